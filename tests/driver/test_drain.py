"""Cluster drain in the driver (`modelplane.driver.drain`, the cordons in
`modelplane.driver.state`, the round's decision): pure, without the engine or clusters.

A simulated fleet answers each round like the dev fleet does: a replica's pods are Ready
one round after it is placed, and a draining replica has nothing in flight.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import PlacementLock
from modelplane.autoscale import DRAIN_SETTLE, AutoscaleState
from modelplane.driver.decide import Applied, RoundInputs, decide
from modelplane.driver.drain import DRAIN_TIMEOUT, describe, finish, progress, retire, serving
from modelplane.driver.state import RuntimeState
from modelplane.health.observation import (
    ClusterObservation,
    Observation,
    PoolObservation,
    ReplicaObservation,
)
from modelplane.scheduler import schedule
from modelplane.scheduler.cordon import cordoned_fleet
from tests.factories import cluster, deployment, draining, fleet, inference_class, pool

IDLE = {"runningRequests": 0.0, "queueDepth": 0.0}
BUSY = {"runningRequests": 2.0, "queueDepth": 0.0}


def _spec(*deps: Any, clusters: tuple[str, ...] = ("a", "b", "c")) -> FleetSpec:
    return fleet(
        [inference_class("h100", 8)], [cluster(n, [pool("gpu", "h100", 4)]) for n in clusters], deps
    )


def _with_rollout(dep: Any, **rollout: Any) -> Any:
    spec = dep.spec.model_copy(update={"rollout": dep.spec.rollout.model_copy(update=rollout)})
    return dep.model_copy(update={"spec": spec})


def _seen(
    lock: PlacementLock,
    ready: set[str],
    now: float,
    metrics: dict[str, dict[str, float]] | None = None,
    clusters: tuple[str, ...] = ("a", "b", "c"),
) -> Observation:
    per: dict[str, dict[str, ReplicaObservation]] = {c: {} for c in clusters}
    for dep in lock.deployments.values():
        for r in dep.replicas:
            up = r.name in ready
            per[r.cluster][r.name] = ReplicaObservation(
                1, 1 if up else 0, metrics=(metrics or {}).get(r.name, IDLE)
            )
    return Observation(
        now,
        {
            c: ClusterObservation(
                c,
                reachable=True,
                pools={"gpu": PoolObservation(4, 4, 32)},
                gateway_address="10.0.0.1",
                replicas=per[c],
            )
            for c in clusters
        },
    )


# -- the runtime state -------------------------------------------------------------------


def test_cordons_are_a_runtime_document(tmp_path: Path) -> None:
    state = RuntimeState.at(tmp_path)
    assert state.cordons() == {}
    assert state.cordon("b", 5.0) and not state.cordon("b", 9.0)  # the first time counts
    assert state.cordon("a", 7.0)
    assert json.loads((tmp_path / "cordons.json").read_text()) == {"cordons": {"a": 7.0, "b": 5.0}}
    # a restart reads the same
    assert RuntimeState.at(tmp_path).cordons() == {"a": 7.0, "b": 5.0}
    assert state.uncordon("a") and not state.uncordon("a")
    assert state.uncordon("b")
    assert not (tmp_path / "cordons.json").exists()
    (tmp_path / "cordons.json").write_text("not json")
    assert state.cordons() == {}  # unreadable: nothing cordoned, never a crash


# -- retire: old replicas leave only once their replacements serve -----------------------


def _moving(replicas: int = 2, **rollout: Any) -> tuple[FleetSpec, PlacementLock]:
    """`replicas` on a, cordoned, with the scheduler's replacements placed elsewhere."""
    dep = _with_rollout(deployment("m", replicas, tensor=8), **rollout)
    on_a = schedule(_spec(dep, clusters=("a",)), None).lock
    closed = cordoned_fleet(_spec(dep), ["a"])
    return closed, schedule(closed, on_a).lock


@pytest.mark.parametrize(
    ("case", "ready_new", "held_out", "unroutable", "retired"),
    [
        ("replacement not Ready", False, False, False, 0),
        ("Ready but not routed yet", True, True, False, 0),
        ("Ready on an unroutable cluster", True, False, True, 0),
        ("Ready and routed", True, False, False, 1),
    ],
)
def test_retire_waits_for_a_serving_replacement(
    case: str, ready_new: bool, held_out: bool, unroutable: bool, retired: int
) -> None:
    closed, lock = _moving()
    new = [r for r in lock.deployments["ml/m"].replicas if r.cluster != "a"]
    old = {r.name for r in lock.deployments["ml/m"].replicas if r.cluster == "a"}
    assert len(new) == 1 and len(old) == 2
    ready = old | ({new[0].name} if ready_new else set())
    after, names = retire(
        closed,
        lock,
        _seen(lock, ready, 0.0),
        {new[0].name} if held_out else set(),
        {new[0].cluster} if unroutable else set(),
    )
    assert len(names) == retired, case
    assert set(names) <= old
    marked = {r.name for r in after.deployments["ml/m"].replicas if r.draining}
    assert marked == set(names)


