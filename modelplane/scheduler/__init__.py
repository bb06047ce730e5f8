"""The fleet scheduler: pure and deterministic (no I/O, no clock, no randomness, no Pulumi).

`schedule(fleet, previous)` applies the rules of design/scheduling.md: charge what
removed deployments still hold, charge and retain what the previous lock placed,
scale down, fill in priority order, and explain every shortfall.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Mapping

from modelplane.api.base import trusted_builder
from modelplane.api.fleet import FleetSpec
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.names import replica_name
from modelplane.api.placement_lock import LockedDeployment, LockedReplica, PlacementLock
from modelplane.network import plan_addresses
from modelplane.scheduler.cordon import surged_fleet
from modelplane.scheduler.cost import rounded
from modelplane.scheduler.placement import Placement
from modelplane.scheduler.reserved import (
    RemovedReport,
    footprint,
    removed_deployments,
    removed_reports,
    reserved_items,
)
from modelplane.scheduler.result import DeploymentReport, OptimizeReport, ScheduleResult

__all__ = [
    "autoscaled_count",
    "autoscaled_fleet",
    "DEFAULT_TIME_LIMIT",
    "DeploymentReport",
    "OptimizeReport",
    "RemovedReport",
    "ScheduleResult",
    "schedule",
]

DEFAULT_TIME_LIMIT = 10.0  # seconds, for `optimize=True`

_locked_replica = trusted_builder(LockedReplica)


def _slot(entry: tuple[tuple[str, int], object, bool]) -> tuple[str, int]:
    return entry[0]


def autoscaled_count(dep: ModelDeployment, previous: PlacementLock | None) -> int:
    """An autoscaled deployment's desired count: the lock's (else `replicas`), clamped to
    its bounds; a fixed deployment's `replicas`."""
    auto = dep.spec.autoscaling
    if auto is None:
        return dep.spec.replicas
    locked = previous.autoscaled(dep.key) if previous is not None else None
    return auto.clamp(dep.spec.replicas if locked is None else locked)


def autoscaled_fleet(fleet: FleetSpec, previous: PlacementLock | None) -> FleetSpec:
    """The fleet with every autoscaled deployment's `replicas` set to its current count."""
    changed = {}
    for key, dep in fleet.deployments.items():
        count = autoscaled_count(dep, previous)
        if count != dep.spec.replicas:
            spec = dep.spec.model_copy(update={"replicas": count})
            changed[key] = dep.model_copy(update={"spec": spec})
    if not changed:
        return fleet
    return dataclasses.replace(fleet, deployments={**fleet.deployments, **changed})


def schedule(
    fleet: FleetSpec,
    previous: PlacementLock | None = None,
    *,
    optimize: bool = False,
    time_limit: float = DEFAULT_TIME_LIMIT,
    surge: Mapping[str, int] | None = None,
) -> ScheduleResult:
    """Place every ModelDeployment's replicas; the same inputs give the same result.

    With `optimize`, new replicas are placed by a MILP (HiGHS) within `time_limit`
    seconds, then topped up by the greedy fill (scheduling.md, "Optimising"). `surge`:
    per deployment, extra replicas to place now beyond its count (a rollout's maxSurge,
    `modelplane.driver.rollouts`); the lock and the report keep the desired count."""
    # The run allocates many small objects and frees few: the cyclic collector would
    # walk the whole heap (the fleet's models) over and over for nothing.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _schedule(fleet, previous, optimize, time_limit, surge)
    finally:
        if enabled:
            gc.enable()


def _replica_names(
    deployment: str, slots: list[tuple[str, int]], locked: LockedDeployment | None
) -> list[str]:
    """One name per (cluster, index) slot (api.md, "Names"): the previous lock's name for a
    slot it holds, else the derived name, retried with a suffix while another replica of
    the deployment has it (five hex digits do collide on large fleets)."""
    kept = {(r.cluster, r.index): r.name for r in locked.replicas} if locked is not None else {}
    taken = {kept[slot] for slot in slots if slot in kept}
    out = []
    for slot in slots:
        name = kept.get(slot)
        if name is None:
            retry = 0
            name = replica_name(deployment, slot[0], slot[1])
            while name in taken:
                retry += 1
                name = replica_name(deployment, slot[0], slot[1], retry)
            taken.add(name)
        out.append(name)
    return out


