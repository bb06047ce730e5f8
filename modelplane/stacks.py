"""The derived Pulumi stacks of a fleet: names, tiers and dependencies (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from modelplane.api.fleet import FleetSpec
from modelplane.api.names import child_name
from modelplane.api.network import CREATED, fleet_paths
from modelplane.api.placement_lock import PlacementLock


class Tier(IntEnum):
    CLUSTERS = 0
    PATHS = 1
    CACHES = 2
    DEPLOYMENTS = 3
    GATEWAY = 4
    ADDRESS = 5


@dataclass(frozen=True)
class StackUnit:
    """One stack: what it owns and which stacks' outputs it reads."""

    name: str
    tier: Tier
    # InferenceCluster | ClusterPath | ModelCache | ModelDeployment | InferenceGateway |
    # FleetAddress
    kind: str
    # cluster name, `<cluster>/<cluster>` (a path), `ns/name`; a gateway stack's front-door
    # cluster, or `default` (a gateway on a cluster outside the fleet); `default` (address)
    key: str
    depends_on: tuple[str, ...] = field(default=())
    # Stacks whose outputs it also reads but whose failure must not hold it back (a tier
    # below it: they run first). The gateway's second pass to each workload gateway: a
    # cluster stack that fails (its cluster down) still has the address it last had, and the
    # routes must still change.
    reads: tuple[str, ...] = field(default=())

    @property
    def upstream(self) -> tuple[str, ...]:
        """Every stack whose outputs it reads (its fingerprint, a preview's overrides)."""
        return (*self.depends_on, *(r for r in self.reads if r not in self.depends_on))


# Pulumi stack names are at most 100 characters; longer derived names are cut and hashed.
MAX_STACK_NAME = 100


def cluster_stack(name: str) -> str:
    return child_name("cluster", name, limit=MAX_STACK_NAME)


def path_stack(a: str, b: str) -> str:
    """The stack of the path between two clusters (in name order: one for both ways)."""
    first, second = sorted((a, b))
    return child_name("path", first, second, limit=MAX_STACK_NAME)


def created_paths(fleet: FleetSpec) -> list[tuple[str, str]]:
    """The cluster pairs, in name order, joined by a path modelplane builds (peering, VPN)."""
    pairs = {p.pair for p in fleet_paths(fleet) if p.kind in CREATED}
    return sorted(pairs)


def cache_stack(key: str) -> str:
    ns, name = key.split("/", 1)
    return child_name("cache", ns, name, limit=MAX_STACK_NAME)


def deploy_stack(key: str) -> str:
    ns, name = key.split("/", 1)
    return child_name("deploy", ns, name, limit=MAX_STACK_NAME)


GATEWAY_STACK = "gateway"
FLEET_ADDRESS_STACK = "fleet-address"
OUTSIDE_THE_FLEET = "default"
"""A gateway stack's key when its front door is on a cluster outside the fleet (`existing`)."""


def gateway_stacks(fleet: FleetSpec) -> list[tuple[str, str]]:
    """(stack, front-door cluster) of every front door, `spec.cluster` first: its stack is
    `gateway`, each further front door's `gateway-<cluster>` (docs/api.md, "More than one
    front door"). The cluster is `default` for a gateway on a cluster outside the fleet."""
    gateway = fleet.gateway
    if gateway is None:
        return []
    doors = gateway.spec.front_door_clusters or [OUTSIDE_THE_FLEET]
    return [
        (GATEWAY_STACK if i == 0 else child_name("gateway", door, limit=MAX_STACK_NAME), door)
        for i, door in enumerate(doors)
    ]


def gateway_stack_names(fleet: FleetSpec) -> list[str]:
    return [name for name, _ in gateway_stacks(fleet)]


def is_gateway_stack(name: str) -> bool:
    """Whether a stack name is a front door's (`gateway`, `gateway-<cluster>`)."""
    return name == GATEWAY_STACK or name.startswith(f"{GATEWAY_STACK}-")


def cache_clusters(fleet: FleetSpec, cache_key: str) -> list[str]:
    cache = fleet.caches[cache_key]
    return [
        name
        for name, cluster in fleet.clusters.items()
        if cache.spec.cluster_selector.matches(cluster.metadata.labels)
    ]