def test_retire_takes_a_replica_that_does_not_serve_first() -> None:
    closed, lock = _moving()
    new = next(r.name for r in lock.deployments["ml/m"].replicas if r.cluster != "a")
    old = sorted(r.name for r in lock.deployments["ml/m"].replicas if r.cluster == "a")
    _, names = retire(closed, lock, _seen(lock, {new, old[0]}, 0.0), set())
    assert names == [old[1]]  # old[1] is not Ready: it goes before old[0]


def test_without_cordons_nothing_retires() -> None:
    spec = _spec(deployment("m", 2, tensor=8))
    lock = schedule(spec, None).lock
    names = {r.name for r in lock.deployments["ml/m"].replicas}
    assert retire(spec, lock, _seen(lock, names, 0.0), set()) == (lock, [])


# -- finish: the drain of a fixed-count deployment's replica ----------------------------


@pytest.mark.parametrize(
    ("gone_for", "metrics", "ended"),
    [
        (None, IDLE, None),  # the routes were not updated yet: no clock
        (DRAIN_SETTLE / 2, IDLE, None),  # too soon after the routes changed
        (DRAIN_SETTLE, BUSY, None),  # requests in flight
        (DRAIN_SETTLE, IDLE, "no requests in flight"),
        (DRAIN_TIMEOUT, BUSY, f"drain timeout ({DRAIN_TIMEOUT:g}s)"),
    ],
)
def test_finish_ends_a_drain(
    gone_for: float | None, metrics: dict[str, float], ended: str | None
) -> None:
    closed, lock = _moving()
    old = next(r.name for r in lock.deployments["ml/m"].replicas if r.cluster == "a")
    names = {r.name for r in lock.deployments["ml/m"].replicas}
    lock, _ = retire(closed, lock, _seen(lock, names, 0.0), set(), ())
    lock = draining(lock, {old})
    now = 1000.0
    gone = {} if gone_for is None else {old: now - gone_for}
    done = finish(closed, lock, _seen(lock, names, now, {old: metrics}), gone, now)
    if ended is None:
        assert done.drained == {} and done.lock == lock
        assert done.routes_gone == gone
    else:
        assert done.drained == {old: ended}
        assert old not in {r.name for r in done.lock.deployments["ml/m"].replicas}


# -- whole drains, round by round --------------------------------------------------------


@dataclasses.dataclass
class Sim:
    """Rounds of `decide` against a simulated fleet; what serves after each one."""

    spec: FleetSpec
    lock: PlacementLock
    cordons: frozenset[str]
    now: float = 1000.0
    born: dict[str, int] = dataclasses.field(default_factory=dict)  # replica -> round placed
    routed: set[str] = dataclasses.field(default_factory=set)  # in the routes after `up`
    unready: frozenset[str] = frozenset()
    autoscale: AutoscaleState = dataclasses.field(default_factory=AutoscaleState)
    rounds: int = 0
    serving_min: dict[str, int] = dataclasses.field(default_factory=dict)

    def ready(self) -> set[str]:
        return {n for n, born in self.born.items() if born < self.rounds}

    def round(self) -> Any:
        self.rounds += 1
        self.now += 10.0
        for d in self.lock.deployments.values():
            for r in d.replicas:
                self.born.setdefault(r.name, self.rounds - 1)
        decided = decide(
            RoundInputs(
                spec=self.spec,
                previous=self.lock,
                observation=_seen(self.lock, self.ready(), self.now),
                unhealthy_since={},
                autoscale=self.autoscale,
                were_unroutable=frozenset(),
                applied=Applied(),
                round_number=self.rounds,
                grace=300.0,
                cordons=self.cordons,
                were_unready=self.unready,
            )
        )
        # `up` succeeds: the routes are the lock's replicas minus draining and unready ones
        self.lock = decided.plan.lock
        self.unready = frozenset(decided.unready)
        self.routed = {
            r.name
            for d in self.lock.deployments.values()
            for r in d.replicas
            if not r.draining and r.name not in decided.unready
        }
        for name in sorted(self.lock.draining()):
            decided.autoscale_state.routes_gone.setdefault(name, self.now)
        self.autoscale = decided.autoscale_state
        ready = self.ready()
        for key, d in self.lock.deployments.items():
            up = sum(1 for r in d.replicas if r.name in self.routed and r.name in ready)
            self.serving_min[key] = min(self.serving_min.get(key, up), up)
        return decided

    def on(self, cluster: str) -> list[str]:
        return sorted(
            r.name
            for d in self.lock.deployments.values()
            for r in d.replicas
            if r.cluster == cluster
        )


