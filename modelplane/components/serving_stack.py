"""ServingStack: what every workload cluster runs under the model replicas.

Helm releases (real installs, ``kubernetes.helm.v3.Release``, fixed names ``mp-<chart>``):
cert-manager (its CRDs on), Envoy Gateway (Backend extension API on, Envoy AI Gateway as its
extension server so HTTPRoutes can target GAIE InferencePools), Envoy AI Gateway (CRDs +
controller), kube-prometheus-stack (Grafana and Alertmanager off), LeaderWorkerSet,
node-feature-discovery (its worker tolerates the GPU taint), the NVIDIA DRA driver (GKE's
driver root on GKE) and KEDA. Versions and repositories come from ``modelplane.components.charts``.

On GKE the GPU pools get no driver from GKE (DRA pools use ``INSTALLATION_DISABLED``), so the
stack first applies Google's COS NVIDIA driver installer DaemonSet (vendored unmodified under
``components/manifests``; it tolerates every taint, the GPU taint included) and installs the
DRA driver after it: the DRA kubelet plugin publishes no ResourceSlices without a driver.

Gateway API (standard channel) and the Gateway API Inference Extension have no Helm chart in
the reference facts: their upstream CRDs are vendored under ``modelplane/crds/`` and applied with
``kubernetes.yaml.v2.ConfigGroup`` (files resolved to absolute paths inside the repository).
Envoy Gateway's chart also carries Gateway API CRDs; Helm skips CRDs that already exist, so the
vendored bundle, applied first, is the one in force.

On GKE and EKS, Envoy Gateway's namespace is a ``Namespace`` this stack owns
(``load_balancer_namespace``), so ``destroy`` waits there until the cloud load balancers of
the Gateways' proxy Services are gone, before the cloud network is deleted
(docs/architecture.md, "Load balancers on teardown").

Then the workload gateway: GatewayClass ``envoy`` (Envoy Gateway's controller) and Gateway
``inference-gateway`` in ``modelplane-system`` (HTTP 80, routes from all namespaces), created
after the CRDs and the controllers that serve them. ``gateway_address`` is the Gateway's first
status address (the Gateway waits until it has one).

Every replica of the cluster is reached through that Gateway's Envoy proxy, so the Gateway names
an ``EnvoyProxy`` (``envoy_proxy_manifest``, cloud review m8) in its
``spec.infrastructure.parametersRef``: ``PROXY_REPLICAS`` proxies, preferably on different
nodes (and spread over zones where the nodes are), and a PodDisruptionBudget that lets a drain
take one at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
import yaml

from modelplane.api.inference_cluster import ServingStackOptions
from modelplane.components.charts import (
    CHARTS,
    check_version_keys,
    crd_files,
    resolve_chart,
)
from modelplane.components.load_balancers import (
    ENVOY_GROUP,
    INTERNAL_LB_ANNOTATIONS,
    client_traffic_policy,
    service_annotations,
)
from modelplane.components.manifests import GKE_NVIDIA_DRIVER_INSTALLER
from modelplane.components.workload.gateway_tls import (
    Certificates,
    https_listener,
    workload_objects,
)
from modelplane.components.workload.objects import (
    ROUTES_FROM,
    Manifest,
    app_labels,
    ensure_namespace,
    metadata,
    register,
)
from modelplane.observe.prometheus import engine_scrape_job

SYSTEM_NAMESPACE = "modelplane-system"
GATEWAY_NAME = "inference-gateway"
GATEWAY_CLASS_NAME = "envoy"
HTTPS_PORT = 443
"""The installed workload Gateway's listener (HTTPS, mutual TLS: gateway_tls.py)."""
GATEWAY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
AI_GATEWAY_CONTROLLER = "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
RELEASE_TIMEOUT_SECONDS = 900

