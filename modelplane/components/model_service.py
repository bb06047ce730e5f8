"""ModelService and ModelEndpoint on the control-plane gateway.

A ModelEndpoint (hand-written for an outside provider, or composed for a placed
replica) becomes a backend on the gateway cluster, in the endpoint's namespace:

- a selectorless Service plus a `discovery.k8s.io/v1` EndpointSlice holding the
  URL's host, addressType IPv4, IPv6 or FQDN (Traefik resolves all three; an
  ExternalName Service is avoided because Traefik rejects it). An https URL
  marks the Service port `appProtocol: https` so the gateway speaks TLS upstream;
- with Envoy Gateway, an endpoint whose host is a name or whose scheme is https
  is an Envoy `Backend` instead (fqdn/ip endpoint, TLS with the system CAs), which
  Envoy Gateway resolves itself; the cluster's Envoy Gateway runs with the
  Backend API enabled.

A ModelService is one HTTPRoute matching `/<namespace>/<name>/`, weighted over
the endpoints its entries select (api.md "Weights", `modelplane.routing`).
Entries select endpoints of the service's own namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlencode

import pulumi

from modelplane import fleet_pki
from modelplane.api.model_service import ModelEndpoint, ModelService, ParsedURL, parse_endpoint_url
from modelplane.api.names import child_name
from modelplane.components.gateway import INTERNAL_SERVICE, TRAEFIK
from modelplane.components.workload import front_door as hop
from modelplane.components.workload import gateway_tls
from modelplane.components.workload.objects import (
    ENDPOINT,
    SERVICE,
    Manifest,
    app_labels,
    dns1035,
    hand_off,
    labels,
    register,
)
from modelplane.components.workload.routes import (
    ENVOY_GROUP,
    MAX_BACKENDS,
    EndpointBackend,
    SplitError,
    auth_name,
    client_headers_name,
    endpoint_slice,
    envoy_backend,
    envoy_retry_policy,
    reference_grant,
    retry_name,
    service_manifest,
    service_route,
    sharded_service_routes,
    strip_key_name,
    traefik_auth_middleware,
    traefik_client_headers_middleware,
    traefik_retry_middleware,
    traefik_strip_key_middleware,
)
from modelplane.routing import WeightedGroup, endpoint_weights

Backend = Literal["Traefik", "EnvoyGateway"]
# The front door's own Service (the Traefik chart's, as modelplane installs it; the dev fleet
# publishes the same): the second pass of a sharded service goes through its `web` port. With
# `tls.http: Refuse` that Service has no port 80: the chart's ClusterIP Service
# `LOOP_INTERNAL_SERVICE` publishes `web` inside the cluster only (modelplane.components.gateway).
LOOP_SERVICE = str(TRAEFIK["release"])
LOOP_INTERNAL_SERVICE = INTERNAL_SERVICE
LOOP_NAMESPACE = str(TRAEFIK["namespace"])
LOOP_PORT = 80
# The same Service by its cluster DNS name: where the OpenAI router sends a request on.
LOOP_URL = f"http://{LOOP_SERVICE}.{LOOP_NAMESPACE}.svc.cluster.local:{LOOP_PORT}"
LOOP_TLS_URL = f"https://{LOOP_SERVICE}.{LOOP_NAMESPACE}.svc.cluster.local:443"


@dataclass(frozen=True)
class EndpointInfo:
    """A ModelEndpoint as the gateway needs it: where it is and how it is labelled."""

    name: str
    namespace: str
    url: str | None
    rewrite_path: str = "/"
    labels: Mapping[str, str] = field(default_factory=dict)
    # A replica on the gateway's own cluster whose cluster gateway has no address
    # (a renderTo cluster): the gateway routes straight to the replica's Service.
    service: str | None = None
    service_port: int = 8000
    # A replica's composed endpoint (a deployment stack's record), reached through its
    # cluster gateway's replica route.
    replica: bool = False
    cluster: str | None = None
    # A Traefik front door reaches a replica's workload gateway over mutual TLS through its
    # own Service once more (gateway_tls.py): that Service (name, namespace, port) and the
    # prefix its IngressRoute for the cluster takes off. None: straight to ``url``.
    via: tuple[str, str, int] | None = None
    via_prefix: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def parsed(self) -> ParsedURL:
        if self.url is None:
            raise ValueError(f"endpoint {self.key} has no url")
        return parse_endpoint_url(self.url)

    @classmethod
    def from_spec(cls, endpoint: ModelEndpoint) -> EndpointInfo:
        return cls(
            endpoint.metadata.name,
            endpoint.metadata.namespace or "default",
            endpoint.spec.url,
            endpoint.spec.rewrite_path,
            dict(endpoint.metadata.labels),
        )

    @classmethod
    def from_record(
        cls, record: Mapping[str, Any], *, gateway_cluster: str | None = None
    ) -> EndpointInfo | None:
        """From a deployment stack's `endpoints` output entry.

        An entry without a url is usable only on its own cluster (through its
        Service); elsewhere it is None (not routable yet).
        """
        labels = {str(k): str(v) for k, v in (record.get("labels") or {}).items()}
        if record.get("url"):
            return cls(
                str(record["name"]),
                str(record["namespace"]),
                str(record["url"]),
                str(record.get("rewritePath") or "/"),
                labels,
                replica=bool(record.get("cluster")),
                cluster=str(record["cluster"]) if record.get("cluster") else None,
            )
        service = record.get("service") or {}
        if gateway_cluster and record.get("cluster") == gateway_cluster and service.get("name"):
            return cls(
                str(record["name"]),
                str(record["namespace"]),
                None,
                "/",
                labels,
                service=str(service["name"]),
                service_port=int(service.get("port") or 8000),
            )
        return None


def uses_envoy_backend(endpoint: EndpointInfo, url: ParsedURL, backend: Backend) -> bool:
    """An Envoy Gateway `Backend` for a named upstream, or a TLS one outside the fleet; a
    replica's workload gateway at an IP is a Service (both with a BackendTLSPolicy then,
    gateway_tls.py)."""
    if backend != "EnvoyGateway":
        return False
    return url.address_type == "FQDN" or (url.scheme == "https" and not endpoint.replica)


def endpoint_object_name(endpoint: EndpointInfo) -> str:
    """Name of the endpoint's Service/Backend (prefixed, so it never collides with a
    workload Service of the same replica on a cluster that is also the gateway's)."""
    return dns1035("ep", endpoint.name)