@pytest.mark.parametrize(
    ("replicas", "rollout", "max_rounds"),
    [
        (2, {}, 8),  # one at a time
        (2, {"max_unavailable": 2}, 5),  # both at once
        (3, {"max_unavailable": 0, "max_surge": 1}, 11),
    ],
)
def test_a_drain_moves_every_replica_without_losing_one(
    replicas: int, rollout: dict[str, Any], max_rounds: int
) -> None:
    dep = _with_rollout(deployment("m", replicas, tensor=8), **rollout)
    start = schedule(_spec(dep, clusters=("a",)), None).lock  # everything on a
    spec = _spec(dep)
    sim = Sim(spec, start, frozenset({"a"}), born={r.name: -1 for r in start.replicas_of("ml/m")})
    sim.routed = {r.name for r in start.replicas_of("ml/m")}
    for _ in range(max_rounds):
        sim.round()
        if not sim.on("a"):
            break
    assert sim.on("a") == [], f"still on a after {sim.rounds} rounds"
    # never fewer serving replicas than the deployment wants
    assert sim.serving_min["ml/m"] >= replicas
    final = sim.lock.deployments["ml/m"].replicas
    assert len(final) == replicas and not any(r.draining for r in final)
    assert progress(cordoned_fleet(spec, ["a"]), sim.lock) == {"a": {"serving": [], "draining": []}}
    # steady: more rounds change nothing
    before = sim.lock
    sim.round()
    assert sim.lock == before
    # uncordoned, a later plan may place there again
    bigger = _spec(_with_rollout(deployment("m", replicas + 6, tensor=8), **rollout))
    assert "a" in {r.cluster for r in schedule(bigger, sim.lock).lock.replicas_of("ml/m")}


def test_a_drain_with_no_room_elsewhere_keeps_the_replicas_serving() -> None:
    dep = deployment("m", 2, tensor=8)
    spec = fleet(
        [inference_class("h100", 8)],
        [cluster("a", [pool("gpu", "h100", 2)]), cluster("b", [pool("gpu", "h100", 2)])],
        [dep, deployment("full", 2, tensor=8, selector={"matchLabels": {}})],
    )
    start = schedule(spec, None).lock  # the fleet is full: 2 + 2 on 4 nodes
    on_a = {r.name for r in start.replicas_of("ml/m") if r.cluster == "a"}
    assert on_a
    sim = Sim(spec, start, frozenset({"a"}))
    sim.born = {r.name: -1 for d in start.deployments.values() for r in d.replicas}
    for _ in range(4):
        decided = sim.round()
    # nothing moved off a that could not be replaced; every replica still serves
    assert {r.name for r in sim.lock.replicas_of("ml/m") if r.cluster == "a"} == on_a
    assert sim.serving_min["ml/m"] == 2
    assert decided.plan.report["ml/m"].unplaced == 0
    assert describe(spec, sim.lock, {"a": 0.0}) == [
        "cordoned a since 1970-01-01 00:00:00 UTC: no new replicas; "
        f"{len(sim.on('a'))} replica(s) still serving, 0 draining"
    ]


def test_serving_needs_every_pod_and_group_ready() -> None:
    _, lock = _moving()
    r = lock.deployments["ml/m"].replicas[0]
    seen = _seen(lock, {r.name}, 0.0)
    assert serving(r, seen, set(), set())
    seen.clusters[r.cluster].replicas[r.name] = ReplicaObservation(2, 2, groups=1, ready_groups=0)
    assert not serving(r, seen, set(), set())


@pytest.mark.parametrize("stop_after", [1, 2, 3])
def test_an_interrupted_drain_continues_from_the_lock(stop_after: int) -> None:
    """A drain stopped after any round (the process gone: its remembered drain clocks lost,
    the replicas it held out of the routes forgotten, as `reconcile` does on exit) finishes
    in later rounds from the lock and the cordon alone, never short of serving replicas."""
    dep = deployment("m", 2, tensor=8)
    start = schedule(_spec(dep, clusters=("a",)), None).lock
    sim = Sim(
        _spec(dep), start, frozenset({"a"}), born={r.name: -1 for r in start.replicas_of("ml/m")}
    )
    for _ in range(stop_after):
        sim.round()
    sim.autoscale, sim.unready = AutoscaleState(), frozenset()  # a new process
    for _ in range(10):
        sim.round()
        if not sim.on("a"):
            break
    assert sim.on("a") == []
    assert sim.serving_min["ml/m"] >= 2
    assert len(sim.lock.replicas_of("ml/m")) == 2


def test_up_and_preview_plan_with_the_cordons(tmp_path: Path) -> None:
    """`Fleet.plan` (what `up` and `preview` apply) reads the cordons from the runtime
    state: replacements for the cordoned cluster's replicas, nothing new there."""
    from modelplane.driver.fleet import Fleet
    from modelplane.lock import write_lock
    from tests.spec_docs import base_fleet, existing_cluster, write_fleet

    docs = base_fleet()
    docs.insert(2, existing_cluster("c2"))
    root = write_fleet(tmp_path / "fleet", docs)
    fleet = Fleet.load(root)
    write_lock(root / "modelplane.lock.yaml", fleet.plan().lock)
    fleet = Fleet.load(root)
    assert [r.cluster for r in fleet.previous.replicas_of("team/m")] == ["c1"]
    fleet.runtime.cordon("c1", 0.0)
    planned = fleet.plan().lock.replicas_of("team/m")
    # the old replica stays (it serves until its replacement does), the new one on c2
    assert sorted(r.cluster for r in planned) == ["c1", "c2"]
    fleet.runtime.uncordon("c1")
    assert [r.cluster for r in fleet.plan().lock.replicas_of("team/m")] == ["c1"]
