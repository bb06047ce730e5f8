"""GKECluster: a GKE Standard cluster with a system pool and DRA-ready GPU node pools.

Arguments follow the seeds' cluster reference (region, kubernetesVersion, networking,
nodePools with role System|GPU, machineType, gpu.acceleratorType/acceleratorCount, disk, node
counts, zones). Usable on its own in any Pulumi program; InferenceCluster composes it.

Node counts are per pool: GKE's ``initial_node_count`` is per zone, so a pool of N nodes over Z
zones starts with ceil(N / Z) per zone; autoscaling uses the pool-wide ``total_*`` limits.

GPU pools are DRA pools (GKE, "Prepare GKE infrastructure for DRA workloads"): GKE installs no
driver (``INSTALLATION_DISABLED``: automatic driver installation is not supported with DRA, and
``gke-no-default-nvidia-gpu-device-plugin`` would stop the managed install from completing), so
the serving stack applies Google's COS driver installer DaemonSet; the pool is labelled
``cloud.google.com/gke-nvidia-gpu-dra-driver=true`` and ``nvidia.com/gpu.present=true`` so that
GKE's cluster autoscaler models the ResourceSlices of a node that does not exist yet and scales
the pool up from zero.
"""

from __future__ import annotations

import json
import math

import pulumi
import pulumi_gcp as gcp

from modelplane.api.names import child_name
from modelplane.components.cloud.gke_args import (  # noqa: F401  (re-exported: gke's public names)
    DRA_DRIVER_LABEL,
    DRIVER_INSTALLATION_DISABLED,
    GKE_NAME_LIMIT,
    GKE_NVIDIA_DRIVER_ROOT,
    GPU_LABEL,
    GPU_PRESENT_LABEL,
    NO_DEFAULT_DEVICE_PLUGIN_LABEL,
    POOL_LABEL,
    SYSTEM_MACHINE_TYPE,
    GKEClusterArgs,
    GKEGpu,
    GKEMaintenanceWindow,
    GKENetworking,
    GKENodePool,
    GKEUpgrade,
    system_pool,
)
from modelplane.components.cloud.pools import with_system_pool


def gke_kubeconfig(name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig (JSON) authenticating with the ``gke-gcloud-auth-plugin`` exec plugin."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": f"https://{endpoint}",
                    "certificate-authority-data": ca_certificate,
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "users": [
            {
                "name": name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "gke-gcloud-auth-plugin",
                        "installHint": (
                            "Install gke-gcloud-auth-plugin: "
                            "https://cloud.google.com/kubernetes-engine/docs/how-to/"
                            "cluster-access-for-kubectl#install_plugin"
                        ),
                        "provideClusterInfo": True,
                    }
                },
            }
        ],
    }
    return json.dumps(config, indent=2)


