"""Autoscaling (api.md "Autoscaling", scheduling.md "Autoscaling"): validation, the pure HPA
math, the lock's count and draining replicas in the scheduler. `pytest -k autoscal`."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.api.autoscaling import Autoscaling, parse_duration
from modelplane.api.loader import load_fleet
from modelplane.api.placement_lock import PlacementLock
from modelplane.autoscale import counter_rate, decide, parse_metrics, replica_values
from modelplane.lock import dump_lock, read_lock
from modelplane.scheduler import schedule
from tests.factories import cluster, deployment, fleet, inference_class, pool
from tests.spec_docs import base_fleet, error_paths, write_fleet

H100 = inference_class("h100", 8)


def auto(**over: Any) -> Autoscaling:
    body: dict[str, Any] = {
        "minReplicas": 1,
        "maxReplicas": 10,
        "metrics": [{"type": "queueDepth", "target": 4}],
        "scaleDown": {"stabilizationWindow": "60s", "maxStep": 2},
        "scaleUp": {"stabilizationWindow": 0, "maxStep": 4},
    }
    body.update(over)
    return Autoscaling.model_validate(body)


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "path", "fragment"),
    [
        (
            {"replicas": 5, "autoscaling": {"minReplicas": 1, "maxReplicas": 3}},
            "spec.replicas",
            "within autoscaling",
        ),
        (
            {"autoscaling": {"minReplicas": 4, "maxReplicas": 2}},
            "spec.autoscaling.minReplicas",
            "greater than maxReplicas",
        ),
        (
            {"autoscaling": {"minReplicas": -1}},
            "spec.autoscaling.minReplicas",
            "greater than or equal to 0",
        ),
        (
            # nothing can wake it: no service with `models` selects it
            {"autoscaling": {"minReplicas": 0}},
            "spec.autoscaling.minReplicas",
            "0 needs a ModelService with `models`",
        ),
        (
            {"autoscaling": {"minReplicas": 0, "idleWindow": "5s"}},
            "spec.autoscaling.idleWindow",
            "at least 10s",
        ),
        ({"autoscaling": {"metrics": []}}, "spec.autoscaling.metrics", "at least 1"),
        (
            {
                "autoscaling": {
                    "metrics": [
                        {"type": "queueDepth", "target": 1},
                        {"type": "queueDepth", "target": 2},
                    ]
                }
            },
            "spec.autoscaling.metrics",
            "repeated: queueDepth",
        ),
        (
            {"autoscaling": {"metrics": [{"type": "gpuTemp", "target": 1}]}},
            "spec.autoscaling.metrics[0].type",
            "queueDepth",
        ),
        (
            {"autoscaling": {"metrics": [{"type": "queueDepth", "target": 0}]}},
            "spec.autoscaling.metrics[0].target",
            "greater than 0",
        ),
        (
            {"autoscaling": {"metrics": [{"type": "kvCacheUsage", "target": 80}]}},
            "spec.autoscaling.metrics[0].target",
            "fraction",
        ),
        (
            {"autoscaling": {"scaleDown": {"stabilizationWindow": "5 minutes"}}},
            "spec.autoscaling.scaleDown.stabilizationWindow",
            "not a duration",
        ),
        (
            {"autoscaling": {"scaleUp": {"stabilizationWindow": "2h"}}},
            "spec.autoscaling.scaleUp.stabilizationWindow",
            "outside",
        ),
        (
            {"autoscaling": {"scaleUp": {"maxStep": 0}}},
            "spec.autoscaling.scaleUp.maxStep",
            "greater than or equal to 1",
        ),
        ({"autoscaling": {"tolerance": 1.5}}, "spec.autoscaling.tolerance", "less than 1"),
        ({"autoscaling": {"cooldown": "1m"}}, "spec.autoscaling.cooldown", "unknown field"),
    ],
)
def test_autoscaling_validation_names_file_object_field_and_line(
    tmp_path, spec, path, fragment
) -> None:
    docs = base_fleet()
    body = {"minReplicas": 1, "maxReplicas": 4, "metrics": [{"type": "queueDepth", "target": 4}]}
    body.update(spec.get("autoscaling", {}))
    docs[2]["spec"]["autoscaling"] = body
    if "replicas" in spec:
        docs[2]["spec"]["replicas"] = spec["replicas"]
    write_fleet(tmp_path, docs)
    errors = load_fleet(tmp_path).errors
    hits = [e for e in errors if e.path == path and fragment in e.message]
    assert hits, "\n".join(map(str, errors))
    assert hits[0].object == "ModelDeployment team/m" and hits[0].file.endswith("fleet.yaml")
    assert hits[0].line > 0


def test_autoscaling_errors_come_all_at_once(tmp_path) -> None:
    docs = base_fleet()
    docs[2]["spec"]["replicas"] = 9
    docs[2]["spec"]["autoscaling"] = {
        "minReplicas": 5,
        "maxReplicas": 3,
        "metrics": [{"type": "kvCacheUsage", "target": 2}],
    }
    paths = error_paths(tmp_path, docs)
    assert {
        "spec.autoscaling.minReplicas",
        "spec.replicas",
        "spec.autoscaling.metrics[0].target",
    } <= paths


def test_autoscaling_defaults() -> None:
    a = Autoscaling.model_validate(
        {"minReplicas": 1, "maxReplicas": 2, "metrics": [{"type": "requestRate", "target": 3}]}
    )
    assert (a.tolerance, a.drain_timeout) == (0.1, 60.0)
    assert (a.scale_up.stabilization_window, a.scale_up.max_step) == (0.0, 4)
    assert (a.scale_down.stabilization_window, a.scale_down.max_step) == (300.0, 1)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1m30s", 90.0),
        ("250ms", 0.25),
        ("45", 45.0),
        (12, 12.0),
        ("1h", 3600.0),
    ],
)
def test_autoscaling_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


# -- the math ------------------------------------------------------------------------------

R = [f"r{i}" for i in range(10)]


def q(*depths: float | None) -> dict[str, dict[str, float] | None]:
    return {R[i]: None if d is None else {"queueDepth": d} for i, d in enumerate(depths)}


@pytest.mark.parametrize(
    ("name", "a", "current", "values", "history", "desired", "note"),
    [
        ("at target holds", auto(), 2, q(4, 4), (), 2, None),
        ("within tolerance holds", auto(), 2, q(4.3, 4.3), (), 2, None),
        ("ceil(current x observed/target)", auto(), 2, q(6, 7), (), 4, None),
        ("scale-up step limit", auto(), 2, q(40, 40), (), 6, None),
        ("max replicas caps", auto(maxReplicas=3), 2, q(40, 40), (), 3, None),
        (
            "idle scales down by the step once the window allows",
            auto(),
            5,
            q(0, 0, 0, 0, 0),
            ((0.0, 5), (30.0, 1)),
            3,
            None,
        ),
        (
            "the highest recommendation in the down window wins",
            auto(),
            4,
            q(1, 1, 1, 1),
            ((20.0, 4), (30.0, 3), (80.0, 3)),
            3,
            None,
        ),
        ("never below min", auto(minReplicas=2), 2, q(0, 0), (), 2, None),
        (
            "missing metrics never scale in",
            auto(),
            3,
            q(0, 0, None),
            (),
            3,
            "no scale-in: missing metrics (r2: not Ready)",
        ),
        (
            "missing counts 0 for scale-up",
            auto(),
            3,
            q(20, 20, None),
            (),
            7,
            "missing metrics (counted 0)",
        ),
        (
            "no metrics at all holds",
            auto(),
            3,
            q(None, None, None),
            (),
            3,
            "no metrics from any replica",
        ),
        (
            "max over metrics",
            auto(
                metrics=[
                    {"type": "queueDepth", "target": 4},
                    {"type": "kvCacheUsage", "target": 0.5},
                ]
            ),
            2,
            {
                "r0": {"queueDepth": 0, "kvCacheUsage": 1.0},
                "r1": {"queueDepth": 0, "kvCacheUsage": 1.0},
            },
            (),
            4,
            None,
        ),
        ("a count outside the bounds is clamped", auto(minReplicas=3), 1, q(4), (), 3, None),
    ],
)
def test_autoscale_decide_table(name, a, current, values, history, desired, note) -> None:
    placed = list(values)
    missing = {r: "not Ready" for r, v in values.items() if v is None}
    d = decide(a, current, placed, values, history, 100.0, missing)
    assert d.desired == desired, (name, d)
    if note is not None:
        assert any(note in n for n in d.notes), d.notes


def test_autoscale_scale_down_waits_for_the_window() -> None:
    """Idle from t=0: the first rounds keep 4 (the window holds the earlier 4)."""
    a = auto()  # 60 s down window, step 2
    history: tuple = ((0.0, 4),)
    count, seen = 4, []
    for now in (10.0, 30.0, 59.0, 61.0, 70.0, 130.0, 140.0):
        d = decide(a, count, R[:count], q(*[0] * count), history, now)
        history, count = d.history, d.desired
        seen.append(count)
    assert seen == [4, 4, 4, 4, 2, 1, 1]


def test_autoscale_a_long_gap_between_rounds_does_not_shorten_the_down_window() -> None:
    """Busy at t=0 (4), the next round only at t=150 (a long `up`): the 4 held until then,
    so the idle reading at 150 starts the 60 s window; the count drops at >= 210."""
    a = auto()
    d = decide(a, 4, R[:4], q(0, 0, 0, 0), ((0.0, 4),), 150.0)
    assert d.desired == 4 and any("held by the 60s" in n for n in d.notes)
    d2 = decide(a, 4, R[:4], q(0, 0, 0, 0), d.history, 200.0)
    assert d2.desired == 4
    d3 = decide(a, 4, R[:4], q(0, 0, 0, 0), d2.history, 211.0)
    assert d3.desired == 2


def test_autoscale_scale_up_window_takes_the_lowest() -> None:
    a = auto(scaleUp={"stabilizationWindow": "30s", "maxStep": 10})
    d1 = decide(a, 2, R[:2], q(8, 8), (), 0.0)  # wants 4, window holds (only now)
    assert d1.desired == 4
    d2 = decide(a, 2, R[:2], q(20, 20), ((0.0, 3),), 10.0)  # wants 10, window min is 3
    assert d2.desired == 3


@pytest.mark.parametrize(
    ("previous", "now", "value", "rate"),
    [
        (None, 10.0, 5.0, None),
        ((0.0, 10.0), 10.0, 30.0, 2.0),
        ((0.0, 10.0), 10.0, 3.0, None),
        ((10.0, 1.0), 10.0, 2.0, None),
    ],
)
def test_autoscale_counter_rate(previous, now, value, rate) -> None:
    assert counter_rate(previous, now, value) == rate


def test_autoscale_parse_vllm_metrics() -> None:
    text = """# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
