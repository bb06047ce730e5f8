"""How long a gateway holds a silent request: every hop outlasts the longest request.

A non-streaming completion (or a long prefill) sends nothing until the whole answer is ready,
so each hop between the client and the engine must keep a silent connection open for as long
as a request may take, ``LONGEST_REQUEST`` (one hour; the routes themselves set no request
timeout, ``timeouts.request: 0s``). The hops and what this module sets on them:

- AWS (EKS): ``type: LoadBalancer`` Services are Classic Load Balancers there (the in-tree
  service controller; no AWS Load Balancer Controller is installed), which close a connection
  after 60 s without data (AWS ELB guide, "Configure the idle connection timeout for your
  Classic Load Balancer"). Every gateway Service on EKS -- the workload gateway, the Envoy
  front door, Traefik's front door -- carries
  ``service.beta.kubernetes.io/aws-load-balancer-connection-idle-timeout: "3600"`` (the
  in-tree controller's annotation, kubernetes/cloud-provider-aws
  ``ServiceAnnotationLoadBalancerConnectionIdleTimeout``; a CLB accepts 1..4000 s).
- GCP (GKE): ``type: LoadBalancer`` Services are passthrough Network Load Balancers, which do
  not terminate connections and have no request or idle timeout (GCPBackendPolicy and
  BackendConfig configure GKE's proxy load balancers, Gateway and Ingress, which modelplane
  does not use). The VPC's connection tracking forgets a flow after 10 minutes without a
  packet (VPC firewall rules: "considered active if at least one packet is sent every 10
  minutes"), so the proxies send TCP keepalives every ``KEEPALIVE_SECONDS`` on their client
  connections (Envoy: the ClientTrafficPolicy below; Traefik: Go's listener keepalive, 15 s).
- Envoy Gateway (workload gateways and an Envoy front door): Envoy resets a stream after 5
  minutes without activity (``streamIdleTimeout``'s default, envoyproxy/gateway v1.8.3
  ``api/v1alpha1/timeout_types.go``): a ``ClientTrafficPolicy`` on the Gateway sets the
  listener's ``timeout.http.streamIdleTimeout`` and ``idleTimeout`` to ``LONGEST_REQUEST``
  (routes inherit the listener's stream idle timeout; the retry BackendTrafficPolicies set
  none) and ``tcpKeepalive``.
- Traefik (the default front door) has no response timeout by default (``writeTimeout`` and
  ``responseHeaderTimeout`` 0); its 60 s ``readTimeout`` bounds reading the request only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from modelplane.components.workload.gateway_tls import envoy_client_validation
from modelplane.components.workload.objects import Manifest, metadata

LONGEST_REQUEST_SECONDS = 3600
"""The longest request a gateway carries (seconds): a generation may take an hour, silent."""
LONGEST_REQUEST = f"{LONGEST_REQUEST_SECONDS}s"
KEEPALIVE_SECONDS = 60
"""TCP keepalive probes after this much silence, and between probes: under GCP's 10-minute
connection tracking and an AWS NLB's 350 s default idle timeout."""

AWS_IDLE_TIMEOUT = "service.beta.kubernetes.io/aws-load-balancer-connection-idle-timeout"
ENVOY_GROUP = "gateway.envoyproxy.io"
GATEWAY_GROUP = "gateway.networking.k8s.io"

# The workload gateway's load balancer is internal where modelplane owns the network
# (api.md "Private workload gateways"): the front door reaches it over the VPC (or peering).
INTERNAL_LB_ANNOTATIONS: dict[str, dict[str, str]] = {
    "GKE": {
        "networking.gke.io/load-balancer-type": "Internal",
        # A front door in another region of the same VPC still reaches it.
        "networking.gke.io/internal-load-balancer-allow-global-access": "true",
    },
    "EKS": {
        # The in-tree AWS service controller (internal subnets: kubernetes.io/role/internal-elb)
        # and the AWS Load Balancer Controller alike.
        "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
        "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
    },
}

