"""The fleet's OpenAI base URL on an Envoy Gateway front door: Envoy AI Gateway's objects.

Envoy AI Gateway (v1.1, installed with Envoy Gateway as its extension server: the serving
stack's releases, or the gateway stack's own when it installs the controller) reads each
request's body, puts its `model` in the header `x-ai-eg-model`, routes on it, answers
`GET /v1/models`, and counts each answer's tokens (streams included: it asks the engine for
`usage` and strips it from a client that did not ask). modelplane renders what it acts on:

- `AIGatewayRoute` `modelplane-openai` (more, `-2`, `-3`, ..., past 15 services: its rule
  limit) on the front door's listener: one rule per ModelService with `spec.models`,
  matching each of its names, owned by the service's namespace (`/v1/models`' `owned_by`),
  with the service's timeouts (`streamIdleTimeout`: Envoy's one idle timer before and
  during the answer, the longer of `firstByte` and `idle`; the request as a whole may take
  the longest generation) and the token costs (`llmRequestCosts`, Envoy's dynamic metadata
  `io.envoy.ai_gateway`);
- per service an `AIServiceBackend` `<namespace>-<service>-openai` (OpenAI schema, prefix
  `/<namespace>/<service>/v1`) on one Envoy Gateway `Backend`, the loop;
- the loop: a Gateway `modelplane-openai-loop` of the same class with an EnvoyProxy whose
  Service is a ClusterIP Service of a fixed name (`modelplane-openai-loop` in Envoy
  Gateway's namespace; never a load balancer). The service routes attach to it as well as
  to the front door, so a request by model name takes the service's own route on its second
  pass: its weights, retries, passive health and the workload gateways' credentials, as a
  request to the service's path does. The loop is plain HTTP inside the gateway's cluster,
  with the front door's stream timeouts (its own ClientTrafficPolicy).
- a `BackendTrafficPolicy` on each generated route: one more try while nothing was sent
  (the idle timer fired before the first byte, a reset, a refused connection).

What Envoy AI Gateway answers itself: an unknown model is its `404` ("No matching route
found..."), an idle timer past the first byte ends the stream, with nothing left to try a
`504`. The router of a Traefik front door (components/model_router.py) does the same steps
there; docs/architecture.md, "The OpenAI base URL", lists who does what on each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modelplane.api.model_service import ModelService
from modelplane.components.load_balancers import client_traffic_policy
from modelplane.components.serving_stack import envoy_proxy_manifest, envoy_proxy_ref
from modelplane.components.workload.objects import (
    ROUTES_FROM,
    SYSTEM_NAMESPACE,
    Manifest,
    app_labels,
    dns1035,
    labels,
    metadata,
)
from modelplane.components.workload.routes import (
    ENVOY_GROUP,
    GATEWAY_GROUP,
    RETRY_STATUSES,
    gateway_ref,
)

AI_GROUP = "aigateway.envoyproxy.io"
AI_VERSION = "v1beta1"
ROUTE_NAME = "modelplane-openai"
MODEL_HEADER = "x-ai-eg-model"  # where Envoy AI Gateway puts the body's `model`
RULES_PER_ROUTE = 15  # AIGatewayRoute.spec.rules maxItems (one slot is the controller's)
LOOP = "modelplane-openai-loop"
LOOP_LISTENER = "loop"
LOOP_PORT = 80
ENVOY_NAMESPACE = "envoy-gateway-system"  # where Envoy Gateway runs the proxies' Services
LONGEST_REQUEST = (
    "3600s"  # = the listeners' stream idle timeout (modelplane.components.load_balancers)
)
TOKEN_COSTS = (
    ("llm_input_token", "InputToken"),
    ("llm_output_token", "OutputToken"),
    ("llm_total_token", "TotalToken"),
    ("llm_cached_input_token", "CachedInputToken"),
)
OPENAI_LABELS = labels(app_labels("inference-gateway", ROUTE_NAME, "openai"))


def loop_host() -> str:
    return f"{LOOP}.{ENVOY_NAMESPACE}.svc.cluster.local"


def loop_parent() -> dict[str, Any]:
    """The parentRef a service route with model names adds: the loop's listener."""
    return {**gateway_ref(LOOP, SYSTEM_NAMESPACE), "sectionName": LOOP_LISTENER}


def backend_name(service: ModelService) -> str:
    return dns1035(service.metadata.namespace or "default", service.metadata.name, "openai")


def route_names(count: int) -> list[str]:
    """`modelplane-openai`, then `-2`, `-3`, ...: one per 15 services."""
    return [ROUTE_NAME if i == 0 else f"{ROUTE_NAME}-{i + 1}" for i in range(count)]


def _duration(seconds: float) -> str:
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{int(seconds * 1000)}ms"