def backend_ref(endpoint: EndpointInfo, backend: Backend) -> dict[str, Any]:
    if endpoint.via is not None:
        name, namespace, port = endpoint.via
        return {"group": "", "kind": "Service", "name": name, "namespace": namespace, "port": port}
    if endpoint.service is not None:
        return {
            "group": "",
            "kind": "Service",
            "name": endpoint.service,
            "port": endpoint.service_port,
        }
    url = endpoint.parsed
    name = endpoint_object_name(endpoint)
    if uses_envoy_backend(endpoint, url, backend):
        return {"group": ENVOY_GROUP, "kind": "Backend", "name": name}
    return {"group": "", "kind": "Service", "name": name, "port": url.port}


def endpoint_manifests(
    endpoint: EndpointInfo, backend: Backend, fleet_ca_cert: Any = None
) -> list[Manifest]:
    """The endpoint's Service (or Envoy Backend) on the front door's cluster; ``fleet_ca_cert``
    (the fleet CA's certificate): a replica's gateway is reached over mutual TLS."""
    if endpoint.service is not None:
        return []  # the replica's own Service already exists on this cluster
    if endpoint.via is not None:
        return []  # the front door's own Service, and the cluster's hop (gateway_tls.py)
    url = endpoint.parsed
    name = endpoint_object_name(endpoint)
    object_labels = labels(
        app_labels(endpoint.name, endpoint.name, "endpoint"), {ENDPOINT: endpoint.name}
    )
    out: list[Manifest]
    if uses_envoy_backend(endpoint, url, backend):
        backend_object = envoy_backend(name, endpoint.namespace, object_labels, url)
        if endpoint.replica:
            backend_object["spec"].pop("tls", None)  # the BackendTLSPolicy's, below
        out = [backend_object]
        target = {"group": ENVOY_GROUP, "kind": "Backend", "name": name}
    else:
        out = [
            service_manifest(
                name,
                endpoint.namespace,
                object_labels,
                None,
                port=url.port,
                app_protocol="https" if url.scheme == "https" else None,
            ),
            endpoint_slice(child_name(name, "addr"), endpoint.namespace, name, object_labels, url),
        ]
        target = {"group": "", "kind": "Service", "name": name}
    if endpoint.replica and endpoint.cluster and fleet_ca_cert is not None:
        # Envoy Gateway: TLS to the workload gateway, the fleet CA and its server name; the
        # client certificate is the front door Gateway's (gateway_tls.py).
        ca = child_name(name, "ca")
        out += [
            gateway_tls.ca_config_map(ca, endpoint.namespace, object_labels, fleet_ca_cert),
            gateway_tls.envoy_backend_tls(
                name,
                endpoint.namespace,
                object_labels,
                target,
                fleet_pki.server_name(endpoint.cluster),
                ca,
            ),
        ]
    return out


