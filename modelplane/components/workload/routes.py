"""Gateway API routing: the per-replica route on a workload cluster's gateway, and the
ModelService route with its endpoint backends on the control-plane gateway.

Request path end to end (original-modelplane §3.7):

    client -> http://<inference gateway>/<svc-ns>/<svc>/v1/...
      ModelService HTTPRoute: PathPrefix /<svc-ns>/<svc>/ -> rewrite to the endpoint's rewritePath
      -> http://<cluster gateway>/<ns>/<replica>/v1/...
      replica HTTPRoute: PathPrefix /<ns>/<replica>/ -> rewrite to / -> engine :8000 /v1/...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from modelplane.api.model_service import ParsedURL
from modelplane.components.workload.objects import (
    SKIP_AWAIT,
    SYSTEM_NAMESPACE,
    WORKLOAD_GATEWAY,
    Manifest,
    metadata,
)
from modelplane.errors import UserError

GATEWAY_GROUP = "gateway.networking.k8s.io"
INFERENCE_GROUP = "inference.networking.k8s.io"
ENVOY_GROUP = "gateway.envoyproxy.io"
TRAEFIK_GROUP = "traefik.io"
SERVICE_PORT = 8000


def prefix_rewrite(path: str) -> dict[str, Any]:
    return {
        "type": "URLRewrite",
        "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": path}},
    }


def path_match(prefix: str) -> dict[str, Any]:
    return {"path": {"type": "PathPrefix", "value": prefix}}


def gateway_ref(name: str, namespace: str) -> dict[str, Any]:
    return {"group": GATEWAY_GROUP, "kind": "Gateway", "name": name, "namespace": namespace}


def service_manifest(
    name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    selector: Mapping[str, str] | None,
    *,
    port: int,
    target_port: int | None = None,
    app_protocol: str | None = None,
    port_name: str = "http",
) -> Manifest:
    """A ClusterIP Service; without a selector its endpoints come from an EndpointSlice."""
    spec_port: dict[str, Any] = {"name": port_name, "port": port, "protocol": "TCP"}
    if target_port is not None:
        spec_port["targetPort"] = target_port
    if app_protocol:
        spec_port["appProtocol"] = app_protocol
    spec: dict[str, Any] = {"type": "ClusterIP", "ports": [spec_port]}
    if selector:
        spec["selector"] = dict(selector)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        # Pulumi would wait for ready endpoints, i.e. for the model to load: never block up.
        "metadata": metadata(name, namespace, object_labels, SKIP_AWAIT),
        "spec": spec,
    }


# Set by an Envoy Gateway control-plane route on the requests it sends to one replica
# (api.md, "InferenceGateway"): the replica's route matches it as well as its path prefix.
ENDPOINT_HEADER = "x-modelplane-endpoint"


def replica_route(
    name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    prefix: str,
    backend: dict[str, Any],
    checks: Sequence[dict[str, Any]] = (),
) -> Manifest:
    """The replica's route on its cluster's `inference-gateway`: prefix -> `/`; and, for a
    request already rewritten to `/` that names the replica in `x-modelplane-endpoint`, as is.
    ``checks``: filters each rule runs first (the front door's credentials, front_door.py)."""
    first = list(checks)
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {
            "parentRefs": [gateway_ref(WORKLOAD_GATEWAY, SYSTEM_NAMESPACE)],
            "rules": [
                {
                    "matches": [path_match(prefix)],
                    "filters": [*first, prefix_rewrite("/")],
                    "backendRefs": [backend],
                    # LLM responses stream for minutes: no request timeout.
                    "timeouts": {"request": "0s"},
                },
                {
                    "matches": [
                        {
                            **path_match("/"),
                            "headers": [
                                {
                                    "type": "Exact",
                                    "name": ENDPOINT_HEADER,
                                    "value": f"{namespace}/{name}",
                                }
                            ],
                        }
                    ],
                    **({"filters": first} if first else {}),
                    "backendRefs": [backend],
                    "timeouts": {"request": "0s"},
                },
            ],
        },
    }


def service_backend(name: str, port: int = SERVICE_PORT) -> dict[str, Any]:
    return {"group": "", "kind": "Service", "name": name, "port": port}


