"""InferenceGateway: the fleet's front door, where ModelService routes live.

Traefik (chart `traefik`, its Kubernetes Gateway provider on) or Envoy Gateway
(chart `gateway-helm`), as a Helm release with a fixed name (`mp-traefik`,
`mp-envoy-gateway`), then a GatewayClass and the Gateway `modelplane` in
`modelplane-system` accepting routes from every namespace (on Envoy Gateway with the
EnvoyProxy `modelplane-proxy` it names: two proxies and a budget, cloud review m8).

- On a `renderTo` cluster there is no API server to install a chart into, so
  the Helm release is skipped and only the Gateway API objects are rendered
  (the platform team installs the controller from the rendered directory's
  hand-off, as for the serving stack).
- Envoy Gateway on an InferenceCluster whose serving stack is installed reuses
  the serving stack's `mp-envoy-gateway` release (two releases of one chart
  under one name would fight); only the GatewayClass and Gateway are added.

Traefik is the default because per-backend path rewrites in one weighted rule
work there; on Envoy Gateway (envoyproxy/gateway#7099) a service is one rule with
one rewrite and replicas named by header (`modelplane.components.workload.routes`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

import modelplane.authz as authz_module
from modelplane import fleet_pki
from modelplane.api.inference_gateway import (
    GATEWAY_CHART_VERSIONS,
    HEALTH_PATH,
    InferenceGateway,
)
from modelplane.caller_keys import live_keys, parse_keys, rfc3339
from modelplane.components.images import FRONT_DOOR_IMAGE, front_door_image
from modelplane.components.load_balancers import (
    HSTS,
    HSTS_SECONDS,
    client_traffic_policy,
    service_annotations,
)
from modelplane.components.serving_stack import (
    envoy_proxy_manifest,
    envoy_proxy_ref,
    load_balancer_namespace,
)
from modelplane.components.workload import front_door, gateway_tls
from modelplane.components.workload.front_door import htpasswd
from modelplane.components.workload.network_policies import authz_policy
from modelplane.components.workload.objects import (
    ROUTES_FROM,
    SKIP_AWAIT,
    SYSTEM_NAMESPACE,
    Manifest,
    app_labels,
    ensure_namespace,
    hand_off,
    labels,
    metadata,
    register,
)
from modelplane.components.workload.routes import GATEWAY_GROUP, gateway_ref
from modelplane.observe.usage import access_log_arguments

GATEWAY_NAME = "modelplane"
TRAEFIK = {
    "release": "mp-traefik",
    "chart": "traefik",
    "repo": "https://traefik.github.io/charts",
    # traefik/traefik-helm-chart tag v41.3.0 (2026-08-21, Traefik v3.7.11); every values key
    # below checked against its values.yaml. Since 40.2.0 the chart ships no Gateway API CRDs:
    # they come from the serving stack's vendored bundle, or the platform (docs/api.md).
    # The pin is the allowlist's first (`spec.version` may name only an allowed one, M10).
    "version": GATEWAY_CHART_VERSIONS["Traefik"][0],
    "namespace": "traefik-system",
    "controller": "traefik.io/gateway-controller",
    "class": "traefik",
    "port": 8000,  # Traefik's `web` entrypoint; its Service exposes 80
    "tls_port": 8443,  # Traefik's `websecure` entrypoint; its Service exposes 443
}
ENVOY = {
    "release": "mp-envoy-gateway",
    "chart": "oci://docker.io/envoyproxy/gateway-helm",
    "repo": None,
    # = the serving stack's envoyGateway pin (components/charts.py), the allowlist's first.
    "version": GATEWAY_CHART_VERSIONS["EnvoyGateway"][0],
    "namespace": "envoy-gateway-system",
    "controller": "gateway.envoyproxy.io/gatewayclass-controller",
    "class": "modelplane-envoy",
    "port": 80,
    "tls_port": 443,
}
DIAL_TIMEOUT = "2s"
GATEWAY_LABELS = labels(
    app_labels("inference-gateway", GATEWAY_NAME, "gateway"), {"modelplane.ai/gateway": "default"}
)
WAIT_FOR_ADDRESS = {"pulumi.com/waitFor": "jsonpath={.status.addresses[0].value}"}


def backend_settings(backend: Literal["Traefik", "EnvoyGateway"]) -> dict[str, Any]:
    return TRAEFIK if backend == "Traefik" else ENVOY


def release_values(
    backend: Literal["Traefik", "EnvoyGateway"],
    cloud: str | None = None,
    namespaces: Sequence[str] = (SYSTEM_NAMESPACE,),
    tls: Literal["Redirect", "Refuse"] | None = None,
) -> dict[str, Any]:
    """The controller's Helm values; on ``cloud`` (GKE, EKS) Traefik's Service holds a silent
    request for the longest request (modelplane.components.load_balancers). Traefik reads its own
    objects (Middlewares, IngressRoutes) from modelplane's ``namespaces`` only: an
    IngressRoute elsewhere is not served (security review H3). ``tls`` (`spec.tls.http`):
    the transport settings of `traefik_transport_values` (security review M5)."""
    if backend == "Traefik":
        annotations = service_annotations(cloud, internal=False)
        transport = traefik_transport_values(tls)
        crd: dict[str, Any] = {"enabled": True, "namespaces": sorted(set(namespaces))}
        if tls is not None:
            # Only modelplane's own TLSOption `default` counts (tls_option).
            crd["defaultTLSResourcesNamespace"] = SYSTEM_NAMESPACE
        service: dict[str, Any] = {
            **({"annotations": annotations} if annotations else {}),
            **transport.get("service", {}),
        }
        return {
            **({"service": service} if service else {}),
            **({"ports": transport["ports"]} if "ports" in transport else {}),
            "providers": {
                "kubernetesGateway": {
                    "enabled": True,
                    "statusAddress": {
                        "service": {"name": TRAEFIK["release"], "namespace": TRAEFIK["namespace"]}
                    },
                },
                "kubernetesIngress": {"enabled": False},
                # The ModelService routes' retry Middlewares (api.md "Retries and ejection").
                "kubernetesCRD": crd,
            },
            # A dead (blackholed) endpoint costs one retry of at most this, not Go's 30 s;
            # the access log (JSON, the caller header only) `modelplane usage` counts.
            "additionalArguments": [
                f"--serversTransport.forwardingTimeouts.dialTimeout={DIAL_TIMEOUT}",
                *access_log_arguments(),
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


# The front door's listeners: `web` (plain HTTP) and, with `spec.tls`, `websecure`.
WEB, WEBSECURE = "web", "websecure"
TLS_SECRET = "modelplane-front-door-tls"
HOP_CHECK = "modelplane-gateway-hop-check"
"""The Middleware (and its htpasswd Secret) the second pass to a workload gateway runs first:
the front door's credentials, which only its first pass adds (gateway_tls.py)."""
REDIRECT_ROUTE = "modelplane-https-redirect"