def mounting(fleet: FleetSpec, cache_key: str) -> list[str]:
    """The deployments whose pods mount the cache ``cache_key`` (`ns/name`)."""
    return sorted(
        key
        for key, dep in fleet.deployments.items()
        if dep.spec.model_cache_ref is not None
        and f"{dep.metadata.namespace or 'default'}/{dep.spec.model_cache_ref.name}" == cache_key
    )


def route_namespaces(fleet: FleetSpec) -> list[str]:
    """The namespaces the front door's routes and backends may be in: every deployment's,
    ModelService's and ModelEndpoint's (the front door reads its own objects from these)."""
    return sorted(
        {d.metadata.namespace or "default" for d in fleet.deployments.values()}
        | {s.metadata.namespace or "default" for s in fleet.services.values()}
        | {e.metadata.namespace or "default" for e in fleet.endpoints.values()}
    )


def hop_clusters(fleet: FleetSpec) -> list[str]:
    """The clusters whose workload gateway a front door may go through, in name order: those
    with a gateway (modelplane installs one, or the platform declares it) and an API server
    (not renderTo). Each serves a certificate of the fleet CA; a Traefik front door keeps its
    second pass to every one (modelplane/network/hop.py), whether or not it holds a replica
    now, so a route never names a hop that is not there yet or is already gone."""
    out = []
    for name, cluster in sorted(fleet.clusters.items()):
        stack = cluster.spec.serving_stack
        existing = cluster.spec.cluster.existing
        render_to = existing is not None and existing.render_to
        if (stack.install or stack.gateway is not None) and not render_to:
            out.append(name)
    return out


def stack_units(fleet: FleetSpec, lock: PlacementLock) -> list[StackUnit]:
    """Every stack of the fleet in tier order, then by name."""
    units: list[StackUnit] = [
        StackUnit(cluster_stack(name), Tier.CLUSTERS, "InferenceCluster", name)
        for name in fleet.clusters
    ]
    for a, b in created_paths(fleet):
        deps = (cluster_stack(a), cluster_stack(b))
        units.append(StackUnit(path_stack(a, b), Tier.PATHS, "ClusterPath", f"{a}/{b}", deps))
    for key in fleet.caches:
        deps = tuple(cluster_stack(c) for c in cache_clusters(fleet, key))
        units.append(StackUnit(cache_stack(key), Tier.CACHES, "ModelCache", key, deps))
    for key, dep in fleet.deployments.items():
        clusters = sorted({r.cluster for r in lock.replicas_of(key)})
        deps = [cluster_stack(c) for c in clusters]
        ref = dep.spec.model_cache_ref
        if ref is not None and f"{dep.metadata.namespace}/{ref.name}" in fleet.caches:
            deps.append(cache_stack(f"{dep.metadata.namespace}/{ref.name}"))
        units.append(
            StackUnit(deploy_stack(key), Tier.DEPLOYMENTS, "ModelDeployment", key, tuple(deps))
        )
    if fleet.gateway is not None:
        # A Traefik front door's second pass to each workload gateway reads its address.
        reads = (
            tuple(cluster_stack(c) for c in hop_clusters(fleet))
            if fleet.gateway.spec.backend == "Traefik"
            else ()
        )
        doors = gateway_stacks(fleet)
        for name, door in doors:
            deps = [deploy_stack(k) for k in fleet.deployments]
            if door != OUTSIDE_THE_FLEET:
                deps.insert(0, cluster_stack(door))
            units.append(
                StackUnit(name, Tier.GATEWAY, "InferenceGateway", door, tuple(deps), reads=reads)
            )
        address = fleet.gateway.spec.fleet_address
        if address is not None and address.provider is not None:
            units.append(
                StackUnit(
                    FLEET_ADDRESS_STACK,
                    Tier.ADDRESS,
                    "FleetAddress",
                    "default",
                    tuple(name for name, _ in doors),
                )
            )
    return sorted(units, key=lambda u: (u.tier, u.name))