PROXY_REPLICAS = 2
"""Envoy proxies per Envoy Gateway Gateway (workload gateways, an Envoy front door): one can
be drained, repaired or rolled while the other serves (cloud review m8)."""
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
ZONE_TOPOLOGY = "topology.kubernetes.io/zone"


def helm_release(
    prefix: str,
    key: str,
    versions: Mapping[str, str],
    chart_repository: str,
    *,
    values: Mapping[str, Any],
    create_namespace: bool,
    opts: pulumi.ResourceOptions,
) -> kubernetes.helm.v3.Release:
    """The Helm release of catalogue chart `key` (modelplane/components/charts.py), named
    `<prefix>-<release>`, at the version the cluster pins."""
    chart = resolve_chart(key, versions, chart_repository)
    return kubernetes.helm.v3.Release(
        f"{prefix}-{chart.spec.release_name}",
        name=chart.spec.release_name,
        chart=chart.chart,
        version=chart.version,
        repository_opts=(
            kubernetes.helm.v3.RepositoryOptsArgs(repo=chart.repository)
            if chart.repository
            else None
        ),
        namespace=chart.spec.namespace,
        create_namespace=create_namespace,
        values=dict(values),
        timeout=RELEASE_TIMEOUT_SECONDS,
        opts=opts,
    )


def _envoy_gateway_values() -> dict[str, Any]:
    return {
        "config": {
            "envoyGateway": {
                "extensionApis": {"enableBackend": True},
                "extensionManager": {
                    "hooks": {
                        "xdsTranslator": {
                            "translation": {
                                part: {"includeAll": True}
                                for part in ("listener", "route", "cluster", "secret")
                            },
                            "post": ["Translation", "Cluster", "Route"],
                        }
                    },
                    "service": {"fqdn": {"hostname": AI_GATEWAY_CONTROLLER, "port": 1063}},
                    "backendResources": [
                        {
                            "group": "inference.networking.k8s.io",
                            "kind": "InferencePool",
                            "version": "v1",
                        }
                    ],
                },
            }
        }
    }


def _prometheus_values() -> dict[str, Any]:
    envoy_proxy_job = {
        "job_name": "envoy-gateway-proxy",
        "metrics_path": "/stats/prometheus",
        "kubernetes_sd_configs": [
            {"role": "pod", "namespaces": {"names": ["envoy-gateway-system"]}}
        ],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_component"],
                "regex": "proxy",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                "regex": "19001",
                "action": "keep",
            },
        ],
    }
    return {
        "fullnameOverride": "prometheus",
        "grafana": {"enabled": False},
        "alertmanager": {"enabled": False},
        "prometheus": {
            "prometheusSpec": {
                # Pick up PodMonitors/ServiceMonitors from every namespace, not only the
                # chart's own release label.
                "podMonitorSelectorNilUsesHelmValues": False,
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorNamespaceSelector": {},
                "serviceMonitorNamespaceSelector": {},
                # The serving engines' vLLM metrics, read by `reconcile` for autoscaling.
                "additionalScrapeConfigs": [envoy_proxy_job, engine_scrape_job()],
            }
        },
    }


def _dra_driver_values(nvidia_driver_root: str) -> dict[str, Any]:
    # The chart's default node affinity relies on NFD's NVIDIA PCI label (missing on some GKE
    # nodes); modelplane's GPU pools also carry modelplane.ai/gpu, so accept either.
    affinity_terms = [
        {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        for key, value in (
            ("feature.node.kubernetes.io/pci-10de.present", "true"),
            ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"),
            ("nvidia.com/gpu.present", "true"),
        )
    ] + [{"matchExpressions": [{"key": "modelplane.ai/gpu", "operator": "Exists"}]}]
    return {
        "nvidiaDriverRoot": nvidia_driver_root,
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        "kubeletPlugin": {
            "tolerations": [GPU_TOLERATION],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": affinity_terms
                    }
                }
            },
        },
    }


