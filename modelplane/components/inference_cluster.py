"""InferenceClusterComponent: one InferenceCluster, provisioned (GKE, EKS) or existing.

Composes the cloud cluster from the cluster's GPU pools and their InferenceClasses (the system
pool is injected by the cloud component), builds the one explicit Kubernetes provider for the
cluster, the ReadWriteMany StorageClass model caches use, and the serving stack.

- GKE: GKECluster; StorageClasses ``modelplane-rwx`` (Filestore zonal tier) and
  ``modelplane-rwx-regional`` (regional), on the cluster's VPC; DRA driver root
  ``/home/kubernetes/bin/nvidia``.
- EKS: EKSCluster; StorageClass ``modelplane-rwx-efs`` (EFS access points on its file system).
- Existing: nothing provisioned; the provider comes from ``kubeconfig`` (resolved from the
  secretRef by the stack program, passed as a secret) or, with ``renderTo``, writes manifests
  to that directory, in which case no serving stack is installed. ``storage_class_name`` is
  ``existing.cache.storageClassName``.

Outputs: ``kubeconfig`` (secret; an empty secret string in renderTo mode), ``render_to``,
``gateway_address``, ``storage_class_name``, ``pool_shapes``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import pulumi
import pulumi_kubernetes as kubernetes

from modelplane import fleet_pki
from modelplane.api.inference_class import EKSMachine, GKEMachine, InferenceClass
from modelplane.api.inference_cluster import InferenceCluster, InferenceClusterSpec, NodePool
from modelplane.api.maintenance import DEFAULT_GKE_WINDOW, EKS_DEFAULT_UNAVAILABLE, PoolUpgrade
from modelplane.components.charts import CLUSTER_AUTOSCALER_IMAGES

# The cloud components import their SDKs (modelplane's `gke` / `eks` extras): only a cluster
# on that cloud imports them; their arguments and labels are plain data.
from modelplane.components.cloud.eks_args import (
    POOL_LABEL,
    EKSCapacityBlock,
    EKSClusterArgs,
    EKSGpu,
    EKSNetworking,
    EKSNodePool,
)
from modelplane.components.cloud.eks_iam import AUTOSCALER_SERVICE_ACCOUNT
from modelplane.components.cloud.gke_args import (
    GKE_NVIDIA_DRIVER_ROOT,
    GKEClusterArgs,
    GKEGpu,
    GKEMaintenanceWindow,
    GKENetworking,
    GKENodePool,
    GKEUpgrade,
)
from modelplane.components.load_balancers import client_traffic_policy
from modelplane.components.model_cache import FILESTORE_CSI_TIERS, FILESTORE_STORAGE_CLASSES
from modelplane.components.providers import cluster_provider, render_directory
from modelplane.components.serving_stack import (
    GATEWAY_CLASS_NAME,
    HTTPS_PORT,
    SYSTEM_NAMESPACE,
    ServingStack,
    gateway_address,
    helm_release,
    workload_envoy_proxy,
    workload_gateway,
    workload_gateway_class,
)
from modelplane.components.workload.gateway_tls import (
    SERVER_SECRET,
    TRAEFIK_TLS_NAMESPACE,
    Certificates,
    certificates,
    tls_secret,
    workload_objects,
)
from modelplane.components.workload.objects import (
    app_labels,
    ensure_namespace,
    hand_off,
    register,
)

if TYPE_CHECKING:
    from modelplane.components.cloud.eks import EKSCluster
    from modelplane.components.cloud.gke import GKECluster

GKE_STORAGE_CLASS = "modelplane-rwx"
EKS_STORAGE_CLASS = "modelplane-rwx-efs"


def _class_of(
    cluster: InferenceCluster, pool: NodePool, classes: Mapping[str, InferenceClass]
) -> InferenceClass:
    cls = classes.get(pool.class_name)
    if cls is None:
        raise ValueError(
            f"InferenceCluster {cluster.metadata.name!r}: node pool {pool.name!r} uses "
            f"InferenceClass {pool.class_name!r}, which does not exist"
        )
    return cls


def _recipe(
    cluster: InferenceCluster, pool: NodePool, classes: Mapping[str, InferenceClass], cloud: str
) -> GKEMachine | EKSMachine:

    cls = _class_of(cluster, pool, classes)
    provisioning = cls.spec.provisioning
    recipe: GKEMachine | EKSMachine | None = None
    if provisioning is not None:
        recipe = provisioning.gke if cloud == "GKE" else provisioning.eks
    if provisioning is None or provisioning.provider != cloud or recipe is None:
        raise ValueError(
            f"InferenceCluster {cluster.metadata.name!r}: node pool {pool.name!r} uses "
            f"InferenceClass {pool.class_name!r}, which has no {cloud} provisioning recipe "
            f"(spec.provisioning.{cloud.lower()})"
        )
    return recipe


def _max_nodes(pool: NodePool) -> int:
    # The scheduler's capacity is maxNodeCount, else nodeCount; the cloud needs at least 1.
    return max(1, pool.capacity_nodes)


def _planned(cluster: InferenceCluster, value: str | None) -> str:
    """A network range the cluster's component builds: declared, or written in by the fleet
    address plan (``modelplane.network.with_addresses``, which the stack program applies)."""
    if value is None:
        raise ValueError(
            f"InferenceCluster {cluster.metadata.name} has no network ranges: apply the fleet "
            "address plan (modelplane.network.with_addresses with the lock's "
            "network.clusters entry) or declare spec.cluster networking"
        )
    return value


def gke_args(cluster: InferenceCluster, classes: Mapping[str, InferenceClass]) -> GKEClusterArgs:
    source = cluster.spec.cluster.gke
    assert source is not None
    pools = []
    for pool in cluster.spec.node_pools:
        recipe = _recipe(cluster, pool, classes, "GKE")
        assert isinstance(recipe, GKEMachine)
        pools.append(
            GKENodePool(
                name=pool.name,
                role="GPU",
                machine_type=recipe.machine_type,
                disk_size_gb=recipe.disk_size_gb,
                node_count=pool.node_count,
                min_node_count=pool.min_node_count or 0,
                max_node_count=_max_nodes(pool),
                gpu=GKEGpu(
                    accelerator_type=recipe.accelerator.type,
                    accelerator_count=recipe.accelerator.count,
                ),
                zones=tuple(pool.zones),
                disk_type=recipe.disk_type,
                reservation=recipe.reservation,
                upgrade=_gke_upgrade(pool.upgrade),
            )
        )
    net = source.networking
    maintenance = cluster.spec.maintenance
    manual = maintenance is None or maintenance.manual_node_upgrades
    window = maintenance.window if maintenance is not None else None
    if window is None and manual:
        window = DEFAULT_GKE_WINDOW  # GKE needs a window beside the exclusion
    return GKEClusterArgs(
        project=source.project,
        region=source.region,
        node_pools=pools,
        kubernetes_version=source.kubernetes_version,
        networking=GKENetworking(
            node_cidr=_planned(cluster, net.node_cidr),
            pod_cidr=_planned(cluster, net.pod_cidr),
            service_cidr=_planned(cluster, net.service_cidr),
        ),
        maintenance_window=(
            GKEMaintenanceWindow(window.start, window.end, window.recurrence) if window else None
        ),
        manual_node_upgrades=manual,
        public_access_cidrs=(
            tuple(source.public_access_cidrs) if source.public_access_cidrs is not None else None
        ),
        protect=source.protect,
    )


def _gke_upgrade(upgrade: PoolUpgrade | None) -> GKEUpgrade:
    """A pool's upgrade settings (api.maintenance: surge 1, unavailable 0 by default)."""
    if upgrade is None:
        return GKEUpgrade()
    if upgrade.strategy == "BlueGreen":
        return GKEUpgrade(strategy="BLUE_GREEN")
    surge, unavailable = upgrade.gke()
    return GKEUpgrade(max_surge=surge, max_unavailable=unavailable)