IDLE_TIMEOUT_ANNOTATIONS: dict[str, dict[str, str]] = {
    "EKS": {AWS_IDLE_TIMEOUT: str(LONGEST_REQUEST_SECONDS)},
}
"""Per cloud, what a gateway's ``type: LoadBalancer`` Service needs to hold a silent request
(GKE's passthrough load balancers need nothing: see the module docstring)."""


def service_annotations(cloud: str | None, *, internal: bool) -> dict[str, str]:
    """A gateway Service's annotations on ``cloud`` (GKE, EKS; None: none)."""
    if cloud is None:
        return {}
    annotations = dict(INTERNAL_LB_ANNOTATIONS.get(cloud, {})) if internal else {}
    annotations.update(IDLE_TIMEOUT_ANNOTATIONS.get(cloud, {}))
    return annotations


# An Envoy front door with `spec.tls` (security review M5; api.md "TLS"): TLS 1.2 at least,
# TLS 1.2 suites with forward secrecy and AEAD only (Envoy's names; envoyproxy/gateway v1.8.3
# `api/v1alpha1/tls_types.go`), and HSTS on every response.
ENVOY_TLS_MIN_VERSION = "1.2"
ENVOY_TLS_CIPHERS = (
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
)
HSTS_SECONDS = 31536000  # a year
HSTS = ("Strict-Transport-Security", f"max-age={HSTS_SECONDS}")


def client_traffic_policy(
    gateway: str,
    namespace: str,
    object_labels: Mapping[str, str],
    *,
    front_door_tls: bool = False,
    client_validation: bool = False,
) -> Manifest:
    """Envoy Gateway's ClientTrafficPolicy ``<gateway>-timeouts`` on the Gateway: a stream (and
    a connection with a request in flight) may stay silent for ``LONGEST_REQUEST``, and Envoy
    keeps its client connections alive with TCP keepalives. ``front_door_tls`` (an Envoy
    front door with `spec.tls`): its HTTPS listener's TLS minimum and suites (`tls`, which
    applies to TLS listeners only) and the HSTS header on every response
    (`headers.lateResponseHeaders`: Envoy's own answers too; the one policy on the Gateway,
    since a second one on the `websecure` section would replace this one there, not merge).
    A plain `web` listener (`tls.http: Redirect`) sends it too, which a browser ignores over
    plain HTTP (RFC 6797, 8.1). ``client_validation`` (a workload gateway): a client
    certificate of the fleet CA required (components/workload/gateway_tls.py)."""
    keepalive = f"{KEEPALIVE_SECONDS}s"
    spec: dict[str, Any] = {
        "targetRefs": [{"group": GATEWAY_GROUP, "kind": "Gateway", "name": gateway}],
        "timeout": {"http": {"streamIdleTimeout": LONGEST_REQUEST, "idleTimeout": LONGEST_REQUEST}},
        "tcpKeepalive": {"idleTime": keepalive, "interval": keepalive},
        # A header spelled with `_` (x_modelplane_caller) is refused, never passed on to an
        # engine that folds `_` into `-` (Envoy Gateway's default, pinned: api.md "Callers").
        "headers": {"withUnderscoresAction": "RejectRequest"},
    }
    if front_door_tls:
        spec["tls"] = {"minVersion": ENVOY_TLS_MIN_VERSION, "ciphers": list(ENVOY_TLS_CIPHERS)}
        spec["headers"]["lateResponseHeaders"] = {"set": [{"name": HSTS[0], "value": HSTS[1]}]}
    if client_validation:
        # A workload gateway: only a client certificate of the fleet CA (gateway_tls.py).
        spec["tls"] = {**spec.get("tls", {}), **envoy_client_validation()}
    return {
        "apiVersion": f"{ENVOY_GROUP}/v1alpha1",
        "kind": "ClientTrafficPolicy",
        "metadata": metadata(f"{gateway}-timeouts", namespace, object_labels),
        "spec": spec,
    }


def duration_seconds(value: str) -> float:
    """A Gateway API duration (``1h``, ``90s``, ``1h30m``, ``500ms``) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+)(ms|h|m|s)", value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"{value!r} is not a Gateway API duration")
    return sum(int(n) * units[u] for n, u in parts)
