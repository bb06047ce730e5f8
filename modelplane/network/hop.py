"""The Traefik front door's second pass to a workload gateway (pure).

A Traefik front door cannot present a client certificate from a Gateway API route, so a
replica's backendRef goes through the front door's own Service once more, to
``/_gateways/<cluster>/<the replica's path>``; an IngressRoute per cluster takes the prefix
off and dials the cluster's workload gateway over mutual TLS
(modelplane/components/workload/gateway_tls.py). Whoever reads the routes back (status,
reconcile, the drills) finds the replica from that path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HOP_PATH = "/_gateways"


def hop_prefix(cluster: str) -> str:
    """The path prefix of the cluster's second pass, without a trailing slash."""
    return f"{HOP_PATH}/{cluster}"


def hop_path(cluster: str, path: str) -> str:
    """The path the front door's route rewrites to for ``path`` on ``cluster``'s gateway."""
    return hop_prefix(cluster) + (path if path.startswith("/") else f"/{path}")


def hop_target(path: str) -> tuple[str, str] | None:
    """``(cluster, path on its gateway)`` of a second-pass path, or None for any other."""
    head = f"{HOP_PATH}/"
    if not path.startswith(head):
        return None
    cluster, slash, rest = path[len(head) :].partition("/")
    if not cluster or not slash:
        return None
    return cluster, f"/{rest}"


def replica_of(path: str) -> str | None:
    """The replica a second-pass path reaches (``/_gateways/<cluster>/<ns>/<replica>/``)."""
    target = hop_target(path)
    if target is None:
        return None
    parts = [p for p in target[1].split("/") if p]
    return parts[1] if len(parts) >= 2 else None


def replica_of_ref(ref: Mapping[str, Any]) -> str | None:
    """The replica an HTTPRoute backendRef reaches through the second pass (its URLRewrite to
    a second-pass path), or None."""
    for f in ref.get("filters") or []:
        path = ((f.get("urlRewrite") or {}).get("path") or {}).get("replacePrefixMatch")
        if isinstance(path, str) and (replica := replica_of(path)):
            return replica
    return None
