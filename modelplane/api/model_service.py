"""ModelService (one stable URL, weighted over endpoints) and ModelEndpoint."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, StringConstraints, field_validator

from modelplane.api.autoscaling import Duration
from modelplane.api.base import (
    API_VERSION,
    DNSLabel,
    LabelSelector,
    Namespaced,
    ObjectMeta,
    Strict,
    check_no_owned_labels,
)
from modelplane.api.limits import MAX_WEIGHT
from modelplane.api.pod_security import reserved_namespace
from modelplane.api.problems import raise_if


class ServiceEndpoint(Strict):
    selector: LabelSelector
    """Which ModelEndpoints (composed replicas and hand-written) this entry routes to, by label."""
    weight: int = Field(default=1, ge=1, le=MAX_WEIGHT)
    """The entry's share of the traffic (1..1000000, default 1), split over the endpoints it
    selects.
    """
    tier: int = Field(default=1, ge=1, le=9)
    """1..9, default 1: the entries of the lowest tier with an endpoint serve the traffic;
    a higher number is overflow (a provider outside the fleet), taking requests only when
    the tiers before it have no endpoint in the route, or (requests by model name) refuse
    one before answering."""


ModelName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$"),
]
"""What a client puts in a request's `model` (`Qwen/Qwen2.5-7B-Instruct`, `gpt-4o-mini`):
a letter or digit, then letters, digits and `. _ : / @ + -`, at most 200 characters."""

DEFAULT_FIRST_BYTE = 300.0
DEFAULT_IDLE = 60.0


class ServiceTimeouts(Strict):
    first_byte: Duration = DEFAULT_FIRST_BYTE
    """How long the front door waits for a backend's first byte (a non-streaming answer is
    whole by then) before it gives up on that backend: retried once elsewhere while nothing
    was sent, else `504` (default 5m, at most 1h)."""
    idle: Duration = DEFAULT_IDLE
    """How long a started answer (a stream) may send nothing before it is ended with an
    error event (default 60s, at most 1h)."""

    @field_validator("first_byte", "idle")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("a timeout must be more than 0s")
        return value


DEFAULT_WAKE_DEADLINE = 300.0
DEFAULT_WAKE_QUEUE = 64


class ServiceWake(Strict):
    deadline: Duration = DEFAULT_WAKE_DEADLINE
    """How long a request by model name is held while no endpoint of the service answers (a
    deployment scaled to zero waking): then `503` with `Retry-After` (default 5m, at most 1h)."""
    queue: int = Field(default=DEFAULT_WAKE_QUEUE, ge=1, le=10000)
    """At most this many requests held per model name and router replica; more get `429`
    (default 64)."""

    @field_validator("deadline")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("a deadline must be more than 0s")
        return value


class ModelServiceSpec(Strict):
    endpoints: list[ServiceEndpoint] = Field(min_length=1)
    """The weighted entries (1 or more); one mechanism for simple and weighted routing."""
    callers: list[DNSLabel] | None = Field(default=None, min_length=1, max_length=1000)
    """Optional: only these InferenceGateway callers (`spec.auth`) may use the service; any
    other caller with a valid key gets 403."""
    models: list[ModelName] | None = Field(default=None, min_length=1, max_length=100)
    """Optional: the model names (and aliases) this service answers to at the fleet's base
    URL (`POST /v1/chat/completions` with `"model": <name>`); unique across the fleet."""
    timeouts: ServiceTimeouts = Field(default_factory=ServiceTimeouts)
    """First-byte and stream-idle timeouts of requests routed by model name."""
    wake: ServiceWake = Field(default_factory=ServiceWake)
    """How requests by model name are held while the service has no answering endpoint
    (its deployments scaled to zero: `autoscaling.minReplicas: 0`)."""

    @field_validator("models")
    @classmethod
    def _unique_models(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            twice = sorted({m for m in value if value.count(m) > 1})
            if twice:
                raise ValueError(f"duplicate model name(s): {', '.join(twice)}")
        return value

    @field_validator("callers")
    @classmethod
    def _unique_callers(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            twice = sorted({c for c in value if value.count(c) > 1})
            if twice:
                raise ValueError(f"duplicate caller name(s): {', '.join(twice)}")
        return value


class ModelService(Namespaced):
    api_version: Literal["modelplane.ai/v1alpha1"] = API_VERSION
    kind: Literal["ModelService"] = "ModelService"
    metadata: ObjectMeta
    spec: ModelServiceSpec

    @property
    def path_prefix(self) -> str:
        return f"/{self.metadata.namespace}/{self.metadata.name}/"


@dataclass(frozen=True)
class ParsedURL:
    scheme: str
    host: str
    port: int
    path: str
    address_type: Literal["IPv4", "IPv6", "FQDN"]


def parse_endpoint_url(url: str) -> ParsedURL:
    """Split an endpoint URL; raise ValueError naming what is wrong."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise ValueError(f"url {url!r} must not contain spaces or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"url {url!r} must start with http:// or https://")
    if parts.username or parts.password:
        raise ValueError(f"url {url!r} must not carry credentials")
    if parts.query or parts.fragment:
        raise ValueError(f"url {url!r} must not have a query or fragment")
    host = parts.hostname or ""
    if not host:
        raise ValueError(f"url {url!r} has no host")
    try:
        given = parts.port
    except ValueError:
        raise ValueError(f"url {url!r} has an invalid port (a port is 1-65535)") from None
    if given is not None and not 1 <= given <= 65535:
        raise ValueError(f"url {url!r} has port {given}: a port is 1-65535")
    port = given if given is not None else (443 if parts.scheme == "https" else 80)
    kind: Literal["IPv4", "IPv6", "FQDN"]
    try:
        ip = ipaddress.ip_address(host)
        kind = "IPv4" if ip.version == 4 else "IPv6"
    except ValueError:
        labels = host.rstrip(".").split(".")
        if not all(
            0 < len(lbl) <= 63
            and lbl.replace("-", "").isalnum()
            and lbl.isascii()
            and not lbl.startswith("-")
            and not lbl.endswith("-")
            for lbl in labels
        ):
            raise ValueError(
                f"url {url!r}: host {host!r} is not an IP address or DNS name"
            ) from None
        kind = "FQDN"
    return ParsedURL(parts.scheme, host.lower(), port, parts.path or "/", kind)


