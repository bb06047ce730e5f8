"""Scale to zero and wake on request (api.md, "Autoscaling"): the pure rules.

`autoscale_fleet` with `minReplicas: 0`: an idle window scales to 0 through the drain, a
request the OpenAI router holds wakes a deployment at 0, missing metrics are never idle,
the load alone never goes below 1; `modelplane.wake` maps model names to deployments.
"""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.api.model_service import ModelService
from modelplane.api.placement_lock import PlacementLock
from modelplane.autoscale import AutoscaleState, autoscale_fleet, decide
from modelplane.health.observation import ClusterObservation, Observation, ReplicaObservation
from modelplane.scheduler import schedule
from modelplane.wake import active_deployments, parse_held, sleeping_models, to_wake
from tests.factories import cluster, deployment, fleet, inference_class, pool
from tests.scheduler.test_autoscale import with_count

H100 = inference_class("h100", 8)
ZERO = {
    "minReplicas": 0,
    "maxReplicas": 3,
    "metrics": [{"type": "queueDepth", "target": 4}, {"type": "requestRate", "target": 10}],
    "scaleDown": {"stabilizationWindow": "0s", "maxStep": 1},
    "idleWindow": "60s",
}
WINDOW = 60.0


def service(name: str, deployment_name: str, models: list[str] | None) -> ModelService:
    spec: dict[str, Any] = {
        "endpoints": [{"selector": {"matchLabels": {"modelplane.ai/deployment": deployment_name}}}]
    }
    if models:
        spec["models"] = models
    return ModelService.model_validate(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": spec,
        }
    )


def zero_fleet(replicas: int = 1, auto: dict[str, Any] | None = None) -> Any:
    f = fleet(
        [H100],
        [cluster(n, [pool("p", "h100", 2)]) for n in ("a", "b")],
        [
            deployment("m", replicas, tensor=8, autoscaling=auto or ZERO),
            deployment("fixed", 1, tensor=8),
        ],
    )
    f.services["ml/chat"] = service("chat", "m", ["chat", "chat-latest"])
    f.services["ml/other"] = service("other", "fixed", ["other"])
    return f


def seen(lock: PlacementLock, metrics: dict[str, dict[str, float] | None]) -> Observation:
    clusters: dict[str, ClusterObservation] = {}
    for r in lock.replicas_of("ml/m"):
        c = clusters.setdefault(r.cluster, ClusterObservation(r.cluster, reachable=True))
        m = metrics.get(r.name)
        c.replicas[r.name] = ReplicaObservation(
            pods=1, ready_pods=1, metrics=m, metrics_error=None if m else "not Ready"
        )
    return Observation(100.0, clusters)


def quiet(lock: PlacementLock) -> dict[str, dict[str, float] | None]:
    return {r.name: {"queueDepth": 0.0, "runningRequests": 0.0} for r in lock.replicas_of("ml/m")}


def test_wake_maps_model_names_to_the_deployments_they_wake() -> None:
    f = zero_fleet()
    lock = schedule(f, None).lock
    assert to_wake(f, lock, {"chat": 2}) == {}  # at 1: nothing to wake
    at_zero = with_count(lock, "ml/m", 0)
    assert sleeping_models(f, at_zero) == ["chat", "chat-latest"]
    assert sleeping_models(f, lock) == []
    assert to_wake(f, at_zero, {"chat-latest": 1, "other": 5}) == {"ml/m": "chat-latest"}
    assert to_wake(f, at_zero, {"chat": 0}) == {}
    assert active_deployments(f, {"chat": 1, "other": 3}) == {"ml/m"}  # fixed never sleeps


@pytest.mark.parametrize(
    ("texts", "held"),
    [
        (['modelplane_router_held{model="chat"} 2\n'], {"chat": 2}),
        (  # two router pods: summed; zero and other metrics ignored
            [
                'modelplane_router_held{model="chat"} 2\nmodelplane_router_held{model="x"} 0\n',
                '# TYPE modelplane_router_held gauge\nmodelplane_router_held{model="chat"} 1\n'
                'modelplane_router_requests_total{caller="a",model="chat",code="200"} 9\n',
            ],
            {"chat": 3},
        ),
        (['modelplane_router_held{model="a\\"b"} 1\n'], {'a"b': 1}),
        (['modelplane_router_held{model="chat"} lots\n', "garbage{\n"], {}),
    ],
)
def test_parse_held(texts: list[str], held: dict[str, int]) -> None:
    assert parse_held(texts) == held


def test_idle_for_the_window_scales_to_zero_through_the_drain() -> None:
    f = zero_fleet()
    lock = schedule(f, None).lock
    state = AutoscaleState()
    # the clock starts at the first round; quiet rounds before the window hold the count
    for now in (100.0, 130.0, 100.0 + WINDOW - 1):
        out = autoscale_fleet(f, lock, seen(lock, quiet(lock)), state, now)
        state = out.state
        assert out.decisions["ml/m"].desired == 1, out.decisions["ml/m"].notes
    out = autoscale_fleet(f, lock, seen(lock, quiet(lock)), state, 100.0 + WINDOW)
    decision = out.decisions["ml/m"]
    assert decision.desired == 0 and out.lock.autoscaled("ml/m") == 0
    assert any("idle for 60s" in n and "scaling to zero" in n for n in decision.notes)
    # the scheduler drains it (out of the routes first, like any scale-in)
    drained = schedule(f, out.lock).lock
    assert {r.name for r in drained.replicas_of("ml/m")} == drained.draining()
    assert len(drained.draining()) == 1


