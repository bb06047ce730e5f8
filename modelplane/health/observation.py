"""What `modelplane/observe` saw on the clusters: plain data, the input of the pure rules.

Built by `modelplane.observe` (the only code that reads clusters); tests build it by hand.
JSON-ready through `as_json` / `from_json` (the shape of `status --output json`'s
`observation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PoolObservation:
    """One node pool as seen: nodes labelled `modelplane.ai/pool=<pool>`."""

    nodes: int = 0
    ready_nodes: int = 0
    devices: int = 0  # DRA devices published in ResourceSlices of the pool's nodes
    # The smallest `memory` capacity the NVIDIA DRA driver publishes for the pool's GPUs, as
    # written in the ResourceSlices (None: no GPU published one).
    gpu_memory: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "nodes": self.nodes,
            "readyNodes": self.ready_nodes,
            "devices": self.devices,
        }
        if self.gpu_memory is not None:
            out["gpuMemory"] = self.gpu_memory
        return out


@dataclass(frozen=True)
class ReplicaObservation:
    """One replica's pods, claims and LeaderWorkerSet groups on its cluster."""

    pods: int = 0
    ready_pods: int = 0
    claims: int = 0
    allocated_claims: int = 0
    groups: int = 0  # LeaderWorkerSet groups (multi-node workers); 0 for Deployments
    ready_groups: int = 0
    reasons: tuple[str, ...] = ()  # why pods are not Ready: `<pod>: <reason>`
    created: float | None = None  # the oldest pod's creation time (epoch seconds)
    running_pods: int = 0  # pods in phase Running (the others are Pending or finished)
    # Autoscaled replicas only (`observe_fleet(metrics=...)`): the vLLM samples summed over
    # the serving pods (`modelplane.autoscale.replica_values`), or why there are none.
    metrics: dict[str, float] | None = None
    metrics_error: str | None = None
    # Where `metrics` came from: "prometheus" (the cluster's, through the API server's
    # service proxy) or "pod-proxy" (each pod's /metrics); and why not Prometheus.
    metrics_source: str | None = None
    metrics_fallback: str | None = None
    # Per serving role (unified, prefill, decode): its oldest pod's creation time. A
    # rollout waits only for the pods of the roles its change touched (driver.rollouts).
    role_created: dict[str, float] = field(default_factory=dict)
    # Start phases (epoch seconds; a phase is there once every pod reached it): `created`
    # (the first pod), `scheduled` (PodScheduled), `started` (every container running),
    # `ready` (Ready). api.md / status.md "Start phases".
    phases: dict[str, float] = field(default_factory=dict)
    # A pod the scheduler cannot place (PodScheduled False, reason Unschedulable): since when
    # (the earliest such pod's condition), and the scheduler's message. health.spill.
    unschedulable_since: float | None = None
    unschedulable: str = ""

    def as_json(self) -> dict[str, Any]:
        out = self._json()
        if self.metrics is not None or self.metrics_error is not None:
            out["metrics"] = self.metrics
            out["metricsError"] = self.metrics_error
            out["metricsSource"] = self.metrics_source
            out["metricsFallback"] = self.metrics_fallback
        return out

    def _json(self) -> dict[str, Any]:
        born = dict(sorted(self.role_created.items()))
        roles: dict[str, Any] = {"roleCreated": born} if born else {}
        if self.phases:
            roles["phases"] = dict(self.phases)
        if self.unschedulable_since is not None:
            roles["unschedulableSince"] = self.unschedulable_since
            roles["unschedulable"] = self.unschedulable
        return {
            "created": self.created,
            "runningPods": self.running_pods,
            "pods": self.pods,
            "readyPods": self.ready_pods,
            "claims": self.claims,
            "allocatedClaims": self.allocated_claims,
            "groups": self.groups,
            "readyGroups": self.ready_groups,
            "reasons": list(self.reasons),
            **roles,
        }


@dataclass(frozen=True)
class CacheObservation:
    """One ModelCache's hydration Job on one cluster."""

    state: str  # Hydrated | Hydrating | Failed | Missing
    reason: str = ""

    def as_json(self) -> dict[str, str]:
        return {"state": self.state, "reason": self.reason}


