"""InferenceGateway: the fleet's front door, where ModelService routes live.

Traefik (chart `traefik`, its Kubernetes Gateway provider on) or Envoy Gateway
(chart `gateway-helm`), as a Helm release with a fixed name (`mp-traefik`,
`mp-envoy-gateway`), then a GatewayClass and the Gateway `modelplane` in
`modelplane-system` accepting routes from every namespace.

- On a `renderTo` cluster there is no API server to install a chart into, so
  the Helm release is skipped and only the Gateway API objects are rendered
  (the platform team installs the controller from the rendered directory's
  hand-off, as for the serving stack).
- Envoy Gateway on an InferenceCluster whose serving stack is installed reuses
  the serving stack's `mp-envoy-gateway` release (two releases of one chart
  under one name would fight); only the GatewayClass and Gateway are added.

Traefik is the default because per-backend path rewrites in one weighted rule
work there; on Envoy Gateway (envoyproxy/gateway#7099) a service is one rule with
one rewrite and replicas named by header (`components.workload.routes`).
"""

from __future__ import annotations

from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from components.workload.objects import (
    SYSTEM_NAMESPACE,
    Manifest,
    app_labels,
    ensure_namespace,
    labels,
    metadata,
)
from components.workload.routes import GATEWAY_GROUP
from modelplane.api.inference_gateway import InferenceGateway

GATEWAY_NAME = "modelplane"
TRAEFIK = {
    "release": "mp-traefik",
    "chart": "traefik",
    "repo": "https://traefik.github.io/charts",
    "version": "39.0.0",
    "namespace": "traefik-system",
    "controller": "traefik.io/gateway-controller",
    "class": "traefik",
    "port": 8000,  # Traefik's `web` entrypoint; its Service exposes 80
}
ENVOY = {
    "release": "mp-envoy-gateway",
    "chart": "oci://docker.io/envoyproxy/gateway-helm",
    "repo": None,
    "version": "v1.8.1",
    "namespace": "envoy-gateway-system",
    "controller": "gateway.envoyproxy.io/gatewayclass-controller",
    "class": "modelplane-envoy",
    "port": 80,
}
DIAL_TIMEOUT = "2s"
GATEWAY_LABELS = labels(
    app_labels("inference-gateway", GATEWAY_NAME, "gateway"), {"modelplane.ai/gateway": "default"}
)
WAIT_FOR_ADDRESS = {"pulumi.com/waitFor": "jsonpath={.status.addresses[0].value}"}


def backend_settings(backend: Literal["Traefik", "EnvoyGateway"]) -> dict[str, Any]:
    return TRAEFIK if backend == "Traefik" else ENVOY


def release_values(backend: Literal["Traefik", "EnvoyGateway"]) -> dict[str, Any]:
    if backend == "Traefik":
        return {
            "providers": {
                "kubernetesGateway": {
                    "enabled": True,
                    "statusAddress": {
                        "service": {"name": TRAEFIK["release"], "namespace": TRAEFIK["namespace"]}
                    },
                },
                "kubernetesIngress": {"enabled": False},
                # The ModelService routes' retry Middlewares (api.md "Retries and ejection").
                "kubernetesCRD": {"enabled": True},
            },
            # A dead (blackholed) endpoint costs one retry of at most this, not Go's 30 s.
            "additionalArguments": [
                f"--serversTransport.forwardingTimeouts.dialTimeout={DIAL_TIMEOUT}"
            ],
            # modelplane creates its own GatewayClass and Gateway.
            "gateway": {"enabled": False},
            "gatewayClass": {"enabled": False},
        }
    return {"config": {"envoyGateway": {"extensionApis": {"enableBackend": True}}}}


def gateway_class_manifest(backend: Literal["Traefik", "EnvoyGateway"]) -> Manifest:
    s = backend_settings(backend)
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "GatewayClass",
        "metadata": metadata(s["class"], None, GATEWAY_LABELS),
        "spec": {"controllerName": s["controller"]},
    }


