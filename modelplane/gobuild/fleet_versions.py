"""Pinned versions of the dev fleet's node simulator, LeaderWorkerSet controller and gateway.

All three are built from Go modules into one wrapper module (one ``go build``: the Kubernetes
client libraries they share are compiled once), cached per user beside the control plane.
"""

from __future__ import annotations

from pathlib import Path

from modelplane.gobuild.cache import cache_root

KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_VERSION = "0.8.0"
KWOK_PACKAGE = "sigs.k8s.io/kwok/cmd/kwok"

LWS_MODULE = "sigs.k8s.io/lws"
LWS_VERSION = (
    "0.8.0"  # = modelplane/crds/lws-v0.8.0; why not the chart's v0.10.0: architecture.md, dev fleet
)
LWS_PACKAGE = "sigs.k8s.io/lws/cmd"

TRAEFIK_MODULE = "github.com/traefik/traefik/v3"
TRAEFIK_VERSION = "3.7.13"
TRAEFIK_PACKAGE = "github.com/traefik/traefik/v3/cmd/traefik"

# What the module proxy refuses, and what the build uses instead (see fleet.py):
# - Traefik's fork of go-http-auth at the pseudo-version Traefik pins is not served; the fork's
#   earlier pseudo-version (same API for what Traefik calls) is.
HTTP_AUTH_MODULE = "github.com/abbot/go-http-auth"
HTTP_AUTH_FORK = "github.com/containous/go-http-auth"
HTTP_AUTH_FORK_VERSION = "v0.4.1-0.20200324110947-a37a7636d23e"
# - lego's DNS-01 provider registry imports ~180 DNS vendors' SDKs, many not served: the build
#   uses lego with that one registry file replaced by one that refuses every provider (ACME
#   DNS-01 is not something a dev fleet on loopback can use anyway).
LEGO_MODULE = "github.com/go-acme/lego/v5"
LEGO_DNS_REGISTRY = "providers/dns/zz_gen_dns_providers.go"
# - Traefik's nested module `github.com/traefik/traefik/dynamic/ext` (empty extension points)
#   is only reachable through a path replace inside Traefik's repository.
TRAEFIK_EXT_MODULE = "github.com/traefik/traefik/dynamic/ext"

#: kwok stages vendored from the kwok module (kustomize/stage/...): the binary has none built in.
KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)

FLEET_COMMANDS = ("kwok", "lws-controller", "traefik")


def fleet_cache_dir() -> Path:
    """``<cache root>/devfleet/kwok-v..-lws-v..-traefik-v..``."""
    key = f"kwok-v{KWOK_VERSION}-lws-v{LWS_VERSION}-traefik-v{TRAEFIK_VERSION}"
    return cache_root() / "devfleet" / key


#: Prometheus for the dev fleet's metrics (the serving stack's kube-prometheus-stack stands in):
#: built alone (its Go module is not on the other binaries' Kubernetes client versions), with
#: every service discovery but Kubernetes left out by Prometheus' own build tags.
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_MODULE_VERSION = "v0.316.0"  # Prometheus v3.16.0 (Go modules carry v0.3xx.y)
PROMETHEUS_VERSION = "3.16.0"
PROMETHEUS_PACKAGE = "github.com/prometheus/prometheus/cmd/prometheus"
PROMETHEUS_TAGS = ("remove_all_sd", "enable_kubernetes_sd")


def prometheus_cache_dir() -> Path:
    """``<cache root>/devfleet/prometheus-v..`` (beside the other fleet binaries)."""
    return cache_root() / "devfleet" / f"prometheus-v{PROMETHEUS_VERSION}"
