"""The address ranges clusters declare, which clusters must reach each other, and the
overlaps that make a pair unroutable (docs/api.md, "Addresses"). Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass

from modelplane.api.errors import SpecError
from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_cluster import InferenceCluster

Net = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Range:
    """One address range of a cluster and where it is written down."""

    cluster: str
    net: Net
    file: str
    document: int
    object: str
    """`InferenceCluster <name>` for a declared range, `PlacementLock` for a planned one."""
    path: str
    """The field: `spec.cluster.gke.networking.nodeCidr`, `network.clusters.<name>.nodes`."""

    @property
    def where(self) -> str:
        return f"{self.path} ({self.file})" if self.file else self.path


def cluster_error(fleet: FleetSpec, name: str, path: str, message: str) -> SpecError:
    """An error on InferenceCluster `name`'s field `path`, in the file it came from."""
    file, doc = fleet.sources.get(("InferenceCluster", name), ("", 0))
    return SpecError(file, doc, f"InferenceCluster {name}", path, message)


def declared_ranges(fleet: FleetSpec, name: str, cluster: InferenceCluster) -> list[Range]:
    """The ranges the cluster's spec declares: a GKE or EKS cluster's `networking` when
    set, an Existing cluster's `network`."""
    file, doc = fleet.sources.get(("InferenceCluster", name), ("", 0))
    src = cluster.spec.cluster
    fields: list[tuple[str, str]] = []
    if src.gke is not None and src.gke.networking.declared:
        net = src.gke.networking
        at = "spec.cluster.gke.networking"
        fields = [
            (f"{at}.nodeCidr", net.node_cidr or ""),
            (f"{at}.podCidr", net.pod_cidr or ""),
            (f"{at}.serviceCidr", net.service_cidr or ""),
        ]
    elif src.eks is not None:
        net_eks = src.eks.networking
        at = "spec.cluster.eks.networking"
        if net_eks.vpc_cidr is not None:
            fields.append((f"{at}.vpcCidr", net_eks.vpc_cidr))
        if net_eks.service_cidr is not None:
            fields.append((f"{at}.serviceCidr", net_eks.service_cidr))
    elif src.existing is not None and src.existing.network is not None:
        existing = src.existing.network
        at = "spec.cluster.existing.network"
        for key, values in (
            ("nodeCidrs", existing.node_cidrs),
            ("podCidrs", existing.pod_cidrs),
            ("serviceCidrs", existing.service_cidrs),
        ):
            fields += [(f"{at}.{key}[{i}]", v) for i, v in enumerate(values)]
    label = f"InferenceCluster {name}"
    return [
        Range(name, ipaddress.ip_network(value), file, doc, label, path)
        for path, value in fields
        if value
    ]


def front_door_clusters(fleet: FleetSpec) -> list[str]:
    """The InferenceClusters the front doors run on (`spec.cluster` first)."""
    gateway = fleet.gateway
    return [] if gateway is None else gateway.spec.front_door_clusters


def must_reach(fleet: FleetSpec) -> list[tuple[str, str]]:
    """(front door cluster, other cluster): every cluster may hold a replica the front
    door routes to, so every such pair must be routable."""
    doors = [d for d in front_door_clusters(fleet) if d in fleet.clusters]
    return [(door, name) for door in doors for name in fleet.clusters if name != door]


def overlaps(door: str, a: list[Range], b: list[Range]) -> Iterator[SpecError]:
    """An error on each range of `b` that overlaps one of `a` (`door`'s side)."""
    for rb in b:
        for ra in a:
            if ra.net.version == rb.net.version and ra.net.overlaps(rb.net):
                yield SpecError(
                    rb.file,
                    rb.document,
                    rb.object,
                    rb.path,
                    f"{rb.net} of cluster {rb.cluster} overlaps {ra.net} of cluster "
                    f"{ra.cluster} ({ra.where}): the front door on {door} must reach "
                    f"{rb.cluster}, and overlapping ranges cannot be routed between them; "
                    "give one of them other ranges",
                )
                break


def declared_overlaps(fleet: FleetSpec) -> list[SpecError]:
    """Overlaps between the declared ranges of clusters that must reach each other."""
    ranges = {name: declared_ranges(fleet, name, c) for name, c in fleet.clusters.items()}
    errors: list[SpecError] = []
    for door, other in must_reach(fleet):
        errors.extend(overlaps(door, ranges[door], ranges[other]))
    return errors


# --- paths between clusters (docs/api.md, "Paths") --------------------------------------------

