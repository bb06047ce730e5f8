"""The fleet address plan (docs/api.md, "Addresses"): every provisioned cluster without
declared ranges gets a block of the fleet range, cut into its node, pod and service ranges.

Pure and deterministic. A block, once given, is kept in the lock: adding, removing or
reordering clusters never moves another cluster's ranges. New clusters take the lowest free
blocks in name order; a block is free when it overlaps no range any cluster declares and no
range the lock holds (a cluster gone from the specs keeps its block until `up --prune`)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from modelplane.api.errors import SpecError
from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.inference_gateway import FleetNetwork
from modelplane.api.network import (
    Range,
    cluster_error,
    declared_ranges,
    must_reach,
    overlaps,
)
from modelplane.api.placement_lock import ClusterAddresses, NetworkLock, PlacementLock

V4 = ipaddress.IPv4Network

LEGACY_GKE = ClusterAddresses(
    source="GKE", nodes="10.0.0.0/24", pods="10.1.0.0/16", services="10.2.0.0/16"
)
LEGACY_EKS_SUBNETS = ("10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20")
"""The ranges every GKE and EKS cluster had before the address plan (its old defaults): a
lock written before it keeps its clusters there, so that no existing network is replaced."""

POD_RANGE_PER_NODE = 24
"""GKE gives each node a /24 of the pod range (110 pods per node, GKE's default)."""


@dataclass
class AddressPlan:
    network: NetworkLock
    errors: list[SpecError] = field(default_factory=list)


def settings(fleet: FleetSpec) -> FleetNetwork:
    return fleet.gateway.spec.network if fleet.gateway is not None else FleetNetwork()


def provisioned(cluster: InferenceCluster) -> str | None:
    """GKE or EKS when modelplane provisions the cluster's network from the plan."""
    src = cluster.spec.cluster
    if src.gke is not None and not src.gke.networking.declared:
        return "GKE"
    if src.eks is not None and not src.eks.networking.declared:
        return "EKS"
    return None


def carve(source: str, block: V4, zones: int) -> ClusterAddresses:
    """A block's ranges: the low half holds the pods (GKE) or the VPC (EKS, its subnets
    one eighth each); the high half's first eighth the GKE nodes, its second the services."""
    low, high = block.subnets(prefixlen_diff=1)
    eighths = list(high.subnets(prefixlen_diff=3))
    if source == "GKE":
        return ClusterAddresses(
            source="GKE",
            block=str(block),
            nodes=str(eighths[0]),
            pods=str(low),
            services=str(eighths[1]),
        )
    subnets = [str(s) for s in list(low.subnets(prefixlen_diff=3))[:zones]]
    return ClusterAddresses(
        source="EKS", block=str(block), vpc=str(low), subnets=subnets, services=str(eighths[1])
    )


def legacy(source: str, zones: int) -> ClusterAddresses:
    if source == "GKE":
        return LEGACY_GKE
    return _with_zones(
        ClusterAddresses(source="EKS", vpc="10.0.0.0/16", subnets=list(LEGACY_EKS_SUBNETS)),
        zones,
    )


def _with_zones(entry: ClusterAddresses, zones: int) -> ClusterAddresses:
    """An EKS entry with one subnet per zone: blocks are appended (the next free one of the
    same size in the VPC) or the last ones dropped, never moved."""
    subnets = list(entry.subnets or [])
    if len(subnets) == zones:
        return entry
    if len(subnets) > zones:
        return entry.model_copy(update={"subnets": subnets[:zones]})
    vpc = V4(entry.vpc or "")
    size = V4(subnets[0]).prefixlen if subnets else vpc.prefixlen + 3
    taken = [V4(s) for s in subnets]
    for candidate in vpc.subnets(new_prefix=size):
        if len(subnets) == zones:
            break
        if not any(candidate.overlaps(t) for t in taken):
            subnets.append(str(candidate))
            taken.append(candidate)
    return entry.model_copy(update={"subnets": subnets})


def _zones(cluster: InferenceCluster) -> int:
    eks = cluster.spec.cluster.eks
    return eks.networking.block_count if eks is not None else 0


def _lock_ranges(name: str, entry: ClusterAddresses, lock_file: str) -> list[Range]:
    return [
        Range(
            name,
            ipaddress.ip_network(cidr),
            lock_file,
            0,
            "PlacementLock",
            f"network.clusters.{name}.{key}",
        )
        for key, cidr in entry.ranges()
    ]


def plan_addresses(fleet: FleetSpec, previous: PlacementLock, lock_file: str = "") -> AddressPlan:
    """The lock's network section for `fleet`, kept from `previous` where it can be, and the
    errors: no free block, a GKE pod range too small for its pools, lock ranges that
    overlap another cluster's where the front door must route between them."""
    chosen = settings(fleet)
    before = previous.network.clusters if previous.network is not None else {}
    # A lock that placed replicas but has no network section was written before the plan:
    # its clusters may run on the old default ranges (see LEGACY_GKE).
    old_lock = previous.network is None and bool(previous.deployments or previous.removed)
    entries: dict[str, ClusterAddresses] = {}
    for name, entry in before.items():
        cluster = fleet.clusters.get(name)
        if cluster is None:
            entries[name] = entry  # gone from the specs, its stack may still run
            continue
        source = provisioned(cluster)
        if source is None:
            continue  # declared ranges (or Existing) now: the plan gives it none
        if entry.source == source:
            entries[name] = _with_zones(entry, _zones(cluster)) if source == "EKS" else entry
        elif entry.block is not None:  # GKE <-> EKS: the same block, cut the other way
            entries[name] = carve(source, V4(entry.block), _zones(cluster))
    declared = {n: declared_ranges(fleet, n, c) for n, c in fleet.clusters.items()}
    errors: list[SpecError] = []
    taken: list[V4] = [r.net for rs in declared.values() for r in rs if isinstance(r.net, V4)]
    for entry in entries.values():
        taken += [V4(cidr) for _, cidr in entry.ranges()]
        taken += [V4(entry.block)] if entry.block else []
    fleet_range = V4(chosen.fleet_cidr)
    free = (b for b in fleet_range.subnets(new_prefix=chosen.cluster_prefix_length))
    for name, cluster in fleet.clusters.items():
        source = provisioned(cluster)
        if source is None or name in entries:
            continue
        if old_lock:
            entries[name] = legacy(source, _zones(cluster))
            continue
        block = next((b for b in free if not any(b.overlaps(t) for t in taken)), None)
        if block is None:
            errors.append(_exhausted(fleet, name, chosen))
            continue
        entries[name] = carve(source, block, _zones(cluster))
        taken.append(block)
    errors += _pod_room(fleet, entries, lock_file)
    errors += _lock_overlaps(fleet, declared, entries, lock_file)
    return AddressPlan(NetworkLock(clusters=dict(sorted(entries.items()))), errors)


def _exhausted(fleet: FleetSpec, name: str, chosen: FleetNetwork) -> SpecError:
    return cluster_error(
        fleet,
        name,
        "spec.cluster",
        f"the fleet range {chosen.fleet_cidr} has no free /{chosen.cluster_prefix_length} "
        "block left for this cluster: widen the InferenceGateway's spec.network.fleetCidr "
        "(blocks given before stay), or declare the cluster's networking",
    )


def _pod_room(
    fleet: FleetSpec, entries: dict[str, ClusterAddresses], lock_file: str
) -> list[SpecError]:
    """A GKE pod range holds a /24 per node: refuse pools that could outgrow it."""
    errors = []
    for name, entry in entries.items():
        cluster = fleet.clusters.get(name)
        if cluster is None or entry.pods is None:
            continue
        room = 2 ** max(0, POD_RANGE_PER_NODE - V4(entry.pods).prefixlen)
        most = sum(max(p.node_count, p.max_node_count or 0) for p in cluster.spec.node_pools)
        if most > room:
            errors.append(
                cluster_error(
                    fleet,
                    name,
                    "spec.nodePools",
                    f"the node pools may grow to {most} nodes but the pod range {entry.pods} "
                    f"(network.clusters.{name}.pods in {lock_file or 'the lock'}) holds "
                    f"{room} (a /{POD_RANGE_PER_NODE} per node): lower maxNodeCount, or "
                    "declare networking with a larger podCidr",
                )
            )
    return errors


def _lock_overlaps(
    fleet: FleetSpec,
    declared: dict[str, list[Range]],
    entries: dict[str, ClusterAddresses],
    lock_file: str,
) -> list[SpecError]:
    """Overlaps the front door cannot route where one side's range is the lock's (a range
    kept from before the plan, or a block a range declared later now covers); overlaps of
    two declared ranges are `validate`'s (modelplane.api.network)."""
    held = {n: _lock_ranges(n, e, lock_file) for n, e in entries.items()}
    errors: list[SpecError] = []
    for door, other in must_reach(fleet):
        for a, b in (
            (held.get(door, []), declared[other] + held.get(other, [])),
            (declared[door], held.get(other, [])),
        ):
            errors.extend(overlaps(door, a, b))
    return errors


def with_addresses(cluster: InferenceCluster, entry: ClusterAddresses | None) -> InferenceCluster:
    """The cluster with its planned ranges written into its networking, as the components
    build it; unchanged when it declares its own (or is Existing)."""
    src = cluster.spec.cluster
    if entry is None or provisioned(cluster) is None:
        return cluster
    if src.gke is not None and entry.source == "GKE":
        net = src.gke.networking.model_copy(
            update={
                "node_cidr": entry.nodes,
                "pod_cidr": entry.pods,
                "service_cidr": entry.services,
            }
        )
        new_src = src.model_copy(update={"gke": src.gke.model_copy(update={"networking": net})})
    elif src.eks is not None and entry.source == "EKS":
        update = {"vpc_cidr": entry.vpc, "subnet_cidrs": list(entry.subnets or [])}
        if src.eks.networking.service_cidr is None:
            update["service_cidr"] = entry.services
        net_eks = src.eks.networking.model_copy(update=update)
        new_src = src.model_copy(update={"eks": src.eks.model_copy(update={"networking": net_eks})})
    else:
        return cluster
    spec = cluster.spec.model_copy(update={"cluster": new_src})
    return cluster.model_copy(update={"spec": spec})


def addresses_of(fleet: FleetSpec, lock: PlacementLock, name: str) -> ClusterAddresses | None:
    """The cluster's entry in the lock, else the one the plan gives it from this lock (a
    stack run by hand before `plan` wrote it gets what `plan` would write)."""
    if lock.network is not None and name in lock.network.clusters:
        return lock.network.clusters[name]
    return plan_addresses(fleet, lock).network.clusters.get(name)
