"""What if clusters were lost now: failover's re-plan for every scenario, before it happens.

scheduling.md, "Surviving a loss". A scenario loses a set of clusters (every N of them,
or every value of a label); it is planned as failover plans a cluster past its grace
period: the cluster carries the NoExecute `modelplane.ai/unhealthy` taint, and the
scheduler re-plans from the current plan's lock (survivors stay where they are,
priorities and the capacity others hold count as always). A scenario fails when some
deployment ends with fewer replicas than the plan without the loss gives it.

Fast path: one run is charged with the plan once; each scenario evicts the lost
clusters' replicas, fills with those clusters out of every group (`Placement.lost`),
and is undone. That is the same re-plan as tainting the clusters, as long as no
deployment tolerates the taint; when one does, each scenario is a full `schedule`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_cluster import Taint
from modelplane.api.placement_lock import LockedReplica, PlacementLock
from modelplane.scheduler import ScheduleResult, autoscaled_fleet, schedule
from modelplane.scheduler.capacity import Pool
from modelplane.scheduler.cordon import surged_fleet
from modelplane.scheduler.placement import Placement, replica_gpus
from modelplane.scheduler.reserved import removed_deployments, reserved_items
from modelplane.scheduler.taints import EVICTS, UNHEALTHY_KEY, untolerated

LOST_TAINT = Taint(key=UNHEALTHY_KEY, value="unreachable", effect="NoExecute")
T = TypeVar("T")
HEADROOM_CAP = 1000  # more new replicas than this per deployment are reported as the cap


@dataclass(frozen=True)
class Short:
    """A deployment a scenario leaves short: replicas fewer than without the loss, and
    the devices they would hold (by InferenceClass of the pools they had)."""

    replicas: int
    devices: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "devices": dict(self.devices)}


@dataclass(frozen=True)
class Scenario:
    lost: tuple[str, ...]  # the clusters lost, by name
    label: tuple[str, str] | None = None  # (key, value) for a label scenario
    short: dict[str, Short] = field(default_factory=dict)  # by deployment key

    @property
    def name(self) -> str:
        if self.label is not None:
            return f"{self.label[0]}={self.label[1]} ({', '.join(self.lost)})"
        return ", ".join(self.lost)

    @property
    def devices(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.short.values():
            for cls, n in s.devices.items():
                out[cls] = out.get(cls, 0) + n
        return dict(sorted(out.items()))

    def severity(self) -> tuple[int, int]:
        return sum(self.devices.values()), sum(s.replicas for s in self.short.values())

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"lost": list(self.lost)}
        if self.label is not None:
            out["label"] = {"key": self.label[0], "value": self.label[1]}
        out["short"] = {k: s.as_dict() for k, s in self.short.items()}
        out["devices"] = self.devices
        return out


@dataclass(frozen=True)
class SurviveReport:
    what: str  # "any 1 cluster", "any value of label <key>"
    scenarios: int  # scenarios checked
    failing: list[Scenario]  # worst first: most devices, then replicas missing, then name
    headroom: dict[str, int]  # per deployment: new replicas the fleet could take now
    headroom_after: dict[str, int]  # the same after the worst scenario (or now)
    free: dict[str, int]  # free devices per InferenceClass now
    free_after: dict[str, int]  # the same after the worst scenario

    @property
    def survives(self) -> bool:
        return not self.failing

    @property
    def worst(self) -> Scenario | None:
        return self.failing[0] if self.failing else None

    def line(self) -> str:
        """One line for people: `survives the loss of any 1 cluster: yes` (or no, worst)."""
        head = f"survives the loss of {self.what}: "
        if self.worst is None:
            return head + f"yes ({self.scenarios} scenarios)"
        worst = self.worst
        shorts = "; ".join(
            f"{k} {s.replicas} replica(s) short" + _devices_text(s.devices)
            for k, s in worst.short.items()
        )
        return (
            head + f"no ({len(self.failing)} of {self.scenarios} scenarios fail; worst: "
            f"losing {worst.name}: {shorts})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "survives": self.survives,
            "scenarios": self.scenarios,
            "failing": [s.as_dict() for s in self.failing],
            "worst": self.worst.as_dict() if self.worst is not None else None,
            "headroom": {
                k: {"now": n, "afterWorstLoss": self.headroom_after[k]}
                for k, n in self.headroom.items()
            },
            "freeDevices": {"now": self.free, "afterWorstLoss": self.free_after},
        }


def _devices_text(devices: Mapping[str, int]) -> str:
    if not devices:
        return ""
    return " (" + ", ".join(f"{n} {cls} devices" for cls, n in devices.items()) + ")"


def scenarios_of(
    fleet: FleetSpec, lock: PlacementLock, losses: int | None, label: str | None
) -> list[tuple[frozenset[str], tuple[str, str] | None]]:
    """The lost-cluster sets to check: every `losses` clusters (sets where no cluster
    hosts a replica change nothing and are left out), or every value of `label`."""
    names = sorted(fleet.clusters)
    if label is not None:
        values: dict[str, list[str]] = {}
        for name in names:
            value = fleet.clusters[name].metadata.labels.get(label)
            if value is not None:
                values.setdefault(value, []).append(name)
        return [(frozenset(m), (label, v)) for v, m in sorted(values.items())]
    hosting = {r.cluster for dep in lock.deployments.values() for r in dep.replicas}
    n = losses or 0
    return [
        (frozenset(combo), None)
        for combo in itertools.combinations(names, n)
        if hosting.intersection(combo)
    ]


def survive(
    fleet: FleetSpec,
    plan: ScheduleResult,
    *,
    losses: int | None = None,
    label: str | None = None,
) -> SurviveReport:
    """Check every scenario against `plan` (the fleet's plan: `schedule(fleet, lock)`)."""
    fleet = autoscaled_fleet(fleet, plan.lock)
    sets = scenarios_of(fleet, plan.lock, losses, label)
    what = f"any value of label {label}" if label is not None else _any(losses or 0)
    base = {k: r.unplaced for k, r in plan.report.items()}
    whatif = WhatIf(fleet, plan.lock)
    run = whatif.run
    tolerant = any(
        not untolerated([LOST_TAINT], d.spec.tolerations, EVICTS)
        for d in fleet.deployments.values()
    )
    failing: list[tuple[Scenario, frozenset[str]]] = []
    for lost, lbl in sets:
        if tolerant:
            unplaced = _replanned(fleet, plan.lock, lost)
        else:
            unplaced = whatif.scenario(lost, _unplaced)
        short = {}
        for key, n in unplaced.items():
            extra = n - base.get(key, 0)
            if extra > 0:
                short[key] = Short(extra, _lost_devices(fleet, plan.lock, key, lost, extra))
        if short:
            failing.append((Scenario(tuple(sorted(lost)), lbl, short), lost))
    failing.sort(key=lambda s: (tuple(-x for x in s[0].severity()), s[0].name))
    headroom = _headroom(run)
    free = _free(run)
    if failing and not tolerant:
        worst = failing[0][1]
        headroom_after = whatif.scenario(worst, _headroom)
        free_after = whatif.scenario(worst, _free)
    else:
        headroom_after, free_after = dict(headroom), dict(free)
    whatif.close()
    return SurviveReport(
        what, len(sets), [s for s, _ in failing], headroom, headroom_after, free, free_after
    )


def _any(n: int) -> str:
    return f"any {n} cluster" + ("" if n == 1 else "s")


def charged(fleet: FleetSpec, lock: PlacementLock) -> Placement:
    """A run holding the plan: what `schedule(fleet, lock)` starts from and ends at."""
    fleet = surged_fleet(fleet, lock)  # replacements for replicas on cordoned clusters
    run = Placement(fleet)
    removed = removed_deployments(fleet, lock)
    run.retain(lock, reserved_items(removed, run.pools, fleet.classes))
    run.scale_down()
    return run


class _Baseline:
    """The charged run's state, kept once; a scenario's changes are undone from it, pool
    by pool (every pool records the layouts it is given in a journal while it runs)."""

    def __init__(self, run: Placement) -> None:
        self.run = run
        self.layouts = {key: pool.layout for key, pool in run.pools.items()}
        self.placed = {key: dict(slots) for key, slots in run.placed.items()}
        self.draining = {key: dict(slots) for key, slots in run.draining.items() if slots}
        self.room = dict(run.cluster_room)
        self.on: dict[str, list[tuple[str, str, int]]] = {}  # cluster -> its replicas
        for key, slots in [*run.placed.items(), *run.draining.items()]:
            for cluster, index in slots:
                self.on.setdefault(cluster, []).append((key, cluster, index))
        self.journal: list[Pool] = []
        for pool in run.pools.values():
            pool.journal = self.journal

    def undo(self) -> None:
        run = self.run
        touched = set(self.journal)
        for pool in touched:
            pool.journal = None
        deployments: set[str] = set()
        for pool in touched:
            base = self.layouts[(pool.cluster, pool.name)]
            deployments.update(i.deployment for i in pool.layout.items)
            deployments.update(i.deployment for i in base.items)
            pool.set_layout(base)
            pool.journal = self.journal
        for key in deployments:
            if key in run.placed:
                run.placed[key] = dict(self.placed[key])
        for cluster in {pool.cluster for pool in touched}:
            run.cluster_room[cluster] = self.room[cluster]
        for key, slots in self.draining.items():  # taking back moves them without repacking
            run.draining[key] = dict(slots)
            run.placed[key] = dict(self.placed[key])
        self.journal.clear()


class WhatIf:
    """A run charged with a plan, and its scenarios (each undone after it is measured)."""

    def __init__(self, fleet: FleetSpec, lock: PlacementLock) -> None:
        self.run = charged(autoscaled_fleet(fleet, lock), lock)
        self._base: _Baseline | None = None  # made at the first scenario

    def scenario(self, lost: frozenset[str], measure: Callable[[Placement], T]) -> T:
        """Re-plan with `lost` gone, measure it, and undo."""
        if self._base is None:
            self._base = _Baseline(self.run)
        return _scenario(self.run, self._base, lost, measure)

    def close(self) -> None:
        """Stop journaling (the journal and the pools would otherwise refer to each other)."""
        for pool in self.run.pools.values():
            pool.journal = None
        self._base = None


def _scenario(
    run: Placement, base: _Baseline, lost: frozenset[str], measure: Callable[[Placement], T]
) -> T:
    try:
        run.drop([slot for cluster in sorted(lost) for slot in base.on.get(cluster, [])])
        run.scale_down()  # an autoscaled deployment takes its draining replicas back first
        run.lost = lost
        run.fill(explain=False)
        return measure(run)
    finally:
        run.lost = frozenset()
        base.undo()


def _unplaced(run: Placement) -> dict[str, int]:
    return {k: max(0, d.spec.replicas - len(run.placed[k])) for k, d in run.deployments.items()}


def _replanned(fleet: FleetSpec, lock: PlacementLock, lost: Iterable[str]) -> dict[str, int]:
    """The full re-plan with the lost clusters tainted (as failover taints them)."""
    clusters = dict(fleet.clusters)
    for name in lost:
        spec = clusters[name].spec
        spec = spec.model_copy(update={"taints": [*spec.taints, LOST_TAINT]})
        clusters[name] = clusters[name].model_copy(update={"spec": spec})
    result = schedule(dataclasses.replace(fleet, clusters=clusters), lock)
    return {k: r.unplaced for k, r in result.report.items()}


def _lost_devices(
    fleet: FleetSpec, lock: PlacementLock, key: str, lost: frozenset[str], extra: int
) -> dict[str, int]:
    """Devices by class that `extra` missing replicas of `key` held: those it had on the
    lost clusters (their footprints); GPUs per replica when the lock does not say."""
    locked = lock.deployments.get(key)
    replicas: list[LockedReplica] = [] if locked is None else list(locked.replicas)
    on_lost = sorted((r for r in replicas if r.cluster in lost), key=lambda r: (r.cluster, r.index))
    out: dict[str, int] = {}
    for n in range(extra):
        replica = on_lost[n] if n < len(on_lost) else None
        if replica is None or replica.footprint is None:
            gpus = replica_gpus(fleet.deployments[key])
            out["?"] = out.get("?", 0) + gpus
            continue
        pools = {p.name: p.class_name for p in fleet.clusters[replica.cluster].spec.node_pools}
        for role, held in replica.footprint.items():
            cls = pools.get(replica.pools.get(role, ""), "?")
            count = held.workers * held.nodes_per_worker * sum(held.devices.values())
            out[cls] = out.get(cls, 0) + count
    return dict(sorted(out.items()))


def _free(run: Placement) -> dict[str, int]:
    """Free consumed devices per InferenceClass, over the clusters not lost."""
    out: dict[str, int] = {}
    for (cluster, _), pool in run.pools.items():
        if cluster not in run.lost:
            out[pool.class_name] = out.get(pool.class_name, 0) + pool.layout.free_total
    return dict(sorted(out.items()))


def _headroom(run: Placement) -> dict[str, int]:
    """Per deployment, how many more replicas the fleet could take as it is, each
    deployment on its own: per open cluster, per role, the whole workers its matching
    pools' free nodes seat (each worker's pods on distinct nodes), the role with the
    fewest deciding; at most HEADROOM_CAP. Roles that share a pool are counted as if
    each had it alone (an upper bound). Clusters with the same profile, pool nodes and
    packing signature have the same free rows and are counted once."""
    interner = run.interner
    alike: dict[tuple[object, ...], list[str]] = {}
    for cluster in run.cluster_names:
        if cluster in run.lost:
            continue
        pools = run.cluster_pools[cluster]
        key = (
            run.eligibility.profile_ids[cluster],
            tuple((p.nodes, interner.sig(p.layout)) for p in pools),
        )
        alike.setdefault(key, []).append(cluster)
    out: dict[str, int] = {}
    for dep_key, dep in run.deployments.items():
        count = 0
        for members in alike.values():
            role_pools = run.eligibility.open_for_new(dep_key, dep, members[0])
            if role_pools is None:
                continue
            pools = run.cluster_pools[members[0]]
            fits = min(
                sum(
                    pools[pos].room_for(
                        pools[pos].layout, d.requests, d.pods_per_worker, d.devices_per_pod
                    )
                    // (d.pods_per_worker * d.devices_per_pod or 1)
                    for pos, d in matching
                )
                // d.workers
                for _, matching in role_pools.roles
                for d in [matching[0][1]]
            )
            count += fits * len(members)
            if count >= HEADROOM_CAP:
                break
        out[dep_key] = min(count, HEADROOM_CAP)
    return out
