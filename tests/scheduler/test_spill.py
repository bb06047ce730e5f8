"""Spill past stockouts (scheduling.md, "Health-aware scheduling", rule 7): a replica stuck
Unschedulable past the window is placed again elsewhere and its pool cools down. Pure:
the observation parser, the rules and one reconcile round's decision.
`pytest -k "spill or stockout"`."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from modelplane.api.inference_gateway import InferenceGateway
from modelplane.autoscale import AutoscaleState
from modelplane.driver.decide import Applied, RoundInputs, decide
from modelplane.health.observation import (
    ClusterObservation,
    Observation,
    PoolObservation,
    ReplicaObservation,
)
from modelplane.health.readiness import readiness
from modelplane.health.rules import effective_fleet
from modelplane.health.spill import Cooldown, cooldowns, stuck
from modelplane.observe.cluster import unschedulable
from modelplane.scheduler import schedule
from tests.factories import cluster, deployment, fleet, inference_class, pool
from tests.spec_docs import gateway

NOW = 10_000.0
AFTER = 600.0
FULL = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def cond(status: str, reason: str = "", at: str = "2026-11-29T05:00:00Z") -> dict[str, Any]:
    return {
        "type": "PodScheduled",
        "status": status,
        "reason": reason,
        "message": FULL,
        "lastTransitionTime": at,
    }


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], (None, "")),
        ([cond("True")], (None, "")),
        ([cond("False", "SchedulingGated")], (None, "")),  # gated, not full
        ([cond("False", "Unschedulable")], (1795928400.0, FULL)),
        (  # the earliest of the pods
            [
                cond("False", "Unschedulable", "2026-11-29T05:00:09Z"),
                cond("False", "Unschedulable", "2026-11-29T05:00:03Z"),
            ],
            (1795928403.0, FULL),
        ),
    ],
)
def test_spill_unschedulable_pods_are_read_with_since_when(
    conditions: list[dict[str, Any]], expected: tuple[float | None, str]
) -> None:
    pods = [{"metadata": {}, "status": {"conditions": [c]}} for c in conditions]
    assert unschedulable(pods) == expected


def spec() -> Any:
    """Cluster a's pool may grow to 4 nodes (it has 1); b has 2 fixed nodes."""
    return dataclasses.replace(
        fleet(
            [inference_class("h100", 8)],
            [cluster("a", [pool("gpu", "h100", 1, 4)]), cluster("b", [pool("gpu", "h100", 2)])],
            [deployment("m", 3, tensor=8)],
        ),
        gateway=InferenceGateway.model_validate(gateway("b")),
    )


SPEC = spec()
LOCK = schedule(SPEC, None).lock  # spread: a, b, then a again (a may grow; ties by name)
ON = {f"{r.cluster}{r.index}": r.name for r in LOCK.replicas_of("ml/m")}
STUCK = ON.get("a1", "")  # a's second replica needs a node the cloud never brings
RUNNING = ReplicaObservation(1, 1, running_pods=1)


def seen(stuck_since: float | None, ready_a: int = 1) -> Observation:
    """a's second replica Pending Unschedulable since ``stuck_since`` (None: Running); the
    first runs on a's one Ready node, b's on b."""
    waiting = ReplicaObservation(
        1, 0, running_pods=0, unschedulable_since=stuck_since, unschedulable=FULL
    )
    a = {ON["a0"]: RUNNING, STUCK: RUNNING if stuck_since is None else waiting}
    return Observation(
        NOW,
        {
            "a": ClusterObservation(
                "a",
                reachable=True,
                pools={"gpu": PoolObservation(ready_a, ready_a, 8 * ready_a)},
                gateway_address="10.0.0.1",
                replicas=a,
            ),
            "b": ClusterObservation(
                "b",
                reachable=True,
                pools={"gpu": PoolObservation(2, 2, 16)},
                gateway_address="10.0.0.2",
                replicas={ON["b0"]: RUNNING},
            ),
        },
    )


def test_spill_fixture_places_two_replicas_on_the_pool_that_may_grow() -> None:
    assert sorted(ON) == ["a0", "a1", "b0"], ON


@pytest.mark.parametrize(
    ("since", "found"),
    [(None, False), (NOW - AFTER + 1, False), (NOW - AFTER, True), (NOW - 5000, True)],
)
def test_spill_a_replica_is_stuck_after_the_window(since: float | None, found: bool) -> None:
    got = stuck(LOCK, seen(since), NOW, AFTER)
    assert list(got) == ([STUCK] if found else [])
    if found:
        assert (got[STUCK].cluster, got[STUCK].pools, got[STUCK].reason) == ("a", ("gpu",), FULL)


COOL = Cooldown(NOW - 100, NOW + 100, 1, "m-x", FULL)