def _schedule(
    fleet: FleetSpec,
    previous: PlacementLock | None,
    optimize: bool,
    time_limit: float,
    extra: Mapping[str, int] | None = None,
) -> ScheduleResult:
    fleet = autoscaled_fleet(fleet, previous)
    # Replicas on cordoned clusters are replaced make-before-break: placed for more
    # replicas than desired while they leave (scheduler.cordon); the lock and the report
    # keep the desired count.
    desired = {key: dep.spec.replicas for key, dep in fleet.deployments.items()}
    fleet = surged_fleet(fleet, previous, extra)
    run = Placement(fleet)
    removed = removed_deployments(fleet, previous)
    run.retain(previous, reserved_items(removed, run.pools, fleet.classes))
    run.scale_down()
    solved: OptimizeReport | None = None
    if optimize:
        from modelplane.scheduler.optimize import optimize as solve

        solved = solve(run, time_limit)
    else:
        run.fill()
    # A footprint depends on the deployment and its pools' classes only: one per such pair
    # (the plan_scale fleet has 10,000 replicas and a few hundred such pairs).
    footprints: dict[tuple[object, ...], object] = {}

    def held(key: str, dep: ModelDeployment, cluster: str, pools: dict[str, str]) -> object:
        memo = (
            key,
            *[(role, run.pools[(cluster, pool)].class_name) for role, pool in pools.items()],
        )
        hit = footprints.get(memo)
        if hit is None and memo not in footprints:
            on = {role: run.pools[(cluster, pool)] for role, pool in pools.items()}
            hit = footprints[memo] = footprint(run.matcher, fleet.classes, key, dep, on)
        return hit

    deployments: dict[str, LockedDeployment] = {}
    report: dict[str, DeploymentReport] = {}
    for key, dep in run.deployments.items():
        slots = [(slot, pools, False) for slot, pools in run.placed[key].items()]
        slots += [(slot, pools, True) for slot, pools in run.draining[key].items()]
        ordered = sorted(slots, key=_slot)
        names = _replica_names(
            dep.metadata.name,
            [slot for slot, _, _ in ordered],
            previous.deployments.get(key) if previous is not None else None,
        )
        # A replica keeps the revision the driver recorded for it (rollouts, scheduling.md).
        before = previous.deployments.get(key) if previous is not None else None
        revisions = {r.name: r.revision for r in before.replicas} if before is not None else {}
        surged = {r.name for r in before.replicas if r.surge} if before is not None else set()
        replicas = [
            # valid by construction: no re-validation (name, cluster, index, pools,
            # draining, footprint, revision, surge)
            _locked_replica(
                replica,
                cluster,
                index,
                dict(pools),
                draining,
                held(key, dep, cluster, pools),
                revisions.get(replica),
                replica in surged,
            )
            for replica, ((cluster, index), pools, draining) in zip(names, ordered, strict=True)
        ]
        auto = dep.spec.autoscaling is not None
        deployments[key] = LockedDeployment.model_construct(
            autoscaled_replicas=desired[key] if auto else None, replicas=replicas
        )
        cost: float | None = None
        if run.prices.any:
            cost = rounded(
                sum(
                    (run.replica_cost(key, dep, slot, pools) for slot, pools, _ in slots),
                    0.0,
                )
            )
        report[key] = DeploymentReport(
            cost_per_hour=cost,
            policy=dep.spec.placement_policy,
            desired=desired[key],
            replicas=replicas,
            unplaced=max(0, desired[key] - len(run.placed[key])),
            reasons=run.reasons[key],
            autoscaling=(
                (dep.spec.autoscaling.min_replicas, dep.spec.autoscaling.max_replicas)
                if dep.spec.autoscaling is not None
                else None
            ),
        )
    # The address plan's errors are `plan`'s to report (modelplane.planning).
    network = plan_addresses(fleet, previous or PlacementLock()).network
    return ScheduleResult(
        lock=PlacementLock(deployments=deployments, removed=removed, network=network),
        report=report,
        optimize=solved,
        removed=removed_reports(removed, run.pools, run.deployments),
    )
