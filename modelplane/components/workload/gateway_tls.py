"""Mutual TLS on the hop front door -> workload gateway (api.md "Mutual TLS between the gateways").

The fleet CA (modelplane/fleet_pki.py; made once by the driver, a Pulumi config secret of the
cluster and gateway stacks) signs a server certificate for each workload gateway (DNS name
``<cluster>.gateway.modelplane.internal``) and one client certificate for the front door. Each
stack derives its own certificate from the CA on every run: the same one within a 30-day
period (no diff), a new one in the next (rotation, with 60 days of overlap).

Workload gateway (cluster stack): the Gateway's one listener is HTTPS with the server
certificate, and requires a client certificate the fleet CA signed:

- Envoy Gateway: the ClientTrafficPolicy's ``tls.clientValidation`` (the CA in a ConfigMap);
- Traefik: the TLSOption ``default`` of namespace ``modelplane-hop`` (``clientAuth``
  RequireAndVerifyClientCert). Traefik's Gateway provider has no per-listener TLS options: a
  Gateway listener takes the default TLSOption, so the workload gateway's Traefik reads its
  default from ``modelplane-hop`` only (``defaultTLSResourcesNamespace``) and a front door's
  Traefik from ``modelplane-system``.

Front door (gateway stack):

- Traefik: its Gateway provider gives a backend TLS (BackendTLSPolicy) a server name and CAs
  but no client certificate, so a replica's backendRef goes through the front door's own
  Service once more (like a shard), to ``/_gateways/<cluster>/<ns>/<replica>/``; an
  IngressRoute per cluster takes that prefix off and sends the request over https with a
  ServersTransport holding the client certificate, the fleet CA and the server name;
- Envoy Gateway: a BackendTLSPolicy per replica endpoint (the fleet CA, the server name) and
  the Gateway's ``spec.tls.backend.clientCertificateRef``.

The fleet key stays the second factor: every replica route still requires it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pulumi

from modelplane import fleet_pki
from modelplane.components.workload.objects import Manifest, dns1035, metadata
from modelplane.network.hop import hop_prefix

GATEWAY_GROUP = "gateway.networking.k8s.io"
TRAEFIK_GROUP = "traefik.io"
SERVER_SECRET = "modelplane-gateway-tls"
"""The workload gateway's server certificate (kubernetes.io/tls, in modelplane-system)."""
CLIENT_SECRET = "modelplane-front-door-client"
"""The front door's client certificate (kubernetes.io/tls)."""
CA_NAME = "modelplane-fleet-ca"
"""The fleet CA's certificate (no key): a Secret (`ca.crt`, Traefik) or ConfigMap (Envoy)."""
TRAEFIK_TLS_NAMESPACE = "modelplane-hop"
"""Where a Traefik workload gateway's default TLSOption (client certificates required) lives."""
LISTENER = "https"
DIAL_TIMEOUT = "2s"  # as the front door's own transport: a dead gateway costs one retry
ENVOY_TLS_MIN_VERSION = "1.2"


def tls_secret(
    name: str, namespace: str, object_labels: Mapping[str, str], cert: Any, key: Any
) -> Manifest:
    """A kubernetes.io/tls Secret (``cert`` and ``key`` PEM, secret Outputs in a program)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(name, namespace, object_labels),
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert, "tls.key": key},
    }


def ca_secret(namespace: str, object_labels: Mapping[str, str], ca_cert: Any) -> Manifest:
    """The fleet CA's certificate as Traefik reads it (`ca.crt` of a Secret)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(CA_NAME, namespace, object_labels),
        "type": "Opaque",
        "stringData": {"ca.crt": ca_cert},
    }


