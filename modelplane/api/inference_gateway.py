"""InferenceGateway: the fleet's front door, where ModelService routes live."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator, model_validator

from modelplane.api.base import (
    API_VERSION,
    DNSLabel,
    DNSSubdomain,
    ObjectMeta,
    SecretKeyRef,
    Strict,
)
from modelplane.api.inference_cluster import KubeconfigSecretRef, cidr, private_v4
from modelplane.api.problems import raise_if


class ExistingGatewayCluster(Strict):
    secret_ref: KubeconfigSecretRef
    """Where the gateway cluster's kubeconfig comes from."""


class GatewayCluster(Strict):
    inference_cluster_ref: DNSLabel | None = None
    """The InferenceCluster the gateway runs on."""
    existing: ExistingGatewayCluster | None = None
    """A cluster outside the fleet, reached with its kubeconfig."""

    @model_validator(mode="after")
    def _exactly_one(self) -> GatewayCluster:
        if (self.inference_cluster_ref is None) == (self.existing is None):
            raise ValueError("set exactly one of inferenceClusterRef or existing")
        return self


class FrontDoorRef(Strict):
    inference_cluster_ref: DNSLabel
    """The InferenceCluster a further front door runs on."""


HEALTH_PATH = "/.well-known/modelplane/health"
"""What every front door answers with 200 and no key: the fleet address's health checks ask
it (docs/api.md, "More than one front door")."""


class FrontDoorHealthCheck(Strict):
    interval_seconds: int = Field(default=30, ge=10, le=300)
    """How often each front door is asked (default 30 s; Route 53 asks every 10 s below 30,
    every 30 s from 30 on)."""
    failure_threshold: int = Field(default=3, ge=1, le=10)
    """Failed checks in a row before a front door leaves the answer (default 3)."""


# Three regions probe an external endpoint for Cloud DNS (GCP requires exactly three).
DEFAULT_PROBE_REGIONS = ("us-central1", "us-east4", "europe-west1")


class CloudDnsFleetAddress(Strict):
    project: str = Field(min_length=1, max_length=63)
    """The GCP project of the managed zone and the health check."""
    managed_zone: DNSLabel
    """The public Cloud DNS managed zone the hostname is in."""
    probe_regions: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PROBE_REGIONS), min_length=3, max_length=3
    )
    """The three GCP regions the health check probes each front door from."""


class Route53FleetAddress(Strict):
    hosted_zone_id: str = Field(pattern=r"^[A-Z0-9]{1,32}$")
    """The Route 53 public hosted zone the hostname is in (`Z0123...`)."""


class FleetAddress(Strict):
    """One name in front of every front door, answering with the healthy ones."""

    hostname: DNSSubdomain
    """The name callers use (`llm.example.com`); the front doors' TLS certificate covers it."""
    ttl_seconds: int = Field(default=30, ge=5, le=3600)
    """How long resolvers keep an answer (default 30 s): a dead front door leaves the answer
    after its failed checks, and a client's cached answer after this."""
    health_check: FrontDoorHealthCheck = Field(default_factory=FrontDoorHealthCheck)
    """How often each front door's health path is asked, and how many failures take it out."""
    cloud_dns: CloudDnsFleetAddress | None = None
    """A Cloud DNS record set with a weighted routing policy over health-checked targets."""
    route53: Route53FleetAddress | None = None
    """Route 53 weighted records, one per front door, each with a health check."""

    @model_validator(mode="after")
    def _at_most_one(self) -> FleetAddress:
        if self.cloud_dns is not None and self.route53 is not None:
            raise ValueError("set at most one of cloudDns or route53")
        return self

    @property
    def provider(self) -> str | None:
        """`CloudDNS`, `Route53`, or None: the platform points the name (status lists the
        front doors' addresses)."""
        if self.cloud_dns is not None:
            return "CloudDNS"
        if self.route53 is not None:
            return "Route53"
        return None


class CallerLimits(Strict):
    requests_per_minute: int | None = Field(default=None, ge=1, le=10_000_000)
    """At most this many requests in any 60 s (optional)."""
    tokens_per_minute: int | None = Field(default=None, ge=1, le=10_000_000_000)
    """At most this many prompt + completion tokens in any 60 s (optional)."""
    tokens_per_day: int | None = Field(default=None, ge=1, le=10_000_000_000_000)
    """At most this many prompt + completion tokens in any 24 h (optional)."""


class GatewayCaller(Strict):
    name: DNSLabel
    """The caller's name: what the engines see in `x-modelplane-caller` (never the key)."""
    secret_ref: SecretKeyRef
    """Where the caller's API key comes from (architecture.md, "Secrets")."""
    limits: CallerLimits | None = None
    """Optional: the caller's request and token budgets at the OpenAI base URL (429 past
    them, before any backend sees the request)."""