# --- ModelService (control-plane gateway) ---------------------------------------------


@dataclass(frozen=True)
class EndpointBackend:
    """One endpoint as the control-plane route sees it."""

    key: str  # `ns/name`
    backend: dict[str, Any]  # the backendRef (Service or Envoy Backend)
    rewrite_path: str
    host: str | None
    # "Service": a workload Service on the gateway's own cluster, routed to directly.
    address_type: Literal["IPv4", "IPv6", "FQDN", "Service"]
    weight: int = 1
    extra_filters: tuple[dict[str, Any], ...] = field(default=())
    # A composed replica endpoint: its cluster gateway also routes `/` + ENDPOINT_HEADER.
    replica: bool = False


def _backend_ref(ep: EndpointBackend, filters: list[dict[str, Any]] | None) -> dict[str, Any]:
    ref = {**ep.backend, "weight": ep.weight}
    if filters:
        ref["filters"] = filters
    return ref


def _rewrite(path: str, hostname: str | None) -> dict[str, Any]:
    rewrite = prefix_rewrite(path)
    if hostname:
        rewrite["urlRewrite"]["hostname"] = hostname
    return rewrite


class SplitError(UserError, ValueError):
    """A weighted split the gateway cannot honour (never collapsed silently)."""


def envoy_path(name: str, namespace: str, endpoints: Sequence[EndpointBackend]) -> str:
    """The one rule-level rewrite of an Envoy Gateway service route (see `service_route`)."""
    paths = sorted({"/" if ep.replica else ep.rewrite_path for ep in endpoints})
    if len(paths) > 1:
        raise SplitError(
            f"ModelService {namespace}/{name}: on an EnvoyGateway InferenceGateway one weighted "
            f"route needs one rewritePath, but its endpoints need {', '.join(paths)} (composed "
            "replicas count as '/'); use the Traefik backend, or give the hand-written "
            "ModelEndpoints the same rewritePath"
        )
    return paths[0] if paths else "/"


def _envoy_backend_ref(ep: EndpointBackend, route_filters: Sequence[str] = ()) -> dict[str, Any]:
    filters: list[dict[str, Any]] = [
        {
            "type": "ExtensionRef",
            "extensionRef": {"group": ENVOY_GROUP, "kind": "HTTPRouteFilter", "name": name},
        }
        for name in route_filters
    ]
    if ep.replica:
        filters.append(
            {
                "type": "RequestHeaderModifier",
                "requestHeaderModifier": {"set": [{"name": ENDPOINT_HEADER, "value": ep.key}]},
            }
        )
    if ep.address_type == "FQDN" and ep.host:
        # Host-only rewrites per backendRef are supported (envoyproxy/gateway#7826).
        filters.append({"type": "URLRewrite", "urlRewrite": {"hostname": ep.host}})
    return _backend_ref(ep, filters or None)


REMOVE_AUTHORIZATION = {
    "type": "RequestHeaderModifier",
    "requestHeaderModifier": {"remove": ["Authorization"]},
}
# A backend that is not a replica (an outside provider, a hand-written endpoint) gets neither
# the front door's credentials nor the caller's name.
REMOVE_FOR_OUTSIDE = {
    "type": "RequestHeaderModifier",
    "requestHeaderModifier": {"remove": ["Authorization", "x-modelplane-caller"]},
}


# --- retries and ejection on the front door (api.md "Retries and ejection") --------------
#
# A request is tried again on another endpoint when the chosen one refuses the connection,
# resets it before answering, or answers 502, 503 or 429 -- always before the client got a
# byte (a stream that started is never replayed). The budget: at most RETRY_ATTEMPTS tries
# per request, immediately one after the other (the next try goes to the next endpoint in
# the weighted rotation); a healthy fleet that answers is never retried.
RETRY_ATTEMPTS = 4
RETRY_STATUSES = (502, 503, 429)
# A request body larger than this is still retried on a refused connection, but not on a
# status (it is not kept in memory for a replay): the gateway's own default.
RETRY_BODY_BYTES = 2 * 1024 * 1024
# Envoy Gateway ejects (outlier detection) an endpoint after this many errors in a row
# (connection failures count; a 429 does not), for EJECTION_TIME, at most half of them.
EJECT_AFTER = 3
EJECTION_TIME = "30s"
MAX_EJECTED_PERCENT = 50


