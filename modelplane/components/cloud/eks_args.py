"""EKSCluster's arguments: node pools (System/GPU, Capacity Blocks, EFA), networking, and the
subnet plan (one public and one private subnet per block; see modelplane.components.cloud.eks)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from modelplane.components.cloud.pools import NodePoolShape

POOL_LABEL = "modelplane.ai/pool"
GPU_LABEL = "modelplane.ai/gpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
SYSTEM_INSTANCE_TYPE = "m6i.xlarge"
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
ROOT_DEVICE = "/dev/xvda"

EFA_INTERFACES: dict[str, int] = {"p5": 32, "p5e": 32, "p5en": 16, "p4d": 4, "p4de": 4}
"""EFA interfaces per instance family (one per network card); other families get one."""


@dataclass(frozen=True)
class EKSGpu:
    accelerator_type: str
    """Used to label GPU nodes; the GPU model and count come from the instance type."""


@dataclass(frozen=True)
class EKSCapacityBlock:
    capacity_reservation_id: str


@dataclass(frozen=True, kw_only=True)
class EKSNodePool(NodePoolShape[EKSGpu]):
    cloud = "EKS"
    instance_type: str
    min_node_count: int = 1
    capacity_block: EKSCapacityBlock | None = None
    fabric: Literal["None", "EFA"] = "None"
    max_unavailable: int = 1
    """Nodes a version update takes down at once (EKS' minimum, 1); EKS launches the new
    nodes first and never forces an eviction a PodDisruptionBudget refuses."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.role == "GPU" and self.capacity_block is None and self.min_node_count < 1:
            # Upstream cluster-autoscaler's AWS template node carries no ResourceSlices, so
            # it never scales a DRA pool up from zero (kubernetes/autoscaler#7799).
            raise ValueError(
                f"EKS node pool {self.name!r}: minNodeCount must be at least 1 (cluster-"
                "autoscaler on AWS cannot scale a DRA GPU node group up from zero)"
            )
        if self.max_node_count < 1 or self.min_node_count > self.max_node_count:
            raise ValueError(
                f"EKS node pool {self.name!r}: need minNodeCount <= maxNodeCount and "
                f"maxNodeCount >= 1 (got {self.min_node_count}..{self.max_node_count})"
            )

    @property
    def desired_size(self) -> int:
        """nodeCount, kept inside min..max (EKS rejects a desired size outside them); 0 for a
        Capacity Block group, which scheduled actions scale to the block while it is active."""
        if self.capacity_block is not None:
            return 0
        return min(max(self.node_count, self.min_node_count), self.max_node_count)

    @property
    def min_size(self) -> int:
        return 0 if self.capacity_block is not None else self.min_node_count

    @property
    def efa_interfaces(self) -> int:
        return EFA_INTERFACES.get(self.instance_type.split(".", 1)[0], 1)


@dataclass(frozen=True)
class EKSNetworking:
    vpc_cidr: str = "10.0.0.0/16"
    subnet_cidrs: tuple[str, ...] = ("10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20")
    service_cidr: str | None = None
    """The Kubernetes services' range (EKS' serviceIpv4Cidr; None: EKS picks)."""
    zones: tuple[str, ...] = ()
    """The zone of each block, by position (default ``<region>a``, ``<region>b``, ...)."""
    nat_gateways: Literal["Single", "PerZone"] = "Single"
    control_plane_zones: tuple[str, ...] = ()
    """The zones whose subnets the control plane uses (default: the first three blocks')."""


CONTROL_PLANE_BLOCKS = 3


@dataclass(frozen=True)
class EKSClusterArgs:
    region: str
    node_pools: Sequence[EKSNodePool] = ()
    kubernetes_version: str = "1.36"
    networking: EKSNetworking = field(default_factory=EKSNetworking)
    cluster_name: str | None = None
    """The EKS cluster's name; defaults to the component name."""
    admin_principal_arns: tuple[str, ...] = ()
    """IAM principals given cluster-admin access entries (the creator is admin already)."""
    public_access_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    """Who may reach the public API endpoint."""
    protect: bool = True
    """``protect`` the cluster, VPC and EFS file system against delete and replace."""
    ami_release_version: str | None = None
    """The EKS-optimized AMI release of every node group (``1.36.1-20260801``); None: EKS'
    latest for ``kubernetes_version`` whenever the version changes."""


@dataclass(frozen=True)
class SubnetPlan:
    zone: str
    public_cidr: str
    private_cidr: str


def system_pool() -> EKSNodePool:
    """The pool injected when none has role System: m6i.xlarge, 1 node, 1..2."""
    return EKSNodePool(
        name="system",
        role="System",
        instance_type=SYSTEM_INSTANCE_TYPE,
        node_count=1,
        min_node_count=1,
        max_node_count=2,
    )


def plan_subnets(
    region: str, pools: Sequence[EKSNodePool], networking: EKSNetworking
) -> list[SubnetPlan]:
    """One public and one private subnet per block, in the block's zone (module docstring)."""
    blocks = list(networking.subnet_cidrs)
    zones = list(networking.zones) or [f"{region}{chr(ord('a') + i)}" for i in range(len(blocks))]
    if len(zones) != len(blocks):
        raise ValueError(f"EKS networking: {len(zones)} zones for {len(blocks)} subnetCidrs blocks")
    missing = sorted({z for pool in pools for z in pool.zones if z not in zones})
    if missing:
        raise ValueError(
            f"EKS networking: zone(s) {', '.join(missing)} of the node pools have no "
            f"subnetCidrs block (the blocks are in {', '.join(zones)}, by position; append one)"
        )
    plans = []
    for zone, block in zip(zones, blocks, strict=True):
        public, private = ipaddress.ip_network(block).subnets(prefixlen_diff=1)
        plans.append(SubnetPlan(zone, str(public), str(private)))
    return plans


def control_plane_plans(plans: Sequence[SubnetPlan], networking: EKSNetworking) -> list[SubnetPlan]:
    """The blocks whose subnets the control plane uses: ``networking.control_plane_zones``,
    else the first three. AWS refuses control-plane subnets outside the Availability Zones the
    cluster was created in (EKS user guide, "View Amazon EKS networking requirements for VPC
    and subnets"), so a zone added later must not reach the cluster's ``vpcConfig``."""
    if not networking.control_plane_zones:
        return list(plans[:CONTROL_PLANE_BLOCKS])
    by_zone = {p.zone: p for p in plans}
    missing = [z for z in networking.control_plane_zones if z not in by_zone]
    if missing or len(networking.control_plane_zones) < 2:
        raise ValueError(
            f"EKS networking: controlPlaneZones {list(networking.control_plane_zones)} need "
            f"two or more zones with a subnetCidrs block (blocks in {', '.join(by_zone)})"
        )
    return [by_zone[z] for z in networking.control_plane_zones]