class GatewayAuth(Strict):
    callers: list[GatewayCaller] = Field(min_length=1, max_length=1000)
    """The callers let in, each with its own API key (`Authorization: Bearer <key>` or
    `x-api-key: <key>`); any other request is refused with 401."""
    allow_insecure: bool = False
    """Let the callers' keys travel over plain HTTP: `auth` without `spec.tls`, or with
    `tls.http: Redirect` (a client's first plain request carries its key before the 301).
    Only for a front door no untrusted network reaches (the dev fleet: one network namespace
    on one machine). Default false: both are validation errors (security review M5)."""

    @model_validator(mode="after")
    def _unique(self) -> GatewayAuth:
        names = [c.name for c in self.callers]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"duplicate caller name(s): {', '.join(twice)}")
        return self


class GatewayTLS(Strict):
    certificate: SecretKeyRef
    """The PEM certificate chain the front door presents."""
    private_key: SecretKeyRef
    """The PEM private key of that certificate."""
    http: Literal["Redirect", "Refuse"] = "Redirect"
    """Plain HTTP: redirected to https, or refused (no plain listener, no port 80 on the
    front door's Service). Default: Refuse with `spec.auth` (a key never travels in
    cleartext), else Redirect."""


GATEWAY_CHART_VERSIONS: Mapping[str, tuple[str, ...]] = {
    # traefik/traefik-helm-chart: the pin (every values key modelplane sets checked against
    # its values.yaml; since 40.2.0 the chart ships no Gateway API CRDs, which the vendored
    # bundle provides: an older chart would install a second set).
    "Traefik": ("41.3.0",),
    # envoyproxy/gateway-helm: the pin (= the serving stack's envoyGateway) and the previous
    # pin, both 1.8 (Gateway API v1.5.1, the vendored bundle; Envoy AI Gateway v1.1.0 needs
    # >= 1.8.1).
    "EnvoyGateway": ("v1.8.3", "v1.8.1"),
}
"""`spec.version`: the front-door chart versions known to work, per backend, the pin first
(security review M10: a spec cannot point the front door at an unreviewed chart)."""

DIGEST_REFERENCE = re.compile(r"^[a-z0-9][a-z0-9._\-/:]*@sha256:[0-9a-f]{64}$")
"""An image pinned by content: `<repository>[:tag]@sha256:<64 hex>`."""


def digest_reference(value: str) -> str:
    if not DIGEST_REFERENCE.match(value):
        raise ValueError(
            f"{value!r} is not pinned by digest: write <repository>[:tag]@sha256:<64 hex "
            "digits> (a tag alone can be moved to other content)"
        )
    return value


class GatewayImages(Strict):
    """Images of modelplane's own containers, for a platform's mirror (security review M10).
    Each is a reference pinned by digest; unset: the default tag (docs/api.md)."""

    front_door: str | None = None
    """The key check (`modelplane-authz`) and the OpenAI router: any image with `python3`
    (3.11 or later) and its standard library (default `python:3.12-alpine`)."""
    model_cache: str | None = None
    """The ModelCache download and prune Jobs and the replicas' wait for the cache: Python
    3.12 with pip on glibc, x86_64 or aarch64 (the pinned wheels' platforms; default
    `python:3.12-slim`)."""

    @field_validator("front_door", "model_cache")
    @classmethod
    def _by_digest(cls, value: str | None) -> str | None:
        return None if value is None else digest_reference(value)


DEFAULT_FLEET_CIDR = "10.0.0.0/8"
DEFAULT_CLUSTER_PREFIX = 16


class FleetNetwork(Strict):
    """The fleet address plan's range (docs/api.md, "Addresses")."""

    fleet_cidr: str = DEFAULT_FLEET_CIDR
    """The range every provisioned cluster's block is taken from (default 10.0.0.0/8; IPv4,
    inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16). Blocks given before it changed stay."""
    cluster_prefix_length: int = Field(default=DEFAULT_CLUSTER_PREFIX, ge=15, le=20)
    """The size of each cluster's block, as a prefix length (default 16: a /16 per cluster,
    256 clusters in 10.0.0.0/8; 15..20)."""

    @field_validator("fleet_cidr")
    @classmethod
    def _private_v4(cls, value: str) -> str:
        net = ipaddress.ip_network(cidr(value))
        if not private_v4(net):
            raise ValueError(
                f"{value} must be an IPv4 block inside 10.0.0.0/8, 172.16.0.0/12 or "
                "192.168.0.0/16 (private ranges: EKS takes service ranges only from these)"
            )
        return value

    @model_validator(mode="after")
    def _room_for_a_block(self) -> FleetNetwork:
        prefix = ipaddress.ip_network(self.fleet_cidr).prefixlen
        if prefix > self.cluster_prefix_length:
            raise ValueError(
                f"fleetCidr {self.fleet_cidr} is smaller than one cluster's block "
                f"(/{self.cluster_prefix_length}, clusterPrefixLength)"
            )
        return self


