"""Fleet rollouts executed by the driver (issue 21, part 1): `prepare` (which revision each
replica renders before the stacks run) and `Rollouts` stepping a simulated fleet to the end --
routes before updates, drained before updated, Ready before routed back, never fewer routable
replicas than `replicas - maxUnavailable`, resumable, halting on a replica that never loads.
The simulated fleet stands for the stacks and the clusters (`World`); the dev-fleet test
(tests/devfleet/test_devfleet_rollout.py) runs the real thing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from modelplane.api.loader import load_fleet
from modelplane.api.placement_lock import LockedDeployment, LockedReplica, PlacementLock
from modelplane.driver.rollouts import (
    Prepared,
    Rollouts,
    World,
    prepare,
    progress,
    release,
    templates_env,
    unfinished,
)
from modelplane.driver.state import RolloutRecord, RuntimeState
from modelplane.health.observation import ClusterObservation, Observation, ReplicaObservation
from modelplane.rollout import at_revision, lock_progress, revision, template
from modelplane.stacks import deploy_stack
from tests.spec_docs import deployment, gpu_class, write_fleet

KEY = "team/m"
CLUSTERS = ("c1", "c2", "c3", "c4")


def cluster(name: str, live: bool = True, nodes: int = 4) -> dict[str, Any]:
    source = {"secretRef": {"name": "kubeconfigs", "key": name}} if live else {"renderTo": "out"}
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": name},
        "spec": {
            "cluster": {"source": "Existing", "existing": source},
            "nodePools": [{"name": "gpu", "className": "l4", "nodeCount": nodes}],
        },
    }


def fleet(
    tmp_path: Path,
    image: str,
    replicas: int = 3,
    live: bool = True,
    nodes: int = 4,
    **rollout: Any,
):
    dep = (
        deployment(replicas=replicas, rollout=rollout) if rollout else deployment(replicas=replicas)
    )
    dep["spec"]["workers"]["template"]["spec"]["containers"][0]["image"] = image
    docs = [gpu_class(), *(cluster(c, live, nodes) for c in CLUSTERS[:replicas]), dep]
    loaded = load_fleet(write_fleet(tmp_path / image.replace(":", "-"), copy.deepcopy(docs)))
    assert not loaded.errors, loaded.errors
    return loaded.fleet


def locked(revisions: list[str | None]) -> PlacementLock:
    replicas = [
        LockedReplica(
            name=f"m-r{i}", cluster=CLUSTERS[i], index=0, pools={"unified": "gpu"}, revision=rev
        )
        for i, rev in enumerate(revisions)
    ]
    return PlacementLock(deployments={KEY: LockedDeployment(replicas=replicas)})


# --------------------------------------------------------------------------- prepare


def test_prepare_keeps_old_replicas_on_their_revision(tmp_path: Path) -> None:
    old, new = fleet(tmp_path, "vllm:a"), fleet(tmp_path, "vllm:b")
    first = prepare(old, locked([None, None, None]), {})
    a = revision(old.deployments[KEY])
    # Placed before rollouts existed: adopted at the current revision, nothing to roll.
    assert [r.revision for r in first.lock.replicas_of(KEY)] == [a, a, a]
    assert first.rolling == [] and first.records[KEY].templates == {
        a: template(old.deployments[KEY])
    }
    second = prepare(new, first.lock, first.records, now=5.0)
    b = revision(new.deployments[KEY])
    assert [r.revision for r in second.lock.replicas_of(KEY)] == [a, a, a]
    assert second.rolling == [KEY]
    record = second.records[KEY]
    assert (record.target, record.stable, record.phase) == (b, a, "Progressing")
    assert set(record.templates) == {a, b}
    # The program renders the old replicas from the old template: the old image.
    rendered = at_revision(new.deployments[KEY], record.templates[a])
    assert revision(rendered) == a
    engine = rendered.spec.workers.template.spec.engine  # type: ignore[union-attr]
    assert engine.image == "vllm:a"
    assert json.loads(templates_env(second.lock, second.records)) == {KEY: {a: record.templates[a]}}
    assert progress(second.lock, KEY, record) == f"rollout: 0/3 replicas at revision {b}"


PREPARE = [
    # (name, strategy, live clusters, expected: every replica at the new revision at once)
    ("rolling", None, True, False),
    ("all-at-once-flag", "AllAtOnce", True, True),
    ("render-to-clusters-change-at-once", None, False, True),
]


@pytest.mark.parametrize(
    ("strategy", "live", "at_once"), [p[1:] for p in PREPARE], ids=[p[0] for p in PREPARE]
)
def test_prepare_strategies(
    tmp_path: Path, strategy: str | None, live: bool, at_once: bool
) -> None:
    old = fleet(tmp_path, "vllm:a", live=live)
    new = fleet(tmp_path, "vllm:b", live=live)
    first = prepare(old, locked([None, None, None]), {})
    second = prepare(new, first.lock, first.records, strategy=strategy)
    b = revision(new.deployments[KEY])
    assert all(r.revision == b for r in second.lock.replicas_of(KEY)) is at_once
    assert (second.rolling == []) is at_once


def test_all_at_once_mid_surge_clears_the_surge_mark(tmp_path: Path) -> None:
    """A rollout finished another way leaves no replica the scheduler would keep beyond
    the count."""
    old, new = fleet(tmp_path, "vllm:a"), fleet(tmp_path, "vllm:b")
    first = prepare(old, locked([None] * 3), {})
    surged = first.lock.replicas_of(KEY) + [
        LockedReplica(
            name="m-s", cluster="c1", index=1, pools={"unified": "gpu"}, revision="b" * 10
        ).model_copy(update={"surge": True})
    ]
    lock = PlacementLock(deployments={KEY: LockedDeployment(replicas=surged)})
    done = prepare(new, lock, first.records, strategy="AllAtOnce")
    assert done.rolling == [] and not any(r.surge for r in done.lock.replicas_of(KEY))
    rolling_on = prepare(new, lock, first.records)
    assert rolling_on.rolling == [KEY] and [r.surge for r in rolling_on.lock.replicas_of(KEY)] == [
        False,
        False,
        False,
        True,
    ]


def test_spec_strategy_all_at_once(tmp_path: Path) -> None:
    old = fleet(tmp_path, "vllm:a", strategy="AllAtOnce")
    new = fleet(tmp_path, "vllm:b", strategy="AllAtOnce")
    second = prepare(
        new, prepare(old, locked([None] * 3), {}).lock, prepare(old, locked([None] * 3), {}).records
    )
    assert second.rolling == []


# --------------------------------------------------------------------------- a simulated fleet


class Sim:
    """Replicas' pods (revision, created, ready at), the routes the gateway applied, and every
    violation a client would see (a replica updated while routed)."""

    def __init__(self, state: RuntimeState, lock: PlacementLock, load: float, never: str = ""):
        self.now = 1000.0
        self.state, self.load, self.never = state, load, never
        self.pods = {r.name: [r.revision, 0.0, 0.0] for r in lock.replicas_of(KEY)}
        self.routed = set(self.pods)
        self.min_routable = len(self.pods)
        self.violations: list[str] = []
        self.applies: list[list[str]] = []
        self.fail_after: int | None = None
        self.linger = 1.5
        self.pending: dict[str, tuple[list[Any], float]] = {}
        self.bad = ""  # a revision whose engines answer 5xx
        self.served: dict[str, list[int]] = {}
        self.born: dict[str, float] = {}
        self.placed: list[str] = []  # surge replicas, in placement order
        self.written = lock
        self.most = len(self.pods)  # replicas' workloads at once

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def tick(self) -> None:
        """Old pods go once their replacement's time came (Recreate: the old pod is seen
        Ready for a moment after the update was applied)."""
        for name, (pod, at) in list(self.pending.items()):
            if self.now >= at:
                self.pods[name] = pod
                del self.pending[name]

    def ready(self, name: str) -> bool:
        self.tick()
        rev, _, ready_at = self.pods[name]
        return rev != self.never and self.now >= ready_at

    def apply(self, lock: PlacementLock, stacks: list[str]) -> bool:
        self.applies.append(stacks)
        self.written = lock  # the lock is written before the stacks run
        if self.fail_after is not None and len(self.applies) > self.fail_after:
            raise KeyboardInterrupt  # the process dies mid-way
        self.now += 1.0
        if "gateway" in stacks:
            out = set(self.state.routing().unready) | lock.draining()
            self.routed = {r.name for r in lock.replicas_of(KEY)} & set(self.pods) - out
        if deploy_stack(KEY) in stacks:
            names = {r.name for r in lock.replicas_of(KEY)}
            for name in sorted(set(self.pods) - names):  # removed: its workload goes
                if name in self.routed:
                    self.violations.append(f"{name} removed while routed")
                del self.pods[name]
                self.pending.pop(name, None)
            for r in lock.replicas_of(KEY):
                if r.name not in self.pods:  # placed: its pod loads
                    self.pods[r.name] = [r.revision, self.now, self.now + self.load]
                    self.placed.append(r.name)
                    continue
                pod = self.pending[r.name][0] if r.name in self.pending else self.pods[r.name]
                if pod[0] != r.revision:
                    if r.name in self.routed:
                        self.violations.append(f"{r.name} updated while routed")
                    at = self.now + self.linger
                    self.pending[r.name] = ([r.revision, at, at + self.load], at)
        routable = sum(1 for n in self.routed if self.ready(n))
        self.min_routable = min(self.min_routable, routable)
        self.most = max(self.most, len(self.pods))
        return True

    def observe(self, lock: PlacementLock, _keys: list[str]) -> Observation:
        self.now += 0.2
        clusters: dict[str, ClusterObservation] = {}
        self.tick()
        for r in lock.replicas_of(KEY):
            if r.name not in self.pods:
                continue  # in the lock, its stack not run yet
            rev, created, _ = self.pods[r.name]
            if r.name in self.routed and self.ready(r.name):
                served = self.served.setdefault(r.name, [0, 0])
                served[0] += 10
                served[1] += 10 if rev == self.bad else 0
            if self.pods[r.name][1] != self.born.get(r.name):  # a new pod: counters restart
                self.born[r.name] = self.pods[r.name][1]
                self.served[r.name] = [0, 0]
            requests, errors = self.served.get(r.name, [0, 0])
            metrics = {"requests": float(requests), "errors": float(errors)}
            seen = ReplicaObservation(
                pods=1, ready_pods=int(self.ready(r.name)), created=created, metrics=metrics
            )
            here = clusters.setdefault(r.cluster, ClusterObservation(r.cluster, reachable=True))
            here.replicas[r.name] = seen
        routable = sum(1 for n in self.routed if self.ready(n))
        self.min_routable = min(self.min_routable, routable)
        return Observation(self.now, clusters)

    def world(self) -> World:
        return World(
            self.apply, self.observe, clock=self.clock, sleep=self.sleep, gateways=("gateway",)
        )


def rolling(
    tmp_path: Path, replicas: int, image: str = "vllm:b", nodes: int = 4, **rollout: Any
) -> tuple[Any, Prepared, RuntimeState]:
    old = fleet(tmp_path, "vllm:a", replicas, nodes=nodes, **rollout)
    new = fleet(tmp_path, image, replicas, nodes=nodes, **rollout)
    first = prepare(
        old, PlacementLock(deployments={KEY: locked([None] * replicas).deployments[KEY]}), {}
    )
    second = prepare(new, first.lock, first.records)
    state = RuntimeState.at(tmp_path / "state")
    state.set_rollouts(second.records)
    return new, second, state


ROLLS = [
    # (name, replicas, rollout, nodes per cluster, least routable at any time,
    #  most workloads at once, surge replicas placed)
    ("one-at-a-time", 3, {}, 4, 2, 3, 0),
    ("two-at-a-time", 4, {"maxUnavailable": 2}, 4, 2, 4, 0),
    ("percent", 4, {"maxUnavailable": "50%"}, 4, 2, 4, 0),
    ("surge-make-before-break", 3, {"maxUnavailable": 0, "maxSurge": 1}, 4, 3, 4, 3),
    ("surge-two-at-a-time", 4, {"maxUnavailable": 0, "maxSurge": 2}, 4, 4, 6, 4),
    ("surge-percent", 4, {"maxUnavailable": 0, "maxSurge": "25%"}, 4, 4, 5, 4),
    ("surge-and-unavailable", 3, {"maxUnavailable": 1, "maxSurge": 1}, 4, 2, 4, 1),
    ("no-room-falls-back-to-unavailable", 3, {"maxUnavailable": 1, "maxSurge": 1}, 1, 2, 3, 0),
]


@pytest.mark.parametrize(
    ("replicas", "rollout", "nodes", "least", "most", "surged"),
    [r[1:] for r in ROLLS],
    ids=[r[0] for r in ROLLS],
)
def test_rollout_steps_within_the_budget(
    tmp_path: Path,
    replicas: int,
    rollout: dict[str, Any],
    nodes: int,
    least: int,
    most: int,
    surged: int,
) -> None:
    spec, prepared, state = rolling(tmp_path, replicas, nodes=nodes, **rollout)
    sim = Sim(state, prepared.lock, load=3.0)
    stepper = Rollouts(spec, state, sim.world(), deadline=900)
    lock = stepper.run(prepared.lock, prepared.rolling)
    b = revision(spec.deployments[KEY])
    assert [r.revision for r in lock.replicas_of(KEY)] == [b] * replicas
    assert not any(r.surge or r.draining for r in lock.replicas_of(KEY))
    assert all(sim.pods[n][0] == b for n in sim.pods) and len(sim.pods) == replicas
    assert sim.violations == []
    assert sim.min_routable == least
    assert (sim.most, len(sim.placed)) == (most, surged)
    assert sim.routed == set(sim.pods) and state.routing().unready == {}
    outcome = stepper.outcomes[KEY]
    assert outcome.phase == "Complete", outcome
    assert outcome.progress == f"rollout: {replicas}/{replicas} replicas at revision {b}"
    record = state.rollouts()[KEY]
    assert (record.phase, record.stable, record.updating) == ("Complete", b, {})
    assert record.retiring == []


def test_surge_without_room_or_unavailability_halts(tmp_path: Path) -> None:
    spec, prepared, state = rolling(tmp_path, 3, nodes=1, maxUnavailable=0, maxSurge=1)
    sim = Sim(state, prepared.lock, load=3.0)
    stepper = Rollouts(spec, state, sim.world(), deadline=900)
    lock = stepper.run(prepared.lock, prepared.rolling)
    assert lock == prepared.lock and sim.applies == [] and sim.min_routable == 3
    record = state.rollouts()[KEY]
    assert record.phase == "Paused" == stepper.outcomes[KEY].phase
    assert "no spare capacity for a surge replica (maxSurge 1)" in record.reason
    assert "maxUnavailable is 0" in stepper.outcomes[KEY].reason


def _next_up(spec: Any, sim: Sim, state: RuntimeState) -> Prepared:
    """What the next `up` rolls from: the scheduler's plan on the lock written so far, its
    stacks run (the workloads and routes the killed run had not applied yet)."""
    from modelplane.scheduler import schedule

    prepared = prepare(spec, schedule(spec, sim.written).lock, state.rollouts())
    sim.apply(prepared.lock, [deploy_stack(KEY), "gateway"])
    return prepared


@pytest.mark.parametrize("killed_at", range(1, 9))
def test_an_interrupted_surge_rollout_resumes(tmp_path: Path, killed_at: int) -> None:
    """Killed before the `killed_at`-th stack run of a maxUnavailable 0 / maxSurge 1 rollout
    (placing, routing, retiring the first surge replica, the second's placement...): the
    next `up` keeps what the lock holds (surge and draining replicas), finishes the rollout
    and never has fewer than 3 routable replicas."""
    spec, prepared, state = rolling(tmp_path, 3, maxUnavailable=0, maxSurge=1)
    sim = Sim(state, prepared.lock, load=3.0)
    sim.fail_after = killed_at - 1
    with pytest.raises(KeyboardInterrupt):
        Rollouts(spec, state, sim.world(), deadline=900).run(prepared.lock, prepared.rolling)
    written = sim.written
    sim.fail_after = None
    again = _next_up(spec, sim, state)
    # The scheduler keeps the surge and draining replicas the rollout placed.
    assert {r.name for r in again.lock.replicas_of(KEY)} == {
        r.name for r in written.replicas_of(KEY)
    }
    assert again.rolling == [KEY]
    lock = Rollouts(spec, state, sim.world(), deadline=900).run(again.lock, again.rolling)
    b = revision(spec.deployments[KEY])
    assert [r.revision for r in lock.replicas_of(KEY)] == [b] * 3
    assert not any(r.surge or r.draining for r in lock.replicas_of(KEY))
    assert sorted(sim.pods) == sorted(r.name for r in lock.replicas_of(KEY))
    assert sim.violations == [] and sim.min_routable >= 3 and sim.most <= 4
    assert state.rollouts()[KEY].phase == "Complete"


def test_an_interrupted_rollout_resumes(tmp_path: Path) -> None:
    spec, prepared, state = rolling(tmp_path, 3)
    sim = Sim(state, prepared.lock, load=3.0)
    sim.fail_after = 3  # gateway, deploy, gateway: killed before the second update
    with pytest.raises(KeyboardInterrupt):
        Rollouts(spec, state, sim.world(), deadline=900).run(prepared.lock, prepared.rolling)
    b = revision(spec.deployments[KEY])
    # What the next `up` sees: the lock as written so far, the state as remembered.
    lock_now = PlacementLock(
        deployments={
            KEY: prepared.lock.deployments[KEY].model_copy(
                update={
                    "replicas": [
                        r.model_copy(update={"revision": sim.pods[r.name][0]})
                        for r in prepared.lock.replicas_of(KEY)
                    ]
                }
            )
        }
    )
    again = prepare(spec, lock_now, state.rollouts())
    assert again.rolling == [KEY]
    sim.fail_after = None
    lock = Rollouts(spec, state, sim.world(), deadline=900).run(again.lock, again.rolling)
    assert [r.revision for r in lock.replicas_of(KEY)] == [b] * 3
    assert sim.violations == [] and sim.min_routable >= 2
    assert state.rollouts()[KEY].phase == "Complete"


def test_a_replica_that_never_loads_halts_the_rollout(tmp_path: Path) -> None:
    spec, prepared, state = rolling(tmp_path, 3)
    b = revision(spec.deployments[KEY])
    sim = Sim(state, prepared.lock, load=3.0, never=b)
    stepper = Rollouts(spec, state, sim.world(), ready_timeout=60, deadline=900)
    lock = stepper.run(prepared.lock, prepared.rolling)
    assert sum(1 for r in lock.replicas_of(KEY) if r.revision == b) == 1
    outcome = stepper.outcomes[KEY]
    assert outcome.phase == "Paused" and "not Ready at revision" in outcome.reason
    assert state.rollouts()[KEY].phase == "Paused"
    assert sim.min_routable == 2  # the two stable replicas kept serving
    # The next run stays halted (`rollout resume` clears it).
    assert Rollouts(spec, state, sim.world(), deadline=900).run(lock, [KEY]) == lock


def test_a_paused_rollout_holds(tmp_path: Path) -> None:
    spec, prepared, state = rolling(tmp_path, 3)
    records = state.rollouts()
    records[KEY].paused = True
    state.set_rollouts(records)
    sim = Sim(state, prepared.lock, load=3.0)
    stepper = Rollouts(spec, state, sim.world(), deadline=900)
    lock = stepper.run(prepared.lock, prepared.rolling)
    assert lock == prepared.lock and sim.applies == []
    assert stepper.outcomes[KEY].phase == "Paused"


def test_rollout_record_round_trips(tmp_path: Path) -> None:
    state = RuntimeState.at(tmp_path)
    record = RolloutRecord(
        "bbbbbbbbbb",
        "aaaaaaaaaa",
        "Paused",
        "why",
        None,
        True,
        {"m-r0": 3.0},
        {"aaaaaaaaaa": {"roles": {}}},
        1.0,
        2.0,
    )
    state.set_rollouts({KEY: record})
    assert state.rollouts() == {KEY: record}
    (tmp_path / "rollout.json").write_text("{not json")
    assert state.rollouts() == {}
    state.set_rollouts({})
    assert not (tmp_path / "rollout.json").exists()


def test_the_analysis_gate_rolls_a_failing_revision_back(tmp_path: Path) -> None:
    gate = {"analysis": {"window": "10s", "minRequests": 20}}
    spec, prepared, state = rolling(tmp_path, 3, **gate)
    a = prepared.records[KEY].stable
    b = revision(spec.deployments[KEY])
    sim = Sim(state, prepared.lock, load=3.0)
    sim.bad = b
    stepper = Rollouts(spec, state, sim.world(), deadline=900)
    lock = stepper.run(prepared.lock, prepared.rolling)
    # One step, judged, rolled back: every replica on the last good revision again.
    assert [r.revision for r in lock.replicas_of(KEY)] == [a] * 3
    assert all(sim.pods[n][0] == a for n in sim.pods)
    assert sim.violations == [] and sim.min_routable >= 2
    record = state.rollouts()[KEY]
    assert (record.phase, record.failed, record.target) == ("RolledBack", b, a)
    assert record.reason.startswith(f"revision {b} rolled back: error ratio 100.0%")
    assert stepper.outcomes[KEY].phase == "RolledBack"
    # The next up leaves it there until the spec changes.
    again = prepare(spec, lock, state.rollouts())
    assert again.rolling == [] and again.lock == lock


def test_the_analysis_gate_passes_a_healthy_revision(tmp_path: Path) -> None:
    spec, prepared, state = rolling(tmp_path, 3, analysis={"window": "10s"})
    sim = Sim(state, prepared.lock, load=3.0)
    started = sim.now
    lock = Rollouts(spec, state, sim.world(), deadline=900).run(prepared.lock, prepared.rolling)
    b = revision(spec.deployments[KEY])
    assert [r.revision for r in lock.replicas_of(KEY)] == [b] * 3
    assert sim.now - started >= 20  # two windows watched (the last step has no old to compare)
    assert state.rollouts()[KEY].phase == "Complete"


class PDSim(Sim):
    """Prefill/decode replicas: an update replaces the pods of the roles whose template changed
    (``changes``), the decode pod ``lag`` seconds after the prefill pod (the two workloads are
    separate objects); a replica routed while its roles run different revisions, or updated
    while routed, is a violation."""

    lag = 4.0

    def __init__(
        self, state: RuntimeState, lock: PlacementLock, load: float, changes: set[str]
    ) -> None:
        super().__init__(state, lock, load)
        self.changes = changes
        self.decode = {n: list(p) for n, p in self.pods.items()}
        self.decode_next: dict[str, tuple[list[Any], float]] = {}

    def mixed_routed(self) -> None:
        for n in self.routed:
            if self.pods[n][0] != self.decode[n][0]:
                self.violations.append(
                    f"{n} routed with prefill {self.pods[n][0]} and decode {self.decode[n][0]}"
                )

    def apply(self, lock: PlacementLock, stacks: list[str]) -> bool:
        if deploy_stack(KEY) in stacks:
            for r in lock.replicas_of(KEY):
                if r.name in self.pending or self.pods[r.name][0] == r.revision:
                    continue
                if r.name in self.routed:
                    self.violations.append(f"{r.name} updated while routed")
                if "prefill" not in self.changes:  # its Deployment is unchanged: same pod
                    self.pods[r.name][0] = r.revision
        ok = super().apply(lock, stacks)
        for r in lock.replicas_of(KEY):
            target = self.decode_next.get(r.name, (self.decode[r.name], 0.0))[0]
            if target[0] != r.revision:
                if "decode" not in self.changes:
                    self.decode[r.name][0] = r.revision
                    continue
                at = self.now + self.lag
                self.decode_next[r.name] = ([r.revision, at, at + self.load], at)
        self.mixed_routed()
        return ok

    def tick(self) -> None:
        super().tick()
        for name, (pod, at) in list(self.decode_next.items()):
            if self.now >= at:
                self.decode[name] = pod
                del self.decode_next[name]

    def observe(self, lock: PlacementLock, keys: list[str]) -> Observation:
        self.now += 0.2
        self.tick()
        clusters: dict[str, ClusterObservation] = {}
        for r in lock.replicas_of(KEY):
            roles = {"prefill": self.pods[r.name], "decode": self.decode[r.name]}
            started = {role: p for role, p in roles.items() if p[1] <= self.now}
            ready = sum(1 for p in started.values() if self.now >= p[2])
            seen = ReplicaObservation(
                pods=len(started),
                ready_pods=ready,
                created=min(p[1] for p in started.values()),
                role_created={role: p[1] for role, p in started.items()},
            )
            clusters[r.cluster] = ClusterObservation(
                r.cluster, reachable=True, replicas={r.name: seen}
            )
        self.mixed_routed()
        return Observation(self.now, clusters)


PD_CHANGES = [
    # (name, prefill image, decode image after the change from vllm:a / vllm:a)
    ("both-roles", "vllm:b", "vllm:b"),
    ("decode-only", "vllm:a", "vllm:b"),
    ("prefill-only", "vllm:b", "vllm:a"),
]


@pytest.mark.parametrize(
    ("prefill", "decode"), [c[1:] for c in PD_CHANGES], ids=[c[0] for c in PD_CHANGES]
)
def test_prefill_decode_replicas_never_serve_mixed_revisions(
    tmp_path: Path, prefill: str, decode: str
) -> None:
    """Both roles of a replica change in its step, out of the routes; it is routed back once
    the pods of every role the change touched are new and Ready (a role the change left
    alone keeps its pods: the rollout does not wait for them to be replaced)."""
    from tests.factories import role

    def pd(images: dict[str, str]) -> Any:
        dep = deployment(replicas=3)
        del dep["spec"]["workers"]
        for name, image in images.items():
            dep["spec"][name] = role()
            dep["spec"][name]["workers"]["template"]["spec"]["containers"][0]["image"] = image
        docs = [gpu_class(), *(cluster(c) for c in CLUSTERS[:3]), dep]
        folder = tmp_path / "-".join(images.values()).replace(":", "")
        loaded = load_fleet(write_fleet(folder, copy.deepcopy(docs)))
        assert not loaded.errors, loaded.errors
        return loaded.fleet

    old = pd({"prefill": "vllm:a", "decode": "vllm:a"})
    new = pd({"prefill": prefill, "decode": decode})
    changes = {r for r, image in (("prefill", prefill), ("decode", decode)) if image != "vllm:a"}
    base = locked([None] * 3)
    pools = {"prefill": "gpu", "decode": "gpu"}
    base = PlacementLock(
        deployments={
            KEY: LockedDeployment(
                replicas=[r.model_copy(update={"pools": pools}) for r in base.replicas_of(KEY)]
            )
        }
    )
    first = prepare(old, base, {})
    second = prepare(new, first.lock, first.records)
    # The old template renders both roles at the old image.
    a = first.records[KEY].stable
    rendered = at_revision(new.deployments[KEY], second.records[KEY].templates[a])
    assert {r.workers.template.spec.engine.image for r in rendered.spec.roles.values()} == {
        "vllm:a"
    }
    state = RuntimeState.at(tmp_path / "state")
    state.set_rollouts(second.records)
    sim = PDSim(state, second.lock, load=3.0, changes=changes)
    stepper = Rollouts(new, state, sim.world(), ready_timeout=120, deadline=900)
    lock = stepper.run(second.lock, second.rolling)
    assert stepper.outcomes[KEY].phase == "Complete", stepper.outcomes[KEY]
    b = revision(new.deployments[KEY])
    assert [r.revision for r in lock.replicas_of(KEY)] == [b] * 3
    assert all(sim.pods[n][0] == sim.decode[n][0] == b for n in sim.pods)
    assert sim.violations == [] and sim.min_routable >= 2
    record = state.rollouts()[KEY]
    assert record.previous == {} and record.updating == {}


# --------------------------------------------------------------------------- state, plan, people


def test_stopping_reconcile_keeps_the_rollout_exclusions(tmp_path: Path) -> None:
    state = RuntimeState.at(tmp_path)
    state.set_routing({}, {"m-r0": "rollout: updating to revision b", "m-r9": "1 of 2 pods Ready"})
    assert state.clear_unready()
    assert state.routing().unready == {"m-r0": "rollout: updating to revision b"}
    assert not state.clear_unready()


def test_reconcile_resumes_only_rollouts_with_steps_left(tmp_path: Path) -> None:
    spec, prepared, state = rolling(tmp_path, 3)
    records = state.rollouts()
    assert unfinished(spec, prepared.lock, records)
    records[KEY].paused = True
    assert not unfinished(spec, prepared.lock, records)
    records[KEY].paused, records[KEY].phase = False, "Paused"  # halted
    assert not unfinished(spec, prepared.lock, records)
    b = revision(spec.deployments[KEY])
    done = locked([b, b, b])
    records[KEY].phase = "Progressing"
    assert not unfinished(spec, done, records)


def test_plan_shows_the_rollout_and_the_next_replicas(tmp_path: Path) -> None:
    spec = fleet(tmp_path, "vllm:b", replicas=4, maxUnavailable=2)
    dep = spec.deployments[KEY]
    b = revision(dep)
    a = "aaaaaaaaaa"
    replicas = locked([a, b, a, a]).replicas_of(KEY)
    got = lock_progress(dep, replicas)
    assert got is not None
    assert got.line == f"rollout: 1/4 replicas at revision {b}; next: m-r0, m-r2"
    assert lock_progress(dep, locked([b] * 4).replicas_of(KEY)) is None
    assert lock_progress(dep, locked([None] * 4).replicas_of(KEY)) is None  # nothing recorded


def test_rollout_verbs(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    spec, prepared, state = rolling(tmp_path, 3)
    fleet_dir = tmp_path / "vllm-b"
    state = RuntimeState.at(fleet_dir / ".modelplane")
    state.set_rollouts(prepared.records)
    a, b = prepared.records[KEY].stable, revision(spec.deployments[KEY])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "modelplane", "rollout", *args],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    shown = cli("status", str(fleet_dir), "-o", "json")
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)
    assert (row["deployment"], row["phase"], row["target"], row["stable"]) == (
        KEY,
        "Progressing",
        b,
        a,
    )
    asked = cli("pause", str(fleet_dir), KEY)  # no terminal, no --yes: refused
    assert asked.returncode == 1 and "--yes" in asked.stderr
    assert not state.rollouts()[KEY].paused
    assert cli("pause", str(fleet_dir), KEY, "--yes").returncode == 0
    assert state.rollouts()[KEY].paused
    assert cli("resume", str(fleet_dir), KEY, "--yes").returncode == 0
    assert not state.rollouts()[KEY].paused
    assert cli("undo", str(fleet_dir), KEY, "--yes").returncode == 0
    record = state.rollouts()[KEY]
    assert (record.phase, record.target, record.failed) == ("RolledBack", a, b)
    twice = cli("undo", str(fleet_dir), KEY, "--yes")  # back at the last good one already
    assert twice.returncode == 1 and "no earlier good revision" in twice.stderr, twice.stderr
    # The next up goes back to the last good revision and stays there.
    again = prepare(spec, prepared.lock, state.rollouts())
    assert again.rolling == [] and {r.revision for r in again.lock.replicas_of(KEY)} == {a}
    for verb in (
        ["pause", str(fleet_dir), "team/nope", "--yes"],
        ["status", str(fleet_dir), "team/nope"],
    ):
        unknown = cli(*verb)
        assert unknown.returncode == 2 and "no ModelDeployment team/nope" in unknown.stderr, verb
        assert "Traceback" not in unknown.stderr


def test_all_at_once_mid_rollout_finishes_it_and_routes_every_replica(tmp_path: Path) -> None:
    spec, prepared, state = rolling(tmp_path, 3)
    state.set_routing(
        {"c9": "unreachable"},
        {"m-r0": "rollout: updating to revision x", "m-r1": "1 of 2 pods Ready"},
    )
    done = prepare(spec, prepared.lock, state.rollouts(), strategy="AllAtOnce")
    assert done.rolling == [] and done.records[KEY].phase == "Complete"
    release(state, done.lock, done.rolling)
    routing = state.routing()
    assert routing.unready == {"m-r1": "1 of 2 pods Ready"}
    assert routing.unroutable == {"c9": "unreachable"}


def test_prepare_leaves_the_remembered_records_alone(tmp_path: Path) -> None:
    """`up` saves the records when they changed: prepare must not change the caller's."""
    old, new = fleet(tmp_path, "vllm:a"), fleet(tmp_path, "vllm:b")
    first = prepare(old, locked([None] * 3), {})
    remembered = copy.deepcopy(first.records)
    second = prepare(new, first.lock, first.records, strategy="AllAtOnce")
    assert first.records == remembered
    b = revision(new.deployments[KEY])
    assert b in second.records[KEY].templates and second.records != first.records


def test_a_lost_template_is_reported(tmp_path: Path) -> None:
    old, new = fleet(tmp_path, "vllm:a"), fleet(tmp_path, "vllm:b")
    first = prepare(old, locked([None] * 3), {})
    second = prepare(new, first.lock, {})  # the runtime state is gone
    assert second.rolling == [] and len(second.unknown) == 3