def ca_config_map(
    name: str, namespace: str, object_labels: Mapping[str, str], ca_cert: Any
) -> Manifest:
    """The fleet CA's certificate as Envoy Gateway reads it (`ca.crt` of a ConfigMap)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(name, namespace, object_labels),
        "data": {"ca.crt": ca_cert},
    }


def https_listener(port: int, allowed_routes: Mapping[str, Any]) -> dict[str, Any]:
    """The workload Gateway's one listener: HTTPS with the server certificate."""
    return {
        "name": LISTENER,
        "protocol": "HTTPS",
        "port": port,
        "tls": {
            "mode": "Terminate",
            "certificateRefs": [{"group": "", "kind": "Secret", "name": SERVER_SECRET}],
        },
        "allowedRoutes": dict(allowed_routes),
    }


def traefik_client_auth(object_labels: Mapping[str, str]) -> Manifest:
    """A Traefik workload gateway's default TLSOption: TLS 1.2 at least, and a client
    certificate the fleet CA signed, or no connection."""
    return {
        "apiVersion": f"{TRAEFIK_GROUP}/v1alpha1",
        "kind": "TLSOption",
        "metadata": metadata("default", TRAEFIK_TLS_NAMESPACE, object_labels),
        "spec": {
            "minVersion": "VersionTLS12",
            "clientAuth": {
                "secretNames": [CA_NAME],
                "clientAuthType": "RequireAndVerifyClientCert",
            },
        },
    }


def envoy_client_validation() -> dict[str, Any]:
    """The `tls` of a workload gateway's ClientTrafficPolicy: a client certificate the fleet
    CA signed, or no connection."""
    return {
        "minVersion": ENVOY_TLS_MIN_VERSION,
        "clientValidation": {
            "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": CA_NAME}]
        },
    }


@dataclass(frozen=True)
class Certificates:
    """One gateway's certificate and the CA's, derived from the fleet CA's text in the program
    (secret Outputs)."""

    ca_cert: pulumi.Output[str]
    cert: pulumi.Output[str]
    key: pulumi.Output[str]


def certificates(
    fleet_ca: pulumi.Input[str],
    *,
    name: str,
    role: Literal["server", "client"],
    dns_names: Sequence[str] = (),
    now: datetime | None = None,
    generation: int = 0,
) -> Certificates:
    """The certificate of this period and ``generation`` (fleet_pki.leaf) for ``name``, from
    the CA text."""
    at = now or datetime.now(UTC)
    text = pulumi.Output.from_input(fleet_ca)
    ca = text.apply(fleet_pki.parse_ca)
    leaf = ca.apply(
        lambda c: fleet_pki.leaf(
            c, name=name, role=role, dns_names=tuple(dns_names), now=at, generation=generation
        )
    )
    return Certificates(
        # Public, but shown as a secret like everything derived from the CA's text.
        ca_cert=ca.apply(lambda c: c.cert_pem),
        cert=pulumi.Output.secret(leaf.apply(lambda lf: lf.cert_pem)),
        key=pulumi.Output.secret(leaf.apply(lambda lf: lf.key_pem)),
    )


def workload_objects(
    controller: Literal["Traefik", "EnvoyGateway"],
    certs: Certificates,
    namespace: str,
    object_labels: Mapping[str, str],
) -> list[Manifest]:
    """A workload gateway's server certificate (in ``namespace``, the Gateway's) and what
    makes its controller require a client certificate of the fleet CA: for Envoy Gateway the
    CA's ConfigMap its ClientTrafficPolicy names (``envoy_client_validation``), for Traefik
    the CA's Secret and the TLSOption ``default`` in TRAEFIK_TLS_NAMESPACE (made first)."""
    server = tls_secret(SERVER_SECRET, namespace, object_labels, certs.cert, certs.key)
    if controller == "EnvoyGateway":
        return [ca_config_map(CA_NAME, namespace, object_labels, certs.ca_cert), server]
    return [
        ca_secret(TRAEFIK_TLS_NAMESPACE, object_labels, certs.ca_cert),
        traefik_client_auth(object_labels),
        server,
    ]


# --- the Traefik front door's second pass to a workload gateway ---------------------------


