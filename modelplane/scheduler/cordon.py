"""Cordoned clusters (scheduling.md, "Cordons"): pure.

A cordon (`modelplane drain`) is a `modelplane.ai/cordoned` NoSchedule taint that no
toleration tolerates, put on the cluster in the fleet the scheduler sees. Nothing new is
placed there; the replicas already there are kept (a cordon never evicts) while the
scheduler places their replacements elsewhere, make-before-break: a deployment with
replicas on a cordoned cluster is scheduled for that many more replicas (at most its
rollout budget at a time, `surge`), and the old ones leave only once the driver sees the
new ones serving (`modelplane.driver.drain`).

A rollout's `maxSurge` uses the same make-before-break placement: the driver asks for
extra replicas (`schedule(..., surge=...)`), which the lock marks `surge` and which the
scheduler keeps, beyond the count, until the rollout retires an old replica in their
stead (`modelplane.driver.rollouts`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_cluster import Taint
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import PlacementLock
from modelplane.scheduler.taints import CORDON_KEY

CORDON_TAINT = Taint(key=CORDON_KEY, effect="NoSchedule")


def cordoned_fleet(fleet: FleetSpec, cordons: Collection[str]) -> FleetSpec:
    """The fleet with the cordon taint on each cordoned cluster it has (others ignored)."""
    names = sorted(c for c in set(cordons) if c in fleet.clusters)
    if not names:
        return fleet
    clusters = dict(fleet.clusters)
    for name in names:
        cluster = clusters[name]
        if any(t.key == CORDON_KEY for t in cluster.spec.taints):
            continue
        spec = cluster.spec.model_copy(update={"taints": [*cluster.spec.taints, CORDON_TAINT]})
        clusters[name] = cluster.model_copy(update={"spec": spec})
    return dataclasses.replace(fleet, clusters=clusters)


def cordoned(fleet: FleetSpec) -> frozenset[str]:
    """The clusters carrying the cordon taint."""
    return frozenset(
        name
        for name, cluster in fleet.clusters.items()
        if any(t.key == CORDON_KEY for t in cluster.spec.taints)
    )


def batch(dep: ModelDeployment, count: int) -> int:
    """How many of a deployment's replicas move off cordoned clusters at once: its rollout
    budget (the larger of maxUnavailable and maxSurge as counts, at least 1)."""
    unavailable, surge = dep.spec.rollout.budget(max(count, 1))
    return max(1, unavailable, surge)


def surge(
    fleet: FleetSpec, previous: PlacementLock | None, counts: dict[str, int]
) -> dict[str, int]:
    """Per deployment, the extra replicas to place: while some of its serving replicas are
    on cordoned clusters, as many as there are, at most `batch` (`counts`: each
    deployment's desired count); plus the rollout surge replicas the lock holds."""
    if previous is None:
        return {}
    closed = cordoned(fleet)
    out: dict[str, int] = {}
    for key, locked in previous.deployments.items():
        dep = fleet.deployments.get(key)
        if dep is None:
            continue
        held = sum(1 for r in locked.replicas if r.surge and not r.draining)
        leaving = sum(1 for r in locked.replicas if r.cluster in closed and not r.draining)
        if leaving:
            count = counts.get(key, dep.spec.replicas)
            held += min(leaving, batch(dep, count), count)
        out[key] = held
    return {k: v for k, v in out.items() if v > 0}


def surged_fleet(
    fleet: FleetSpec, previous: PlacementLock | None, more: Mapping[str, int] | None = None
) -> FleetSpec:
    """The fleet (autoscaled counts already applied) with each deployment's `replicas`
    raised by its `surge` (and by `more`, a rollout's new surge replicas): what a
    scheduling run places."""
    desired = {key: dep.spec.replicas for key, dep in fleet.deployments.items()}
    extra = surge(fleet, previous, desired)
    for key, n in (more or {}).items():
        if key in fleet.deployments and n > 0:
            extra[key] = extra.get(key, 0) + n
    if not extra:
        return fleet
    bumped = {
        key: dep.model_copy(
            update={"spec": dep.spec.model_copy(update={"replicas": desired[key] + extra[key]})}
        )
        for key, dep in fleet.deployments.items()
        if extra.get(key)
    }
    return dataclasses.replace(fleet, deployments={**fleet.deployments, **bumped})


__all__ = ["CORDON_TAINT", "batch", "cordoned", "cordoned_fleet", "surge", "surged_fleet"]
