"""The package-facing components (`modelplane:index:<Kind>`): schema-describable ``args``, the
validated models built from them, the existing component as their only child.

No ``from __future__ import annotations`` here: Pulumi's analyzer reads the annotations of
``args`` and of the component class at run time, and a postponed (string) annotation would not
be a type it can describe.

Arguments that decide which resources exist (chart versions, the gateway class, the port, the
clusters a gateway is private to) are plain values in the schema (``plain: true``): they are
validated and used while the component is built, so they cannot wait for another resource's
output. The Kubernetes cluster comes from the caller's ``providers`` option
(``opts=ResourceOptions(providers=[k8s])``), the usual way to place a component.
"""

from enum import StrEnum
from typing import NotRequired, TypedDict

import pulumi

from modelplane.api.inference_cluster import ServingStackOptions
from modelplane.components import serving_stack as stack
from modelplane.components.workload.objects import ensure_namespace

PACKAGE_NAME = "modelplane"


class Cloud(StrEnum):
    """A cloud whose load balancers modelplane makes internal."""

    GKE = "GKE"
    EKS = "EKS"


def _cloud(value: "Cloud | str | None") -> str | None:
    return None if value is None else Cloud(value).value


class ServingStackArgs(TypedDict):
    """The inputs of ``modelplane:index:ServingStack``: the ``servingStack`` block of an
    InferenceCluster (docs/api.md) and what the cluster's kind decides."""

    versions: NotRequired[dict[str, str]]
    """Per-component chart version overrides (keys: certManager, envoyGateway, ...; unknown
    keys are refused)."""
    chart_repository: NotRequired[str]
    """A chart mirror for air-gapped installs (OCI or https); empty: the upstream repositories."""
    nvidia_driver_root: NotRequired[str]
    """Where the NVIDIA driver lives on the nodes (GKE: /home/kubernetes/bin/nvidia); default /."""
    gke_driver_installer: NotRequired[bool]
    """Apply Google's COS NVIDIA driver installer DaemonSet first (GKE GPU pools)."""
    owns_network: NotRequired[bool]
    """The cloud network is the caller's stack's own (GKE, EKS): Envoy Gateway's namespace is
    then owned here, so a destroy waits for the cloud load balancers."""
    cloud: NotRequired[Cloud]
    """GKE or EKS: the workload gateway's load balancer is internal."""
    private_to: NotRequired[list[str]]
    """On an Existing cluster: the clusters whose networks reach it privately."""


