"""Moving replicas off cordoned clusters (`modelplane drain`): the round's pure part.

The scheduler places the replacements (scheduler.cordon: a deployment with replicas on a
cordoned cluster is placed for that many more, within its rollout budget); a round then,
from what it observed:

1. `retire`: marks old replicas on cordoned clusters `draining` (out of the routes, their
   workload still up) once as many replacements are Ready *and routed* (Ready in this
   observation, and not held out of the routes by the previous round) -- so the
   deployment never has fewer serving replicas than it wants;
2. `finish`: removes from the lock (which deletes their workloads) the draining replicas
   of deployments without autoscaling whose drain is over: nothing in flight a little
   after their routes went, or `DRAIN_TIMEOUT` after them (autoscaled deployments' drains
   are the autoscaler's, with their `drainTimeout`).

Both are pure functions of the lock, the observation and the remembered state, so a
drain interrupted anywhere continues in the next round from what the lock and the
clusters say.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import LockedDeployment, LockedReplica, PlacementLock
from modelplane.autoscale import DRAIN_SETTLE
from modelplane.health.observation import Observation
from modelplane.scheduler import autoscaled_count
from modelplane.scheduler.cordon import cordoned, cordoned_fleet

DRAIN_TIMEOUT = 60.0  # seconds: longest wait for in-flight requests (fixed-count deployments)


def serving(
    replica: LockedReplica,
    observation: Observation,
    held_out: Collection[str],
    unroutable: Collection[str],
) -> bool:
    """The replica is in the routes and every pod (and LeaderWorkerSet group) is Ready."""
    if replica.draining or replica.name in held_out or replica.cluster in unroutable:
        return False
    seen = observation.cluster(replica.cluster)
    if seen is None or not seen.observed or not seen.reachable:
        return False
    got = seen.replicas.get(replica.name)
    return (
        got is not None
        and got.pods > 0
        and got.ready_pods >= got.pods
        and got.ready_groups >= got.groups
    )


def retire(
    fleet: FleetSpec,
    lock: PlacementLock,
    observation: Observation,
    held_out: Collection[str],
    unroutable: Collection[str] = (),
) -> tuple[PlacementLock, list[str]]:
    """Mark draining the replicas on cordoned clusters whose replacements serve (`fleet`
    carries the cordons, scheduler.cordon; `held_out`: the replicas the previous round
    kept out of the routes). The new lock and the replicas retired."""
    closed = cordoned(fleet)
    if not closed:
        return lock, []
    deployments = dict(lock.deployments)
    retired: list[str] = []
    for key, locked in sorted(lock.deployments.items()):
        dep = fleet.deployments.get(key)
        if dep is None:
            continue
        old = [r for r in locked.replicas if r.cluster in closed and not r.draining]
        if not old:
            continue
        count = autoscaled_count(dep, lock)
        others = [r for r in locked.replicas if r.cluster not in closed and not r.draining]
        ready = sum(1 for r in others if serving(r, observation, held_out, unroutable))
        # Keep count - len(old) others serving for the replicas that stay, then one
        # serving replacement per old replica retired.
        n = min(len(old), ready - max(0, count - len(old)))
        if n <= 0:
            continue
        # Those not serving anyway first, then by cluster and name.
        order = sorted(
            old,
            key=lambda r: (serving(r, observation, held_out, unroutable), r.cluster, r.name),
        )
        leaving = {r.name for r in order[:n]}
        retired += sorted(leaving)
        deployments[key] = mark_draining(locked, leaving, settle=False)
    if not retired:
        return lock, []
    return lock.model_copy(update={"deployments": deployments}), retired


def mark_draining(
    locked: LockedDeployment, names: Collection[str], *, settle: bool = True
) -> LockedDeployment:
    """``names`` draining (out of every route, their workloads still up: the gateway
    drops them); with ``settle``, as many of the deployment's surge replicas (a rollout's
    maxSurge, `modelplane.driver.rollouts`) count as ordinary ones: each took a leaver's
    place. One lock write does both, so the scheduler never sees the count exceeded."""
    leaving = [r.name for r in locked.replicas if r.name in names and not r.draining]
    surged = [r.name for r in locked.replicas if r.surge and not r.draining and r.name not in names]
    settled = set(surged[: len(leaving)]) if settle else set()
    replicas = [
        r.model_copy(update={"draining": True, "surge": False})
        if r.name in leaving
        else r.model_copy(update={"surge": False})
        if r.name in settled
        else r
        for r in locked.replicas
    ]
    return locked.model_copy(update={"replicas": replicas})


def without(lock: PlacementLock, names: Collection[str]) -> PlacementLock:
    """The lock without the replicas ``names`` (their drains are over: the next run of
    their deployment stacks deletes their workloads)."""
    deployments = {
        key: locked.model_copy(
            update={"replicas": [r for r in locked.replicas if r.name not in names]}
        )
        if any(r.name in names for r in locked.replicas)
        else locked
        for key, locked in lock.deployments.items()
    }
    return lock.model_copy(update={"deployments": deployments})


@dataclass
class Finished:
    lock: PlacementLock
    drained: dict[str, str] = field(default_factory=dict)  # replica -> why its drain ended
    routes_gone: dict[str, float] = field(default_factory=dict)  # the drains still going


def finish(
    fleet: FleetSpec,
    lock: PlacementLock,
    observation: Observation,
    routes_gone: Mapping[str, float],
    now: float,
) -> Finished:
    """End the drains of draining replicas of deployments without autoscaling: nothing
    in flight `DRAIN_SETTLE` after their routes went (`routes_gone`: since when), or
    `DRAIN_TIMEOUT` after them."""
    deployments = dict(lock.deployments)
    out = Finished(lock)
    for key, locked in sorted(lock.deployments.items()):
        dep = fleet.deployments.get(key)
        if dep is None or dep.spec.autoscaling is not None:
            continue
        kept = []
        for r in locked.replicas:
            since = routes_gone.get(r.name) if r.draining else None
            why = None if since is None else _drain_over(r, observation, now - since)
            if why is None:
                kept.append(r)
                if since is not None:
                    out.routes_gone[r.name] = since
            else:
                out.drained[r.name] = why
        if len(kept) != len(locked.replicas):
            deployments[key] = locked.model_copy(update={"replicas": kept})
    if out.drained:
        out.lock = lock.model_copy(update={"deployments": deployments})
    return out


def _drain_over(replica: LockedReplica, observation: Observation, gone: float) -> str | None:
    if gone >= DRAIN_TIMEOUT:
        return f"drain timeout ({DRAIN_TIMEOUT:g}s)"
    seen = observation.cluster(replica.cluster)
    got = seen.replicas.get(replica.name) if seen is not None and seen.reachable else None
    if got is None or got.metrics is None or gone < DRAIN_SETTLE:
        return None
    if got.metrics.get("runningRequests", 0) or got.metrics.get("queueDepth", 0):
        return None
    return "no requests in flight"


def progress(fleet: FleetSpec, lock: PlacementLock) -> dict[str, dict[str, Any]]:
    """Per cordoned cluster (`fleet` carries the cordons): the replicas still on it,
    serving and draining (`status`, `drain`)."""
    out: dict[str, dict[str, Any]] = {
        name: {"serving": [], "draining": []} for name in sorted(cordoned(fleet))
    }
    for locked in lock.deployments.values():
        for r in locked.replicas:
            if r.cluster in out:
                out[r.cluster]["draining" if r.draining else "serving"].append(r.name)
    for entry in out.values():
        entry["serving"].sort()
        entry["draining"].sort()
    return out


def describe(fleet: FleetSpec, lock: PlacementLock, cordons: Mapping[str, float]) -> list[str]:
    """One line per cordoned cluster (`status`), with what is still on it."""
    left = progress(cordoned_fleet(fleet, cordons), lock)
    lines = []
    for name, since in sorted(cordons.items()):
        here = left.get(name, {"serving": [], "draining": []})
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(since))
        what = (
            f"{len(here['serving'])} replica(s) still serving, {len(here['draining'])} draining"
            if here["serving"] or here["draining"]
            else "no replica left"
        )
        lines.append(f"cordoned {name} since {stamp} UTC: no new replicas; {what}")
    return lines


__all__ = [
    "describe",
    "DRAIN_TIMEOUT",
    "Finished",
    "finish",
    "mark_draining",
    "progress",
    "retire",
    "serving",
    "without",
]
