"""Cordons in the scheduler (scheduling.md, "Cordons"): no new replicas on a cordoned
cluster, whatever the tolerations; kept replicas stay while replacements are placed
elsewhere, within the rollout budget (make-before-break)."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.api.placement_lock import PlacementLock
from modelplane.scheduler import schedule
from modelplane.scheduler.cordon import batch, cordoned, cordoned_fleet, surge
from modelplane.scheduler.evidence import explain_plan
from modelplane.scheduler.taints import CORDON_KEY
from tests.factories import cluster, deployment, draining, fleet, inference_class, pool

H100 = inference_class("h100", 8)


def _fleet(*deps: Any, nodes: int = 4, clusters: tuple[str, ...] = ("a", "b", "c")) -> Any:
    return fleet([H100], [cluster(n, [pool("p", "h100", nodes)]) for n in clusters], deps)


def _with_rollout(dep: Any, **rollout: Any) -> Any:
    spec = dep.spec.model_copy(update={"rollout": dep.spec.rollout.model_copy(update=rollout)})
    return dep.model_copy(update={"spec": spec})


def _on(result: Any, key: str = "ml/m") -> list[str]:
    return sorted(r.cluster for r in result.lock.deployments[key].replicas)


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        ([], ["b", "b", "c"]),
        # a deployment that tolerates every taint still does not tolerate a cordon
        ([{"operator": "Exists"}], ["b", "b", "c"]),
        ([{"key": CORDON_KEY, "operator": "Exists"}], ["b", "b", "c"]),
    ],
)
def test_no_new_replica_on_a_cordoned_cluster(tolerations: list[Any], expected: list[str]) -> None:
    spec = _fleet(deployment("m", 3, tensor=8, tolerations=tolerations))
    result = schedule(cordoned_fleet(spec, ["a"]), None)
    assert _on(result) == expected
    assert cordoned(cordoned_fleet(spec, ["a", "zz"])) == {"a"}  # unknown names ignored


def test_a_cordoned_cluster_is_reported_and_explained() -> None:
    spec = cordoned_fleet(_fleet(deployment("m", 3, tensor=8), clusters=("a", "b")), ["a"])
    result = schedule(spec, None)
    # dev b takes 3 (4 nodes); nothing on a
    assert _on(result) == ["b", "b", "b"]
    short = schedule(
        cordoned_fleet(_fleet(deployment("m", 6, tensor=8), clusters=("a", "b")), ["a"]), None
    )
    assert short.report["ml/m"].unplaced == 2
    assert any(r.startswith("a: cordoned") for r in short.report["ml/m"].reasons)
    evidence = explain_plan(
        cordoned_fleet(_fleet(deployment("m", 6, tensor=8), clusters=("a", "b")), ["a"]),
        short,
        None,
        ["ml/m"],
    )
    rules = {c["cluster"]: c["rule"] for c in evidence["ml/m"]["clusters"]}
    assert rules["a"] == "cordoned"


@pytest.mark.parametrize(
    ("replicas", "rollout", "on_a", "extra"),
    [
        (2, {}, 2, 1),  # default maxUnavailable 1: one at a time
        (2, {"max_unavailable": 2}, 2, 2),
        (4, {"max_unavailable": "50%"}, 2, 2),
        (4, {"max_unavailable": 0, "max_surge": 1}, 2, 1),
        (3, {"max_unavailable": 3}, 1, 1),  # never more than are there
    ],
)
def test_replacements_within_the_budget(
    replicas: int, rollout: dict[str, Any], on_a: int, extra: int
) -> None:
    dep = _with_rollout(deployment("m", replicas, tensor=8), **rollout)
    spec = _fleet(dep)
    previous = schedule(spec, None).lock
    # put `on_a` replicas on a (re-plan on a fleet where only a has room for them first)
    first = schedule(_fleet(dep, nodes=on_a, clusters=("a",)) if on_a == replicas else spec)
    if on_a == replicas:
        previous = first.lock
    here = sum(1 for r in previous.deployments["ml/m"].replicas if r.cluster == "a")
    assert here == on_a
    closed = cordoned_fleet(spec, ["a"])
    assert surge(closed, previous, {"ml/m": replicas}) == {"ml/m": extra}
    result = schedule(closed, previous)
    replicas_after = result.lock.deployments["ml/m"].replicas
    assert len(replicas_after) == replicas + extra
    # every old replica kept where it was, and the new ones elsewhere
    before = {r.name: r.cluster for r in previous.deployments["ml/m"].replicas}
    assert all(before[r.name] == r.cluster for r in replicas_after if r.name in before)
    assert all(r.cluster != "a" for r in replicas_after if r.name not in before)
    # the plan says what the deployment wants, not the surge
    assert result.report["ml/m"].desired == replicas and result.report["ml/m"].unplaced == 0
    # a re-plan with the written lock changes nothing
    assert schedule(closed, result.lock).lock == result.lock


def test_batch_is_the_rollout_budget() -> None:
    dep = deployment("m", 10, tensor=8)
    assert batch(dep, 10) == 1
    assert batch(_with_rollout(dep, max_unavailable="30%"), 10) == 3
    assert batch(_with_rollout(dep, max_unavailable=0, max_surge=2), 10) == 2


def _two_on_a() -> tuple[Any, PlacementLock]:
    spec = _fleet(deployment("m", 2, tensor=8))
    only_a = schedule(_fleet(deployment("m", 2, tensor=8), clusters=("a",)), None).lock
    return spec, only_a


def test_a_retired_replica_is_never_taken_back_and_the_next_one_moves() -> None:
    spec, previous = _two_on_a()
    closed = cordoned_fleet(spec, ["a"])
    step1 = schedule(closed, previous).lock  # 2 old on a + 1 new
    old = sorted(r.name for r in step1.deployments["ml/m"].replicas if r.cluster == "a")
    assert len(step1.deployments["ml/m"].replicas) == 3
    # the driver retires one old replica (its replacement serves)
    step2 = schedule(closed, draining(step1, {old[0]})).lock
    replicas = {r.name: r for r in step2.deployments["ml/m"].replicas}
    assert replicas[old[0]].draining, "a replica draining off a cordoned cluster stays drained"
    assert not replicas[old[1]].draining
    serving = [r for r in replicas.values() if not r.draining]
    assert len(serving) == 3 and sum(r.cluster != "a" for r in serving) == 2
    # the drained one is gone, the last old one retires: no more surge
    gone = draining(step2, {old[1]}, gone={old[0]})
    step3 = schedule(closed, gone).lock
    serving3 = [r for r in step3.deployments["ml/m"].replicas if not r.draining]
    assert len(serving3) == 2 and all(r.cluster != "a" for r in serving3)


def test_uncordoned_a_draining_replica_may_be_taken_back() -> None:
    spec, previous = _two_on_a()
    name = previous.deployments["ml/m"].replicas[0].name
    result = schedule(spec, draining(previous, {name}))
    assert not any(r.draining for r in result.lock.deployments["ml/m"].replicas)


def test_scale_down_drops_the_replicas_on_cordoned_clusters_first() -> None:
    spec = _fleet(deployment("m", 3, tensor=8))
    previous = schedule(spec, None).lock  # a, b, c
    smaller = _fleet(deployment("m", 1, tensor=8))
    result = schedule(cordoned_fleet(smaller, ["c"]), previous)
    # 3 -> 1 with a surge of none left for c (c's replica is dropped, not a or b's twice)
    assert "c" not in _on(result)


def test_autoscaled_lock_keeps_the_desired_count_not_the_surge() -> None:
    auto = {"minReplicas": 1, "maxReplicas": 4, "metrics": [{"type": "queueDepth", "target": 4}]}
    dep = deployment("m", 2, tensor=8, autoscaling=auto)
    previous = schedule(_fleet(dep, clusters=("a",)), None).lock
    result = schedule(cordoned_fleet(_fleet(dep), ["a"]), previous)
    assert result.lock.deployments["ml/m"].autoscaled_replicas == 2
    assert len(result.lock.deployments["ml/m"].replicas) == 3


def _surge(lock: PlacementLock, names: set[str]) -> PlacementLock:
    deps = {
        key: d.model_copy(
            update={
                "replicas": [r.model_copy(update={"surge": r.name in names}) for r in d.replicas]
            }
        )
        for key, d in lock.deployments.items()
    }
    return lock.model_copy(update={"deployments": deps})


@pytest.mark.parametrize(
    ("marked", "retired", "kept"),
    [
        # a rollout's surge replica (maxSurge) is kept beyond the count while it is marked
        ("surge", False, 4),
        # unmarked, the fourth replica is surplus: the usual scale-down
        ("none", False, 3),
        # the rollout retired an old one (draining, kept and charged) and cleared the mark
        ("none", True, 4),
    ],
)
def test_rollout_surge_replicas_are_kept_while_marked(
    marked: str, retired: bool, kept: int
) -> None:
    spec = _fleet(deployment("m", 3, tensor=8))
    start = schedule(spec, None).lock
    more = schedule(spec, start, surge={"ml/m": 1}).lock  # the driver asks for one more
    names = [r.name for r in more.deployments["ml/m"].replicas]
    (extra,) = set(names) - {r.name for r in start.deployments["ml/m"].replicas}
    lock = _surge(more, {extra} if marked == "surge" else set())
    if retired:
        lock = draining(lock, {names[0] if names[0] != extra else names[1]})
    again = schedule(spec, lock)
    replicas = again.lock.deployments["ml/m"].replicas
    assert len(replicas) == kept
    assert not again.short
    if marked == "surge":
        assert [r.surge for r in replicas if r.name == extra] == [True]