class ServingStack(pulumi.ComponentResource):
    """modelplane's per-cluster serving stack (Helm releases of cert-manager, Envoy Gateway,
    Envoy AI Gateway, kube-prometheus-stack, LeaderWorkerSet, node-feature-discovery, the NVIDIA
    DRA driver and KEDA; the Gateway API and Inference Extension CRDs; the workload Gateway) on
    the Kubernetes provider of the ``providers`` option. Needs a reachable cluster and the chart
    repositories (Helm releases are not rendered by a provider in renderYamlToDirectory mode)."""

    gateway_address: pulumi.Output[str | None]
    """The workload Gateway's first address (none until a controller gives it one)."""
    releases: pulumi.Output[dict[str, str]]
    """The Helm release names by chart key."""

    def __init__(
        self,
        name: str,
        args: ServingStackArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        options = ServingStackOptions(
            install=True,
            chart_repository=args.get("chart_repository") or "",
            versions=dict(args.get("versions") or {}),
        )
        super().__init__(f"{PACKAGE_NAME}:index:ServingStack", name, None, opts)
        provider = kubernetes_provider(self, "ServingStack")
        self.stack = stack.ServingStack(
            name,
            options,
            provider=provider,  # type: ignore[arg-type]  # a provider reference is enough
            nvidia_driver_root=args.get("nvidia_driver_root") or "/",
            gke_driver_installer=bool(args.get("gke_driver_installer")),
            owns_network=bool(args.get("owns_network")),
            cloud=_cloud(args.get("cloud")),
            private_to=list(args.get("private_to") or ()),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.gateway_address = self.stack.gateway_address
        self.releases = pulumi.Output.from_input(dict(self.stack.release_names))
        self.register_outputs({"gateway_address": self.gateway_address, "releases": self.releases})


class WorkloadGatewayArgs(TypedDict):
    """The inputs of ``modelplane:index:WorkloadGateway``."""

    class_name: NotRequired[str]
    """The GatewayClass; default ``envoy``, the serving stack's (Envoy Gateway), which also
    brings its GatewayClass and the EnvoyProxy the Gateway names (two proxies)."""
    port: NotRequired[int]
    """The HTTPS listener's port; default 443. Its server certificate is the Secret
    ``modelplane-gateway-tls`` of ``modelplane-system`` and it requires a client certificate
    of the fleet CA (docs/api.md "Mutual TLS between the gateways"): the caller makes both."""
    cloud: NotRequired[Cloud]
    """GKE or EKS: the Gateway's load balancer is internal (only with class ``envoy``)."""
    private_to: NotRequired[list[str]]
    """The clusters whose networks reach this one privately (the annotation the policy pack
    accepts instead of an internal load balancer)."""
    await_address: NotRequired[bool]
    """Wait until a controller gives the Gateway an address (default true; false when the
    provider only renders manifests)."""


class WorkloadGateway(pulumi.ComponentResource):
    """The workload Gateway ``modelplane-system/inference-gateway`` that a cluster's model
    replicas' routes attach to: the namespace (co-owned, a NamespacePatch), the Gateway and, for
    class ``envoy``, its GatewayClass and EnvoyProxy: what modelplane renders for a cluster with
    ``renderTo``. On the Kubernetes provider of the ``providers`` option (or the default one)."""

    gateway_name: pulumi.Output[str]
    """The Gateway's name."""
    namespace: pulumi.Output[str]
    """The Gateway's namespace."""
    gateway_address: pulumi.Output[str | None]
    """The Gateway's first address (none when not awaited or not yet given)."""

    def __init__(
        self,
        name: str,
        args: WorkloadGatewayArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        class_name = args.get("class_name") or stack.GATEWAY_CLASS_NAME
        port = int(args.get("port") or stack.HTTPS_PORT)
        ours = class_name == stack.GATEWAY_CLASS_NAME
        cloud = _cloud(args.get("cloud"))
        if cloud is not None and not ours:
            raise ValueError(
                f"WorkloadGateway {name}: cloud is for class {stack.GATEWAY_CLASS_NAME!r} "
                f"(Envoy Gateway's load balancer annotations), not {class_name!r}"
            )
        await_address = args.get("await_address", True)
        super().__init__(f"{PACKAGE_NAME}:index:WorkloadGateway", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        namespace = ensure_namespace(stack.SYSTEM_NAMESPACE, child, scope=name)
        after: list[pulumi.Resource] = [namespace] if namespace else []
        if ours:
            after.append(stack.workload_gateway_class(name, child))
            after.append(
                stack.workload_envoy_proxy(
                    name, pulumi.ResourceOptions(parent=self, depends_on=after[:1])
                )
            )
        self.gateway = stack.workload_gateway(
            name,
            class_name,
            port,
            pulumi.ResourceOptions(parent=self, depends_on=after),
            await_address=await_address,
            cloud=cloud if ours else None,
            envoy_proxy=ours,
            private_to=list(args.get("private_to") or ()),
        )
        self.gateway_name = pulumi.Output.from_input(stack.GATEWAY_NAME)
        self.namespace = pulumi.Output.from_input(stack.SYSTEM_NAMESPACE)
        self.gateway_address = (
            stack.gateway_address(self.gateway, port)
            if await_address
            else pulumi.Output.from_input(None)
        )
        self.register_outputs(
            {
                "gateway_name": self.gateway_name,
                "namespace": self.namespace,
                "gateway_address": self.gateway_address,
            }
        )


def kubernetes_provider(component: pulumi.ComponentResource, kind: str) -> pulumi.ProviderResource:
    """The Kubernetes provider the caller gave the component (``providers`` option)."""
    provider = component.get_provider("kubernetes::")
    if provider is None:
        raise ValueError(
            f"{kind}: pass the cluster's Kubernetes provider "
            "(opts=ResourceOptions(providers=[k8s_provider]))"
        )
    return provider


COMPONENTS: list[type[pulumi.ComponentResource]] = [ServingStack, WorkloadGateway]
"""What the plugin hosts (provider/__main__.py)."""