def chart_values(key: str, *, nvidia_driver_root: str = "/") -> dict[str, Any]:
    """The Helm values modelplane sets for chart ``key``."""
    if key == "certManager":
        return {"crds": {"enabled": True, "keep": False}}
    if key == "envoyGateway":
        return _envoy_gateway_values()
    if key == "prometheus":
        return _prometheus_values()
    if key == "nodeFeatureDiscovery":
        return {"worker": {"tolerations": [GPU_TOLERATION]}}
    if key == "nvidiaDraDriver":
        return _dra_driver_values(nvidia_driver_root)
    return {}


def gke_driver_installer_manifest() -> dict[str, Any]:
    """Google's COS NVIDIA driver installer DaemonSet: the vendored upstream manifest, with
    modelplane's recommended labels added."""
    manifest = yaml.safe_load(GKE_NVIDIA_DRIVER_INSTALLER.read_text())
    if not isinstance(manifest, dict) or manifest.get("kind") != "DaemonSet":
        raise ValueError(f"{GKE_NVIDIA_DRIVER_INSTALLER}: not a DaemonSet manifest")
    # Plus modelplane's recommended labels (object and pod template; never the selector).
    ours = app_labels("nvidia-driver-installer", "nvidia-driver-installer", "gpu-driver")
    for meta in (manifest["metadata"], manifest["spec"]["template"]["metadata"]):
        meta["labels"] = {**meta.get("labels", {}), **ours}
    return manifest


LB_CLEANUP_TIMEOUT = "30m"
"""How long destroy waits for a load-balancer namespace to be gone (its cloud LBs deleted)."""


def load_balancer_namespace(
    name: str, namespace: str, opts: pulumi.ResourceOptions
) -> kubernetes.core.v1.Namespace:
    """The namespace where a controller creates ``type: LoadBalancer`` Services, owned by this
    stack (a plain ``Namespace``, not Helm's ``create_namespace``) so that ``destroy`` waits
    for their cloud load balancers to be gone before the network goes.

    The cloud LBs (an ELB/NLB with its security group and ENIs on AWS; forwarding and firewall
    rules on GCP) are not Pulumi resources: Envoy Gateway creates the proxy Service per
    Gateway, and the cloud's service controller deletes the LB only after the Service is
    deleted, asynchronously. A LoadBalancer Service carries the finalizer
    ``service.kubernetes.io/load-balancer-cleanup`` until its LB is gone, a namespace is not
    gone before its objects are, and pulumi-kubernetes waits for a deleted Namespace to
    disappear. The namespace uses the cluster's provider, which depends on the whole cloud
    cluster (VPC, subnets, NAT), so Pulumi deletes it, and waits, before any of those.
    """
    return kubernetes.core.v1.Namespace(
        f"{name}-ns-{namespace}",
        metadata=kubernetes.meta.v1.ObjectMetaArgs(
            name=namespace,
            labels=app_labels("inference-gateway", namespace, "load-balancer-namespace"),
        ),
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(
                custom_timeouts=pulumi.CustomTimeouts(delete=LB_CLEANUP_TIMEOUT)
            ),
        ),
    )


def _first_address(status: Any) -> str | None:
    if not isinstance(status, Mapping):
        return None
    for address in status.get("addresses") or []:
        if isinstance(address, Mapping) and address.get("value"):
            return str(address["value"])
    return None


def proxy_pod_labels(gateway: str, namespace: str) -> dict[str, str]:
    """The labels Envoy Gateway puts on the proxy pods of Gateway ``namespace/gateway`` (its
    Deployment's selector; envoyproxy/gateway v1.8.3 ``EnvoyAppLabel`` plus the owning-gateway
    labels, internal/infrastructure/kubernetes/proxy)."""
    return {
        "app.kubernetes.io/name": "envoy",
        "app.kubernetes.io/component": "proxy",
        "app.kubernetes.io/managed-by": "envoy-gateway",
        f"{ENVOY_GROUP}/owning-gateway-name": gateway,
        f"{ENVOY_GROUP}/owning-gateway-namespace": namespace,
    }