def loop_manifests(gateway_class: str) -> list[Manifest]:
    """The loop's EnvoyProxy (a ClusterIP Service of a fixed name) and Gateway."""
    proxy = envoy_proxy_manifest(LOOP, SYSTEM_NAMESPACE, OPENAI_LABELS)
    kubernetes = proxy["spec"].setdefault("provider", {"type": "Kubernetes"})
    kubernetes.setdefault("kubernetes", {})["envoyService"] = {"type": "ClusterIP", "name": LOOP}
    gateway = {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "Gateway",
        "metadata": metadata(LOOP, SYSTEM_NAMESPACE, OPENAI_LABELS),
        "spec": {
            "gatewayClassName": gateway_class,
            "infrastructure": {"parametersRef": envoy_proxy_ref(LOOP)},
            "listeners": [
                {
                    "name": LOOP_LISTENER,
                    "protocol": "HTTP",
                    "port": LOOP_PORT,
                    "allowedRoutes": ROUTES_FROM,
                }
            ],
        },
    }
    backend = {
        "apiVersion": f"{ENVOY_GROUP}/v1alpha1",
        "kind": "Backend",
        "metadata": metadata(LOOP, SYSTEM_NAMESPACE, OPENAI_LABELS),
        "spec": {"endpoints": [{"fqdn": {"hostname": loop_host(), "port": LOOP_PORT}}]},
    }
    # The second pass holds a silent stream as long as the front door does (Envoy's default
    # would reset it after 5 minutes), and refuses `_` headers the same way.
    timeouts = client_traffic_policy(LOOP, SYSTEM_NAMESPACE, OPENAI_LABELS)
    return [proxy, gateway, timeouts, backend]


def service_backend(service: ModelService) -> Manifest:
    """The service as Envoy AI Gateway sees it: OpenAI's API under the service's path."""
    prefix = f"{service.path_prefix}v1"
    return {
        "apiVersion": f"{AI_GROUP}/{AI_VERSION}",
        "kind": "AIServiceBackend",
        "metadata": metadata(backend_name(service), SYSTEM_NAMESPACE, OPENAI_LABELS),
        "spec": {
            "schema": {"name": "OpenAI", "prefix": prefix},
            "backendRef": {"group": ENVOY_GROUP, "kind": "Backend", "name": LOOP},
        },
    }


def route_rule(service: ModelService) -> dict[str, Any]:
    timeouts = service.spec.timeouts
    return {
        "name": backend_name(service),
        "matches": [
            {"headers": [{"type": "Exact", "name": MODEL_HEADER, "value": model}]}
            for model in service.spec.models or ()
        ],
        "backendRefs": [{"name": backend_name(service)}],
        "timeouts": {"request": LONGEST_REQUEST},
        "streamIdleTimeout": _duration(max(timeouts.first_byte, timeouts.idle)),
        "modelsOwnedBy": service.metadata.namespace or "default",
    }


def openai_routes(
    services: Sequence[ModelService], gateway: tuple[str, str], listener: str | None
) -> list[Manifest]:
    """The AIGatewayRoutes, 15 services each, in key order."""
    ordered = sorted((s for s in services if s.spec.models), key=lambda s: s.key)
    chunks = [ordered[i : i + RULES_PER_ROUTE] for i in range(0, len(ordered), RULES_PER_ROUTE)]
    parent = gateway_ref(*gateway)
    if listener:
        parent["sectionName"] = listener
    return [
        {
            "apiVersion": f"{AI_GROUP}/{AI_VERSION}",
            "kind": "AIGatewayRoute",
            "metadata": metadata(name, SYSTEM_NAMESPACE, OPENAI_LABELS),
            "spec": {
                "parentRefs": [parent],
                "rules": [route_rule(s) for s in chunk],
                "llmRequestCosts": [
                    {"metadataKey": key, "type": kind} for key, kind in TOKEN_COSTS
                ],
            },
        }
        for name, chunk in zip(route_names(len(chunks)), chunks, strict=True)
    ]


def retry_policy(route: str) -> Manifest:
    """One more try on the generated HTTPRoute (named as its AIGatewayRoute) while nothing
    was sent: the loop's service route then picks an endpoint by weight again."""
    return {
        "apiVersion": f"{ENVOY_GROUP}/v1alpha1",
        "kind": "BackendTrafficPolicy",
        "metadata": metadata(f"{route}-retry", SYSTEM_NAMESPACE, OPENAI_LABELS),
        "spec": {
            "targetRefs": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": route}],
            "retry": {
                "numRetries": 1,
                "retryOn": {
                    # `reset` and `gateway-error`: the idle timer fired before a byte came.
                    "triggers": [
                        "connect-failure",
                        "refused-stream",
                        "reset",
                        "gateway-error",
                        "retriable-status-codes",
                    ],
                    "httpStatusCodes": list(RETRY_STATUSES),
                },
            },
        },
    }


def ai_gateway_manifests(
    services: Sequence[ModelService],
    *,
    gateway: tuple[str, str],
    listener: str | None,
    gateway_class: str,
) -> list[Manifest]:
    """Every object, in the order they must exist: the loop, the backends, the routes and
    their retries (a route names only backends that exist)."""
    routes = openai_routes(services, gateway, listener)
    return [
        *loop_manifests(gateway_class),
        *(service_backend(s) for s in sorted(services, key=lambda s: s.key) if s.spec.models),
        *routes,
        *(retry_policy(r["metadata"]["name"]) for r in routes),
    ]
