"""Who may open a connection to a deployment's pods and to the authorization service
(security review M4; docs/architecture.md, "Security").

Per deployment and cluster hosting its replicas, one NetworkPolicy `<deployment>-<cluster>-ingress`
selects every serving pod of the deployment there (every role, LeaderWorkerSet leaders and
workers: `modelplane.ai/deployment` with a `modelplane.ai/role`) and admits ingress only from:

- the cluster's workload gateway, on the ports its routes send to (a unified replica's engine
  port; a prefill/decode replica's pool port 8000, the decode sidecar's and the prefill
  engine's): the installed stack's Envoy Gateway proxies of `modelplane-system/
  inference-gateway` (namespace `envoy-gateway-system`, Envoy Gateway's proxy labels); a
  platform's own gateway (`servingStack.gateway`): every pod of its `namespace`, since
  modelplane does not know its pods' labels -- and of every namespace when none is declared;
- the front door's proxies, where the fleet's InferenceGateway runs on this cluster (it routes
  to a replica's Service directly when the cluster's gateway has no address): Traefik's pods
  of the chart modelplane installs (`traefik-system`, `mp-traefik`), or Envoy Gateway's proxies
  of the Gateways of `modelplane-system` (the front door and its OpenAI loop);
- the metrics scraper: pods of the serving stack's Prometheus namespace (`monitoring`), on the
  engine ports only (the container port named `http` the scrape job keeps);
- the deployment's own serving pods, on every port (a LeaderWorkerSet group's ranks, the decode
  sidecar calling prefill, NIXL's side channel);
- the deployment's endpoint pickers (prefill/decode: the GAIE EPP scrapes the pods it picks),
  on the pool port and the engine ports.

Everything else is refused -- where the cluster enforces NetworkPolicy (GKE with Dataplane V2,
EKS with the VPC CNI's network policy on; an Existing cluster's CNI, or nothing). Kubelet's
probes are not subject to it. Pure: manifests as dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.names import child_name
from modelplane.api.topology import POOL_PORT
from modelplane.components.workload import disaggregation as pd
from modelplane.components.workload.objects import (
    DEPLOYMENT,
    ROLE,
    SYSTEM_NAMESPACE,
    WORKLOAD_GATEWAY,
    Manifest,
    app_labels,
    labels,
    metadata,
)
from modelplane.components.workload.pods import engine_port

API_VERSION = "networking.k8s.io/v1"
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # set by the API server on every namespace
POLICY_COMPONENT = "network-policy"

#: Envoy Gateway's namespace (its chart's, where its default deployment mode runs the proxies)
#: and the labels it gives every proxy pod of a Gateway.
ENVOY_GATEWAY_NAMESPACE = "envoy-gateway-system"
ENVOY_PROXY_LABELS = {
    "app.kubernetes.io/name": "envoy",
    "app.kubernetes.io/component": "proxy",
    "app.kubernetes.io/managed-by": "envoy-gateway",
}
OWNING_GATEWAY_NAME = "gateway.envoyproxy.io/owning-gateway-name"
OWNING_GATEWAY_NAMESPACE = "gateway.envoyproxy.io/owning-gateway-namespace"

#: The front door's Traefik as modelplane installs it (components/gateway.py `TRAEFIK`): the
#: chart's selector labels are `app.kubernetes.io/name: traefik` and
#: `app.kubernetes.io/instance: <release>-<namespace>`.
TRAEFIK_NAMESPACE = "traefik-system"
TRAEFIK_RELEASE = "mp-traefik"

#: The serving stack's Prometheus (kube-prometheus-stack's namespace, components/charts.py).
METRICS_NAMESPACE = "monitoring"

EPP_LABEL = "modelplane.ai/epp"

Backend = Literal["Traefik", "EnvoyGateway"]


def namespace_peer(namespace: str | None, pods: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A NetworkPolicy peer: pods of ``namespace`` (None: of every namespace), those labelled
    ``pods`` (None: every pod there)."""
    peer: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: namespace}} if namespace else {}
    }
    if pods:
        peer["podSelector"] = {"matchLabels": dict(pods)}
    return peer


def envoy_proxies(gateway: str, gateway_namespace: str) -> dict[str, Any]:
    """The proxy pods Envoy Gateway runs for Gateway ``gateway_namespace/gateway``."""
    return namespace_peer(
        ENVOY_GATEWAY_NAMESPACE,
        {
            **ENVOY_PROXY_LABELS,
            OWNING_GATEWAY_NAME: gateway,
            OWNING_GATEWAY_NAMESPACE: gateway_namespace,
        },
    )


def traefik_pods(
    release: str = TRAEFIK_RELEASE, namespace: str = TRAEFIK_NAMESPACE
) -> dict[str, Any]:
    """The pods of the Traefik chart's release ``release`` in ``namespace``."""
    return namespace_peer(
        namespace,
        {
            "app.kubernetes.io/name": "traefik",
            "app.kubernetes.io/instance": f"{release}-{namespace}",
        },
    )