def service_listener(gateway: InferenceGateway) -> str:
    """The listener ModelService routes attach to."""
    return WEBSECURE if gateway.spec.tls is not None else WEB


def gateway_manifest(
    backend: Literal["Traefik", "EnvoyGateway"],
    *,
    await_address: bool = True,
    tls: Literal["Redirect", "Refuse"] | None = None,
    cloud: str | None = None,
    client_certificate: bool = False,
) -> Manifest:
    """``client_certificate`` (Envoy Gateway): the front door presents the fleet's client
    certificate to every backend it reaches over TLS (`spec.tls.backend`; the workload
    gateways, gateway_tls.py). ``tls``: a `websecure` HTTPS listener with the front door's
    certificate (Secret `TLS_SECRET`); `web` stays for the redirect to https (`Redirect`) or
    goes (`Refuse`).
    Traefik keeps `web` on Refuse as an internal listener: its entrypoint is on no
    LoadBalancer port (chart values, `traefik_transport_values`), only on the ClusterIP
    Service `INTERNAL_SERVICE`, for a sharded service's second pass (api.md "Large
    services"); no ModelService route attaches to it.
    ``cloud``: Envoy Gateway puts `spec.infrastructure.annotations` on the proxy's Service
    (its load balancer's idle timeout; Traefik's Service takes them from the chart values).
    Envoy Gateway: `spec.infrastructure.parametersRef` names the front door's EnvoyProxy (two
    proxies and a budget, serving_stack.envoy_proxy_manifest)."""
    s = backend_settings(backend)
    # When a controller is known to program the Gateway, wait for it to publish an address
    # (as the serving stack's Gateway does), so service URLs are known at the end of the
    # same `up`. Without one, waiting could only time out.
    wait = WAIT_FOR_ADDRESS if await_address else None
    annotations = service_annotations(cloud, internal=False) if backend == "EnvoyGateway" else {}
    infrastructure: dict[str, Any] = {"annotations": annotations} if annotations else {}
    if backend == "EnvoyGateway":
        infrastructure["parametersRef"] = envoy_proxy_ref(GATEWAY_NAME)
    listeners: list[dict[str, Any]] = []
    if tls != "Refuse" or backend == "Traefik":
        listeners.append(
            {
                "name": WEB,
                "protocol": "HTTP",
                "port": s["port"],
                "allowedRoutes": ROUTES_FROM,
            }
        )
    if tls is not None:
        listeners.append(
            {
                "name": WEBSECURE,
                "protocol": "HTTPS",
                "port": s["tls_port"],
                "tls": {
                    "mode": "Terminate",
                    "certificateRefs": [{"group": "", "kind": "Secret", "name": TLS_SECRET}],
                },
                "allowedRoutes": ROUTES_FROM,
            }
        )
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "Gateway",
        "metadata": metadata(GATEWAY_NAME, SYSTEM_NAMESPACE, GATEWAY_LABELS, wait),
        "spec": {
            **({"infrastructure": infrastructure} if infrastructure else {}),
            "gatewayClassName": s["class"],
            "listeners": listeners,
            **(
                {
                    "tls": {
                        "backend": {
                            "clientCertificateRef": {
                                "group": "",
                                "kind": "Secret",
                                "name": gateway_tls.CLIENT_SECRET,
                            }
                        }
                    }
                }
                if client_certificate and backend == "EnvoyGateway"
                else {}
            ),
        },
    }