def retry_name(service_name: str) -> str:
    """The retry Middleware (Traefik) / BackendTrafficPolicy (Envoy Gateway) of a service."""
    return f"{service_name}-retry"[:63].rstrip("-")


def traefik_retry_middleware(
    name: str, namespace: str, object_labels: Mapping[str, str]
) -> Manifest:
    """Traefik's `retry` middleware: network errors before the request was sent (refused,
    reset before a byte) and the retried statuses, also for POST (inference is POST)."""
    return {
        "apiVersion": f"{TRAEFIK_GROUP}/v1alpha1",
        "kind": "Middleware",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {
            "retry": {
                "attempts": RETRY_ATTEMPTS,
                "status": [str(code) for code in RETRY_STATUSES],
                "retryNonIdempotentMethod": True,
                "maxRequestBodyBytes": RETRY_BODY_BYTES,
            }
        },
    }


def traefik_middleware_filter(middleware: str) -> dict[str, Any]:
    """The route rule's ExtensionRef to the retry middleware (Traefik's Gateway provider
    resolves `traefik.io/Middleware` through its Kubernetes CRD provider)."""
    return {
        "type": "ExtensionRef",
        "extensionRef": {"group": TRAEFIK_GROUP, "kind": "Middleware", "name": middleware},
    }


def envoy_retry_policy(
    name: str, namespace: str, object_labels: Mapping[str, str], route: str
) -> Manifest:
    """Envoy Gateway's BackendTrafficPolicy on the service's HTTPRoute: retries (Envoy never
    retries once response headers went downstream) and passive health (outlier detection)."""
    return {
        "apiVersion": f"{ENVOY_GROUP}/v1alpha1",
        "kind": "BackendTrafficPolicy",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {
            "targetRefs": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": route}],
            "retry": {
                "numRetries": RETRY_ATTEMPTS - 1,
                "retryOn": {
                    "triggers": [
                        "connect-failure",
                        "refused-stream",
                        "reset",
                        "retriable-status-codes",
                    ],
                    "httpStatusCodes": list(RETRY_STATUSES),
                },
            },
            "healthCheck": {
                "passive": {
                    "consecutive5XxErrors": EJECT_AFTER,
                    "consecutiveGatewayErrors": EJECT_AFTER,
                    "interval": "1s",
                    "baseEjectionTime": EJECTION_TIME,
                    "maxEjectionPercent": MAX_EJECTED_PERCENT,
                }
            },
        },
    }


# --- callers with keys (api.md "Callers") --------------------------------------------------
CALLER_HEADER = "x-modelplane-caller"
# modelplane's own request headers: only the key check sets the caller, only the front door
# the endpoint. A client's are removed first (api.md "Callers"), in every spelling a server
# folding `_` and `-` (CGI/WSGI) would read as them.
OWN_REQUEST_HEADERS = (CALLER_HEADER, "x-modelplane-endpoint")


def header_spellings(name: str) -> list[str]:
    """``name`` with each `-` as `-` or `_`: ``x-a-b`` -> x-a-b, x-a_b, x_a-b, x_a_b."""
    parts = name.split("-")
    spellings = [parts[0]]
    for part in parts[1:]:
        spellings = [f"{s}{sep}{part}" for s in spellings for sep in ("-", "_")]
    return spellings


def client_headers_name(service_name: str) -> str:
    return f"{service_name[:48].rstrip('-')}-client-headers"


def traefik_client_headers_middleware(
    name: str, namespace: str, object_labels: Mapping[str, str]
) -> Manifest:
    """The first Middleware of a ModelService route: every spelling of modelplane's own
    request headers a client sent is removed (an empty value removes a header), before the
    key check sets the caller."""
    removed = {h: "" for own in OWN_REQUEST_HEADERS for h in header_spellings(own)}
    return {
        "apiVersion": f"{TRAEFIK_GROUP}/v1alpha1",
        "kind": "Middleware",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {"headers": {"customRequestHeaders": removed}},
    }


