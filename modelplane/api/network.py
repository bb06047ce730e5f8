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
    """The InferenceClusters the front door runs on."""
    gateway = fleet.gateway
    if gateway is None or gateway.spec.cluster.inference_cluster_ref is None:
        return []
    return [gateway.spec.cluster.inference_cluster_ref]


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