def gateway_manifest(
    backend: Literal["Traefik", "EnvoyGateway"], *, await_address: bool = True
) -> Manifest:
    s = backend_settings(backend)
    # When a controller is known to program the Gateway, wait for it to publish an address
    # (as the serving stack's Gateway does), so service URLs are known at the end of the
    # same `up`. Without one, waiting could only time out.
    annotations = WAIT_FOR_ADDRESS if await_address else None
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "Gateway",
        "metadata": metadata(GATEWAY_NAME, SYSTEM_NAMESPACE, GATEWAY_LABELS, annotations),
        "spec": {
            "gatewayClassName": s["class"],
            "listeners": [
                {
                    "name": "web",
                    "protocol": "HTTP",
                    "port": s["port"],
                    "allowedRoutes": {"namespaces": {"from": "All"}},
                }
            ],
        },
    }


class _GatewayObject(pulumi.CustomResource):
    """A Gateway API object whose live `status` is an output (the Gateway's address)."""

    status: pulumi.Output[Any]

    def __init__(self, name: str, manifest: Manifest, opts: pulumi.ResourceOptions) -> None:
        props = {
            "apiVersion": manifest["apiVersion"],
            "kind": manifest["kind"],
            "metadata": manifest["metadata"],
            "spec": manifest["spec"],
            "status": None,
        }
        super().__init__(
            f"kubernetes:{manifest['apiVersion']}:{manifest['kind']}", name, props, opts
        )


def _first_address(status: Any) -> str | None:
    if not isinstance(status, dict):
        return None
    for address in status.get("addresses") or []:
        if isinstance(address, dict) and address.get("value"):
            return str(address["value"])
    return None


class InferenceGatewayComponent(pulumi.ComponentResource):
    """`modelplane:gateway:InferenceGateway`: controller release, GatewayClass, Gateway.

    `provider` is the gateway cluster's. `install_controller=False` skips the Helm
    release (renderTo clusters, or Envoy Gateway already installed by the
    cluster's serving stack). `await_address` makes Pulumi wait until the Gateway
    has an address (when a controller is known to program it), so ModelService
    URLs are filled in by the same `up`. Outputs: `address` (the Gateway's first status
    address once the controller has published it, else None), `gateway_name`,
    `gateway_namespace`, `backend`.
    """

    address: pulumi.Output[str | None]
    gateway_name: pulumi.Output[str]
    gateway_namespace: pulumi.Output[str]
    backend: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        gateway: InferenceGateway,
        provider: pulumi.ProviderResource,
        *,
        install_controller: bool = True,
        await_address: bool = True,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            "modelplane:gateway:InferenceGateway",
            name,
            None,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=[provider])),
        )
        backend = gateway.spec.backend
        s = backend_settings(backend)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        deps: list[pulumi.Resource] = []
        if install_controller:
            repo = k8s.helm.v3.RepositoryOptsArgs(repo=s["repo"]) if s["repo"] else None
            deps.append(
                k8s.helm.v3.Release(
                    s["release"],
                    name=s["release"],
                    chart=s["chart"],
                    version=gateway.spec.version or s["version"],
                    repository_opts=repo,
                    namespace=s["namespace"],
                    create_namespace=True,
                    values=release_values(backend),
                    opts=child,
                )
            )
        ns = ensure_namespace(SYSTEM_NAMESPACE, child, scope="gateway")
        if ns is not None:
            deps.append(ns)
        after = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=deps or None)
        gw_class = _GatewayObject(f"gateway/{s['class']}", gateway_class_manifest(backend), after)
        gw_manifest = gateway_manifest(backend, await_address=await_address)
        gw = _GatewayObject(
            f"gateway/{SYSTEM_NAMESPACE}/{GATEWAY_NAME}",
            gw_manifest,
            pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[gw_class, *deps]),
        )
        self.address = gw.status.apply(_first_address)
        self.gateway_name = pulumi.Output.from_input(GATEWAY_NAME)
        self.gateway_namespace = pulumi.Output.from_input(SYSTEM_NAMESPACE)
        self.backend = pulumi.Output.from_input(backend)
        self.register_outputs(
            {
                "address": self.address,
                "gatewayName": self.gateway_name,
                "gatewayNamespace": self.gateway_namespace,
                "backend": self.backend,
            }
        )