# Envoy Gateway: the rule removes a client's caller header (the front door has no key check
# there, so nothing sets one; underscore spellings are refused by the ClientTrafficPolicy).
REMOVE_CLIENT_CALLER = {
    "type": "RequestHeaderModifier",
    "requestHeaderModifier": {"remove": [CALLER_HEADER]},
}


def auth_name(service_name: str) -> str:
    return f"{service_name}-auth"[:63].rstrip("-")


def strip_key_name(service_name: str) -> str:
    return f"{service_name}-strip-key"[:63].rstrip("-")


def traefik_auth_middleware(
    name: str, namespace: str, object_labels: Mapping[str, str], address: str
) -> Manifest:
    """forwardAuth to the authorization service: a 401 (OpenAI-shaped body) goes back to
    the client as is; on 200 the caller header it answers replaces whatever the client sent."""
    return {
        "apiVersion": f"{TRAEFIK_GROUP}/v1alpha1",
        "kind": "Middleware",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {
            "forwardAuth": {
                "address": address,
                "trustForwardHeader": False,
                "authRequestHeaders": ["Authorization", "X-Api-Key"],
                # The caller's name, and the front door's credentials in place of the key.
                "authResponseHeaders": [CALLER_HEADER, "Authorization"],
            }
        },
    }


def traefik_strip_key_middleware(
    name: str, namespace: str, object_labels: Mapping[str, str]
) -> Manifest:
    """The caller's key stops at the front door (an empty value removes the header). Its
    `Authorization` is already replaced by the forwardAuth answer (the front door's own
    credentials for the workload gateways, or nothing)."""
    return {
        "apiVersion": f"{TRAEFIK_GROUP}/v1alpha1",
        "kind": "Middleware",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {"headers": {"customRequestHeaders": {"X-Api-Key": ""}}},
    }


def service_route(
    name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    prefix: str,
    endpoints: Sequence[EndpointBackend],
    *,
    backend: Literal["Traefik", "EnvoyGateway"],
    gateway: tuple[str, str],
    middlewares: Sequence[str] = (),
    listener: str | None = None,
    pinned: bool = False,
    tiers: Sequence[tuple[int, Sequence[EndpointBackend]]] = (),
) -> Manifest:
    """One HTTPRoute for a ModelService.

    Traefik: one weighted rule, each backendRef with its own URLRewrite to the
    endpoint's rewritePath (and Host for named upstreams).

    Envoy Gateway rejects path rewrites on a backendRef (envoyproxy/gateway#7099),
    so it also gets one weighted rule, with one rule-level rewrite: to `/` for
    replicas (each backendRef sets `x-modelplane-endpoint: <ns>/<replica>`, which
    the replica's route on its cluster gateway matches), and to the common
    rewritePath of the other endpoints; Host rewrites stay per backendRef. A
    service whose endpoints need different paths cannot be one weighted rule there
    and is an error (validation rejects what the specs show; see `envoy_path`).

    `middlewares` (Traefik): Traefik Middlewares of the route's namespace the rule runs
    first, in order (ExtensionRef filters): the key check, then the retries. `listener`:
    the Gateway listener (sectionName) the route attaches to.
    """
    if backend == "Traefik":
        rules = [traefik_rule(prefix, endpoints, middlewares)]
        rules += [tier_rule(prefix, n, eps, middlewares) for n, eps in tiers]
        if pinned and len(endpoints) <= MAX_PINNED - len(tiers):
            rules += [pinned_rule(prefix, ep, middlewares) for ep in endpoints]
    else:
        path = envoy_path(name, namespace, endpoints)
        # `middlewares` here: HTTPRouteFilters each replica's backendRef runs (the front
        # door's credentials, front_door.py; never sent to an outside provider).
        refs = [_envoy_backend_ref(ep, middlewares if ep.replica else ()) for ep in endpoints]
        rules = [
            {
                "matches": [path_match(prefix)],
                "filters": [prefix_rewrite(path), REMOVE_CLIENT_CALLER],
                "backendRefs": refs,
                "timeouts": {"request": "0s"},
            }
        ]
    return _route(name, namespace, object_labels, rules, gateway, listener)