def select_endpoints(
    service: ModelService, endpoints: Sequence[EndpointInfo]
) -> list[WeightedGroup]:
    """Per entry, the endpoints (same namespace) its selector matches, in key order."""
    ns = service.metadata.namespace or "default"
    candidates = sorted((e for e in endpoints if e.namespace == ns), key=lambda e: e.key)
    return [
        WeightedGroup(
            entry.weight,
            [e.key for e in candidates if entry.selector.matches(dict(e.labels))],
        )
        for entry in service.spec.endpoints
    ]


def tiered_backends(
    service: ModelService, endpoints: Sequence[EndpointInfo], backend: Backend
) -> list[tuple[int, list[EndpointBackend]]]:
    """Per tier with an endpoint (ascending), its endpoints weighted among themselves (an
    endpoint belongs to the first entry that selects it, whatever the tier)."""
    groups = select_endpoints(service, endpoints)
    seen: set[str] = set()
    per_tier: dict[int, list[WeightedGroup]] = {}
    for entry, group in zip(service.spec.endpoints, groups, strict=True):
        mine = [k for k in group.endpoints if k not in seen]
        seen.update(mine)
        per_tier.setdefault(entry.tier, []).append(WeightedGroup(group.weight, mine))
    out = []
    for tier in sorted(per_tier):
        weights = endpoint_weights(per_tier[tier])
        if weights:
            out.append((tier, _backends(weights, endpoints, backend)))
    return out


def service_backends(
    service: ModelService, endpoints: Sequence[EndpointInfo], backend: Backend
) -> list[EndpointBackend]:
    """What the service's weighted rule serves: its first tier that has an endpoint (so a
    lower tier serves every request once the tiers above it have none in the route)."""
    tiers = tiered_backends(service, endpoints, backend)
    return tiers[0][1] if tiers else []


def overflow_backends(
    service: ModelService, endpoints: Sequence[EndpointInfo], backend: Backend
) -> list[tuple[int, list[EndpointBackend]]]:
    """The tiers below the serving one: reached by the OpenAI router's `x-modelplane-tier`
    when the tiers above refuse a request before answering."""
    return tiered_backends(service, endpoints, backend)[1:]