def hop_name(cluster: str) -> str:
    """The per-cluster Service, ServersTransport, Middleware and IngressRoute."""
    return dns1035("gateway", cluster)


def hop_manifests(
    cluster: str,
    address: tuple[str, int],
    server_name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    *,
    check: str,
    entry_point: str,
) -> list[Manifest]:
    """What sends ``/_gateways/<cluster>/...`` to the cluster's workload gateway over mutual
    TLS: a Service whose one endpoint is the gateway's address, a ServersTransport (the
    client certificate, the fleet CA, the server name), a Middleware taking the prefix off,
    and the IngressRoute on ``entry_point`` (the front door's plain listener its own Service
    reaches), which first runs ``check`` (the front door's credentials: no caller reaches a
    workload gateway through it)."""
    host, port = address
    name = hop_name(cluster)
    try:
        address_type = f"IPv{ipaddress.ip_address(host).version}"
    except ValueError:
        address_type = "FQDN"  # an EKS load balancer's name
    strip = f"{name}-strip"[:63]
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(name, namespace, object_labels),
            "spec": {
                "type": "ClusterIP",
                "ports": [
                    {"name": "https", "port": port, "protocol": "TCP", "appProtocol": "https"}
                ],
            },
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": metadata(
                f"{name}-addr"[:63],
                namespace,
                {**object_labels, "kubernetes.io/service-name": name},
            ),
            "addressType": address_type,
            "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
        {
            "apiVersion": f"{TRAEFIK_GROUP}/v1alpha1",
            "kind": "ServersTransport",
            "metadata": metadata(name, namespace, object_labels),
            "spec": {
                "serverName": server_name,
                "rootCAs": [{"secret": CA_NAME}],
                "certificatesSecrets": [CLIENT_SECRET],
                # No minVersion: Traefik then wants a maxVersion too, or it drops the whole
                # TLS configuration (server name, CAs, certificate) for its default; Go's
                # client offers TLS 1.2 at least, and the workload gateway accepts no less.
                "forwardingTimeouts": {"dialTimeout": DIAL_TIMEOUT},
            },
        },
        {
            "apiVersion": f"{TRAEFIK_GROUP}/v1alpha1",
            "kind": "Middleware",
            "metadata": metadata(strip, namespace, object_labels),
            "spec": {"stripPrefix": {"prefixes": [hop_prefix(cluster)]}},
        },
        {
            "apiVersion": f"{TRAEFIK_GROUP}/v1alpha1",
            "kind": "IngressRoute",
            "metadata": metadata(name, namespace, object_labels),
            "spec": {
                "entryPoints": [entry_point],
                "routes": [
                    {
                        "kind": "Rule",
                        "match": f"PathPrefix(`{hop_prefix(cluster)}/`)",
                        "middlewares": [{"name": check}, {"name": strip}],
                        "services": [
                            {
                                "kind": "Service",
                                "name": name,
                                "port": port,
                                "scheme": "https",
                                "serversTransport": name,
                                # The client and the gateway may hold a stream for an hour.
                                "responseForwarding": {"flushInterval": "100ms"},
                            }
                        ],
                    }
                ],
            },
        },
    ]


# --- the Envoy Gateway front door ----------------------------------------------------------


def envoy_backend_tls(
    name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    target: Mapping[str, str],
    server_name: str,
    ca_config_map_name: str,
) -> Manifest:
    """A BackendTLSPolicy on a replica endpoint's Service (or Envoy `Backend`, ``target``):
    TLS to the workload gateway, verified by the fleet CA and the gateway's server name (the
    client certificate is the front door Gateway's `spec.tls.backend.clientCertificateRef`)."""
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "BackendTLSPolicy",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {
            "targetRefs": [dict(target)],
            "validation": {
                "caCertificateRefs": [
                    {"group": "", "kind": "ConfigMap", "name": ca_config_map_name}
                ],
                "hostname": server_name,
            },
        },
    }