GCP_PEERING = "gcp-peering"
AWS_PEERING = "aws-peering"
HA_VPN = "ha-vpn"
DECLARED = "declared"
GATEWAY_ADDRESS = "gateway-address"
CREATED = frozenset({GCP_PEERING, AWS_PEERING, HA_VPN})
"""The paths modelplane builds (a `path-<a>-<b>` stack each)."""

HOW = {
    GCP_PEERING: "VPC peering (GCP), both directions",
    AWS_PEERING: "VPC peering (AWS), with routes both ways",
    HA_VPN: "HA VPN with BGP (GCP HA VPN gateway, AWS virtual private gateway, 4 tunnels)",
    DECLARED: "a private network the platform connects (existing.network.connectedTo)",
    GATEWAY_ADDRESS: "the workload gateway's own address (an Existing cluster without a "
    "declared network: reachable only if the platform made it so)",
}


@dataclass(frozen=True)
class PairPath:
    """How the front door on `door` reaches `cluster`'s workload gateway."""

    door: str
    cluster: str
    kind: str | None
    """One of the constants above; None: no path (refused)."""

    @property
    def how(self) -> str:
        return HOW[self.kind] if self.kind is not None else "no path"

    @property
    def pair(self) -> tuple[str, str]:
        """The two clusters in name order (one path serves both directions)."""
        a, b = sorted((self.door, self.cluster))
        return a, b


def _declared_network(cluster: InferenceCluster) -> list[str] | None:
    """An Existing cluster's `connectedTo` when it declares a network, else None."""
    existing = cluster.spec.cluster.existing
    if existing is None or existing.network is None:
        return None
    return list(existing.network.connected_to)


def pair_path(fleet: FleetSpec, door: str, name: str) -> PairPath:
    """The path from the front door's cluster to another (module docstring of paths above)."""
    a, b = fleet.clusters[door], fleet.clusters[name]
    sources = {a.spec.cluster.source, b.spec.cluster.source}
    if sources == {"GKE"}:
        return PairPath(door, name, GCP_PEERING)
    if sources == {"EKS"}:
        return PairPath(door, name, AWS_PEERING)
    if sources == {"GKE", "EKS"}:
        return PairPath(door, name, HA_VPN)
    linked = name in (_declared_network(a) or []) or door in (_declared_network(b) or [])
    if linked:
        return PairPath(door, name, DECLARED)
    # An Existing cluster that declares no network keeps a workload gateway of its own
    # address; one that declares a network, or a provisioned one (internal load balancer),
    # is reached only over a private path.
    if b.spec.cluster.source == "Existing" and _declared_network(b) is None:
        return PairPath(door, name, GATEWAY_ADDRESS)
    return PairPath(door, name, None)


def fleet_paths(fleet: FleetSpec) -> list[PairPath]:
    """The path of every pair the front door must reach, in name order."""
    return [pair_path(fleet, door, name) for door, name in must_reach(fleet)]


def unreachable(fleet: FleetSpec) -> list[SpecError]:
    """An error for each cluster the front door has no path to, naming the pair, and for
    each `connectedTo` naming no cluster."""
    errors = []
    for name, cluster in fleet.clusters.items():
        for i, other in enumerate(_declared_network(cluster) or []):
            if other not in fleet.clusters and not fleet.declared("InferenceCluster", other):
                errors.append(
                    cluster_error(
                        fleet,
                        name,
                        f"spec.cluster.existing.network.connectedTo[{i}]",
                        f"InferenceCluster {other!r} does not exist",
                    )
                )
    for path in fleet_paths(fleet):
        if path.kind is not None:
            continue
        door_spec, other_spec = fleet.clusters[path.door], fleet.clusters[path.cluster]
        # Name the Existing side: its declaration is what is missing.
        at, partner = (
            (path.cluster, path.door)
            if other_spec.spec.cluster.source == "Existing"
            else (path.door, path.cluster)
        )
        here = fleet.clusters[at]
        private = [
            n
            for n, c in ((path.door, door_spec), (path.cluster, other_spec))
            if c.spec.cluster.source != "Existing" or _declared_network(c) is not None
        ]
        field = "spec.cluster.existing.network" if here.spec.cluster.existing else "spec.cluster"
        errors.append(
            cluster_error(
                fleet,
                at,
                field,
                f"the front door on {path.door} cannot reach {path.cluster}: "
                f"{' and '.join(private)} {'is' if len(private) == 1 else 'are'} reached only "
                f"over a private network, and none joins {path.door} and {path.cluster}; once "
                f"the platform connects them, add {partner} to "
                f"spec.cluster.existing.network.connectedTo of {at}",
            )
        )
    return errors