def _backends(
    weights: Mapping[str, int], endpoints: Sequence[EndpointInfo], backend: Backend
) -> list[EndpointBackend]:
    by_key = {e.key: e for e in endpoints}
    out: list[EndpointBackend] = []
    for key, weight in weights.items():
        ep = by_key[key]
        if ep.service is not None or ep.via is not None:
            host, address_type = None, "Service"
        else:
            url = ep.parsed
            host, address_type = url.host, url.address_type
        out.append(
            EndpointBackend(
                key=key,
                backend=backend_ref(ep, backend),
                rewrite_path=ep.via_prefix + ep.rewrite_path,
                host=host,
                address_type=address_type,  # type: ignore[arg-type]
                weight=weight,
                replica=ep.replica and ep.service is None,
            )
        )
    return out


def _route_labels(service: ModelService) -> dict[str, str]:
    return labels(
        app_labels(service.metadata.name, service.metadata.name, "service-route"),
        {SERVICE: service.metadata.name},
    )


@dataclass(frozen=True)
class FrontDoor:
    """What every service route on the InferenceGateway shares: the listener it attaches
    to and the scheme of its URL (`spec.tls`), and the authorization service to ask
    (`spec.auth`; None: no key check)."""

    listener: str | None = None
    scheme: str = "http"
    authz_address: str | None = None
    # Envoy Gateway: the front door's credentials for the workload gateways (a secret
    # Output), injected per service route (front_door.py); Traefik's come from authz.
    credential: Any = None
    # Traefik, services over more than 16 endpoints (routes.py "shards"): the htpasswd line
    # of the front door's credentials (a secret Output) the shard routes check, and the
    # plain-HTTP listener the front door's own Service reaches (None: no such listener).
    shard_users: Any = None
    # The front door's cluster only renders manifests (renderTo): Secrets go to the rendered
    # folder without their values (objects.hand_off).
    render_only: bool = False
    shard_listener: str | None = None
    # The Service (in LOOP_NAMESPACE, port LOOP_PORT) the second pass goes through.
    loop_service: str = LOOP_SERVICE
    # Envoy Gateway, services with model names: the loop Gateway's parentRef their route adds,
    # the second pass of a request by model name (modelplane/components/ai_gateway.py).
    openai_loop: Mapping[str, Any] | None = None


def _first_pass_middlewares(name: str, backend: Backend, door: FrontDoor) -> list[str]:
    middlewares: list[str] = []
    if backend == "Traefik":
        middlewares.append(client_headers_name(name))  # a client's x-modelplane-* go first
        if door.authz_address:
            middlewares += [auth_name(name), strip_key_name(name)]
        middlewares.append(retry_name(name))
    elif door.credential is not None:
        middlewares.append(hop.injection_name(name))
    return middlewares