def eks_args(cluster: InferenceCluster, classes: Mapping[str, InferenceClass]) -> EKSClusterArgs:
    source = cluster.spec.cluster.eks
    assert source is not None
    pools = []
    for pool in cluster.spec.node_pools:
        recipe = _recipe(cluster, pool, classes, "EKS")
        assert isinstance(recipe, EKSMachine)
        pools.append(
            EKSNodePool(
                name=pool.name,
                role="GPU",
                instance_type=recipe.instance_type,
                disk_size_gb=recipe.disk_size_gb,
                node_count=pool.node_count,
                # DRA pools cannot scale up from zero on AWS: at least 1 (validation rejects 0;
                # a Capacity Block group's size follows its block instead).
                min_node_count=pool.min_node_count if pool.min_node_count is not None else 1,
                max_node_count=_max_nodes(pool),
                gpu=EKSGpu(accelerator_type=recipe.accelerator.type),
                zones=tuple(pool.zones),
                capacity_block=(
                    EKSCapacityBlock(pool.capacity_block.capacity_reservation_id)
                    if pool.capacity_block is not None
                    else None
                ),
                fabric=pool.fabric,
                max_unavailable=(
                    pool.upgrade.max_unavailable
                    if pool.upgrade is not None and pool.upgrade.max_unavailable is not None
                    else EKS_DEFAULT_UNAVAILABLE
                ),
            )
        )
    return EKSClusterArgs(
        region=source.region,
        node_pools=pools,
        kubernetes_version=source.kubernetes_version,
        networking=EKSNetworking(
            vpc_cidr=_planned(cluster, source.networking.vpc_cidr),
            subnet_cidrs=tuple(source.networking.subnet_cidrs or ()),  # set with vpc_cidr
            service_cidr=source.networking.service_cidr,
            zones=tuple(source.networking.zones),
            nat_gateways=source.networking.nat_gateways,
            control_plane_zones=tuple(source.networking.control_plane_zones),
        ),
        cluster_name=cluster.metadata.name,
        admin_principal_arns=tuple(source.admin_principals),
        public_access_cidrs=tuple(source.public_access_cidrs),
        protect=source.protect,
        ami_release_version=source.ami_release_version,
    )