def redirect_route() -> Manifest:
    """Every plain-HTTP request answered with a redirect to https (`tls.http: Redirect`)."""
    parent = {**gateway_ref(GATEWAY_NAME, SYSTEM_NAMESPACE), "sectionName": WEB}
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(REDIRECT_ROUTE, SYSTEM_NAMESPACE, GATEWAY_LABELS),
        "spec": {
            "parentRefs": [parent],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "filters": [
                        {
                            "type": "RequestRedirect",
                            "requestRedirect": {"scheme": "https", "statusCode": 301},
                        }
                    ],
                }
            ],
        },
    }


HEALTH_ROUTE = "modelplane-front-door-health"
ENVOY_EXTENSION_GROUP = "gateway.envoyproxy.io"


def health_manifests(backend: Literal["Traefik", "EnvoyGateway"], tls: bool) -> list[Manifest]:
    """`GET /.well-known/modelplane/health` answered 200 by the front door itself, with no
    key, on the listener callers use: what the fleet address's health checks ask (api.md,
    "More than one front door"). Traefik: an IngressRoute to its own `ping@internal` (the
    chart enables ping for its probes), ahead of every other route; Envoy Gateway: an
    HTTPRoute whose one rule answers directly (an HTTPRouteFilter)."""
    if backend == "Traefik":
        route: dict[str, Any] = {
            "entryPoints": [WEBSECURE if tls else WEB],
            "routes": [
                {
                    "kind": "Rule",
                    "match": f"Path(`{HEALTH_PATH}`)",
                    # Above any rule a ModelService path could make (Traefik ranks rules by
                    # length unless told).
                    "priority": 1_000_000,
                    "services": [{"name": "ping@internal", "kind": "TraefikService"}],
                }
            ],
        }
        if tls:
            route["tls"] = {"secretName": TLS_SECRET}
        return [
            {
                "apiVersion": "traefik.io/v1alpha1",
                "kind": "IngressRoute",
                "metadata": metadata(HEALTH_ROUTE, SYSTEM_NAMESPACE, GATEWAY_LABELS),
                "spec": route,
            }
        ]
    answer = {
        "apiVersion": f"{ENVOY_EXTENSION_GROUP}/v1alpha1",
        "kind": "HTTPRouteFilter",
        "metadata": metadata(HEALTH_ROUTE, SYSTEM_NAMESPACE, GATEWAY_LABELS),
        "spec": {
            "directResponse": {
                "contentType": "text/plain",
                "statusCode": 200,
                "body": {"type": "Inline", "inline": "OK"},
            }
        },
    }
    parent = {
        **gateway_ref(GATEWAY_NAME, SYSTEM_NAMESPACE),
        "sectionName": WEBSECURE if tls else WEB,
    }
    return [
        answer,
        {
            "apiVersion": f"{GATEWAY_GROUP}/v1",
            "kind": "HTTPRoute",
            "metadata": metadata(HEALTH_ROUTE, SYSTEM_NAMESPACE, GATEWAY_LABELS),
            "spec": {
                "parentRefs": [parent],
                "rules": [
                    {
                        "matches": [{"path": {"type": "Exact", "value": HEALTH_PATH}}],
                        "filters": [
                            {
                                "type": "ExtensionRef",
                                "extensionRef": {
                                    "group": ENVOY_EXTENSION_GROUP,
                                    "kind": "HTTPRouteFilter",
                                    "name": HEALTH_ROUTE,
                                },
                            }
                        ],
                    }
                ],
            },
        },
    ]