def service_route_manifests(
    service: ModelService,
    endpoints: Sequence[EndpointInfo],
    backend: Backend,
    gateway: tuple[str, str],
    front_door: FrontDoor | None = None,
) -> list[Manifest]:
    """The service's HTTPRoute (last); over more than 16 endpoints (Traefik), first its
    shards' routes and what they need (routes.py "shards"). Empty: no endpoint selected."""
    backends = service_backends(service, endpoints, backend)
    if not backends:
        return []
    overflow = overflow_backends(service, endpoints, backend) if backend == "Traefik" else []
    for tier, eps in overflow:
        if len(eps) > MAX_BACKENDS:
            raise SplitError(
                f"ModelService {service.key}: tier {tier} has {len(eps)} endpoints, more "
                f"than the {MAX_BACKENDS} one route rule holds"
            )
    door = front_door or FrontDoor()
    name, ns = service.metadata.name, service.metadata.namespace or "default"
    middlewares = _first_pass_middlewares(name, backend, door)
    if len(backends) <= MAX_BACKENDS:
        route = service_route(
            name,
            ns,
            _route_labels(service),
            service.path_prefix,
            backends,
            backend=backend,
            gateway=gateway,
            middlewares=middlewares,
            listener=door.listener,
            # The Traefik router keeps a conversation on one endpoint (model_router.py).
            pinned=backend == "Traefik" and bool(service.spec.models),
            tiers=overflow,
        )
        if door.openai_loop is not None and service.spec.models:
            route["spec"]["parentRefs"].append(dict(door.openai_loop))
        looped = {
            b.backend["name"]
            for _, tier in [(0, backends), *overflow]
            for b in tier
            if b.backend.get("namespace") == LOOP_NAMESPACE
        }
        # A replica through the front door's own Service (gateway_tls.py): the route's
        # namespace may name it.
        grants = [
            reference_grant(
                dns1035("gateways", ns, name), LOOP_NAMESPACE, _route_labels(service), ns, loop
            )
            for loop in sorted(looped)
        ]
        return [*grants, route]
    if overflow:
        raise SplitError(
            f"ModelService {service.key}: {len(backends)} endpoints in its first tier, more "
            f"than the {MAX_BACKENDS} one route rule holds, and overflow tiers: not supported "
            "together (use fewer endpoints per tier, or one tier)"
        )
    problem = _shard_problem(backend, door)
    if problem:
        raise SplitError(
            f"ModelService {service.key}: {len(backends)} endpoints, more than the "
            f"{MAX_BACKENDS} one route rule holds, and {problem}"
        )
    object_labels = _route_labels(service)
    check = shard_check_name(name)
    first, *shard_routes = sharded_service_routes(
        name,
        ns,
        object_labels,
        service.path_prefix,
        backends,
        gateway=gateway,
        loop={
            "group": "",
            "kind": "Service",
            "name": door.loop_service,
            "namespace": LOOP_NAMESPACE,
            "port": LOOP_PORT,
        },
        middlewares=middlewares,
        shard_middlewares=[check, retry_name(name)],
        listener=door.listener,
        shard_listener=door.shard_listener or "",
    )
    # In the order they must exist: nothing is sent to a shard before its route and check.
    return [
        *hop.check_manifests(
            "Traefik", check, ns, object_labels, door.shard_users, (), remove_header=False
        ),
        reference_grant(
            dns1035("shards", ns, name), LOOP_NAMESPACE, object_labels, ns, door.loop_service
        ),
        *shard_routes,
        first,
    ]


def _shard_problem(backend: Backend, door: FrontDoor) -> str | None:
    if backend != "Traefik":
        return "the EnvoyGateway backend routes a service as one rule (use Traefik)"
    if door.shard_listener is None:
        return "the InferenceGateway has no plain-HTTP listener for the second pass"
    if door.shard_users is None:
        return "the gateway stack has no front-door key to guard the shards with"
    return None


def shard_check_name(service_name: str) -> str:
    return f"{service_name[:48].rstrip('-')}-shard-check"


def service_route_manifest(
    service: ModelService,
    endpoints: Sequence[EndpointInfo],
    backend: Backend,
    gateway: tuple[str, str],
    front_door: FrontDoor | None = None,
) -> Manifest | None:
    """The service's own HTTPRoute (the one its URL reaches); None: no endpoint selected."""
    routes = service_route_manifests(service, endpoints, backend, gateway, front_door)
    return routes[-1] if routes else None


def service_policy_manifests(
    service: ModelService, backend: Backend, front_door: FrontDoor | None = None
) -> list[Manifest]:
    """What the service route's rule runs before its backends: on Traefik a client's
    x-modelplane-* headers removed, the key check (forwardAuth, then the key removed) with
    `spec.auth`, and the retries, as Middlewares
    the rule references; on Envoy Gateway a BackendTrafficPolicy (retries, passive health)."""
    name, ns = service.metadata.name, service.metadata.namespace or "default"
    object_labels = _route_labels(service)
    door = front_door or FrontDoor()
    out: list[Manifest] = []
    if backend != "Traefik":
        out.append(envoy_retry_policy(retry_name(name), ns, object_labels, name))
        if door.credential is not None:
            out += hop.envoy_injection(hop.injection_name(name), ns, object_labels, door.credential)
        return out
    out.append(traefik_client_headers_middleware(client_headers_name(name), ns, object_labels))
    if door.authz_address:
        address = door.authz_address
        if service.spec.callers is not None:  # only these callers (the service's spec)
            address += "?" + urlencode({"callers": ",".join(service.spec.callers)})
        out.append(traefik_auth_middleware(auth_name(name), ns, object_labels, address))
        out.append(traefik_strip_key_middleware(strip_key_name(name), ns, object_labels))
    out.append(traefik_retry_middleware(retry_name(name), ns, object_labels))
    return out