class GKECluster(pulumi.ComponentResource):
    """VPC + subnet (pods/services secondary ranges), GKE cluster, system and GPU node pools.

    Outputs: ``kubeconfig`` (secret), ``cluster_name``, ``network_name``, ``endpoint``.
    """

    kubeconfig: pulumi.Output[str]
    cluster_name: pulumi.Output[str]
    network_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        args: GKEClusterArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        pools = with_system_pool("GKECluster", name, args.node_pools, system_pool)
        super().__init__("modelplane:cloud:GKECluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        net = args.networking
        cluster_name = child_name(name, limit=GKE_NAME_LIMIT)

        services = [
            gcp.projects.Service(
                f"{name}-{api.split('.')[0]}-api",
                project=args.project,
                service=api,
                disable_on_destroy=False,
                opts=child,
            )
            for api in ("container.googleapis.com", "file.googleapis.com")
        ]

        network = gcp.compute.Network(
            f"{name}-net",
            name=child_name(name, "net"),
            project=args.project,
            auto_create_subnetworks=False,
            opts=pulumi.ResourceOptions(parent=self, depends_on=services, protect=args.protect),
        )
        subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            name=child_name(name, "subnet"),
            project=args.project,
            region=args.region,
            network=network.id,
            ip_cidr_range=net.node_cidr,
            private_ip_google_access=True,
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(
                    range_name="pods", ip_cidr_range=net.pod_cidr
                ),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(
                    range_name="services", ip_cidr_range=net.service_cidr
                ),
            ],
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        cluster = gcp.container.Cluster(
            f"{name}-cluster",
            name=cluster_name,
            project=args.project,
            location=args.region,
            network=network.self_link,
            subnetwork=subnet.self_link,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name="pods",
                services_secondary_range_name="services",
            ),
            remove_default_node_pool=True,
            initial_node_count=1,
            deletion_protection=args.protect,
            min_master_version=args.kubernetes_version,
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=args.release_channel),
            maintenance_policy=_maintenance_policy(
                args.maintenance_window, args.manual_node_upgrades
            ),
            master_authorized_networks_config=(
                gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
                    cidr_blocks=[
                        gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                            cidr_block=cidr, display_name=f"modelplane-{i}"
                        )
                        for i, cidr in enumerate(args.public_access_cidrs)
                    ]
                )
                if args.public_access_cidrs is not None
                else None
            ),
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=f"{args.project}.svc.id.goog"
            ),
            addons_config=gcp.container.ClusterAddonsConfigArgs(
                gcp_filestore_csi_driver_config=(
                    gcp.container.ClusterAddonsConfigGcpFilestoreCsiDriverConfigArgs(enabled=True)
                ),
            ),
            # Dataplane V2 (Cilium): enforces the NetworkPolicies modelplane renders (security
            # M4). Immutable: a cluster created before keeps its datapath (ignored below,
            # never replaced by an `up`); docs/architecture.md "Cloud decisions" has the move.
            datapath_provider=DATAPATH_PROVIDER,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=services,
                protect=args.protect,
                ignore_changes=[DATAPATH_FIELD],
            ),
        )

        # The system node's zone: the GPU pools' alphabetically first zone, so reordering
        # pools (or adding one in a later zone) never moves it.
        gpu_zones = [z for p in pools if p.role == "GPU" for z in p.zones]
        first_gpu_zone = min(gpu_zones) if gpu_zones else None
        self.node_pools: dict[str, gcp.container.NodePool] = {}
        for pool in pools:
            self.node_pools[pool.name] = self._node_pool(
                name, pool, args, cluster, first_gpu_zone, child
            )

        self.cluster_name = cluster.name
        self.network_name = network.name
        # `projects/<project>/global/networks/<name>`: what a peering names the network by.
        self.network_id = network.id
        self.endpoint = cluster.endpoint
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(cluster.name, cluster.endpoint, cluster.master_auth).apply(
                lambda a: gke_kubeconfig(
                    f"gke_{args.project}_{args.region}_{a[0]}",
                    a[1],
                    _ca_certificate(a[2]),
                )
            )
        )
        self.register_outputs(
            {
                "kubeconfig": self.kubeconfig,
                "cluster_name": self.cluster_name,
                "network_name": self.network_name,
                "endpoint": self.endpoint,
            }
        )

    def _node_pool(
        self,
        name: str,
        pool: GKENodePool,
        args: GKEClusterArgs,
        cluster: gcp.container.Cluster,
        first_gpu_zone: str | None,
        opts: pulumi.ResourceOptions,
    ) -> gcp.container.NodePool:
        labels = {POOL_LABEL: pool.name}
        taints: list[gcp.container.NodePoolNodeConfigTaintArgs] = []
        accelerators: list[gcp.container.NodePoolNodeConfigGuestAcceleratorArgs] = []
        zones = list(pool.zones)
        if pool.role == "GPU":
            assert pool.gpu is not None
            labels[GPU_LABEL] = pool.gpu.accelerator_type
            labels[NO_DEFAULT_DEVICE_PLUGIN_LABEL] = "true"
            labels[DRA_DRIVER_LABEL] = "true"
            labels[GPU_PRESENT_LABEL] = "true"
            taints.append(
                gcp.container.NodePoolNodeConfigTaintArgs(
                    key="nvidia.com/gpu", value="present", effect="NO_SCHEDULE"
                )
            )
            accelerators.append(
                gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                    type=pool.gpu.accelerator_type,
                    count=pool.gpu.accelerator_count,
                    gpu_driver_installation_config=(
                        gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                            gpu_driver_version=pool.gpu.driver_version
                        )
                    ),
                )
            )
        elif not zones and first_gpu_zone:
            # One zone keeps the system pool at its 1..2 nodes (a regional pool would start
            # one node in every zone), next to the GPUs it serves.
            zones = [first_gpu_zone]
        count = min(max(pool.node_count, pool.min_node_count), pool.max_node_count)
        per_zone = math.ceil(count / len(zones)) if zones else count
        return gcp.container.NodePool(
            f"{name}-{pool.name}",
            name=pool.name,
            project=args.project,
            location=args.region,
            cluster=cluster.name,
            node_locations=zones or None,
            initial_node_count=per_zone,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=pool.min_node_count,
                total_max_node_count=pool.max_node_count,
                location_policy="ANY" if pool.role == "GPU" else "BALANCED",
            ),
            # A release channel (the cluster has one) keeps node auto-upgrade on: GKE rejects
            # turning it off. What keeps a serving pool safe is how (upgrade_settings) and
            # when (the cluster's maintenance window) it upgrades.
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            upgrade_settings=pool.upgrade.args(),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=pool.machine_type,
                disk_size_gb=pool.disk_size_gb,
                disk_type=pool.disk_type,
                reservation_affinity=(
                    gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                        consume_reservation_type="SPECIFIC_RESERVATION",
                        key="compute.googleapis.com/reservation-name",
                        values=[pool.reservation],
                    )
                    if pool.reservation
                    else None
                ),
                image_type="COS_CONTAINERD",
                labels=labels,
                taints=taints or None,
                guest_accelerators=accelerators or None,
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
            ),
            # nodeCount is the initial size; afterwards the autoscaler owns it. GKE replaces a
            # pool whose initial count changes, and the name is fixed, so delete first. The
            # system pool keeps the zone it was created in: a GPU pool added later in an
            # earlier-lettered zone would move it (and its node) otherwise.
            opts=pulumi.ResourceOptions.merge(
                opts,
                pulumi.ResourceOptions(
                    ignore_changes=[
                        "initialNodeCount",
                        *(["nodeLocations"] if pool.role == "System" else []),
                    ],
                    delete_before_replace=True,
                ),
            ),
        )