def tls_secret(certificate: pulumi.Input[str], private_key: pulumi.Input[str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(TLS_SECRET, SYSTEM_NAMESPACE, GATEWAY_LABELS),
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": certificate, "tls.key": private_key},
    }


# --- transport security (security review M5; api.md "TLS") --------------------------------
# Every response of the HTTPS listener says: this host is HTTPS only, for a year.
HSTS_HEADER, HSTS_VALUE = HSTS
HSTS_MIDDLEWARE = "front-door-hsts"
# Traefik names a Kubernetes CRD Middleware `<namespace>-<name>@kubernetescrd` outside its own
# namespace: the `websecure` entrypoint runs it first on every router attached to it (every
# provider's, so the Gateway API routes' too; Traefik v3.7 `server/aggregator.go` applyModel).
HSTS_ENTRYPOINT_MIDDLEWARE = f"{SYSTEM_NAMESPACE}-{HSTS_MIDDLEWARE}@kubernetescrd"
# Traefik's TLS options named `default` (traefik.io TLSOption): what every router without TLS
# options of its own gets -- Traefik's Gateway provider gives each HTTPS route's router an
# empty TLS config (v3.7 `provider/kubernetes/gateway/httproute.go`), so the front door's
# HTTPS listener negotiates with these. Only modelplane-system may define it (chart value
# `providers.kubernetesCRD.defaultTLSResourcesNamespace`): a TLSOption `default` in a route
# namespace is ignored, never a second default that would void both.
TLS_OPTION = "default"
TLS_MIN_VERSION = "VersionTLS12"
# TLS 1.2 suites with forward secrecy and AEAD only (TLS 1.3's suites are all AEAD and Go's
# are not configurable); Go (crypto/tls) names, as Traefik's TLSOption takes them.
TLS_CIPHER_SUITES = (
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
)
# `tls.http: Refuse` on Traefik: the chart's LoadBalancer Service has no port 80; the `web`
# entrypoint is published only by a ClusterIP Service of the release (chart value
# `service.additionalServices`), `mp-traefik-internal`, where a sharded service's second
# pass goes (api.md "Large services").
INTERNAL_SERVICE_KEY = "internal"
INTERNAL_SERVICE = f"{TRAEFIK['release']}-{INTERNAL_SERVICE_KEY}"


def traefik_transport_values(tls: Literal["Redirect", "Refuse"] | None) -> dict[str, Any]:
    """The Traefik chart values of the front door's transport (`spec.tls`): HSTS on the
    `websecure` entrypoint; on Refuse, no port 80 on the LoadBalancer Service and the `web`
    entrypoint on the ClusterIP Service `INTERNAL_SERVICE` only. Keys checked against the
    chart's values.yaml (41.3.0): `ports.<name>.expose.<service>`,
    `ports.websecure.http.middlewares`, `service.additionalServices.<name>.spec`."""
    if tls is None:
        return {}
    ports: dict[str, Any] = {
        WEBSECURE: {"http": {"middlewares": [HSTS_ENTRYPOINT_MIDDLEWARE]}},
    }
    values: dict[str, Any] = {"ports": ports}
    if tls == "Refuse":
        ports[WEB] = {"expose": {"default": False, INTERNAL_SERVICE_KEY: True}}
        values["service"] = {
            "additionalServices": {INTERNAL_SERVICE_KEY: {"spec": {"type": "ClusterIP"}}}
        }
    return values


def hsts_middleware() -> Manifest:
    """Traefik's `headers` Middleware the `websecure` entrypoint runs first: the HSTS header
    on every answer of the HTTPS listener (a 401 of the key check too). `stsSeconds` alone:
    no `includeSubDomains`, which would bind hosts modelplane does not serve."""
    return {
        "apiVersion": "traefik.io/v1alpha1",
        "kind": "Middleware",
        "metadata": metadata(HSTS_MIDDLEWARE, SYSTEM_NAMESPACE, GATEWAY_LABELS),
        "spec": {"headers": {"stsSeconds": HSTS_SECONDS}},
    }


def tls_option() -> Manifest:
    """Traefik's default TLS options: TLS 1.2 at least, AEAD suites with forward secrecy."""
    return {
        "apiVersion": "traefik.io/v1alpha1",
        "kind": "TLSOption",
        "metadata": metadata(TLS_OPTION, SYSTEM_NAMESPACE, GATEWAY_LABELS),
        "spec": {"minVersion": TLS_MIN_VERSION, "cipherSuites": list(TLS_CIPHER_SUITES)},
    }


def transport_manifests(
    backend: Literal["Traefik", "EnvoyGateway"], tls: Literal["Redirect", "Refuse"] | None
) -> list[Manifest]:
    """The front door's HSTS and TLS minimum as objects (Traefik; Envoy Gateway's are in its
    ClientTrafficPolicy, load_balancers.client_traffic_policy). None without `spec.tls`."""
    if tls is None or backend != "Traefik":
        return []
    return [hsts_middleware(), tls_option()]


# --- callers with keys (api.md "Callers") -------------------------------------------------
AUTHZ_NAME = "modelplane-authz"
AUTHZ_PORT = 8080
AUTHZ_IMAGE = (
    FRONT_DOOR_IMAGE  # a tag; `spec.images.frontDoor` pins it (modelplane/components/images.py)
)
# Threads are bounded (modelplane/authz.py MAX_CONNECTIONS): a leak or a flood is killed, not
# the node starved.
AUTHZ_MEMORY_LIMIT = "256Mi"
CALLERS_SECRET = "modelplane-callers"
AUTHZ_ADDRESS = f"http://{AUTHZ_NAME}.{SYSTEM_NAMESPACE}.svc.cluster.local:{AUTHZ_PORT}/"
AUTHZ_LABELS = labels(app_labels("inference-gateway", AUTHZ_NAME, "authz"))


# The container context of modelplane's own standard-library services (authz, the OpenAI
# router): nobody, no privilege escalation, a read-only root, no capability.
LOCKED_DOWN: Mapping[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def callers_table(
    keys: Mapping[str, str] | None,
    front_door_key: str | None = None,
    *,
    now: datetime | None = None,
) -> str:
    """The authorization service's keys file: sha256(key) -> caller for every key of every
    caller not expired at ``now`` (a caller's secret holds one key a line, optionally with
    `notAfter=`: modelplane/caller_keys.py), never a caller's key; `notAfter`: the hash ->
    RFC 3339 end of each key that has one, checked by authz on every request (so a key ends
    without another `up`; only written when some key has an end, so a table without one is
    byte for byte what it was); the front door's credentials for the workload gateways;
    `open` without `spec.auth` (every request in, as `anonymous`).

    The format stays readable by the authz of the previous release during a roll: it reads
    `callers` and ignores `notAfter`, so it accepts every listed key until its pod is
    replaced (never a key `up` left out)."""
    now = now or datetime.now(UTC)
    callers: dict[str, str] = {}
    not_after: dict[str, str] = {}
    for caller, text in sorted((keys or {}).items()):
        for key in live_keys(parse_keys(text, where=f"caller {caller}'s keys"), now):
            digest = authz_module.key_hash(key.key)
            callers[digest] = caller
            if key.not_after is not None:
                not_after[digest] = rfc3339(key.not_after)
            else:
                not_after.pop(digest, None)
    table: dict[str, object] = {"callers": callers, "open": keys is None}
    if not_after:
        table["notAfter"] = not_after
    if front_door_key is not None:
        table["frontDoor"] = front_door.basic_credentials(front_door_key)
    return json.dumps(table, sort_keys=True)


def authz_source() -> str:
    return Path(authz_module.__file__).read_text()


def authz_manifests(table: pulumi.Input[str], image: str = AUTHZ_IMAGE) -> list[Manifest]:
    """The authorization service behind the routes' forwardAuth: its keys (a Secret of
    hashes), its code (a ConfigMap run by a stock Python image, ``image``), Deployment,
    Service, PodDisruptionBudget and NetworkPolicy (ingress from the front door's Traefik
    only)."""
    source = authz_source()
    selector = {"modelplane.ai/authz": AUTHZ_NAME}  # never a recommended label (immutable)
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata(CALLERS_SECRET, SYSTEM_NAMESPACE, AUTHZ_LABELS),
            "type": "Opaque",
            "stringData": {"callers.json": table},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(AUTHZ_NAME, SYSTEM_NAMESPACE, AUTHZ_LABELS),
            "data": {"authz.py": source},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata(AUTHZ_NAME, SYSTEM_NAMESPACE, AUTHZ_LABELS),
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {
                        "labels": {**AUTHZ_LABELS, **selector},
                        # A new service version rolls the pods; a rotated key does not
                        # (the mounted Secret is re-read).
                        "annotations": {
                            "modelplane.ai/authz-sha256": hashlib.sha256(
                                source.encode()
                            ).hexdigest()
                        },
                    },
                    "spec": {
                        # It talks to no API server: no token; RuntimeDefault seccomp.
                        "automountServiceAccountToken": False,
                        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [
                            {
                                "name": "authz",
                                "image": image,
                                "command": [
                                    "python",
                                    "/app/authz.py",
                                    "--keys",
                                    "/keys/callers.json",
                                    "--listen",
                                    f"0.0.0.0:{AUTHZ_PORT}",
                                ],
                                "ports": [{"name": "authz", "containerPort": AUTHZ_PORT}],
                                "readinessProbe": {"tcpSocket": {"port": AUTHZ_PORT}},
                                "resources": {
                                    "requests": {"cpu": "50m", "memory": "64Mi"},
                                    "limits": {"memory": AUTHZ_MEMORY_LIMIT},
                                },
                                "securityContext": dict(LOCKED_DOWN),
                                "volumeMounts": [
                                    {"name": "code", "mountPath": "/app", "readOnly": True},
                                    {"name": "keys", "mountPath": "/keys", "readOnly": True},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "code", "configMap": {"name": AUTHZ_NAME}},
                            {"name": "keys", "secret": {"secretName": CALLERS_SECRET}},
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            # Not awaited: the Deployment above is (its pods answer before this exists), and
            # the provider's Service await adds a fixed 10 s "settle" after every change of
            # its endpoints (pulumi-kubernetes, await/service.go) to each gateway run.
            "metadata": metadata(AUTHZ_NAME, SYSTEM_NAMESPACE, AUTHZ_LABELS, SKIP_AWAIT),
            "spec": {
                "type": "ClusterIP",
                "selector": selector,
                "ports": [{"name": "authz", "port": AUTHZ_PORT, "protocol": "TCP"}],
            },
        },
        {
            # Every front-door request waits on the key check: a node drain or upgrade takes
            # its two pods one at a time.
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": metadata(AUTHZ_NAME, SYSTEM_NAMESPACE, AUTHZ_LABELS),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
        },
        # Only the front door's Traefik (its forwardAuth) reaches it: security M4.
        authz_policy(AUTHZ_NAME, SYSTEM_NAMESPACE, AUTHZ_LABELS, selector, AUTHZ_PORT),
    ]


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
    scheme: pulumi.Output[str]
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
        caller_keys: pulumi.Input[Mapping[str, str]] | None = None,
        front_door_key: pulumi.Input[str] | None = None,
        tls_material: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None,
        cloud: str | None = None,
        render_only: bool = False,
        namespaces: Sequence[str] = (),
        fleet_ca: pulumi.Input[str] | None = None,
        workload_gateways: Mapping[str, tuple[str, int]] | None = None,
        certificate_generation: int = 0,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``fleet_ca`` (the fleet CA's text, a secret): the front door reaches workload
        gateways over mutual TLS with a client certificate of it; ``workload_gateways``
        (Traefik): the address of each cluster's workload gateway the front door goes
        through (gateway_tls.py, the second pass); ``certificate_generation``: counted up by
        `modelplane keys rotate --certificates` (fleet_pki.leaf)."""
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
            # On a cloud the controller's namespace is this stack's, so destroy waits for the
            # front door's load balancer to be gone (serving_stack.load_balancer_namespace).
            lb_namespace = (
                load_balancer_namespace("gateway", s["namespace"], child)
                if cloud is not None
                else None
            )
            deps.append(
                k8s.helm.v3.Release(
                    s["release"],
                    name=s["release"],
                    chart=s["chart"],
                    # Validated against GATEWAY_CHART_VERSIONS (modelplane.api).
                    version=gateway.spec.version or s["version"],
                    repository_opts=repo,
                    namespace=s["namespace"],
                    create_namespace=lb_namespace is None,
                    values=release_values(
                        backend,
                        cloud,
                        [SYSTEM_NAMESPACE, *namespaces],
                        gateway.spec.tls.http if gateway.spec.tls is not None else None,
                    ),
                    opts=pulumi.ResourceOptions.merge(
                        child,
                        pulumi.ResourceOptions(
                            depends_on=[lb_namespace] if lb_namespace is not None else None
                        ),
                    ),
                )
            )
        ns = ensure_namespace(SYSTEM_NAMESPACE, child, scope="gateway")
        if ns is not None:
            deps.append(ns)
        after = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=deps or None)
        gw_class = _GatewayObject(f"gateway/{s['class']}", gateway_class_manifest(backend), after)
        tls = gateway.spec.tls
        gw_deps: list[pulumi.Resource] = [gw_class, *deps]
        if backend == "EnvoyGateway":
            # Two proxies and a budget (cloud review m8), before the Gateway that names them.
            proxy = envoy_proxy_manifest(GATEWAY_NAME, SYSTEM_NAMESPACE, GATEWAY_LABELS)
            gw_deps.append(register(proxy, after, scope="gateway"))
        # HSTS and the TLS minimum (security review M5), before the Gateway's HTTPS listener.
        for manifest in transport_manifests(backend, tls.http if tls is not None else None):
            gw_deps.append(register(manifest, after, scope="gateway"))
        if tls is not None:
            if tls_material is None:
                raise ValueError("InferenceGateway spec.tls needs the certificate and key")
            made = tls_secret(*tls_material)
            # renderTo: the rendered folder gets the Secret's name and keys, never the key.
            made = hand_off(made) if render_only else made
            gw_deps.append(register(made, after, scope="gateway"))
        if fleet_ca is not None:
            certs = gateway_tls.certificates(
                fleet_ca, name="front-door", role="client", generation=certificate_generation
            )
            gw_deps += self._hop_objects(
                backend, certs, front_door_key, workload_gateways or {}, after, render_only
            )
        gw_manifest = gateway_manifest(
            backend,
            await_address=await_address,
            tls=tls.http if tls is not None else None,
            cloud=cloud,
            client_certificate=fleet_ca is not None,
        )
        gw = _GatewayObject(
            f"gateway/{SYSTEM_NAMESPACE}/{GATEWAY_NAME}",
            gw_manifest,
            pulumi.ResourceOptions(parent=self, provider=provider, depends_on=gw_deps),
        )
        if backend == "EnvoyGateway":
            # Envoy resets a stream silent for 5 minutes (modelplane.components.load_balancers).
            register(
                client_traffic_policy(
                    GATEWAY_NAME, SYSTEM_NAMESPACE, GATEWAY_LABELS, front_door_tls=tls is not None
                ),
                after,
                scope="gateway",
            )
        for manifest in health_manifests(backend, tls is not None):
            register(
                manifest,
                pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[gw]),
                scope="gateway",
            )
        if tls is not None and tls.http == "Redirect":
            register(
                redirect_route(),
                pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[gw]),
                scope="gateway",
            )
        if gateway.spec.auth is not None and caller_keys is None:
            raise ValueError("InferenceGateway spec.auth needs the callers' keys")
        # Traefik's front door always asks the authorization service: it holds the callers'
        # keys (spec.auth) and the credentials the workload gateways require.
        if backend == "Traefik" and (gateway.spec.auth is not None or front_door_key is not None):
            keys_in = (
                pulumi.Output.from_input(caller_keys)
                if caller_keys is not None
                else pulumi.Output.from_input(None)
            )
            table: pulumi.Output[str] = pulumi.Output.all(
                keys_in, pulumi.Output.from_input(front_door_key)
            ).apply(lambda args: callers_table(args[0], args[1]))
            table = pulumi.Output.secret(table)
            for manifest in authz_manifests(table, front_door_image(gateway)):
                register(hand_off(manifest) if render_only else manifest, after, scope="gateway")
        self.address = gw.status.apply(_first_address)
        self.scheme = pulumi.Output.from_input("https" if tls is not None else "http")
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

    def _hop_objects(
        self,
        backend: Literal["Traefik", "EnvoyGateway"],
        certs: gateway_tls.Certificates,
        front_door_key: pulumi.Input[str] | None,
        workload_gateways: Mapping[str, tuple[str, int]],
        opts: pulumi.ResourceOptions,
        render_only: bool,
    ) -> list[pulumi.Resource]:
        """The front door's client certificate; on Traefik the fleet CA, the credentials
        check and, per workload gateway, the second pass over mutual TLS (gateway_tls.py)."""
        object_labels = app_labels("inference-gateway", GATEWAY_NAME, "gateway-tls")
        manifests = [
            gateway_tls.tls_secret(
                gateway_tls.CLIENT_SECRET, SYSTEM_NAMESPACE, object_labels, certs.cert, certs.key
            )
        ]
        if backend == "Traefik" and workload_gateways:
            if front_door_key is None:
                raise ValueError(
                    "the second pass to the workload gateways needs the front-door key"
                )
            users: pulumi.Output[str] = pulumi.Output.secret(
                pulumi.Output.from_input(front_door_key).apply(htpasswd)
            )
            manifests += [
                gateway_tls.ca_secret(SYSTEM_NAMESPACE, object_labels, certs.ca_cert),
                *front_door.check_manifests(
                    "Traefik",
                    HOP_CHECK,
                    SYSTEM_NAMESPACE,
                    object_labels,
                    users,
                    (),
                    remove_header=False,
                ),
            ]
            for cluster, address in sorted(workload_gateways.items()):
                manifests += gateway_tls.hop_manifests(
                    cluster,
                    address,
                    fleet_pki.server_name(cluster),
                    SYSTEM_NAMESPACE,
                    object_labels,
                    check=HOP_CHECK,
                    entry_point=WEB,
                )
        return [
            register(hand_off(m) if render_only else m, opts, scope="gateway") for m in manifests
        ]
