"""Health-aware scheduling (scheduling.md, "Health-aware scheduling"): pure rules.

The observation becomes an *effective* fleet -- a `modelplane.ai/unhealthy` taint on every
unhealthy cluster (NoSchedule, NoExecute once past the grace period) and fixed-size pools
capped to their Ready nodes -- which the unchanged scheduler places. Its shortfall reasons
are then rewritten to say what was observed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_cluster import InferenceCluster, Taint
from modelplane.api.placement_lock import PlacementLock
from modelplane.health.observation import ClusterObservation, Observation
from modelplane.health.spill import Cooldown, describe
from modelplane.scheduler import ScheduleResult, schedule
from modelplane.scheduler import reasons as texts
from modelplane.scheduler.taints import UNHEALTHY_KEY as UNHEALTHY_KEY  # re-exported

DEFAULT_GRACE = 300.0  # seconds

UNREACHABLE = "unreachable"
NOT_READY = "not-ready"
NO_GATEWAY = "no-gateway-address"


@dataclass(frozen=True)
class ClusterHealth:
    """`code` None: healthy (or not observed). Otherwise the reason code and its text."""

    code: str | None = None
    problem: str | None = None
    observed: bool = True

    @property
    def healthy(self) -> bool:
        return self.code is None


def expects_gateway(cluster: InferenceCluster) -> bool:
    """The cluster should get a workload gateway address: modelplane installs its serving
    stack, or the platform's gateway is configured (`servingStack.gateway`)."""
    stack = cluster.spec.serving_stack
    return bool(stack.install or getattr(stack, "gateway", None) is not None)


def cluster_health(cluster: InferenceCluster, seen: ClusterObservation | None) -> ClusterHealth:
    """Healthy, or the first of: API unreachable, not Ready, no gateway address."""
    if seen is None or not seen.observed:
        return ClusterHealth(observed=False)
    if not seen.reachable:
        return ClusterHealth(UNREACHABLE, f"API unreachable ({seen.error or 'no answer'})")
    pools = [seen.pools.get(p.name) for p in cluster.spec.node_pools]
    nodes = sum(p.nodes for p in pools if p is not None)
    ready = sum(p.ready_nodes for p in pools if p is not None)
    must_have = any(p.max_node_count is None and p.node_count > 0 for p in cluster.spec.node_pools)
    if ready == 0 and (nodes > 0 or must_have):
        what = f"0 of {nodes} nodes Ready" if nodes else "no nodes in its node pools"
        return ClusterHealth(NOT_READY, f"not Ready ({what})")
    # A cluster whose Gateway does not exist yet is being set up (its cluster stack creates
    # it): only a Gateway without an address keeps replicas off.
    if expects_gateway(cluster) and seen.gateway_found and not seen.gateway_address:
        return ClusterHealth(NO_GATEWAY, "no gateway address (inference-gateway has none)")
    return ClusterHealth()


def remember(
    previous: Mapping[str, float], health: Mapping[str, ClusterHealth], now: float
) -> dict[str, float]:
    """Since when each unhealthy cluster has been unhealthy (healthy ones are forgotten)."""
    return {
        name: min(previous.get(name, now), now)
        for name, h in sorted(health.items())
        if not h.healthy
    }


@dataclass
class HealthView:
    """The effective fleet and what was decided about each cluster."""

    fleet: FleetSpec
    health: dict[str, ClusterHealth]
    since: dict[str, float]
    evicting: list[str] = field(default_factory=list)  # unhealthy past the grace period
    capped: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # ready, spec
    full: dict[str, Cooldown] = field(default_factory=dict)  # `cluster/pool` cooling down

    def taint(self, cluster: str) -> Taint | None:
        h = self.health.get(cluster)
        if h is None or h.healthy:
            return None
        effect = "NoExecute" if cluster in self.evicting else "NoSchedule"
        return Taint(key=UNHEALTHY_KEY, value=h.code or "", effect=effect)


def effective_fleet(
    fleet: FleetSpec,
    observation: Observation,
    since: Mapping[str, float],
    now: float,
    grace: float = DEFAULT_GRACE,
    full: Mapping[str, Cooldown] | None = None,
) -> HealthView:
    """The fleet the scheduler sees given `observation` (`since`: `remember`'s output;
    `full`: the pools cooling down after a stockout, health.spill: each is a fixed pool of
    its Ready nodes)."""
    health = {n: cluster_health(c, observation.cluster(n)) for n, c in fleet.clusters.items()}
    since = remember(since, health, now)
    view = HealthView(fleet, health, since, full=dict(full or {}))
    clusters: dict[str, InferenceCluster] = {}
    for name, cluster in fleet.clusters.items():
        spec = cluster.spec
        h = health[name]
        if not h.healthy:
            if now - since[name] >= grace:
                view.evicting.append(name)
            taint = view.taint(name)
            assert taint is not None
            spec = spec.model_copy(update={"taints": [*spec.taints, taint]})
        elif h.observed:
            seen = observation.clusters[name]
            pools = []
            for pool in spec.node_pools:
                got = seen.pools.get(pool.name)
                ready = got.ready_nodes if got is not None else 0
                declared = pool.max_node_count or pool.node_count
                cooling = f"{name}/{pool.name}" in view.full
                if (pool.max_node_count is None or cooling) and ready < declared:
                    view.capped[(name, pool.name)] = (ready, declared)
                    pool = pool.model_copy(update={"node_count": ready, "max_node_count": None})
                pools.append(pool)
            spec = spec.model_copy(update={"node_pools": pools})
        clusters[name] = cluster.model_copy(update={"spec": spec})
    view.fleet = dataclasses.replace(fleet, clusters=clusters)
    return view


