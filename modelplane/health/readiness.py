"""The readiness view of `modelplane status` (pure): specs + lock + observation -> rows.

One entry per ModelDeployment (READY n/m, placed, clusters, age, conditions with reasons),
per replica (cluster, pools, phase, reason), per ModelService (URL, routable endpoints)
and per cluster (health). `as_json` is the documented `status --output json` shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from modelplane.api.fleet import FleetSpec
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import LockedReplica, PlacementLock
from modelplane.health.classes import class_mismatches
from modelplane.health.observation import Observation
from modelplane.health.phases import durations, merged
from modelplane.health.rules import (
    NOT_READY,
    UNREACHABLE,
    ClusterHealth,
    clock_text,
    cluster_health,
)
from modelplane.scheduler import autoscaled_count
from modelplane.stacks import cache_clusters

READY = "Ready"
DRAINING = "Draining"
NOT_READY_PHASE = "NotReady"
PENDING = "Pending"
UNKNOWN = "Unknown"

# The labels a replica's composed ModelEndpoint carries (api.md, "ModelEndpoint").
DEPLOYMENT_LABEL = "modelplane.ai/deployment"
CLUSTER_LABEL = "modelplane.ai/cluster"
INDEX_LABEL = "modelplane.ai/replica-index"


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # True | False | Unknown
    reason: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
        }


@dataclass(frozen=True)
class ReplicaStatus:
    name: str
    cluster: str
    index: int
    pools: dict[str, str]
    phase: str
    reason: str
    pods: int
    ready_pods: int
    expected_pods: int
    age: float | None
    phases: dict[str, float] = field(default_factory=dict)  # health.phases: start order

    def as_json(self) -> dict[str, Any]:
        started = {"phases": dict(self.phases), "startSeconds": durations(self.phases)}
        return {
            **(started if self.phases else {}),
            "name": self.name,
            "cluster": self.cluster,
            "index": self.index,
            "pools": dict(self.pools),
            "phase": self.phase,
            "reason": self.reason,
            "pods": self.pods,
            "readyPods": self.ready_pods,
            "expectedPods": self.expected_pods,
            "age": None if self.age is None else round(self.age, 1),
        }


@dataclass(frozen=True)
class DeploymentStatus:
    key: str
    desired: int
    placed: int
    ready: int
    clusters: list[str]
    age: float | None
    conditions: list[Condition]
    replicas: list[ReplicaStatus]
    autoscaling: tuple[int, int] | None = None  # (minReplicas, maxReplicas) when autoscaled

    @property
    def draining(self) -> list[str]:
        return [r.name for r in self.replicas if r.phase == DRAINING]

    def as_json(self) -> dict[str, Any]:
        out = self._json()
        if self.autoscaling is not None:
            out["autoscaling"] = {
                "replicas": self.desired,
                "minReplicas": self.autoscaling[0],
                "maxReplicas": self.autoscaling[1],
                "draining": self.draining,
            }
        return out

    def _json(self) -> dict[str, Any]:
        return {
            "ready": f"{self.ready}/{self.desired}",
            "readyReplicas": self.ready,
            "desired": self.desired,
            "placed": self.placed,
            "clusters": self.clusters,
            "age": None if self.age is None else round(self.age, 1),
            "conditions": [c.as_json() for c in self.conditions],
            "replicas": [r.as_json() for r in self.replicas],
        }


@dataclass(frozen=True)
class ServiceStatus:
    key: str
    url: str | None
    endpoints: int
    routable: int
    unroutable: list[str]  # `<endpoint>: <why>`
    routes_error: str | None = None  # the live routes could not be read: from the placement

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "endpoints": self.endpoints,
            "routable": self.routable,
            "unroutable": list(self.unroutable),
            "routesObserved": self.routes_error is None,
            "routesError": self.routes_error,
        }


@dataclass(frozen=True)
class CacheStatus:
    key: str
    clusters: dict[str, tuple[str, str]]  # covered cluster -> (state, reason)

    @property
    def hydrated(self) -> int:
        return sum(1 for state, _ in self.clusters.values() if state == "Hydrated")

    def as_json(self) -> dict[str, Any]:
        return {
            "hydrated": f"{self.hydrated}/{len(self.clusters)}",
            "clusters": {c: {"state": s, "reason": r} for c, (s, r) in self.clusters.items()},
        }


@dataclass(frozen=True)
class ClusterStatus:
    name: str
    health: str  # Healthy | Unreachable | NotReady | NoGatewayAddress | NotObserved
    message: str
    nodes: str  # `ready/total` over its node pools
    devices: int | None  # DRA devices published for the nodes of its node pools
    gateway_address: str | None
    unhealthy_since: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "health": self.health,
            "message": self.message,
            "nodes": self.nodes,
            "devices": self.devices,
            "gatewayAddress": self.gateway_address,
            "unhealthySince": self.unhealthy_since,
        }


@dataclass(frozen=True)
class FrontDoorStatus:
    """One front door: `Serving` when it answers its health path, else `Down` (its cluster
    unreachable, no address yet, no answer)."""

    cluster: str
    stack: str
    address: str | None
    health: str
    message: str

    def as_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "address": self.address,
            "health": self.health,
            "message": self.message,
        }


@dataclass(frozen=True)
class FrontDoorProbe:
    """What `status` found at a front door: its stack, address and why it did not answer
    its health path (None: it answered 200)."""

    stack: str
    address: str | None
    problem: str | None


@dataclass
class FleetReadiness:
    at: float
    front_doors: list[FrontDoorStatus] = field(default_factory=list)
    clusters: list[ClusterStatus] = field(default_factory=list)
    deployments: list[DeploymentStatus] = field(default_factory=list)
    services: list[ServiceStatus] = field(default_factory=list)
    caches: list[CacheStatus] = field(default_factory=list)

    def deployment(self, key: str) -> DeploymentStatus:
        return next(d for d in self.deployments if d.key == key)

    def service(self, key: str) -> ServiceStatus:
        return next(s for s in self.services if s.key == key)

    @property
    def all_ready(self) -> bool:
        return all(d.ready >= d.desired for d in self.deployments)

    def as_json(self) -> dict[str, Any]:
        return {
            "observedAt": self.at,
            "frontDoors": {d.cluster: d.as_json() for d in self.front_doors},
            "clusters": {c.name: c.as_json() for c in self.clusters},
            "deployments": {d.key: d.as_json() for d in self.deployments},
            "services": {s.key: s.as_json() for s in self.services},
            "caches": {c.key: c.as_json() for c in self.caches},
        }


_HEALTH_NAMES = {
    None: "Healthy",
    UNREACHABLE: "Unreachable",
    NOT_READY: "NotReady",
    "no-gateway-address": "NoGatewayAddress",
}


def expected_pods(dep: ModelDeployment) -> int:
    """Pods of one replica: per role, workers x nodes per worker."""
    return sum(
        r.workers.count * r.workers.topology.shape.nodes_per_worker for r in dep.spec.roles.values()
    )


def _replica(
    dep: ModelDeployment,
    replica: LockedReplica,
    observation: Observation,
    health: Mapping[str, ClusterHealth],
    now: float,
    recorded: Mapping[str, float] | None = None,
) -> ReplicaStatus:
    expected = expected_pods(dep)
    seen = observation.cluster(replica.cluster)
    h = health.get(replica.cluster)
    observed = seen.replicas.get(replica.name) if seen is not None else None
    started = merged(observed.phases if observed is not None else {}, recorded)

    def row(phase: str, reason: str, pods: int = 0, ready: int = 0, age: float | None = None):
        return ReplicaStatus(
            replica.name,
            replica.cluster,
            replica.index,
            dict(replica.pools),
            phase,
            reason,
            pods,
            ready,
            expected,
            age,
            started,
        )

    if h is None:
        return row(UNKNOWN, f"cluster {replica.cluster} is not in the fleet")
    if seen is None or not seen.observed:
        return row(UNKNOWN, f"cluster not observed: {seen.error if seen else 'no observation'}")
    if not seen.reachable:
        return row(UNKNOWN, f"cluster {h.problem}")
    got = seen.replicas.get(replica.name)
    if got is None or got.pods == 0:
        return row(PENDING, "no pods yet")
    age = None if got.created is None else max(0.0, now - got.created)
    groups_ok = got.groups == 0 or got.ready_groups >= got.groups
    if got.ready_pods >= expected and groups_ok:
        if h.code == NOT_READY:
            return row(NOT_READY_PHASE, f"cluster {h.problem}", got.pods, got.ready_pods, age)
        return row(READY, "", got.pods, got.ready_pods, age)
    why = list(got.reasons[:3])
    if got.unschedulable_since is not None:
        pools = ",".join(sorted(set(replica.pools.values())))
        stamp = clock_text(got.unschedulable_since)
        message = f": {got.unschedulable}" if got.unschedulable else ""
        why = [f"waiting for capacity on {replica.cluster}/{pools} since {stamp} UTC{message}"]
    if got.claims and got.allocated_claims < got.claims and got.unschedulable_since is None:
        why.insert(0, f"{got.allocated_claims} of {got.claims} device claims allocated")
    if got.groups and got.ready_groups < got.groups:
        why.append(f"{got.ready_groups} of {got.groups} LeaderWorkerSet groups ready")
    if not why:
        why = [f"{got.ready_pods} of {expected} pods Ready"]
    phase = PENDING if got.running_pods < got.pods or got.pods < expected else NOT_READY_PHASE
    return row(phase, "; ".join(why), got.pods, got.ready_pods, age)


def _conditions(
    desired: int, replicas: Sequence[ReplicaStatus], shortfall: Sequence[str]
) -> list[Condition]:
    placed = len(replicas)
    ready = sum(1 for r in replicas if r.phase == READY)
    if placed >= desired:
        scheduled = Condition(
            "ReplicasScheduled", "True", "AllPlaced", f"{placed} of {desired} placed"
        )
    else:
        why = "; ".join(shortfall)
        scheduled = Condition(
            "ReplicasScheduled",
            "False",
            "Shortfall",
            f"{placed} of {desired} placed" + (f": {why}" if why else ""),
        )
    not_ready = [
        f"{r.name} ({r.cluster}): {r.phase}, {r.reason}" for r in replicas if r.phase != READY
    ]
    if ready >= desired:
        status, reason = "True", "AllReady"
    elif any(r.phase == UNKNOWN for r in replicas):
        status, reason = "False", "ClusterUnreachable"
    else:
        status, reason = "False", "ReplicasNotReady" if placed else "NothingPlaced"
    message = f"{ready} of {desired} ready" + (f": {'; '.join(not_ready)}" if not_ready else "")
    return [scheduled, Condition("ReplicasReady", status, reason, message)]


def _cache_condition(
    dep: ModelDeployment, rows: Sequence[ReplicaStatus], caches: Mapping[str, CacheStatus]
) -> list[Condition]:
    """ModelCacheResolved, for a deployment with a modelCacheRef: hydrated where it runs."""
    ref = dep.spec.model_cache_ref
    if ref is None:
        return []
    key = f"{dep.metadata.namespace}/{ref.name}"
    cache = caches.get(key)
    if cache is None:
        return [Condition("ModelCacheResolved", "False", "CacheNotFound", f"no ModelCache {key}")]
    where = sorted({r.cluster for r in rows})
    missing = [
        f"{c}: {cache.clusters.get(c, ('NotCovered', ''))[0]}"
        + (f" ({cache.clusters[c][1]})" if c in cache.clusters and cache.clusters[c][1] else "")
        for c in where
        if cache.clusters.get(c, ("NotCovered", ""))[0] != "Hydrated"
    ]
    if missing:
        return [
            Condition("ModelCacheResolved", "False", "NotHydrated", f"{key}: " + "; ".join(missing))
        ]
    return [
        Condition("ModelCacheResolved", "True", "Hydrated", f"{key} hydrated on {', '.join(where)}")
    ]


def readiness(
    fleet: FleetSpec,
    lock: PlacementLock,
    observation: Observation,
    *,
    shortfall: Mapping[str, Sequence[str]] | None = None,
    service_urls: Mapping[str, str | None] | None = None,
    since: Mapping[str, float] | None = None,
    phases: Mapping[str, Mapping[str, float]] | None = None,
    front_doors: Mapping[str, FrontDoorProbe] | None = None,
) -> FleetReadiness:
    """The readiness view at `observation.at` (`shortfall`: the plan's reasons per
    deployment; `service_urls`: the gateway stack's `services` output; `front_doors`: per
    front door's cluster, what its health path answered)."""
    now = observation.at
    health = {n: cluster_health(c, observation.cluster(n)) for n, c in fleet.clusters.items()}
    out = FleetReadiness(at=now)
    for door, found in (front_doors or {}).items():
        h = health.get(door)
        if h is not None and h.code == UNREACHABLE:
            state, message = "Down", f"cluster unreachable: {h.problem or ''}".rstrip(": ")
        elif found.problem is not None:
            state, message = "Down", found.problem
        else:
            state, message = "Serving", ""
        out.front_doors.append(FrontDoorStatus(door, found.stack, found.address, state, message))
    for name in fleet.clusters:
        h, seen = health[name], observation.cluster(name)
        nodes, devices = "", None
        if seen is not None and seen.reachable:
            pools = [seen.pools.get(p.name) for p in fleet.clusters[name].spec.node_pools]
            nodes = f"{sum(p.ready_nodes for p in pools if p)}/{sum(p.nodes for p in pools if p)}"
            devices = sum(p.devices for p in pools if p)
        if not h.observed:
            state, message = "NotObserved", (seen.error if seen else None) or "not observed"
        else:
            state, message = _HEALTH_NAMES.get(h.code, h.code or ""), h.problem or ""
        mismatches = class_mismatches(fleet.clusters[name], fleet.classes, seen)
        if mismatches:
            message = "; ".join([message, *mismatches] if message else mismatches)
        out.clusters.append(
            ClusterStatus(
                name,
                state,
                message,
                nodes,
                devices,
                seen.gateway_address if seen else None,
                (since or {}).get(name),
            )
        )
    for key in fleet.caches:
        states: dict[str, tuple[str, str]] = {}
        for name in cache_clusters(fleet, key):
            seen = observation.cluster(name)
            got = seen.caches.get(key) if seen is not None and seen.reachable else None
            if got is None:
                why = health[name].problem or (seen.error if seen else None) or "not observed"
                states[name] = ("Unknown", why)
            else:
                states[name] = (got.state, got.reason)
        out.caches.append(CacheStatus(key, states))
    cache_view = {c.key: c for c in out.caches}
    ready_endpoints: dict[tuple[str, str, int], ReplicaStatus] = {}
    for key, dep in fleet.deployments.items():
        rows, leaving = [], []
        for locked in lock.replicas_of(key):
            got = _replica(dep, locked, observation, health, now, (phases or {}).get(locked.name))
            if locked.draining:
                reason = "scale-in: out of the routes" + (f"; {got.reason}" if got.reason else "")
                leaving.append(dataclasses.replace(got, phase=DRAINING, reason=reason))
            else:
                rows.append(got)
        for r in rows:
            ready_endpoints[(key, r.cluster, r.index)] = r
        ages = [r.age for r in rows if r.age is not None]
        auto = dep.spec.autoscaling
        desired = autoscaled_count(dep, lock)
        out.deployments.append(
            DeploymentStatus(
                key=key,
                desired=desired,
                placed=len(rows),
                ready=sum(1 for r in rows if r.phase == READY),
                clusters=sorted({r.cluster for r in rows}),
                age=max(ages) if ages else None,
                conditions=_conditions(desired, rows, (shortfall or {}).get(key, ()))
                + _cache_condition(dep, rows, cache_view),
                replicas=sorted([*rows, *leaving], key=lambda r: (r.cluster, r.index)),
                autoscaling=None if auto is None else (auto.min_replicas, auto.max_replicas),
            )
        )
    for key, svc in fleet.services.items():
        out.services.append(
            _service(fleet, key, svc, ready_endpoints, health, service_urls, observation.routes)
        )
    return out


def _service(fleet, key, svc, rows, health, urls, routes) -> ServiceStatus:  # type: ignore[no-untyped-def]
    """Endpoints the service selects (first entry wins, as in routing) and which are
    routable: a backend of the service's live route (when the routes were observed) that is
    a Ready replica on a healthy cluster, or a static endpoint."""
    ns = svc.metadata.namespace
    candidates: list[tuple[str, dict[str, str], ReplicaStatus | None]] = []
    for dep_key, dep in fleet.deployments.items():
        if dep.metadata.namespace != ns:
            continue
        for (k, cluster, index), row in sorted(rows.items()):
            if k != dep_key:
                continue
            labels = {
                **dep.template_labels(),
                DEPLOYMENT_LABEL: dep.metadata.name,
                CLUSTER_LABEL: cluster,
                INDEX_LABEL: str(index),
            }
            candidates.append((row.name, labels, row))
    for ep in fleet.endpoints.values():
        if ep.metadata.namespace == ns:
            candidates.append((ep.metadata.name, dict(ep.metadata.labels), None))
    chosen: list[tuple[str, ReplicaStatus | None]] = []
    seen: set[str] = set()
    for entry in svc.spec.endpoints:
        for name, labels, row in candidates:
            if name not in seen and entry.selector.matches(labels):
                seen.add(name)
                chosen.append((name, row))
    live: tuple[str, ...] | None = None
    routes_error = None
    if routes is not None:
        if routes.observed:
            live = routes.services.get(key, ())
        else:
            routes_error = f"gateway routes not observed: {routes.error}"
    unroutable = []
    for name, row in chosen:
        h = health.get(row.cluster) if row is not None else None
        if live is not None and name not in live:
            unroutable.append(f"{name}: not in the route (yet)")
        elif row is None:
            continue  # a static ModelEndpoint: not observed, counted as routable
        elif row.phase != READY:
            unroutable.append(f"{name}: {row.phase}, {row.reason}".rstrip(", "))
        elif h is not None and not h.healthy:
            unroutable.append(f"{name}: cluster {row.cluster} {h.problem}")
    routable = len(chosen) - len(unroutable)
    names = {name for name, _ in chosen}
    for name in live or ():
        if name not in names:
            unroutable.append(f"{name}: in the route, but no longer placed")
    url = (urls or {}).get(key)
    return ServiceStatus(key, url, len(chosen), routable, unroutable, routes_error)
