"""The arguments of a GKECluster (components/cloud/gke.py) and the labels its pools carry.

Plain data, no cloud SDK at import: InferenceCluster builds these for every cluster it might
provision, and pulumi-gcp is only installed with modelplane's `gke` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from modelplane.components.cloud.pools import NodePoolShape

if TYPE_CHECKING:
    import pulumi_gcp as gcp

POOL_LABEL = "modelplane.ai/pool"
GPU_LABEL = "modelplane.ai/gpu"
NO_DEFAULT_DEVICE_PLUGIN_LABEL = "gke-no-default-nvidia-gpu-device-plugin"
"""GKE node label that stops GKE's own NVIDIA device plugin, so the DRA driver owns the GPUs."""
DRA_DRIVER_LABEL = "cloud.google.com/gke-nvidia-gpu-dra-driver"
"""Tells GKE's cluster autoscaler the pool's GPUs are published by the NVIDIA DRA driver, so it
can scale the pool up from zero for pods with ResourceClaims."""
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
DRIVER_INSTALLATION_DISABLED = "INSTALLATION_DISABLED"
GKE_NVIDIA_DRIVER_ROOT = "/home/kubernetes/bin/nvidia"
"""Where GKE installs the NVIDIA driver on COS nodes (the DRA driver's ``nvidiaDriverRoot``)."""

SYSTEM_MACHINE_TYPE = "e2-standard-4"
GKE_NAME_LIMIT = 40


@dataclass(frozen=True)
class GKEGpu:
    accelerator_type: str
    accelerator_count: int = 1
    driver_version: str = DRIVER_INSTALLATION_DISABLED
    """GKE-managed driver installation: INSTALLATION_DISABLED for DRA pools (the serving stack
    installs the driver); DEFAULT | LATEST only for device-plugin pools."""


@dataclass(frozen=True)
class GKEUpgrade:
    """A node pool's upgrade strategy. The default never takes a node down before its
    replacement is up (surge 1, unavailable 0): a GPU pool keeps serving through upgrades,
    its pods' PodDisruptionBudgets holding each eviction (GKE respects them for up to an
    hour). BLUE_GREEN creates the whole new set first, then drains one node at a time."""

    strategy: Literal["SURGE", "BLUE_GREEN"] = "SURGE"
    max_surge: int = 1
    max_unavailable: int = 0

    def args(self) -> gcp.container.NodePoolUpgradeSettingsArgs:
        import pulumi_gcp as gcp  # only where a GKE pool is built (the `gke` extra)

        if self.strategy == "BLUE_GREEN":
            return gcp.container.NodePoolUpgradeSettingsArgs(
                strategy="BLUE_GREEN",
                blue_green_settings=gcp.container.NodePoolUpgradeSettingsBlueGreenSettingsArgs(
                    standard_rollout_policy=(
                        gcp.container.NodePoolUpgradeSettingsBlueGreenSettingsStandardRolloutPolicyArgs(
                            batch_node_count=1
                        )
                    ),
                ),
            )
        return gcp.container.NodePoolUpgradeSettingsArgs(
            strategy="SURGE", max_surge=self.max_surge, max_unavailable=self.max_unavailable
        )


@dataclass(frozen=True)
class GKEMaintenanceWindow:
    """A recurring window (UTC, RFC 3339 times, RFC 5545 RRULE) outside which GKE does not
    upgrade the control plane or the nodes."""

    start: str
    end: str
    recurrence: str


@dataclass(frozen=True, kw_only=True)
class GKENodePool(NodePoolShape[GKEGpu]):
    cloud = "GKE"
    machine_type: str
    min_node_count: int = 0
    disk_type: str | None = None
    """Boot disk type (None: GKE's default)."""
    reservation: str | None = None
    """A specific reservation the nodes consume (name or projects/<p>/reservations/<name>)."""
    upgrade: GKEUpgrade = GKEUpgrade()
    """How GKE replaces the pool's nodes in an upgrade (default: surge 1, unavailable 0)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.min_node_count <= self.max_node_count:
            raise ValueError(
                f"GKE node pool {self.name!r}: minNodeCount {self.min_node_count} > "
                f"maxNodeCount {self.max_node_count}"
            )


@dataclass(frozen=True)
class GKENetworking:
    node_cidr: str = "10.0.0.0/24"
    pod_cidr: str = "10.1.0.0/16"
    service_cidr: str = "10.2.0.0/16"


@dataclass(frozen=True)
class GKEClusterArgs:
    project: str
    region: str
    node_pools: Sequence[GKENodePool] = ()
    kubernetes_version: str = "1.35"
    networking: GKENetworking = field(default_factory=GKENetworking)
    release_channel: str = "REGULAR"
    maintenance_window: GKEMaintenanceWindow | None = None
    """None: GKE may upgrade any time (still surge-first, see GKEUpgrade)."""
    manual_node_upgrades: bool = False
    """A maintenance exclusion (NO_MINOR_OR_NODE_UPGRADES, until the minor's end of support)
    keeps GKE from upgrading the nodes: the operator does, after draining the cluster. Needs
    ``maintenance_window`` (GKE's provider requires a window in a maintenance policy)."""
    protect: bool = True
    """GKE deletion protection plus Pulumi ``protect`` on the cluster and its network."""
    public_access_cidrs: tuple[str, ...] | None = None
    """Master authorized networks: who may reach the public endpoint (None: anyone)."""


def system_pool() -> GKENodePool:
    """The pool injected when none has role System: e2-standard-4, 1 node, autoscaling 1..2."""
    return GKENodePool(
        name="system",
        role="System",
        machine_type=SYSTEM_MACHINE_TYPE,
        node_count=1,
        min_node_count=1,
        max_node_count=2,
    )