# What no ModelEndpoint may name (docs/api.md "ModelService and ModelEndpoint"; security L5):
# the front door would expose it to every client.
_AWS_METADATA_V6 = ipaddress.ip_address("fd00:ec2::254")
_INTERNAL_NAMES = frozenset({"localhost", "metadata", "metadata.google.internal", "kubernetes"})


def internal_problem(parsed: ParsedURL) -> str | None:
    """Why the front door must not reach this endpoint's host (None: it may)."""
    if parsed.address_type != "FQDN":
        ip = ipaddress.ip_address(parsed.host)
        mapped = getattr(ip, "ipv4_mapped", None)
        ip = mapped or ip
        if ip == _AWS_METADATA_V6:
            return "the cloud's metadata service"
        if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
            return "a loopback, link-local (cloud metadata), unspecified or multicast address"
        return None
    name = parsed.host.rstrip(".")
    labels = name.split(".")
    if (
        name in _INTERNAL_NAMES
        or labels[-1] == "localhost"
        or labels[:2] == ["kubernetes", "default"]
    ):
        return f"{name!r} is the node, the cluster's API server or the metadata service"
    if len(labels) >= 2 and reserved_namespace(labels[1]):
        return f"{name!r} is a Service of the reserved namespace {labels[1]!r}"
    return None


class ModelEndpointSpec(Strict):
    url: str = Field(min_length=1)
    """The endpoint's base URL: http(s), a host (IP, IPv6 or name), an optional port."""
    rewrite_path: str = "/"
    """What the service prefix is rewritten to (default /)."""

    @field_validator("url")
    @classmethod
    def _valid_url(cls, url: str) -> str:
        problem = internal_problem(parse_endpoint_url(url))
        if problem:
            raise ValueError(f"url {url!r}: {problem}, never a ModelEndpoint")
        return url

    @field_validator("rewrite_path")
    @classmethod
    def _absolute(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"rewritePath {path!r} must start with '/'")
        return path


class ModelEndpoint(Namespaced):
    api_version: Literal["modelplane.ai/v1alpha1"] = API_VERSION
    kind: Literal["ModelEndpoint"] = "ModelEndpoint"
    metadata: ObjectMeta
    spec: ModelEndpointSpec

    @field_validator("metadata")
    @classmethod
    def _user_labels(cls, meta: ObjectMeta) -> ObjectMeta:
        try:
            check_no_owned_labels(meta.labels)
        except ValueError as exc:
            raise_if([("labels", str(exc))])
        return meta