def envoy_proxy_name(gateway: str) -> str:
    """The EnvoyProxy of Gateway ``gateway`` (in the Gateway's namespace)."""
    return f"{gateway}-proxy"


def envoy_proxy_ref(gateway: str) -> dict[str, str]:
    """A Gateway's ``spec.infrastructure.parametersRef`` to its EnvoyProxy (same namespace)."""
    return {"group": ENVOY_GROUP, "kind": "EnvoyProxy", "name": envoy_proxy_name(gateway)}


def envoy_proxy_manifest(
    gateway: str, namespace: str, object_labels: Mapping[str, str]
) -> Manifest:
    """The EnvoyProxy ``<gateway>-proxy`` the Gateway names in ``spec.infrastructure
    .parametersRef`` (Envoy Gateway v1.8, "Customize EnvoyProxy"; the Gateway's reference
    outranks the GatewayClass's and the default, and is namespace-local).

    - ``PROXY_REPLICAS`` proxies (Envoy Gateway's default is 1: every request of the cluster
      through one pod).
    - Anti-affinity on the node, *preferred*: the system pools that hold the proxies (GPU
      nodes are tainted) start at 1 node (GKE e2-standard-4, EKS m6i.xlarge, 1..2 nodes), where
      a required term would leave the second proxy Pending, and the cluster autoscaler adds
      no node for a preferred term; an Existing cluster's pools are unknown. On 2+ nodes the
      scheduler puts them apart. A zone spread (``ScheduleAnyway``) does the same across
      zones, where the system nodes span several (EKS' system group is in the control plane's
      zones).
    - ``envoyPDB`` ``maxUnavailable: 1``: a drain (node upgrade, repair, scale-down) evicts
      one proxy at a time, the next once the first's replacement is Ready.

    Nothing on the Service: the load balancer's annotations stay the Gateway's
    ``spec.infrastructure.annotations`` (Envoy Gateway copies them onto the Service, then
    ``envoyService.annotations`` over them; this sets none)."""
    selector = {"matchLabels": proxy_pod_labels(gateway, namespace)}
    pod = {
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": selector,
                            "topologyKey": HOSTNAME_TOPOLOGY,
                        },
                    }
                ]
            }
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": ZONE_TOPOLOGY,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": selector,
            }
        ],
    }
    return {
        "apiVersion": f"{ENVOY_GROUP}/v1alpha1",
        "kind": "EnvoyProxy",
        "metadata": metadata(envoy_proxy_name(gateway), namespace, object_labels),
        "spec": {
            "provider": {
                "type": "Kubernetes",
                "kubernetes": {
                    "envoyDeployment": {"replicas": PROXY_REPLICAS, "pod": pod},
                    "envoyPDB": {"maxUnavailable": 1},
                },
            }
        },
    }