@dataclass(frozen=True)
class ClusterObservation:
    """One cluster. `observed` False: modelplane had no way to reach it (no kubeconfig)."""

    name: str
    observed: bool = True
    reachable: bool = False
    error: str | None = None  # why it is unreachable / not observed (never a secret)
    pools: dict[str, PoolObservation] = field(default_factory=dict)
    gateway_address: str | None = None
    gateway_found: bool = True  # False: no inference-gateway Gateway (not set up yet)
    replicas: dict[str, ReplicaObservation] = field(default_factory=dict)  # by replica name
    caches: dict[str, CacheObservation] = field(default_factory=dict)  # by `ns/name`
    duration: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "observed": self.observed,
            "reachable": self.reachable,
            "error": self.error,
            "pools": {k: v.as_json() for k, v in sorted(self.pools.items())},
            "gatewayAddress": self.gateway_address,
            "gatewayFound": self.gateway_found,
            "replicas": {k: v.as_json() for k, v in sorted(self.replicas.items())},
            "caches": {k: v.as_json() for k, v in sorted(self.caches.items())},
            "duration": round(self.duration, 3),
        }


@dataclass(frozen=True)
class RoutesObservation:
    """The ModelService routes live on the gateway cluster: per service (`ns/name`), the
    endpoints its HTTPRoute's backends reach (by endpoint name). `observed` False: the
    gateway cluster could not be read (`error` says why)."""

    observed: bool = True
    error: str | None = None
    services: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "observed": self.observed,
            "error": self.error,
            "services": {k: list(v) for k, v in sorted(self.services.items())},
        }

    @staticmethod
    def from_json(data: dict[str, Any] | None) -> RoutesObservation | None:
        if data is None:
            return None
        return RoutesObservation(
            bool(data.get("observed", True)),
            data.get("error"),
            {str(k): tuple(v) for k, v in (data.get("services") or {}).items()},
        )


@dataclass(frozen=True)
class Observation:
    """Every cluster of the fleet at one time (`at`: seconds since the epoch), and the
    routes on the gateway cluster (None: the fleet has no gateway or it was not read)."""

    at: float
    clusters: dict[str, ClusterObservation] = field(default_factory=dict)
    routes: RoutesObservation | None = None

    def cluster(self, name: str) -> ClusterObservation | None:
        return self.clusters.get(name)

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "clusters": {k: v.as_json() for k, v in sorted(self.clusters.items())},
            "routes": None if self.routes is None else self.routes.as_json(),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Observation:
        clusters = {}
        for name, c in (data.get("clusters") or {}).items():
            clusters[name] = ClusterObservation(
                name=name,
                observed=bool(c.get("observed", True)),
                reachable=bool(c.get("reachable")),
                error=c.get("error"),
                pools={
                    p: PoolObservation(
                        int(v["nodes"]),
                        int(v["readyNodes"]),
                        int(v["devices"]),
                        v.get("gpuMemory"),
                    )
                    for p, v in (c.get("pools") or {}).items()
                },
                gateway_address=c.get("gatewayAddress"),
                gateway_found=bool(c.get("gatewayFound", True)),
                replicas={
                    r: ReplicaObservation(
                        int(v["pods"]),
                        int(v["readyPods"]),
                        int(v["claims"]),
                        int(v["allocatedClaims"]),
                        int(v["groups"]),
                        int(v["readyGroups"]),
                        tuple(v.get("reasons") or ()),
                        v.get("created"),
                        int(v.get("runningPods", 0)),
                        v.get("metrics"),
                        v.get("metricsError"),
                        v.get("metricsSource"),
                        v.get("metricsFallback"),
                        {str(k): float(t) for k, t in (v.get("roleCreated") or {}).items()},
                        {str(k): float(t) for k, t in (v.get("phases") or {}).items()},
                        v.get("unschedulableSince"),
                        str(v.get("unschedulable") or ""),
                    )
                    for r, v in (c.get("replicas") or {}).items()
                },
                caches={
                    k: CacheObservation(str(v["state"]), str(v.get("reason", "")))
                    for k, v in (c.get("caches") or {}).items()
                },
                duration=float(c.get("duration", 0.0)),
            )
        return Observation(
            float(data.get("at", 0.0)), clusters, RoutesObservation.from_json(data.get("routes"))
        )