class ModelEndpointComponent(pulumi.ComponentResource):
    """`modelplane:gateway:ModelEndpoint`: one endpoint's backend on the gateway cluster.

    Output `backend_ref`: the HTTPRoute backendRef that reaches it.
    """

    backend_ref: pulumi.Output[dict[str, Any]]

    def __init__(
        self,
        name: str,
        endpoint: EndpointInfo,
        *,
        backend: Backend,
        fleet_ca_cert: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("modelplane:gateway:ModelEndpoint", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        for manifest in endpoint_manifests(endpoint, backend, fleet_ca_cert):
            register(manifest, child, scope="gateway")
        self.backend_ref = pulumi.Output.from_input(backend_ref(endpoint, backend))
        self.register_outputs({"backendRef": self.backend_ref})


class ModelServiceComponent(pulumi.ComponentResource):
    """`modelplane:gateway:ModelService`: the service's weighted HTTPRoute.

    `endpoints` are every endpoint known to the gateway (hand-written and
    composed); the service's entries select among them. Output `address`:
    `http://<gateway address>/<namespace>/<name>/` (None until the gateway has an
    address), and `weights` per endpoint key.
    """

    address: pulumi.Output[str | None]
    weights: pulumi.Output[dict[str, int]]

    def __init__(
        self,
        name: str,
        service: ModelService,
        endpoints: Sequence[EndpointInfo],
        *,
        backend: Backend,
        gateway_address: pulumi.Input[str | None],
        gateway: tuple[str, str],
        front_door: FrontDoor | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("modelplane:gateway:ModelService", name, None, opts)
        door = front_door or FrontDoor()
        try:
            routes = service_route_manifests(service, endpoints, backend, gateway, door)
        except SplitError as exc:
            # Reported as a program error (no Python traceback): the specs validate, but the
            # endpoints the deployment stacks composed cannot be one weighted route here.
            raise pulumi.RunError(str(exc)) from None
        if not routes:
            pulumi.log.warn(
                f"ModelService {service.key}: no endpoint matches its selectors; no route",
                resource=self,
            )
        else:
            # Its Middlewares first: a Traefik route naming a Middleware that does not
            # exist yet answers 404 until it does (and never lets a request in unchecked).
            policies = [
                register(
                    hand_off(manifest) if door.render_only else manifest,
                    pulumi.ResourceOptions(parent=self, depends_on=list(depends_on) or None),
                    scope="gateway",
                )
                for manifest in service_policy_manifests(service, backend, door)
            ]
            # Shards: their check and ReferenceGrant, then the shard routes, then the service's
            # own route (nothing is sent to a shard before its route exists).
            *others, first = routes
            shard_objects = [
                register(
                    hand_off(manifest) if door.render_only else manifest,
                    pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, *policies]),
                    scope="gateway",
                )
                for manifest in others
            ]
            register(
                first,
                pulumi.ResourceOptions(
                    parent=self, depends_on=[*depends_on, *policies, *shard_objects]
                ),
                scope="gateway",
            )
        prefix = service.path_prefix
        scheme = door.scheme
        self.address = pulumi.Output.from_input(gateway_address).apply(
            lambda a: f"{scheme}://{a}{prefix}" if a else None
        )
        self.weights = pulumi.Output.from_input(
            {b.key: b.weight for b in service_backends(service, endpoints, backend)}
        )
        self.register_outputs({"address": self.address, "weights": self.weights})