@pytest.mark.parametrize(
    ("previous", "ready_a", "now", "kept"),
    [
        ({"a/gpu": COOL}, 1, NOW, True),
        ({"a/gpu": COOL}, 1, NOW + 100, False),  # its time is over
        ({"a/gpu": COOL}, 2, NOW, False),  # a node more is Ready: capacity appeared
        ({"a/gpu": COOL}, 0, NOW, True),  # fewer is no sign of capacity
    ],
)
def test_spill_cooldown_ends_at_its_time_or_when_capacity_appears(
    previous: dict[str, Cooldown], ready_a: int, now: float, kept: bool
) -> None:
    out = cooldowns(previous, {}, seen(None, ready_a), now, 1800)
    assert ("a/gpu" in out) is kept


def test_spill_a_cooling_pool_is_its_ready_nodes_for_the_scheduler() -> None:
    view = effective_fleet(SPEC, seen(None), {}, NOW, full={"a/gpu": COOL})
    (p,) = view.fleet.clusters["a"].spec.node_pools
    assert (p.node_count, p.max_node_count) == (1, None)
    assert view.capped[("a", "gpu")] == (1, 4)
    plain = effective_fleet(SPEC, seen(None), {}, NOW)  # autoscaled pools are not capped
    assert plain.fleet.clusters["a"].spec.node_pools[0].max_node_count == 4


def inputs(observation: Observation, **over: Any) -> RoundInputs:
    base = RoundInputs(
        spec=SPEC,
        previous=LOCK,
        observation=observation,
        unhealthy_since={},
        autoscale=AutoscaleState(),
        were_unroutable=frozenset(),
        applied=Applied(),
        round_number=1,
        grace=300.0,
        spill_after=AFTER,
        cooldown=1800.0,
    )
    return dataclasses.replace(base, **over)


def test_spill_round_moves_the_stuck_replica_and_remembers_the_full_pool() -> None:
    waiting = decide(inputs(seen(NOW - 100)))
    assert not waiting.spilled and not waiting.capacity and not waiting.moved
    out = decide(inputs(seen(NOW - AFTER - 1)))
    assert list(out.spilled) == [STUCK] and out.spilled[STUCK].startswith("a/gpu: ")
    assert out.moved == [STUCK]
    assert list(out.capacity) == ["a/gpu"] and out.capacity["a/gpu"].replica == STUCK
    assert out.capacity["a/gpu"].until == NOW + 1800.0

    def clusters(plan: Any) -> list[str]:
        return sorted(r.cluster for r in plan.lock.replicas_of("ml/m"))

    assert clusters(out.plan) == ["a", "b", "b"]  # not back onto the pool that cannot grow
    # The next round remembers the cool-down: nothing goes back to a.
    again = decide(inputs(seen(None), previous=out.plan.lock, capacity=out.capacity))
    assert clusters(again.plan) == ["a", "b", "b"] and "a/gpu" in again.capacity
    # Without the cool-down, the pool that says it may grow would take the replica again.
    forgot = decide(inputs(seen(NOW - 100), previous=_one_short(out)))
    assert clusters(forgot.plan) == ["a", "a", "b"]


def _one_short(out: Any) -> Any:
    """The lock after the spill with b's new replica gone (a deployment one short)."""
    lock = out.plan.lock
    dep = lock.deployments["ml/m"]
    new_b = [r for r in dep.replicas if r.cluster == "b" and r.name != ON["b0"]]
    keep = [r for r in dep.replicas if r not in new_b]
    return lock.model_copy(
        update={"deployments": {"ml/m": dep.model_copy(update={"replicas": keep})}}
    )


def test_spill_status_says_the_replica_waits_for_capacity() -> None:
    view = readiness(SPEC, LOCK, seen(NOW - 100))
    (replica,) = [r for r in view.deployment("ml/m").replicas if r.name == STUCK]
    assert replica.phase == "Pending"
    assert replica.reason == f"waiting for capacity on a/gpu since 02:45:00 UTC: {FULL}"


def test_spill_a_shortfall_on_a_cooling_pool_says_why() -> None:
    from modelplane.health.rules import observed_schedule

    bigger = dataclasses.replace(
        SPEC, deployments={"ml/m": deployment("m", 6, tensor=8)}
    )  # 6 > a's 1 Ready node + b's 2
    result, _ = observed_schedule(bigger, LOCK, seen(None), {}, NOW, full={"a/gpu": COOL})
    reasons = result.report["ml/m"].reasons
    (on_a,) = [r for r in reasons if r.startswith("a: ")]
    assert "(1 of 4 nodes Ready; no capacity on a/gpu since 02:45:00" in on_a, reasons
    assert "no new replicas there until 02:48:20 or a node more is Ready)" in on_a