def traefik_rule(
    prefix: str, endpoints: Sequence[EndpointBackend], middlewares: Sequence[str]
) -> dict[str, Any]:
    """One weighted Traefik rule: each backendRef with its own URLRewrite to the endpoint's
    rewritePath (and Host for named upstreams), the Middlewares first."""
    refs = [
        _backend_ref(
            ep,
            [
                _rewrite(ep.rewrite_path, ep.host if ep.address_type == "FQDN" else None),
                # The front door's credentials are for workload gateways only: never to
                # an outside provider or straight to a replica's Service.
                *([] if ep.replica else [REMOVE_FOR_OUTSIDE]),
            ],
        )
        for ep in endpoints
    ]
    rule: dict[str, Any] = {"matches": [path_match(prefix)]}
    if middlewares:
        rule["filters"] = [traefik_middleware_filter(m) for m in middlewares]
    return {**rule, "backendRefs": refs, "timeouts": {"request": "0s"}}


PIN_HEADER = "x-modelplane-pin"
"""Set by the OpenAI router to keep a conversation on one endpoint (`<namespace>/<name>`)."""
MAX_PINNED = 15  # the weighted rule and one per endpoint: Gateway API's 16 rules per route


def pinned_rule(
    prefix: str, endpoint: EndpointBackend, middlewares: Sequence[str]
) -> dict[str, Any]:
    """The service's rule for one endpoint alone, taken by a request whose `x-modelplane-pin`
    names it (a header match is more specific than the weighted rule's path alone): the
    same checks, that endpoint's rewrite. A client sending the header only picks among the
    service's own endpoints."""
    rule = traefik_rule(prefix, [replace(endpoint, weight=1)], middlewares)
    match = path_match(prefix)
    match["headers"] = [{"type": "Exact", "name": PIN_HEADER, "value": endpoint.key}]
    return {**rule, "matches": [match]}


TIER_HEADER = "x-modelplane-tier"
"""Set by the OpenAI router to send a request to a service's overflow tier."""


def tier_rule(
    prefix: str, tier: int, endpoints: Sequence[EndpointBackend], middlewares: Sequence[str]
) -> dict[str, Any]:
    """The service's rule for one overflow tier, taken by a request whose `x-modelplane-tier`
    names it: the same checks, that tier's endpoints by their weights."""
    rule = traefik_rule(prefix, endpoints, middlewares)
    match = path_match(prefix)
    match["headers"] = [{"type": "Exact", "name": TIER_HEADER, "value": str(tier)}]
    return {**rule, "matches": [match]}


def _route(
    name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    rules: list[dict[str, Any]],
    gateway: tuple[str, str],
    listener: str | None,
) -> Manifest:
    gw_name, gw_namespace = gateway
    parent = gateway_ref(gw_name, gw_namespace)
    if listener:
        parent["sectionName"] = listener
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {"parentRefs": [parent], "rules": rules},
    }


# --- services over more endpoints than one rule holds (api.md "Large services") ---------
#
# Gateway API allows 16 backendRefs per rule, and rules with equal matches do not share
# traffic. A Traefik service over more endpoints is split in shards of at most 16: its own
# route sends each request to one shard, weighted by the shard's total, through the front
# door's own Service (a second pass through the same Traefik) with the path rewritten to
# the shard's prefix; each shard's route then picks the endpoint by weight, as one rule
# does for a small service. The shard routes require the fleet's front-door credentials
# (the key check of the first pass sets them), so no caller reaches a shard directly.
MAX_BACKENDS = 16  # backendRefs per HTTPRoute rule (Gateway API CRD maxItems)
MAX_SHARDS = 16  # one rule: at most 16 shards, so at most 256 endpoints
SHARD_PATH = "/_shards"


def shard_prefix(namespace: str, name: str, index: int) -> str:
    return f"{SHARD_PATH}/{namespace}/{name}/{index}/"


def shard_route_name(service_name: str, index: int) -> str:
    return f"{service_name[:50].rstrip('-')}-shard-{index}"


