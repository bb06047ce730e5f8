"""Start phases of a replica (status.md, "Start phases"): placed -> pods created -> scheduled
-> started -> Ready -> routed, from the pods' conditions and reconcile's record; shown by
`status -o wide` / `-o json` and the reconcile service's `/metrics`. `pytest -k phases`."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from modelplane.cli.health import readiness_tables, startup
from modelplane.driver.reconcile import Round, replica_phases
from modelplane.driver.service import Metrics
from modelplane.health.observation import ReplicaObservation
from modelplane.health.phases import durations, merged, remember
from modelplane.health.readiness import readiness
from modelplane.observe.cluster import start_phases
from tests.factories import deployment, lock
from tests.scheduler.test_health import NOW, healthy, obs, three_clusters

T0 = "2026-11-29T05:00:00Z"
EPOCH0 = 1795928400.0  # T0


def at(seconds: int) -> str:
    return f"2026-11-29T05:00:{seconds:02d}Z"


def pod(
    created: int = 0,
    scheduled: int | None = 1,
    started: list[int | None] | None = None,
    ready: int | None = None,
) -> dict[str, Any]:
    conditions = []
    if scheduled is not None:
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at(scheduled)}
        )
    else:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable"})
    conditions.append(
        {"type": "Ready", "status": "True" if ready is not None else "False"}
        | ({"lastTransitionTime": at(ready)} if ready is not None else {})
    )
    statuses = [
        {"state": {"running": {"startedAt": at(s)}} if s is not None else {"waiting": {}}}
        for s in (started or [])
    ]
    return {
        "metadata": {"creationTimestamp": at(created)},
        "status": {"conditions": conditions, "containerStatuses": statuses},
    }


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([], {}),
        ([pod(scheduled=None)], {"created": 0}),  # Pending: unschedulable
        ([pod(started=[None])], {"created": 0, "scheduled": 1}),  # image pulling
        ([pod(started=[3, 4])], {"created": 0, "scheduled": 1, "started": 4}),  # last container
        (
            [pod(started=[3], ready=25)],
            {"created": 0, "scheduled": 1, "started": 3, "ready": 25},
        ),
        (  # a phase counts once every pod reached it: the last pod's time, the first creation
            [pod(0, 1, [3], 25), pod(2, 6, [9], None)],
            {"created": 0, "scheduled": 6, "started": 9},
        ),
        (
            [pod(0, 1, [3], 25), pod(2, 6, [9], 31)],
            {"created": 0, "scheduled": 6, "started": 9, "ready": 31},
        ),
    ],
)
def test_phases_observed_from_the_pods(
    pods: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    assert start_phases(pods) == {k: EPOCH0 + v for k, v in expected.items()}


def with_volume(p: dict[str, Any], claim: str) -> dict[str, Any]:
    return p | {"spec": {"volumes": [{"name": "w", "persistentVolumeClaim": {"claimName": claim}}]}}


def with_init(p: dict[str, Any], initialized: int | None) -> dict[str, Any]:
    cond = {"type": "Initialized", "status": "True" if initialized is not None else "False"}
    if initialized is not None:
        cond["lastTransitionTime"] = at(initialized)
    status = {**p["status"], "conditions": [*p["status"]["conditions"], cond]}
    return p | {"spec": {"initContainers": [{"name": "fetch"}]}, "status": status}


@pytest.mark.parametrize(
    ("pods", "hydrated", "weights"),
    [
        # The cache was hydrated before the pod existed: weights ready at its creation.
        ([with_volume(pod(2, 3, [4]), "modelcache-w")], {"modelcache-w": 0}, 2),
        # Hydrated after the pod started (the engine waits for the files): that time.
        ([with_volume(pod(2, 3, [4]), "modelcache-w")], {"modelcache-w": 40}, 40),
        # Not hydrated yet (no completed Job for its claim): no weights phase.
        ([with_volume(pod(2, 3, [4]), "modelcache-w")], {"modelcache-x": 1}, None),
        # An init container downloads them: Initialized.
        ([with_init(pod(2, 3, [9]), 7)], {}, 7),
        ([with_init(pod(2, 3, [None]), None)], {}, None),
        # Every pod must have them: the last one.
        ([with_init(pod(2, 3, [9]), 7), with_init(pod(2, 3, [12]), 11)], {}, 11),
        # The engine loads them itself: not observable.
        ([pod(2, 3, [4])], {}, None),
    ],
)
def test_phases_weights_from_the_cache_or_an_init_container(
    pods: list[dict[str, Any]], hydrated: dict[str, int], weights: int | None
) -> None:
    got = start_phases(pods, {k: EPOCH0 + v for k, v in hydrated.items()})
    assert got.get("weights") == (None if weights is None else EPOCH0 + weights)
    assert list(got)[:2] == ["created", "scheduled"]


def test_read_caches_gives_the_hydration_time_of_each_claim() -> None:
    from modelplane.observe.cluster import read_caches

    def job(name: str, claim: str, done: str | None) -> dict[str, Any]:
        status: dict[str, Any] = {"succeeded": 1, "completionTime": done} if done else {}
        return {
            "metadata": {"name": f"{name}-hydrate", "labels": {"modelplane.ai/modelcache": name}},
            "spec": {"template": with_volume({}, claim)},
            "status": status,
        }

    class Reader:
        def items(self, path: str, **_: Any) -> list[dict[str, Any]]:
            assert path == "/apis/batch/v1/namespaces/ml/jobs"
            return [job("w", "modelcache-w", at(30)), job("x", "modelcache-x", None)]

    states, hydrated = read_caches(Reader(), ["ml/w", "ml/x"])  # type: ignore[arg-type]
    assert {k: v.state for k, v in states.items()} == {"ml/w": "Hydrated", "ml/x": "Hydrating"}
    assert hydrated == {"modelcache-w": EPOCH0 + 30}


def test_phases_reconcile_records_placed_and_routed() -> None:
    placement = lock(
        {"ml/m": [("m-a0", "a", 0, {"unified": "gpu"}), ("m-b0", "b", 0, {"unified": "gpu"})]}
    )
    # m-b0 is new this round; m-a0 was placed by an `up` before: no record of its own
    first = remember({}, placement, 100.0, routed=101.0, added=["m-b0"], unready=["m-b0"])
    assert first == {"m-b0": {"placed": 100.0}}  # not routed while it waits for Ready
    # the round's `up` failed: the routes are not in effect
    assert remember(first, placement, 110.0, routed=None, added=[]) == first
    second = remember(first, placement, 130.0, routed=142.0, added=[])
    assert second == {"m-b0": {"placed": 100.0, "routed": 142.0}}
    assert remember(second, placement, 160.0, routed=161.0) == second  # the first time stays
    gone = lock({"ml/m": [("m-a0", "a", 0, {"unified": "gpu"})]})
    assert remember(second, gone, 170.0, routed=171.0) == {}  # replicas gone are dropped


def test_phases_in_status_json_wide_table_and_metrics() -> None:
    f = three_clusters()
    f.deployments["ml/m"] = deployment("m", 1, tensor=8)
    placement = lock({"ml/m": [("m-a0", "a", 0, {"unified": "gpu"})]})
    seen = ReplicaObservation(
        pods=1,
        ready_pods=1,
        running_pods=1,
        created=NOW - 40,
        phases={"created": NOW - 40, "scheduled": NOW - 39, "started": NOW - 36, "ready": NOW - 14},
    )
    observation = obs(healthy("a", replicas={"m-a0": seen}))
    recorded = {"m-a0": {"placed": NOW - 45, "routed": NOW - 2}}
    view = readiness(f, placement, observation, phases=recorded)
    (replica,) = view.deployment("ml/m").replicas
    data = replica.as_json()
    assert list(data["phases"]) == ["placed", "created", "scheduled", "started", "ready", "routed"]
    assert data["startSeconds"] == {
        "placed": 0.0,
        "created": 5.0,
        "scheduled": 6.0,
        "started": 9.0,
        "ready": 31.0,
        "routed": 43.0,
    }
    console = Console(width=300, record=True)
    for table in readiness_tables(view, wide=True):
        console.print(table)
    text = console.export_text()
    assert "created +5s, scheduled +6s, started +9s, ready +31s, routed +43s" in text
    # a replica placed by `up` (no record) counts from its pods' creation
    assert startup(merged(seen.phases, None)) == "scheduled +1s, started +4s, ready +26s"
    assert durations({}) == {}
    # the reconcile service's gauges
    current = Round(1, NOW)
    current.observation = observation
    current.phases = replica_phases(observation, placement, recorded)

    class Plan:
        lock = placement
        report: dict[str, Any] = {}

    current.plan = Plan()  # type: ignore[assignment]
    metrics = Metrics()
    metrics.record_round(current)
    text = metrics.render()
    line = 'modelplane_reconcile_replica_start_seconds{deployment="ml/m",replica="m-a0",phase="ready"} 31'
    assert line in text.splitlines()
