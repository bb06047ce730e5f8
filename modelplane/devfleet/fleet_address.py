"""The dev fleet's fleet address: a stand-in for the global load balancer in front of every
front door (api.md, "More than one front door"; architecture.md, "The dev fleet").

On a cloud the InferenceGateway's `spec.fleetAddress` is a DNS name whose answers are the
healthy front doors (Cloud DNS or Route 53 health checks), and for Existing clusters a name
the platform points at the front doors' addresses. The dev fleet is one network namespace
with no DNS server, so one more Traefik stands in: it listens on the fleet's own address,
asks every front door its health path every second, and sends each request to a healthy one,
once more to another when a connection to one fails or it answers a gateway error (a front
door that died between two checks, or mid-request). What it stands in for, exactly: the
name's resolution and the health checks; it is an HTTP proxy in the request's path where the
clouds' DNS answers are not, and its retry is what a client of a DNS name does itself.

Which front doors it sends to is what a platform decides when it points a DNS name:
`point` writes Traefik's file-provider configuration (``<state>/fleet-address/``, watched),
from `modelplane dev-fleet fleet-address CLUSTER...` or, at `dev-fleet up` with specs, from
the InferenceGateway's front doors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from modelplane.api.inference_gateway import HEALTH_PATH
from modelplane.devfleet.cluster import GATEWAY_PORT, ClusterAddresses

PORT = 8000
"""Where the stand-in listens inside the namespace (bridged to port 80 of its host address)."""
HEALTH_INTERVAL = "1s"
HEALTH_TIMEOUT = "500ms"
ATTEMPTS = 3
"""A request whose connection to a front door fails goes to another: at most this many tries."""
RETRIED_STATUSES = "502-504"
"""A gateway error from a front door (a dying one's, whose own upstream died first) is tried
on another front door too: what an L7 global load balancer (GCP's, Envoy's `gateway-error`)
does, and what a client of a DNS fleet address does itself (OpenAI's SDKs retry 502-504)."""
RETRY_BODY_BYTES = 1 << 20
"""Requests up to 1 MiB are kept for a retry (larger ones are sent once)."""
DIAL_TIMEOUT = "1s"
CONFIG_FILE = "dynamic.yaml"
SERVICE = "front-doors"


def host(slot: int) -> str:
    """The fleet address as the host sees it (through the bridge, port 80)."""
    return f"127.77.{slot}.9"


def inside(slot: int) -> str:
    """Where the stand-in listens inside the namespace."""
    return f"10.253.{slot}.9"


def config_dir(root: Path) -> Path:
    return root / "fleet-address"


def access_log(root: Path) -> Path:
    """One JSON line per request: which front door (`ServiceURL`) answered it."""
    return root / "logs" / "fleet-address-access.log"


def dynamic_config(front_doors: Sequence[str]) -> dict[str, Any]:
    """Traefik's dynamic configuration: every request to one of ``front_doors`` (URLs), the
    healthy ones only, retried on another when the connection fails."""
    http: dict[str, Any] = {
        "routers": {
            "fleet": {
                "entryPoints": ["web"],
                "rule": "PathPrefix(`/`)",
                "service": SERVICE,
                "middlewares": ["another-front-door"],
            }
        },
        "middlewares": {
            "another-front-door": {
                "retry": {
                    "attempts": ATTEMPTS,
                    # Inference is POST; a front door that dies mid-request answers a gateway
                    # error or nothing: both go to another front door.
                    "retryNonIdempotentMethod": True,
                    "status": [RETRIED_STATUSES],
                    "maxRequestBodyBytes": RETRY_BODY_BYTES,
                }
            }
        },
        "services": {
            SERVICE: {
                "loadBalancer": {
                    "servers": [{"url": url} for url in front_doors],
                    "healthCheck": {
                        "path": HEALTH_PATH,
                        "interval": HEALTH_INTERVAL,
                        "timeout": HEALTH_TIMEOUT,
                    },
                }
            }
        },
    }
    if not front_doors:  # nothing pointed at yet: every request gets Traefik's 404
        http = {}
    return {"http": http} if http else {}


def front_door_url(addresses: ClusterAddresses) -> str:
    """A cluster's front door inside the namespace (its `web` entrypoint)."""
    return f"http://{addresses.front_door_ip}:{GATEWAY_PORT}"


def point(root: Path, clusters: Sequence[ClusterAddresses]) -> Path:
    """Point the fleet address at these clusters' front doors (replacing the previous
    answer at once: Traefik's file provider sees one rename)."""
    directory = config_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / CONFIG_FILE
    tmp = directory / f".{CONFIG_FILE}.tmp"
    tmp.write_text(yaml.safe_dump(dynamic_config([front_door_url(a) for a in clusters])))
    os.replace(tmp, target)
    return target


def pointed(root: Path) -> list[str]:
    """The front-door URLs the fleet address sends to now."""
    path = config_dir(root) / CONFIG_FILE
    if not path.is_file():
        return []
    data = yaml.safe_load(path.read_text()) or {}
    service = ((data.get("http") or {}).get("services") or {}).get(SERVICE) or {}
    return [s["url"] for s in (service.get("loadBalancer") or {}).get("servers") or []]


def traefik_argv(traefik: Path, *, slot: int, root: Path) -> list[str]:
    return [
        str(traefik),
        "--global.checkNewVersion=false",
        "--global.sendAnonymousUsage=false",
        f"--entryPoints.web.address={inside(slot)}:{PORT}",
        f"--providers.file.directory={config_dir(root)}",
        "--providers.file.watch=true",
        f"--serversTransport.forwardingTimeouts.dialTimeout={DIAL_TIMEOUT}",
        "--accesslog=true",
        f"--accesslog.filePath={access_log(root)}",
        "--accesslog.format=json",
        "--log.level=WARN",
        "--log.noColor=true",
    ]