DATAPATH_PROVIDER = "ADVANCED_DATAPATH"
"""GKE Dataplane V2, which enforces NetworkPolicy (set at creation only)."""
DATAPATH_FIELD = "datapathProvider"

MANUAL_NODE_UPGRADES = "modelplane-manual-node-upgrades"
"""The maintenance exclusion that keeps GKE from upgrading the nodes (nodeUpgrades: Manual)."""
NO_NODE_UPGRADES = "NO_MINOR_OR_NODE_UPGRADES"
UNTIL_END_OF_SUPPORT = "UNTIL_END_OF_SUPPORT"


def _maintenance_policy(
    window: GKEMaintenanceWindow | None, manual_node_upgrades: bool = False
) -> gcp.container.ClusterMaintenancePolicyArgs | None:
    """The recurring window, and with ``manual_node_upgrades`` a persistent exclusion: GKE
    neither upgrades nor force-evicts serving nodes by itself (it respects a
    PodDisruptionBudget for an hour only, then evicts), until the minor's end of support;
    control-plane patches still happen inside the window."""
    if window is None:
        if manual_node_upgrades:
            raise ValueError("manual node upgrades need a maintenance window (GKE requires one)")
        return None
    exclusions = None
    if manual_node_upgrades:
        Exclusion = gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs
        Options = gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs
        exclusions = [
            Exclusion(
                exclusion_name=MANUAL_NODE_UPGRADES,
                start_time=window.start,
                exclusion_options=Options(
                    scope=NO_NODE_UPGRADES, end_time_behavior=UNTIL_END_OF_SUPPORT
                ),
            )
        ]
    return gcp.container.ClusterMaintenancePolicyArgs(
        recurring_window=gcp.container.ClusterMaintenancePolicyRecurringWindowArgs(
            start_time=window.start, end_time=window.end, recurrence=window.recurrence
        ),
        maintenance_exclusions=exclusions,
    )


def _ca_certificate(master_auth: object) -> str:
    """``master_auth.cluster_ca_certificate`` (base64 PEM), from the typed or the dict form."""
    if isinstance(master_auth, dict):
        value = master_auth.get("cluster_ca_certificate") or master_auth.get("clusterCaCertificate")
    else:
        value = getattr(master_auth, "cluster_ca_certificate", None)
    return str(value or "")