def workload_gateway_peer(installed: bool, platform_namespace: str | None = None) -> dict[str, Any]:
    """The workload gateway's proxies: the installed stack's Envoy Gateway, else the platform's
    gateway namespace (every pod there; every namespace when it is not declared)."""
    if installed:
        return envoy_proxies(WORKLOAD_GATEWAY, SYSTEM_NAMESPACE)
    return namespace_peer(platform_namespace)


def front_door_peer(backend: Backend) -> dict[str, Any]:
    """The front door's proxies (the fleet's InferenceGateway) of ``backend``: Traefik's
    pods, or Envoy Gateway's proxies of every Gateway of `modelplane-system` (the front door
    `modelplane` and the second-pass loop of its OpenAI base URL, components/ai_gateway.py;
    only modelplane makes Gateways there, a reserved namespace)."""
    if backend == "Traefik":
        return traefik_pods()
    return namespace_peer(
        ENVOY_GATEWAY_NAMESPACE, {**ENVOY_PROXY_LABELS, OWNING_GATEWAY_NAMESPACE: SYSTEM_NAMESPACE}
    )


def _tcp(ports: Iterable[int]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in sorted(set(ports))]


def serving_ports(deployment: ModelDeployment) -> tuple[set[int], set[int]]:
    """(the ports a gateway sends requests to, the engines' metrics ports) of a deployment's
    serving pods: a unified engine serves and is scraped on its port; prefill/decode pods are
    reached on the pool port (the prefill engine, the decode routing sidecar) and scraped on
    their engines' ports."""
    roles = deployment.spec.roles
    if not deployment.spec.disaggregated:
        port = engine_port(roles["unified"].workers.template.spec.engine)
        return {port}, {port}
    metrics = {engine_port(roles["prefill"].workers.template.spec.engine)}
    metrics.add(pd.decode_engine_port(roles["decode"].workers.template.spec.engine)[0])
    return {POOL_PORT}, metrics


def policy_name(deployment: ModelDeployment, cluster: str) -> str:
    """`<deployment>-<cluster>-ingress`: one per InferenceCluster, since what it admits is
    that cluster's (its gateway, whether the front door runs there), and two InferenceClusters
    may share one API server (a replica moving between them meets the other's policy)."""
    return child_name(deployment.metadata.name, cluster, "ingress")


def deployment_policy(
    deployment: ModelDeployment,
    cluster: str,
    *,
    installed_gateway: bool,
    gateway_namespace: str | None = None,
    front_door: Backend | None = None,
    revisions: Sequence[ModelDeployment] = (),
) -> Manifest:
    """The NetworkPolicy of one deployment's serving pods on one cluster (see the module
    docstring). ``installed_gateway``: the cluster runs the installed serving stack (its Envoy
    Gateway); else ``gateway_namespace`` is the platform gateway's. ``front_door``: the
    InferenceGateway's backend when it runs on this cluster. ``revisions``: the specs replicas
    not yet rolled render from (their ports are admitted too, until they are rolled)."""
    ns = deployment.metadata.namespace or "default"
    model = deployment.metadata.name
    serve: set[int] = set()
    scrape: set[int] = set()
    for spec in (deployment, *revisions):
        routed, metrics = serving_ports(spec)
        serve |= routed
        scrape |= metrics
    own = {
        "matchLabels": {DEPLOYMENT: model},
        "matchExpressions": [{"key": ROLE, "operator": "Exists"}],
    }
    gateways = [workload_gateway_peer(installed_gateway, gateway_namespace)]
    if front_door is not None:
        gateways.append(front_door_peer(front_door))
    rules: list[dict[str, Any]] = [
        {"from": gateways, "ports": _tcp(serve)},
        {"from": [namespace_peer(METRICS_NAMESPACE)], "ports": _tcp(scrape)},
        # Every port: a group's ranks, the decode sidecar to prefill, NIXL.
        {"from": [{"podSelector": own}]},
    ]
    if any(d.spec.disaggregated for d in (deployment, *revisions)):
        pickers = {
            "matchLabels": {DEPLOYMENT: model},
            "matchExpressions": [{"key": EPP_LABEL, "operator": "Exists"}],
        }
        rules.append({"from": [{"podSelector": pickers}], "ports": _tcp(serve | scrape)})
    object_labels = labels(app_labels(model, model, POLICY_COMPONENT), {DEPLOYMENT: model})
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": metadata(policy_name(deployment, cluster), ns, object_labels),
        "spec": {"podSelector": own, "policyTypes": ["Ingress"], "ingress": rules},
    }


def authz_policy(
    name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    selector: Mapping[str, str],
    port: int,
) -> Manifest:
    """The authorization service's NetworkPolicy: only the front door's Traefik pods (its
    forwardAuth) reach ``port``. The OpenAI router reads the keys file itself (no call)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [traefik_pods()], "ports": _tcp([port])}],
        },
    }