def shards(
    name: str, namespace: str, endpoints: Sequence[EndpointBackend]
) -> list[list[EndpointBackend]]:
    """The endpoints dealt round-robin (in the order given) into the fewest shards of at most
    MAX_BACKENDS each; one shard when they fit in one rule."""
    if len(endpoints) <= MAX_BACKENDS:
        return [list(endpoints)]
    count = -(-len(endpoints) // MAX_BACKENDS)
    if count > MAX_SHARDS:
        raise SplitError(
            f"ModelService {namespace}/{name}: {len(endpoints)} endpoints, but a service "
            f"routes at most {MAX_BACKENDS * MAX_SHARDS} ({MAX_SHARDS} shards of "
            f"{MAX_BACKENDS})"
        )
    return [list(endpoints[k::count]) for k in range(count)]


def sharded_service_routes(
    name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    prefix: str,
    endpoints: Sequence[EndpointBackend],
    *,
    gateway: tuple[str, str],
    loop: dict[str, Any],
    middlewares: Sequence[str],
    shard_middlewares: Sequence[str],
    listener: str | None,
    shard_listener: str,
) -> list[Manifest]:
    """Traefik only: the service's route over its shards, then one route per shard.

    ``loop``: the backendRef of the front door's own Service (its plain-HTTP `web` port);
    ``shard_listener`` is the listener behind it. ``middlewares`` run on the first pass
    (key check, retries), ``shard_middlewares`` on the second (the front-door credentials
    check, retries within the shard)."""
    parts = shards(name, namespace, endpoints)
    refs = [
        {
            **loop,
            "weight": sum(ep.weight for ep in part),
            "filters": [prefix_rewrite(shard_prefix(namespace, name, k))],
        }
        for k, part in enumerate(parts)
    ]
    rule: dict[str, Any] = {"matches": [path_match(prefix)]}
    if middlewares:
        rule["filters"] = [traefik_middleware_filter(m) for m in middlewares]
    first = _route(
        name,
        namespace,
        object_labels,
        [{**rule, "backendRefs": refs, "timeouts": {"request": "0s"}}],
        gateway,
        listener,
    )
    return [
        first,
        *(
            _route(
                shard_route_name(name, k),
                namespace,
                object_labels,
                [traefik_rule(shard_prefix(namespace, name, k), part, shard_middlewares)],
                gateway,
                shard_listener,
            )
            for k, part in enumerate(parts)
        ),
    ]


def reference_grant(
    name: str, namespace: str, object_labels: Mapping[str, str], from_namespace: str, service: str
) -> Manifest:
    """Lets the HTTPRoutes of ``from_namespace`` name Service ``service`` of ``namespace``."""
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {
            "from": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "namespace": from_namespace}],
            "to": [{"group": "", "kind": "Service", "name": service}],
        },
    }


def endpoint_slice(
    name: str,
    namespace: str,
    service: str,
    object_labels: Mapping[str, str],
    url: ParsedURL,
    *,
    port_name: str = "http",
) -> Manifest:
    """The one address of a selectorless Service (IPv4, IPv6 or FQDN by the URL's host)."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": metadata(
            name, namespace, {**object_labels, "kubernetes.io/service-name": service}
        ),
        "addressType": url.address_type,
        "endpoints": [{"addresses": [url.host], "conditions": {"ready": True}}],
        "ports": [{"name": port_name, "port": url.port, "protocol": "TCP"}],
    }


def envoy_backend(
    name: str, namespace: str, object_labels: Mapping[str, str], url: ParsedURL
) -> Manifest:
    """An Envoy Gateway Backend for a named (FQDN) upstream, TLS when the URL is https."""
    endpoint: dict[str, Any]
    if url.address_type == "FQDN":
        endpoint = {"fqdn": {"hostname": url.host, "port": url.port}}
    else:
        endpoint = {"ip": {"address": url.host, "port": url.port}}
    spec: dict[str, Any] = {"endpoints": [endpoint]}
    if url.scheme == "https":
        spec["tls"] = {"wellKnownCACertificates": "System", "sni": url.host}
    return {
        "apiVersion": f"{ENVOY_GROUP}/v1alpha1",
        "kind": "Backend",
        "metadata": metadata(name, namespace, object_labels),
        "spec": spec,
    }