def workload_envoy_proxy(name: str, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """The workload Gateway's EnvoyProxy (``envoy_proxy_manifest``), in ``modelplane-system``.
    Create it before the Gateway that names it (Envoy Gateway's advice) and after Envoy
    Gateway's chart (its CRD)."""
    proxy = envoy_proxy_manifest(
        GATEWAY_NAME,
        SYSTEM_NAMESPACE,
        app_labels("inference-gateway", GATEWAY_NAME, "envoy-proxy"),
    )
    return kubernetes.apiextensions.CustomResource(
        f"{name}-envoy-proxy",
        api_version=proxy["apiVersion"],
        kind=proxy["kind"],
        metadata=proxy["metadata"],
        spec=proxy["spec"],
        opts=opts,
    )


def workload_gateway_class(name: str, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """The installed stack's GatewayClass ``envoy`` (Envoy Gateway's controller)."""
    return kubernetes.apiextensions.CustomResource(
        f"{name}-gatewayclass",
        api_version="gateway.networking.k8s.io/v1",
        kind="GatewayClass",
        metadata={
            "name": GATEWAY_CLASS_NAME,
            "labels": app_labels("inference-gateway", GATEWAY_CLASS_NAME, "gateway-class"),
        },
        spec={"controllerName": GATEWAY_CONTROLLER},
        opts=opts,
    )


PRIVATE_NETWORK_ANNOTATION = "modelplane.ai/private-network"
"""On a workload Gateway: the clusters whose networks reach it privately (declared by the
platform for an Existing cluster; GKE and EKS gateways are internal load balancers)."""


def workload_gateway(
    name: str,
    class_name: str,
    port: int,
    opts: pulumi.ResourceOptions,
    *,
    await_address: bool = True,
    cloud: str | None = None,
    envoy_proxy: bool = False,
    private_to: Sequence[str] = (),
) -> pulumi.CustomResource:
    """The cluster's workload Gateway `modelplane-system/inference-gateway` of ``class_name``:
    a plain CustomResource so that `status` is an output, and Pulumi waits for an address
    (unless ``await_address`` is false: rendered manifests have no controller to wait for).
    ``cloud`` (GKE, EKS): its load balancer is internal and holds a silent request for the
    longest request (`spec.infrastructure.annotations`, which Envoy Gateway puts on the
    proxy's Service; modelplane.components.load_balancers). ``envoy_proxy`` (the installed stack's
    Envoy Gateway, never a platform's own controller): `spec.infrastructure.parametersRef`
    names the EnvoyProxy ``workload_envoy_proxy`` makes. ``private_to``: on an Existing
    cluster, the clusters the platform declared it privately connected to
    (`existing.network.connectedTo`), recorded as the annotation PRIVATE_NETWORK_ANNOTATION
    (what the shipped policy pack accepts instead of an internal load balancer)."""
    meta: dict[str, Any] = {
        "name": GATEWAY_NAME,
        "namespace": SYSTEM_NAMESPACE,
        "labels": app_labels("inference-gateway", GATEWAY_NAME, "workload-gateway"),
    }
    annotations: dict[str, str] = {}
    if await_address:
        annotations["pulumi.com/waitFor"] = "jsonpath={.status.addresses[0].value}"
    if private_to:
        annotations[PRIVATE_NETWORK_ANNOTATION] = ",".join(private_to)
    if annotations:
        meta["annotations"] = annotations
    infrastructure: dict[str, Any] = {}
    if cloud in INTERNAL_LB_ANNOTATIONS:
        infrastructure["annotations"] = service_annotations(cloud, internal=True)
    if envoy_proxy:
        infrastructure["parametersRef"] = envoy_proxy_ref(GATEWAY_NAME)
    return pulumi.CustomResource(
        "kubernetes:gateway.networking.k8s.io/v1:Gateway",
        f"{name}-gateway",
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": meta,
            "spec": {
                **({"infrastructure": infrastructure} if infrastructure else {}),
                "gatewayClassName": class_name,
                # HTTPS only, a client certificate required (gateway_tls.py): the front door
                # is the one client.
                "listeners": [https_listener(port, ROUTES_FROM)],
            },
            "status": None,
        },
        opts,
    )


def gateway_address(
    gateway: pulumi.CustomResource, port: int = HTTPS_PORT
) -> pulumi.Output[str | None]:
    """The Gateway's first address, with ``:port`` when the listener is not on 443 (the
    replica endpoint URLs are ``https://<gateway address>/...``)."""

    def with_port(status: Any) -> str | None:
        address = _first_address(status)
        if address is None or port == HTTPS_PORT:
            return address
        host = f"[{address}]" if ":" in address else address
        return f"{host}:{port}"

    status: pulumi.Output[Any] = gateway.status  # type: ignore[attr-defined]
    return status.apply(with_port)


class ServingStack(pulumi.ComponentResource):
    """The per-cluster serving stack on ``provider`` (see the module docstring).

    Outputs: ``gateway_address`` (None until the Gateway has an address), ``releases``
    (release names by chart key).
    """

    gateway_address: pulumi.Output[str | None]

    def __init__(
        self,
        name: str,
        options: ServingStackOptions,
        *,
        provider: kubernetes.Provider,
        nvidia_driver_root: str = "/",
        gke_driver_installer: bool = False,
        owns_network: bool = False,
        cloud: str | None = None,
        private_to: Sequence[str] = (),
        certificates: Certificates | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``certificates``: the workload gateway's server certificate and the fleet CA
        (gateway_tls.py); None (a caller of the package component): the listener and the
        client validation name the Secret and ConfigMap the caller makes."""
        versions = dict(options.versions)
        installer = gke_driver_installer_manifest() if gke_driver_installer else None
        check_version_keys(versions)
        gateway_api_files = crd_files("gatewayApi", versions)
        gaie_files = crd_files("inferenceExtension", versions)
        super().__init__("modelplane:cluster:ServingStack", name, None, opts)
        self._name = name
        self._provider = provider
        self._options = options
        self._versions = versions

        self.gateway_api_crds = kubernetes.yaml.v2.ConfigGroup(
            f"{name}-gateway-api-crds", files=gateway_api_files, opts=self._opts()
        )
        self.inference_extension_crds = kubernetes.yaml.v2.ConfigGroup(
            f"{name}-inference-extension-crds", files=gaie_files, opts=self._opts()
        )
        crds: list[pulumi.Resource] = [self.gateway_api_crds, self.inference_extension_crds]

        self.releases: dict[str, kubernetes.helm.v3.Release] = {}
        self._release("certManager")
        # Only where modelplane owns the cloud network (GKE, EKS) must destroy wait for the
        # load balancers; on an Existing cluster the namespace stays Helm's, so a namespace the
        # platform made, or a destroy-then-up, never meets a client-side AlreadyExists.
        self.envoy_namespace: kubernetes.core.v1.Namespace | None = None
        if owns_network:
            self.envoy_namespace = load_balancer_namespace(
                name, CHARTS["envoyGateway"].namespace, self._opts()
            )
            self._release(
                "envoyGateway", create_namespace=False, depends_on=[*crds, self.envoy_namespace]
            )
        else:
            self._release("envoyGateway", depends_on=crds)
        self._release("envoyAiGatewayCrds")
        self._release(
            "envoyAiGateway",
            depends_on=[
                self.releases["envoyGateway"],
                self.releases["envoyAiGatewayCrds"],
                self.inference_extension_crds,
            ],
        )
        self._release("prometheus")
        self._release("leaderWorkerSet")
        self._release("nodeFeatureDiscovery")

        # The DRA kubelet plugin runs at system-node-critical priority; GKE admits such pods
        # outside kube-system only where a ResourceQuota allows them.
        dra = CHARTS["nvidiaDraDriver"]
        dra_namespace = ensure_namespace(dra.namespace, self._opts(), scope=name)
        core = kubernetes.core.v1
        critical_pods = core.ResourceQuota(
            f"{name}-allow-critical-pods",
            metadata=kubernetes.meta.v1.ObjectMetaArgs(
                name="allow-critical-pods",
                namespace=dra.namespace,
                labels=app_labels("nvidia-dra-driver", "allow-critical-pods", "resource-quota"),
            ),
            spec=core.ResourceQuotaSpecArgs(
                hard={"pods": "1000"},
                scope_selector=core.ScopeSelectorArgs(
                    match_expressions=[
                        core.ScopedResourceSelectorRequirementArgs(
                            scope_name="PriorityClass",
                            operator="In",
                            values=["system-node-critical", "system-cluster-critical"],
                        )
                    ]
                ),
            ),
            opts=self._opts(depends_on=[dra_namespace] if dra_namespace else []),
        )
        # GKE: the driver the DRA plugin needs comes from Google's installer DaemonSet.
        self.driver_installer: kubernetes.apps.v1.DaemonSet | None = None
        if installer is not None:
            self.driver_installer = kubernetes.apps.v1.DaemonSet(
                f"{name}-nvidia-driver-installer",
                metadata=installer["metadata"],
                spec=installer["spec"],
                opts=self._opts(),
            )
        self._release(
            "nvidiaDraDriver",
            values=chart_values("nvidiaDraDriver", nvidia_driver_root=nvidia_driver_root),
            create_namespace=False,
            depends_on=[
                critical_pods,
                self.releases["nodeFeatureDiscovery"],
                *([self.driver_installer] if self.driver_installer else []),
            ],
        )
        self._release("keda")

        # modelplane-system is shared with other stacks on the same cluster (the gateway stack
        # puts its objects there too): a NamespacePatch like every other stack's namespace, so
        # destroying this stack gives up its fields and a later `up` re-creates it cleanly.
        namespace = ensure_namespace(SYSTEM_NAMESPACE, self._opts(), scope=name)
        self.gateway_class = workload_gateway_class(
            name,
            self._opts(depends_on=[self.gateway_api_crds, self.releases["envoyGateway"]]),
        )
        # Two proxies with a budget (m8), in place before the Gateway that names them.
        self.envoy_proxy = workload_envoy_proxy(
            name,
            self._opts(
                depends_on=[self.releases["envoyGateway"], *([namespace] if namespace else [])]
            ),
        )
        # The server certificate and the client CA before the Gateway that needs them.
        tls_objects = [
            register(m, self._opts(depends_on=[namespace] if namespace else []), scope=name)
            for m in (
                workload_objects(
                    "EnvoyGateway",
                    certificates,
                    SYSTEM_NAMESPACE,
                    app_labels("inference-gateway", GATEWAY_NAME, "gateway-tls"),
                )
                if certificates is not None
                else []
            )
        ]
        self.gateway = workload_gateway(
            name,
            GATEWAY_CLASS_NAME,
            HTTPS_PORT,
            cloud=cloud,
            envoy_proxy=True,
            private_to=private_to,
            opts=self._opts(
                depends_on=[
                    self.gateway_class,
                    self.envoy_proxy,
                    *([namespace] if namespace else []),
                    self.releases["envoyAiGateway"],
                    *tls_objects,
                ]
            ),
        )
        # Envoy resets a stream silent for 5 minutes: the listener holds one for the longest
        # request, and keeps its client connections alive (modelplane.components.load_balancers).
        timeouts = client_traffic_policy(
            GATEWAY_NAME,
            SYSTEM_NAMESPACE,
            app_labels("inference-gateway", GATEWAY_NAME, "gateway-timeouts"),
            client_validation=True,
        )
        self.gateway_timeouts = kubernetes.apiextensions.CustomResource(
            f"{name}-gateway-timeouts",
            api_version=timeouts["apiVersion"],
            kind=timeouts["kind"],
            metadata=timeouts["metadata"],
            spec=timeouts["spec"],
            # Before the Gateway has an address, so no request meets Envoy's defaults.
            opts=self._opts(depends_on=[self.gateway_class, *([namespace] if namespace else [])]),
        )
        self.gateway_address = gateway_address(self.gateway)
        self.release_names = {key: CHARTS[key].release_name for key in self.releases}
        self.register_outputs(
            {"gateway_address": self.gateway_address, "releases": self.release_names}
        )

    def _opts(self, **kwargs: Any) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, provider=self._provider, **kwargs)

    def _release(
        self,
        key: str,
        *,
        values: Mapping[str, Any] | None = None,
        create_namespace: bool = True,
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> kubernetes.helm.v3.Release:
        release = helm_release(
            self._name,
            key,
            self._versions,
            self._options.chart_repository,
            values=dict(values) if values is not None else chart_values(key),
            create_namespace=create_namespace,
            opts=self._opts(depends_on=list(depends_on)),
        )
        self.releases[key] = release
        return release