def pool_shapes(
    cluster: InferenceCluster, classes: Mapping[str, InferenceClass]
) -> list[dict[str, Any]]:
    """Per pool: its name, node capacity and the devices of one node (from its class)."""
    shapes = []
    for pool in cluster.spec.node_pools:
        cls = _class_of(cluster, pool, classes)
        shapes.append(
            {
                "name": pool.name,
                "nodes": pool.capacity_nodes,
                "devices": [
                    {"name": d.name, "driver": d.driver, "claim": d.claim, "count": d.count}
                    for d in cls.spec.devices
                ],
            }
        )
    return shapes


class InferenceClusterComponent(pulumi.ComponentResource):
    """See the module docstring. ``self.provider`` is the cluster's Kubernetes provider."""

    provider: kubernetes.Provider
    kubeconfig: pulumi.Output[str]
    render_to: str | None
    gateway_address: pulumi.Output[str | None]
    storage_class_name: str | None
    pool_shapes: list[dict[str, Any]]

    def __init__(
        self,
        name: str,
        cluster: InferenceCluster,
        classes: Mapping[str, InferenceClass],
        kubeconfig: pulumi.Input[str] | None = None,
        fleet_ca: pulumi.Input[str] | None = None,
        certificate_generation: int = 0,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        spec = cluster.spec
        source = spec.cluster.source
        # Validate everything before registering anything.
        shapes = pool_shapes(cluster, classes)
        gke = gke_args(cluster, classes) if source == "GKE" else None
        eks = eks_args(cluster, classes) if source == "EKS" else None
        existing = spec.cluster.existing
        render_to = (
            os.path.abspath(os.path.expanduser(existing.render_to))
            if source == "Existing" and existing is not None and existing.render_to
            else None
        )
        if source == "Existing" and render_to is None and kubeconfig is None:
            raise ValueError(
                f"InferenceCluster {cluster.metadata.name!r}: an Existing cluster without "
                "renderTo needs its kubeconfig (resolve existing.secretRef and pass it)"
            )

        super().__init__("modelplane:cluster:InferenceCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.pool_shapes = shapes
        # As the provider records it (relative to the program's folder): no machine path.
        self.render_to = render_directory(render_to) if render_to is not None else None
        self.cloud: GKECluster | EKSCluster | None = None
        gke_cloud: GKECluster | None = None
        eks_cloud: EKSCluster | None = None
        driver_root = "/"

        # What a path to another cluster needs of this one (modelplane/components/network/sides.py).
        self.network: dict[str, Any] | None = None
        if gke is not None:
            from modelplane.components.cloud.gke import GKECluster

            gke_cloud = GKECluster(name, gke, opts=child)
            self.cloud = gke_cloud
            self.kubeconfig = gke_cloud.kubeconfig
            driver_root = GKE_NVIDIA_DRIVER_ROOT
            net = gke.networking
            self.network = {
                "cloud": "GCP",
                "project": gke.project,
                "region": gke.region,
                "network": gke_cloud.network_id,
                "ranges": [net.node_cidr, net.pod_cidr, net.service_cidr],
            }
        elif eks is not None:
            from modelplane.components.cloud.eks import EKSCluster

            eks_cloud = EKSCluster(name, eks, opts=child)
            self.cloud = eks_cloud
            self.kubeconfig = eks_cloud.kubeconfig
            self.network = {
                "cloud": "AWS",
                "region": eks.region,
                "vpcId": eks_cloud.vpc_id,
                "vpcCidr": eks.networking.vpc_cidr,
                "routeTableIds": [t.id for t in eks_cloud.private_route_tables],
            }
        elif render_to is not None:
            self.kubeconfig = pulumi.Output.secret("")
        else:
            assert kubeconfig is not None
            self.kubeconfig = pulumi.Output.secret(kubeconfig)

        # On a provisioned cluster the provider waits for the whole cloud cluster, node pools
        # included: everything applied through it (Helm waits for the charts' pods, which need
        # nodes) comes after, and is removed before the nodes go.
        self.provider = cluster_provider(
            f"{name}-k8s",
            kubeconfig=None if render_to is not None else self.kubeconfig,
            render_to=render_to,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.cloud] if self.cloud is not None else None
            ),
        )
        k8s_child = pulumi.ResourceOptions(parent=self, provider=self.provider)

        self.storage_class: kubernetes.storage.v1.StorageClass | None = None
        if gke_cloud is not None:
            # One class per Filestore tier a ModelCache may ask for (model_cache.py sizes each
            # cache's instance for its throughput); Zonal keeps the historical name.
            self.filestore_classes = {
                tier: kubernetes.storage.v1.StorageClass(
                    f"{name}-{class_name}",
                    metadata={
                        "name": class_name,
                        "labels": app_labels("model-cache", class_name, "storage-class"),
                    },
                    provisioner="filestore.csi.storage.gke.io",
                    parameters={
                        "tier": FILESTORE_CSI_TIERS[tier],
                        "network": gke_cloud.network_name,
                    },
                    reclaim_policy="Delete",
                    volume_binding_mode="Immediate",
                    allow_volume_expansion=True,
                    opts=k8s_child,
                )
                for tier, class_name in FILESTORE_STORAGE_CLASSES.items()
            }
            self.storage_class = self.filestore_classes["Zonal"]
            self.storage_class_name = GKE_STORAGE_CLASS
        elif eks_cloud is not None:
            self.storage_class = kubernetes.storage.v1.StorageClass(
                f"{name}-{EKS_STORAGE_CLASS}",
                metadata={
                    "name": EKS_STORAGE_CLASS,
                    "labels": app_labels("model-cache", EKS_STORAGE_CLASS, "storage-class"),
                },
                provisioner="efs.csi.aws.com",
                parameters={
                    "provisioningMode": "efs-ap",
                    "fileSystemId": eks_cloud.file_system_id,
                    "directoryPerms": "700",
                },
                reclaim_policy="Delete",
                volume_binding_mode="Immediate",
                opts=pulumi.ResourceOptions.merge(
                    k8s_child,
                    pulumi.ResourceOptions(depends_on=[*eks_cloud.mount_targets.values()]),
                ),
            )
            self.storage_class_name = EKS_STORAGE_CLASS
        else:
            cache = existing.cache if existing is not None else None
            self.storage_class_name = cache.storage_class_name if cache is not None else None

        self.autoscaler: kubernetes.helm.v3.Release | None = None
        if eks_cloud is not None and eks_cloud.autoscaler_identity is not None:
            assert eks is not None
            self.autoscaler = self._autoscaler(
                name, eks_cloud, spec, eks.kubernetes_version, k8s_child
            )

        self.efa_device_plugin: kubernetes.helm.v3.Release | None = None
        if eks_cloud is not None and any(p.fabric == "EFA" for p in spec.node_pools):
            self.efa_device_plugin = self._efa_device_plugin(name, spec, k8s_child)

        # An Existing cluster the platform connects privately (api.md "Paths").
        network = existing.network if existing is not None else None
        private_to = list(network.connected_to) if network is not None else []
        # The workload gateway's server certificate (gateway_tls.py): where it has a
        # controller to serve it (never in a renderTo folder, which holds no key).
        certs = (
            certificates(
                fleet_ca,
                name=cluster.metadata.name,
                role="server",
                dns_names=[fleet_pki.server_name(cluster.metadata.name)],
                generation=certificate_generation,
            )
            if fleet_ca is not None and render_to is None
            else None
        )
        self.serving_stack: ServingStack | None = None
        if spec.serving_stack.install and render_to is None:
            self.serving_stack = ServingStack(
                f"{name}-serving",
                spec.serving_stack,
                provider=self.provider,
                nvidia_driver_root=driver_root,
                gke_driver_installer=gke is not None,
                owns_network=self.cloud is not None,
                cloud=source if self.cloud is not None else None,
                private_to=private_to,
                certificates=certs,
                opts=child,
            )
            self.gateway_address = self.serving_stack.gateway_address
        elif spec.serving_stack.gateway is not None and render_to is None:
            # The platform runs the gateway controller; modelplane owns the workload Gateway.
            own = spec.serving_stack.gateway
            namespace = ensure_namespace(SYSTEM_NAMESPACE, k8s_child, scope=name)
            tls_objects = self._gateway_tls(name, own.controller, certs, namespace, k8s_child)
            self.workload_gateway = workload_gateway(
                name,
                own.class_name,
                own.port,
                pulumi.ResourceOptions.merge(
                    k8s_child,
                    pulumi.ResourceOptions(
                        depends_on=[*([namespace] if namespace else []), *tls_objects]
                    ),
                ),
                private_to=private_to,
            )
            self.gateway_address = gateway_address(self.workload_gateway, own.port)
        elif spec.serving_stack.install or spec.serving_stack.gateway is not None:
            # renderTo: nothing to install into, but the rendered directory is the cluster's
            # hand-off, so it holds the workload Gateway the replicas' routes attach to (and the
            # installed stack's GatewayClass); no address until a controller programs it.
            render_own = spec.serving_stack.gateway
            namespace = ensure_namespace(SYSTEM_NAMESPACE, k8s_child, scope=name)
            after: list[pulumi.Resource] = [namespace] if namespace else []
            if render_own is None:
                after.append(workload_gateway_class(name, k8s_child))
                # The installed stack's Gateway names its EnvoyProxy (two proxies, m8).
                after.append(
                    workload_envoy_proxy(
                        name,
                        pulumi.ResourceOptions.merge(
                            k8s_child,
                            pulumi.ResourceOptions(depends_on=[namespace] if namespace else []),
                        ),
                    )
                )
            # The listener's certificate: its name, type and keys, never a value (a rendered
            # folder holds no key); the platform makes it (api.md "Mutual TLS between the
            # gateways").
            certificate = hand_off(
                tls_secret(
                    SERVER_SECRET,
                    SYSTEM_NAMESPACE,
                    app_labels("inference-gateway", "inference-gateway", "gateway-tls"),
                    "",
                    "",
                )
            )
            after.append(
                register(
                    certificate,
                    pulumi.ResourceOptions.merge(
                        k8s_child,
                        pulumi.ResourceOptions(depends_on=[namespace] if namespace else []),
                    ),
                    scope=name,
                )
            )
            self.workload_gateway = workload_gateway(
                name,
                render_own.class_name if render_own is not None else GATEWAY_CLASS_NAME,
                render_own.port if render_own is not None else HTTPS_PORT,
                pulumi.ResourceOptions.merge(k8s_child, pulumi.ResourceOptions(depends_on=after)),
                await_address=False,
                cloud=source if render_own is None else None,
                envoy_proxy=render_own is None,
                private_to=private_to,
            )
            self.gateway_address = pulumi.Output.from_input(None)
        else:
            self.gateway_address = pulumi.Output.from_input(None)

        self.register_outputs(
            {
                "kubeconfig": self.kubeconfig,
                "render_to": self.render_to,
                "gateway_address": self.gateway_address,
                "storage_class_name": self.storage_class_name,
                "pool_shapes": self.pool_shapes,
                "network": self.network,
            }
        )

    @staticmethod
    def _efa_device_plugin(
        name: str, spec: InferenceClusterSpec, opts: pulumi.ResourceOptions
    ) -> kubernetes.helm.v3.Release:
        """The AWS EFA device plugin: each EFA node advertises its interfaces as the extended
        resource `vpc.amazonaws.com/efa`, which pods of classes that declare them as an
        ExtendedResource device request (docs/api.md). It tolerates the GPU taint."""
        return helm_release(
            name,
            "awsEfaDevicePlugin",
            spec.serving_stack.versions,
            spec.serving_stack.chart_repository,
            create_namespace=False,
            values={
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ]
            },
            opts=opts,
        )

    def _gateway_tls(
        self,
        name: str,
        controller: Literal["Traefik", "EnvoyGateway"] | None,
        certs: Certificates | None,
        namespace: pulumi.Resource | None,
        opts: pulumi.ResourceOptions,
    ) -> list[pulumi.Resource]:
        """A platform-run controller's side of the mutual TLS (gateway_tls.py): the server
        certificate, and for a controller modelplane configures, the client certificates it
        requires (Envoy Gateway: a ClientTrafficPolicy; Traefik: its default TLSOption)."""
        if certs is None:
            return []
        after = [namespace] if namespace else []
        object_labels = app_labels("inference-gateway", "inference-gateway", "gateway-tls")
        out: list[pulumi.Resource] = []
        if controller == "Traefik":
            hop_ns = ensure_namespace(TRAEFIK_TLS_NAMESPACE, opts, scope=name)
            after += [hop_ns] if hop_ns else []
        manifests = workload_objects(
            controller or "EnvoyGateway", certs, SYSTEM_NAMESPACE, object_labels
        )
        if controller == "EnvoyGateway":
            manifests.append(
                client_traffic_policy(
                    "inference-gateway",
                    SYSTEM_NAMESPACE,
                    app_labels("inference-gateway", "inference-gateway", "gateway-timeouts"),
                    client_validation=True,
                )
            )
        elif controller is None:
            manifests = manifests[-1:]  # the server certificate alone
        in_order = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=after))
        for manifest in manifests:
            out.append(register(manifest, in_order, scope=name))
        return out

    @staticmethod
    def _autoscaler(
        name: str,
        cloud: EKSCluster,
        spec: InferenceClusterSpec,
        kubernetes_version: str,
        opts: pulumi.ResourceOptions,
    ) -> kubernetes.helm.v3.Release:
        """cluster-autoscaler on the system pool, discovering this cluster's node groups, with
        its AWS permissions through the Pod Identity association (docs/architecture.md); its
        image is the release for the cluster's Kubernetes minor (the chart's default is not)."""
        image = CLUSTER_AUTOSCALER_IMAGES.get(kubernetes_version)
        return helm_release(
            name,
            "clusterAutoscaler",
            spec.serving_stack.versions,
            spec.serving_stack.chart_repository,
            create_namespace=False,
            values={
                "cloudProvider": "aws",
                "awsRegion": cloud.region,
                "autoDiscovery": {"clusterName": cloud.cluster_name},
                "rbac": {"serviceAccount": {"create": True, "name": AUTOSCALER_SERVICE_ACCOUNT}},
                "nodeSelector": {POOL_LABEL: "system"},
                **({"image": {"tag": image}} if image else {}),
                "extraArgs": {
                    "balance-similar-node-groups": True,
                    # GPU pods claim their devices through DRA (ResourceClaims).
                    "enable-dynamic-resource-allocation": True,
                },
            },
            opts=pulumi.ResourceOptions.merge(
                opts,
                pulumi.ResourceOptions(
                    depends_on=[cloud.autoscaler_identity] if cloud.autoscaler_identity else []
                ),
            ),
        )