def explain(view: HealthView, reason: str) -> str:
    """A scheduler reason, rewritten to say what was observed."""
    cluster, sep, why = reason.partition(": ")
    if not sep:
        return reason
    taint = view.taint(cluster)
    if taint is not None:
        h = view.health[cluster]
        if why == texts.taints_not_tolerated([taint]):
            return texts.at(cluster, f"{h.problem}: no new replicas")
        if taint.describe() in why:
            return texts.at(
                cluster, why.replace(taint.describe(), f"{taint.describe()} [{h.problem}]")
            )
    for (c, pool), (ready, nodes) in view.capped.items():
        if c == cluster and why.startswith(f"pool {pool} has "):
            cool = view.full.get(f"{c}/{pool}")
            if cool is not None:
                return (
                    f"{reason} ({ready} of {nodes} nodes Ready; {describe_cooldown(c, pool, cool)})"
                )
            return f"{reason} ({ready} of {nodes} nodes Ready)"
    return reason


def describe_cooldown(cluster: str, pool: str, cool: Cooldown) -> str:
    return describe(f"{cluster}/{pool}", cool, clock_text)


def clock_text(at: float) -> str:
    """Epoch seconds as `HH:MM:SS` (UTC)."""
    return time.strftime("%H:%M:%S", time.gmtime(at))


def observed_schedule(
    fleet: FleetSpec,
    previous: PlacementLock | None,
    observation: Observation,
    since: Mapping[str, float],
    now: float,
    grace: float = DEFAULT_GRACE,
    full: Mapping[str, Cooldown] | None = None,
) -> tuple[ScheduleResult, HealthView]:
    """`schedule` on the effective fleet, with reasons that say what was observed."""
    view = effective_fleet(fleet, observation, since, now, grace, full)
    result = schedule(view.fleet, previous)
    report = {
        key: dataclasses.replace(rep, reasons=[explain(view, r) for r in rep.reasons])
        for key, rep in result.report.items()
    }
    return ScheduleResult(lock=result.lock, report=report), view


ROUTE_BLOCKING = (UNREACHABLE, NO_GATEWAY)


def unroutable_clusters(
    fleet: FleetSpec, lock: PlacementLock, health: Mapping[str, ClusterHealth]
) -> dict[str, str]:
    """Clusters whose replicas' endpoints leave the ModelService routes now (scheduling.md
    rule 6): unreachable or without a gateway address, hosting replicas in `lock`, and not
    the gateway's own cluster when it is the one front door (with several, the others route
    around a dead one's replicas). Cluster -> why."""
    doors = fleet.gateway.spec.front_door_clusters if fleet.gateway else []
    gateway = doors[0] if len(doors) == 1 else None
    hosting = {r.cluster for dep in lock.deployments.values() for r in dep.replicas}
    return {
        name: h.problem or h.code or ""
        for name, h in sorted(health.items())
        if h.code in ROUTE_BLOCKING and name in hosting and name != gateway
    }


def unready_replicas(
    lock: PlacementLock, observation: Observation, unroutable: Collection[str] = ()
) -> dict[str, str]:
    """Replicas whose endpoints stay out of the ModelService routes until their pods are
    Ready (a scaled-out replica joins the routes the round after it is seen Ready): on a
    cluster observed and answering, with no pods, a pod not Ready or a LeaderWorkerSet
    group not ready. Draining replicas and those on `unroutable` clusters are out of the
    routes by their own rules. A deployment none of whose other replicas could take the
    traffic keeps its replicas routed (a replica that becomes Ready serves at once; no
    route serves nothing). Replica -> why."""
    out: dict[str, str] = {}
    for dep in lock.deployments.values():
        candidates = 0
        waiting: dict[str, str] = {}
        for r in dep.replicas:
            if r.draining or r.cluster in unroutable:
                continue
            candidates += 1
            seen = observation.cluster(r.cluster)
            if seen is None or not seen.observed or not seen.reachable:
                continue  # the cluster rules decide (unroutable clusters)
            if seen.error and "replicas:" in seen.error:
                continue  # its replicas could not be listed: nothing known
            got = seen.replicas.get(r.name)
            if got is None or got.pods == 0:
                waiting[r.name] = "no pods yet"
            elif got.ready_pods < got.pods:
                waiting[r.name] = f"{got.ready_pods} of {got.pods} pods Ready"
            elif got.ready_groups < got.groups:
                waiting[r.name] = f"{got.ready_groups} of {got.groups} LeaderWorkerSet groups ready"
        if len(waiting) < candidates:
            out.update(waiting)
    return dict(sorted(out.items()))