vllm:num_requests_waiting{model_name="m",x="}"} 7.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
vllm:request_success_total{model_name="m",finished_reason="stop"} 10
vllm:request_success_total{model_name="m",finished_reason="length"} 5
garbage line
"""
    samples = parse_metrics(text)
    assert samples["vllm:num_requests_waiting"] == 7.0
    assert samples["vllm:request_success_total"] == 15.0
    other = {"vllm:num_requests_waiting": 1.0, "vllm:gpu_cache_usage_perc": 0.75}
    assert replica_values([samples, other]) == {
        "queueDepth": 8.0,
        "runningRequests": 3.0,
        "requestSuccess": 15.0,
        "kvCacheUsage": 0.75,
    }


# -- the lock and the scheduler ------------------------------------------------------------

AUTO = {"minReplicas": 1, "maxReplicas": 6, "metrics": [{"type": "queueDepth", "target": 4}]}


def with_count(previous: PlacementLock, key: str, count: int) -> PlacementLock:
    deps = dict(previous.deployments)
    deps[key] = deps[key].model_copy(update={"autoscaled_replicas": count})
    return previous.model_copy(update={"deployments": deps})


def three_clusters(nodes: int = 2) -> list[Any]:
    return [cluster(n, [pool("p", "h100", nodes)]) for n in ("a", "b", "c")]


def test_autoscaled_count_is_written_to_the_lock_and_kept_by_plain_plans(tmp_path) -> None:
    f = fleet([H100], three_clusters(), [deployment("m", 2, tensor=8, autoscaling=AUTO)])
    first = schedule(f, None)
    assert first.lock.autoscaled("ml/m") == 2
    scaled = schedule(f, with_count(first.lock, "ml/m", 5))
    assert scaled.lock.autoscaled("ml/m") == 5
    # spread over the clusters, then a plain re-plan keeps the count and the placement
    assert sorted(r.cluster for r in scaled.lock.replicas_of("ml/m")) == ["a", "a", "b", "b", "c"]
    again = schedule(f, scaled.lock)
    assert again.lock == scaled.lock
    text = dump_lock(scaled.lock)
    assert "    autoscaledReplicas: 5\n" in text
    (tmp_path / "l.yaml").write_text(text)
    assert read_lock(tmp_path / "l.yaml") == scaled.lock
    assert scaled.report["ml/m"].as_dict()["autoscaling"] == {
        "replicas": 5,
        "minReplicas": 1,
        "maxReplicas": 6,
    }


def test_autoscaled_scale_in_drains_then_the_replica_can_be_dropped() -> None:
    f = fleet([H100], three_clusters(), [deployment("m", 4, tensor=8, autoscaling=AUTO)])
    four = schedule(f, None).lock
    down = schedule(f, with_count(four, "ml/m", 3))
    draining = [r for r in down.lock.replicas_of("ml/m") if r.draining]
    # the cluster hosting most (a: 2), highest index
    assert [(r.cluster, r.index) for r in draining] == [("a", 1)]
    assert down.report["ml/m"].unplaced == 0 and down.report["ml/m"].draining == [draining[0].name]
    assert "      draining: true\n" in dump_lock(down.lock)
    # re-planning keeps it draining and charged; a new replica cannot reuse its index
    again = schedule(f, down.lock)
    assert again.lock == down.lock
    # scaling out again takes it back before placing anything new
    back = schedule(f, with_count(down.lock, "ml/m", 4))
    assert not any(r.draining for r in back.lock.replicas_of("ml/m"))
    assert {r.name for r in back.lock.replicas_of("ml/m")} == {
        r.name for r in four.replicas_of("ml/m")
    }
    # the drain done (reconcile drops it from the lock), it is gone
    deps = dict(down.lock.deployments)
    deps["ml/m"] = deps["ml/m"].model_copy(update={"replicas": deps["ml/m"].serving})
    done = schedule(f, down.lock.model_copy(update={"deployments": deps}))
    assert len(done.lock.replicas_of("ml/m")) == 3 and not done.lock.draining()


def test_autoscaled_draining_replica_keeps_its_capacity() -> None:
    f = fleet(
        [H100],
        [cluster("a", [pool("p", "h100", 2)])],
        [deployment("m", 2, tensor=8, autoscaling=AUTO), deployment("other", 1, tensor=8)],
    )
    lock = schedule(f, None).lock
    assert len(lock.replicas_of("ml/m")) == 2 and not lock.replicas_of("ml/other")
    down = schedule(f, with_count(lock, "ml/m", 1))
    assert down.lock.draining() and not down.lock.replicas_of("ml/other")
    assert down.report["ml/other"].unplaced == 1


def test_autoscaled_full_fleet_reports_the_shortfall_and_priority_is_served_first() -> None:
    f = fleet(
        [H100],
        [cluster("a", [pool("p", "h100", 3)])],
        [
            deployment("low", 1, tensor=8, autoscaling=AUTO),
            deployment("high", 1, tensor=8, autoscaling=AUTO, priority=10),
        ],
    )
    start = schedule(f, None).lock
    both = with_count(with_count(start, "ml/low", 3), "ml/high", 3)
    out = schedule(f, both)
    assert len(out.lock.replicas_of("ml/high")) == 2  # 1 + the one free node
    assert len(out.lock.replicas_of("ml/low")) == 1
    assert out.report["ml/low"].unplaced == 2
    assert out.report["ml/low"].reasons == ["a: pool p has 0 free nodes, unified needs 1"]
    assert out.lock.autoscaled("ml/low") == 3  # kept: placed as soon as room appears


def test_a_fixed_deployment_scale_down_still_drops_at_once() -> None:
    f = fleet([H100], three_clusters(), [deployment("m", 2, tensor=8)])
    assert schedule(f, None).lock.autoscaled("ml/m") is None
    f3 = fleet([H100], three_clusters(), [deployment("m", 3, tensor=8)])
    three = schedule(f3, None).lock
    two = schedule(f, three)
    assert len(two.lock.replicas_of("ml/m")) == 2 and not two.lock.draining()


# -- one reconcile round's autoscaling (pure) ------------------------------------------------

from modelplane.autoscale import AutoscaleState, autoscale_fleet  # noqa: E402
from modelplane.health.observation import (  # noqa: E402
    ClusterObservation,
    Observation,
    ReplicaObservation,
)

FAST = {
    "minReplicas": 1,
    "maxReplicas": 6,
    "metrics": [{"type": "queueDepth", "target": 4}, {"type": "requestRate", "target": 10}],
    "scaleDown": {"stabilizationWindow": "0s", "maxStep": 1},
    "drainTimeout": "30s",
}


def seen(
    lock: PlacementLock, metrics: dict[str, dict[str, float] | None], unreachable: str = ""
) -> Observation:
    clusters: dict[str, ClusterObservation] = {}
    for r in lock.replicas_of("ml/m"):
        c = clusters.setdefault(r.cluster, ClusterObservation(r.cluster, reachable=True))
        m = metrics.get(r.name)
        c.replicas[r.name] = ReplicaObservation(
            pods=1, ready_pods=1, metrics=m, metrics_error=None if m else "m-0 not Ready"
        )
    if unreachable:
        clusters[unreachable] = ClusterObservation(unreachable, reachable=False, error="down")
    return Observation(100.0, clusters)


def test_autoscale_fleet_round_rate_from_counters_and_drains() -> None:
    f = fleet([H100], three_clusters(), [deployment("m", 3, tensor=8, autoscaling=FAST)])
    lock = schedule(f, None).lock
    names = [r.name for r in lock.replicas_of("ml/m")]
    # first round: counters only (no rate yet), queues at target -> hold 3
    busy = {n: {"queueDepth": 4.0, "runningRequests": 1.0, "requestSuccess": 100.0} for n in names}
    one = autoscale_fleet(f, lock, seen(lock, busy), AutoscaleState(), 100.0)
    assert one.decisions["ml/m"].desired == 3
    assert one.state.counters[names[0]] == (100.0, 100.0)
    # 10 s later each replica finished 300 more: 30/s per replica vs 10 -> 9, step 4 -> 7 -> max 6
    more = {n: {**busy[n], "requestSuccess": 400.0} for n in names}
    two = autoscale_fleet(f, lock, seen(lock, more), one.state, 110.0)
    rate = next(r for r in two.decisions["ml/m"].readings if r.type == "requestRate")
    assert rate.observed == 30.0 and two.decisions["ml/m"].desired == 6
    assert two.lock.autoscaled("ml/m") == 6
    # idle, one replica unreadable: no scale-in, reported
    idle = {n: {"queueDepth": 0.0, "runningRequests": 0.0} for n in names}
    idle[names[1]] = None
    three = autoscale_fleet(f, lock, seen(lock, idle), two.state, 120.0)
    assert three.decisions["ml/m"].desired == 3
    assert any("no scale-in" in n and "not Ready" in n for n in three.decisions["ml/m"].notes)
    # a cluster that is not observed counts as missing too
    down = autoscale_fleet(f, lock, seen(lock, {}, unreachable="a"), two.state, 120.0)
    assert down.decisions["ml/m"].desired == 3


def test_autoscale_fleet_drain_ends_when_idle_or_on_timeout() -> None:
    f = fleet([H100], three_clusters(), [deployment("m", 3, tensor=8, autoscaling=FAST)])
    lock = schedule(f, with_count(schedule(f, None).lock, "ml/m", 2)).lock
    (leaving,) = lock.draining()
    names = [r.name for r in lock.replicas_of("ml/m")]
    busy = {n: {"queueDepth": 4.0, "runningRequests": 2.0} for n in names}
    idle = {n: {"queueDepth": 0.0, "runningRequests": 0.0} for n in names}
    # routes not yet updated: never ends
    r0 = autoscale_fleet(f, lock, seen(lock, idle), AutoscaleState(), 100.0)
    assert not r0.drained and leaving in r0.lock.draining()
    gone = AutoscaleState(routes_gone={leaving: 90.0})
    r1 = autoscale_fleet(f, lock, seen(lock, busy), gone, 100.0)
    assert not r1.drained  # requests in flight
    r2 = autoscale_fleet(f, lock, seen(lock, idle), gone, 100.0)
    assert r2.drained == {leaving: "no requests in flight"}
    assert leaving not in {r.name for r in r2.lock.replicas_of("ml/m")}
    assert leaving not in r2.state.routes_gone
    r3 = autoscale_fleet(f, lock, seen(lock, busy), gone, 121.0)
    assert r3.drained == {leaving: "drain timeout (30s)"}
    # the scheduler then forgets it; 2 serve
    after = schedule(f, r3.lock).lock
    assert len(after.replicas_of("ml/m")) == 2 and not after.draining()


# -- where the count shows: plan JSON/table, status, the PR preview --------------------------

from rich.console import Console  # noqa: E402

from modelplane.cli.commands import _plan_table  # noqa: E402
from modelplane.cli.health import readiness_tables  # noqa: E402
from modelplane.driver.markdown import placement_section  # noqa: E402
from modelplane.driver.plan import Plan  # noqa: E402
from modelplane.health.readiness import readiness  # noqa: E402


def rendered(table: Any) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def test_autoscaled_count_shows_in_plan_status_and_preview() -> None:
    f = fleet([H100], three_clusters(), [deployment("m", 2, tensor=8, autoscaling=AUTO)])
    before = schedule(f, None).lock
    result = schedule(f, with_count(before, "ml/m", 1))
    plan = Plan(before, result)
    (leaving,) = result.lock.draining()
    data = plan.as_json()["deployments"]["ml/m"]
    assert data["autoscaling"] == {"replicas": 1, "minReplicas": 1, "maxReplicas": 6}
    assert data["draining"] == [leaving] and plan.changed
    table = rendered(_plan_table(plan.as_json()["deployments"]))
    assert "autoscaled 1 (1..6)" in table and "draining (scale-in)" in table
    md = "\n".join(placement_section(plan))
    assert f"- `ml/m`: 2 → 1 replica(s) (min 1, max 6); draining `{leaving}`" in md
    view = readiness(f, result.lock, Observation(0.0, {}))
    d = view.deployment("ml/m")
    assert (d.desired, d.placed, d.draining) == (1, 1, [leaving])
    assert d.as_json()["autoscaling"] == {
        "replicas": 1,
        "minReplicas": 1,
        "maxReplicas": 6,
        "draining": [leaving],
    }
    status = rendered(readiness_tables(view)[0])
    assert "AUTOSCALE" in status and f"1 (1..6); draining {leaving}" in status


@pytest.mark.parametrize(
    ("sources", "expected_json", "fallbacks", "word", "printed"),
    [
        (["prometheus"] * 3, "prometheus", set(), "prometheus", 0),
        (["pod-proxy"] * 3, "pod-proxy", {"prometheus: service proxy: HTTP 503"}, "pod-proxy", 3),
        (
            ["prometheus", "pod-proxy", "prometheus"],
            None,
            {"prometheus: no fresh sample of m-0"},
            "mixed",
            1,
        ),
    ],
)
def test_autoscale_round_reports_the_metrics_source_per_replica(
    sources: list[str], expected_json: str | None, fallbacks: set[str], word: str, printed: int
) -> None:
    import dataclasses

    from rich.console import Console

    from modelplane.cli.health import _say_round
    from modelplane.driver.reconcile import Round

    f = fleet([H100], three_clusters(), [deployment("m", 3, tensor=8, autoscaling=FAST)])
    lock = schedule(f, None).lock
    names = [r.name for r in lock.replicas_of("ml/m")]
    busy = {n: {"queueDepth": 40.0, "runningRequests": 1.0} for n in names}
    observation = seen(lock, busy)
    why = sorted(fallbacks)[0] if fallbacks else None
    for name, source in zip(names, sources, strict=True):
        c = next(c for c in observation.clusters.values() if name in c.replicas)
        c.replicas[name] = dataclasses.replace(
            c.replicas[name],
            metrics_source=source,
            metrics_fallback=why if source == "pod-proxy" else None,
        )
    decision = autoscale_fleet(f, lock, observation, AutoscaleState(), 100.0).decisions["ml/m"]
    data = decision.as_json()
    assert data["metricsSource"] == dict(zip(names, sources, strict=True))
    if expected_json is not None:
        assert set(data["metricsSource"].values()) == {expected_json}
    assert set(data["metricsFallback"].values()) == fallbacks
    assert decision.changed and decision.describe().endswith(f"; metrics: {word}")
    out, err = Console(record=True, width=300), Console(record=True, width=300)
    _say_round(Round(1, 0.0, autoscale={"ml/m": decision}), out, err)
    text = out.export_text()
    assert f"metrics: {word})" in text
    assert text.count("metrics through the pod proxy") == printed
