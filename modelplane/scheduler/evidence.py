"""`plan --explain`: per cluster, the first rule that rejects another replica of a
deployment (with the numbers), and per placed replica why it is where it is.

Shaped so that it maps onto a PlacementDecision-like object (SIG-Multicluster KEP-5313):
per deployment, the clusters it is placed on with a reason, and the ones it is not, each
with the rule that decided.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import LockedReplica, PlacementLock
from modelplane.scheduler import ScheduleResult, autoscaled_fleet
from modelplane.scheduler.cost import rounded
from modelplane.scheduler.explain import cluster_evidence
from modelplane.scheduler.placement import cheapest_first, lowest_free
from modelplane.scheduler.survive import charged

WHY_STICKY = "sticky"  # kept where the previous lock had it
WHY_SPREAD = "spread"  # a new replica, the only one of the deployment on its cluster
WHY_PACK = "pack"  # a new replica next to others of the deployment (spread ran out)
WHY_CHEAPEST = "cheapest"  # a new replica of a Cheapest deployment: where it cost least


def _why(r: LockedReplica, kept: set[tuple[str, int, str]], cheapest: bool, on: int) -> str:
    """Why a placed replica is where it is (`on`: the deployment's replicas on its cluster)."""
    if (r.cluster, r.index, r.name) in kept:
        return WHY_STICKY
    if cheapest:
        return WHY_CHEAPEST
    return WHY_SPREAD if on == 1 else WHY_PACK


def explain_plan(
    fleet: FleetSpec,
    plan: ScheduleResult,
    previous: PlacementLock | None,
    keys: Iterable[str],
) -> dict[str, dict[str, Any]]:
    """Evidence for each deployment of `keys`, on the state `plan` leaves."""
    fleet = autoscaled_fleet(fleet, plan.lock)
    run = charged(fleet, plan.lock)
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        dep = run.deployments[key]
        report = plan.report[key]
        taken: dict[str, set[int]] = {}
        for cluster, index in [*run.placed[key], *run.draining[key]]:
            taken.setdefault(cluster, set()).add(index)
        clusters = []
        for cluster in run.cluster_names:
            pools = run.eligibility.open_for_new(key, dep, cluster)
            fits = (
                pools is not None
                and run.may_fit(cluster, pools)
                and run.fit(key, dep, cluster, lowest_free(taken.get(cluster, ())), pools)
                is not None
            )
            clusters.append(cluster_evidence(run.explainer, key, dep, cluster, fits))
        before = previous.deployments.get(key) if previous is not None else None
        kept = {(r.cluster, r.index, r.name) for r in before.replicas} if before else set()
        per_cluster = Counter(r.cluster for r in report.replicas)
        cheapest = cheapest_first(dep)
        replicas = []
        for r in report.replicas:
            entry: dict[str, Any] = {
                "name": r.name,
                "cluster": r.cluster,
                "pools": {str(role): pool for role, pool in r.pools.items()},
                "why": _why(r, kept, cheapest, per_cluster[r.cluster]),
            }
            if run.prices.any:
                entry["costPerHour"] = rounded(
                    run.replica_cost(key, dep, (r.cluster, r.index), entry["pools"])
                )
            replicas.append(entry)
        out[key] = {
            "desired": report.desired,
            "placed": len(report.serving),
            "unplaced": report.unplaced,
            "clusters": clusters,
            "replicas": replicas,
        }
    return out