class InferenceGatewaySpec(Strict):
    backend: Literal["Traefik", "EnvoyGateway"] = "Traefik"
    """The gateway implementation: Traefik (default) or EnvoyGateway."""
    cluster: GatewayCluster
    """The cluster the gateway runs on (exactly one of inferenceClusterRef or existing)."""
    additional_front_doors: list[FrontDoorRef] = Field(default_factory=list, max_length=16)
    """More front doors, each on another InferenceCluster and complete: the same routes,
    callers, keys and certificates (docs/api.md, "More than one front door")."""
    fleet_address: FleetAddress | None = None
    """One name in front of every front door, with health checks."""
    version: str | None = Field(default=None, description="chart version override")
    """The front-door chart's version: one of GATEWAY_CHART_VERSIONS[backend] (default: the
    pin, its first)."""
    images: GatewayImages = Field(default_factory=GatewayImages)
    """Image overrides (pinned by digest) for modelplane's own containers."""
    auth: GatewayAuth | None = None
    """API keys per caller; without it the front door is open to anyone who reaches it."""
    tls: GatewayTLS | None = None
    """TLS on the front door (port 443 behind the controller's Service)."""
    network: FleetNetwork = Field(default_factory=FleetNetwork)
    """The fleet address plan: where provisioned clusters' ranges come from."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_plain_http_with_auth(cls, data: object) -> object:
        """With `auth`, `tls.http` defaults to Refuse: a caller's key never reaches a plain
        listener (security review M5)."""
        if not isinstance(data, dict) or data.get("auth") is None:
            return data
        tls = data.get("tls")
        if isinstance(tls, dict) and "http" not in tls:
            return {**data, "tls": {**tls, "http": "Refuse"}}
        return data

    @model_validator(mode="after")
    def _problems(self) -> InferenceGatewaySpec:
        """Every problem at once: the chart version on the allowlist; `auth` needs Traefik,
        and (unless `auth.allowInsecure`) TLS with plain HTTP refused, so no caller's key
        travels in cleartext."""
        problems: list[tuple[str, str]] = []
        if self.additional_front_doors and self.cluster.inference_cluster_ref is None:
            problems.append(
                (
                    "additionalFrontDoors",
                    "needs spec.cluster.inferenceClusterRef: every front door of several runs "
                    "on an InferenceCluster of the fleet",
                )
            )
        doors = self.front_door_clusters
        twice = sorted({d for d in doors if doors.count(d) > 1})
        if twice:
            problems.append(
                (
                    "additionalFrontDoors",
                    f"cluster(s) {', '.join(twice)} named twice: one front door per cluster",
                )
            )
        allowed = GATEWAY_CHART_VERSIONS[self.backend]
        if self.version is not None and self.version not in allowed:
            problems.append(
                (
                    "version",
                    f"{self.version!r} is not a {self.backend} chart version modelplane knows "
                    f"to work; allowed: {', '.join(allowed)} (security review M10)",
                )
            )
        if self.auth is None:
            raise_if(problems)
            return self
        if self.backend != "Traefik":
            problems.append(
                (
                    "",
                    "auth needs backend Traefik (the key check runs behind Traefik's "
                    "forwardAuth; EnvoyGateway callers are not supported yet): a front door "
                    "without its key check is never deployed",
                )
            )
        if not self.auth.allow_insecure:
            if self.tls is None:
                problems.append(
                    (
                        "tls",
                        "required with spec.auth: without it every caller's key travels in "
                        "cleartext; set spec.tls (or spec.auth.allowInsecure: true, only for a "
                        "front door no untrusted network reaches)",
                    )
                )
            elif self.tls.http == "Redirect":
                problems.append(
                    (
                        "tls.http",
                        "Redirect with spec.auth keeps plain HTTP open, and a client's first "
                        "plain request carries its key before the redirect; use Refuse (the "
                        "default with auth), or spec.auth.allowInsecure: true",
                    )
                )
        raise_if(problems)
        return self

    @property
    def front_door_clusters(self) -> list[str]:
        """The InferenceClusters the front doors run on, `spec.cluster` first."""
        first = self.cluster.inference_cluster_ref
        return ([first] if first else []) + [
            d.inference_cluster_ref for d in self.additional_front_doors
        ]


class InferenceGateway(Strict):
    api_version: Literal["modelplane.ai/v1alpha1"] = API_VERSION
    kind: Literal["InferenceGateway"] = "InferenceGateway"
    metadata: ObjectMeta
    spec: InferenceGatewaySpec