@pytest.mark.parametrize(
    ("why", "metrics", "held"),
    [
        ("a request finished", {"requestSuccess": 5.0}, {}),
        ("a request running", {"runningRequests": 1.0}, {}),
        ("a request queued", {"queueDepth": 2.0}, {}),
        ("a request held at the router", {}, {"chat": 1}),
    ],
)
def test_activity_restarts_the_idle_clock(
    why: str, metrics: dict[str, float], held: dict[str, int]
) -> None:
    f = zero_fleet()
    lock = schedule(f, None).lock
    (name,) = [r.name for r in lock.replicas_of("ml/m")]
    base = {"queueDepth": 0.0, "runningRequests": 0.0, "requestSuccess": 0.0}
    first = autoscale_fleet(f, lock, seen(lock, {name: base}), AutoscaleState(), 100.0)
    busy = {name: {**base, **metrics}}
    mid = autoscale_fleet(f, lock, seen(lock, busy), first.state, 150.0, held)
    assert mid.state.active["ml/m"] == 150.0, why
    # a window after the first round, but not after the activity: held
    later = autoscale_fleet(f, lock, seen(lock, {name: base}), mid.state, 100.0 + WINDOW + 5)
    assert later.decisions["ml/m"].desired == 1, why
    gone = autoscale_fleet(f, lock, seen(lock, {name: base}), later.state, 150.0 + WINDOW)
    assert gone.decisions["ml/m"].desired == 0, why


def test_missing_metrics_are_never_idle() -> None:
    f = zero_fleet()
    lock = schedule(f, None).lock
    (name,) = [r.name for r in lock.replicas_of("ml/m")]
    state = AutoscaleState(active={"ml/m": 0.0})
    out = autoscale_fleet(f, lock, seen(lock, {name: None}), state, 1000.0)
    assert out.decisions["ml/m"].desired == 1


def test_the_load_alone_never_scales_to_zero() -> None:
    # no traffic for one round within the window: HPA math says 0, the floor is 1
    auto = zero_fleet().deployments["ml/m"].spec.autoscaling
    d = decide(auto, 2, ["r0", "r1"], {"r0": {"queueDepth": 0.0}, "r1": {"queueDepth": 0.0}}, (), 1)
    assert d.recommendation == 1 and d.desired == 1


def test_a_held_request_wakes_a_deployment_at_zero_and_nothing_else_does() -> None:
    f = zero_fleet()
    asleep = with_count(schedule(f, None).lock, "ml/m", 0)
    asleep = schedule(f, asleep).lock
    deps = dict(asleep.deployments)
    deps["ml/m"] = deps["ml/m"].model_copy(update={"replicas": []})  # the drain ended
    asleep = asleep.model_copy(update={"deployments": deps})
    still = autoscale_fleet(f, asleep, seen(asleep, {}), AutoscaleState(), 500.0)
    assert still.decisions["ml/m"].desired == 0 and not still.woken
    assert still.decisions["ml/m"].notes == ("scaled to zero: a request by model name wakes it",)
    woken = autoscale_fleet(f, asleep, seen(asleep, {}), still.state, 501.0, {"chat": 3})
    assert woken.decisions["ml/m"].desired == 1 and woken.woken == {"ml/m": "chat"}
    assert woken.lock.autoscaled("ml/m") == 1
    assert woken.state.active["ml/m"] == 501.0  # a woken replica gets a whole window
    placed = schedule(f, woken.lock).lock
    assert len(placed.replicas_of("ml/m")) == 1


def test_a_wake_during_the_drain_takes_the_draining_replica_back() -> None:
    f = zero_fleet()
    lock = schedule(f, None).lock
    draining = schedule(f, with_count(lock, "ml/m", 0)).lock
    (name,) = draining.draining()
    out = autoscale_fleet(f, draining, seen(draining, {}), AutoscaleState(), 200.0, {"chat": 1})
    assert out.decisions["ml/m"].desired == 1
    back = schedule(f, out.lock).lock
    assert [r.name for r in back.replicas_of("ml/m")] == [name] and not back.draining()


def test_a_deployment_at_zero_shows_in_status() -> None:
    from rich.console import Console

    from modelplane.cli.health import readiness_tables
    from modelplane.health.readiness import readiness

    f = zero_fleet()
    asleep = schedule(f, with_count(schedule(f, None).lock, "ml/m", 0)).lock
    deps = dict(asleep.deployments)
    deps["ml/m"] = deps["ml/m"].model_copy(update={"replicas": []})
    asleep = asleep.model_copy(update={"deployments": deps})
    view = readiness(f, asleep, Observation(0.0, {}))
    d = view.deployment("ml/m")
    assert (d.desired, d.placed, d.ready) == (0, 0, 0)
    assert d.as_json()["autoscaling"]["replicas"] == 0
    console = Console(width=250, record=True)
    console.print(readiness_tables(view)[0])
    assert "0 (0..3); scaled to zero" in console.export_text()
