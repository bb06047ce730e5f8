"""FleetAddress: one hostname in front of every front door, answering with the healthy ones.

An InferenceGateway with several front doors (`spec.additionalFrontDoors`) has one load
balancer per door. `spec.fleetAddress` puts one name over them: a weighted DNS answer (weight
1 each) from which a door leaves once its health check fails, so callers keep one URL while a
cluster is down. Each check asks the door's `HEALTH_PATH` (200, no key) with the fleet
hostname as Host and TLS SNI.

- Cloud DNS: one global `compute.HealthCheck` probing from three regions and one A
  `dns.RecordSet` whose weighted round robin policy has one health-checked external endpoint
  (the door's IPv4 address) per door.
- Route 53: per door one `route53.HealthCheck` and one weighted `route53.Record` (set
  identifier = the door's cluster) carrying that check: an A record for an IPv4 door, an
  alias A record for an AWS NLB (`<name>.elb.<region>.amazonaws.com`, the alias target's
  zone the region's NLB zone from the provider), so GKE's IPs and EKS's NLBs share one
  name; a CNAME for any other DNS name (which then cannot share the name with A records).
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp

from modelplane.api.base import check_dns_subdomain
from modelplane.api.inference_gateway import HEALTH_PATH, FleetAddress
from modelplane.api.names import gcp_name
from modelplane.components.cloud.provider_config import aws_provider_settings

TYPE = "modelplane:gateway:FleetAddress"
FRONT_DOOR_TAG = "modelplane.ai/front-door"

# Route 53 is a global service whose API lives in us-east-1.
ROUTE53_REGION = "us-east-1"

# GCP: a health check with `sourceRegions` (the only kind Cloud DNS accepts for external
# endpoints) needs `checkIntervalSec` of at least 30 (pulumi_gcp 10.2.0
# `compute.HealthCheck.source_regions`: "The checkIntervalSec field must be at least 30"),
# while the spec allows 10..300 (Route 53's fast checks). A shorter interval is raised to 30.
GCP_MIN_INTERVAL_SECONDS = 30
# How long a probe waits for the answer; GCP refuses a timeout above the interval.
GCP_TIMEOUT_SECONDS = 10
# Successes in a row before a door that failed is back in the answer (GCP's default).
GCP_HEALTHY_THRESHOLD = 2

# Route 53 checks every 10 or every 30 seconds, nothing else (`RequestInterval`, fixed once
# the check exists).
ROUTE53_FAST_INTERVAL = 10
ROUTE53_STANDARD_INTERVAL = 30

AddressKind = Literal["ip", "name"]
"""An IPv4 door (A record) or a door whose load balancer has a DNS name (CNAME)."""

# An NLB's DNS name: `<name>-<id>.elb.<region>.amazonaws.com` (a Classic ELB's is
# `<name>.<region>.elb.amazonaws.com`, which a Service of the AWS Load Balancer Controller
# does not get).
_NLB_NAME = re.compile(r"\.elb\.([a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com\.?$")


def nlb_region(address: str) -> str | None:
    """The region of an AWS NLB's DNS name, else None."""
    found = _NLB_NAME.search(address.lower())
    return found.group(1) if found else None


@dataclass(frozen=True)
class DoorAddress:
    """One front door: the InferenceCluster it runs on and its load balancer's address."""

    cluster: str
    """The front door's InferenceCluster name."""
    address: str
    """Its load balancer: an IPv4 address (GKE, most clouds) or a DNS name (an AWS NLB)."""


def gcp_check_interval(interval_seconds: int) -> int:
    """The Cloud DNS health check's interval for the spec's `intervalSeconds` (>= 30)."""
    return max(interval_seconds, GCP_MIN_INTERVAL_SECONDS)


def route53_request_interval(interval_seconds: int) -> int:
    """Route 53's `request_interval` for the spec's `intervalSeconds`: 10 below 30, else 30."""
    if interval_seconds < ROUTE53_STANDARD_INTERVAL:
        return ROUTE53_FAST_INTERVAL
    return ROUTE53_STANDARD_INTERVAL


def _is_ipv4(address: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address)
    except ValueError:
        return False


def _address_kind(door: DoorAddress) -> AddressKind:
    """`ip` for an IPv4 address, `name` for a DNS name; anything else is refused."""
    if _is_ipv4(door.address):
        return "ip"
    with contextlib.suppress(ValueError):
        check_dns_subdomain(door.address.lower().rstrip("."))
        return "name"
    raise ValueError(
        f"spec.fleetAddress: front door on cluster {door.cluster!r} has address "
        f"{door.address!r}, neither an IPv4 address nor a DNS name"
    )


class FleetAddressComponent(pulumi.ComponentResource):
    """`spec.fleetAddress`: the fleet hostname over ``doors``, with a health check per door."""

    hostname: str
    dns_provider: str
    """`CloudDNS` or `Route53`."""
    health_checks: dict[str, pulumi.Output[str]]
    """Per door's cluster, the id of the health check that takes it out of the answer (on
    Cloud DNS every door has the one check)."""

    def __init__(
        self,
        name: str,
        spec: FleetAddress,
        doors: Sequence[DoorAddress],
        *,
        https: bool,
        aws_provider: pulumi.ProviderResource | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        provider = spec.provider
        if provider is None:
            raise ValueError(
                "spec.fleetAddress sets neither cloudDns nor route53: nothing to build (the "
                "platform points the hostname at the front doors itself)"
            )
        if not doors:
            raise ValueError(
                f"spec.fleetAddress {spec.hostname}: no front doors to put behind the name"
            )
        clusters = [d.cluster for d in doors]
        twice = sorted({c for c in clusters if clusters.count(c) > 1})
        if twice:
            raise ValueError(
                f"spec.fleetAddress: cluster(s) {', '.join(twice)} given twice: one front door "
                "per cluster"
            )
        kinds = {d.cluster: _address_kind(d) for d in doors}
        if provider == "CloudDNS":
            _check_cloud_dns(doors, kinds)
        else:
            _check_route53(doors, kinds)

        super().__init__(TYPE, name, None, opts)
        self.hostname = spec.hostname
        self.dns_provider = provider
        self._https = https
        self._port = 443 if https else 80
        if provider == "CloudDNS":
            self.health_checks = self._cloud_dns(name, spec, doors)
        else:
            self.health_checks = self._route53(name, spec, doors, kinds, aws_provider)
        self.register_outputs(
            {
                "hostname": self.hostname,
                "provider": provider,
                "doors": clusters,
                "healthChecks": self.health_checks,
            }
        )

    # --- Cloud DNS ----------------------------------------------------------------------
    def _cloud_dns(
        self, name: str, spec: FleetAddress, doors: Sequence[DoorAddress]
    ) -> dict[str, pulumi.Output[str]]:
        cloud_dns = spec.cloud_dns
        assert cloud_dns is not None
        child = pulumi.ResourceOptions(parent=self)
        probe: dict[str, Any] = {
            "port": self._port,
            "request_path": HEALTH_PATH,
            "host": spec.hostname,
        }
        check = gcp.compute.HealthCheck(
            f"{name}-health",
            name=gcp_name(name, "health"),
            description=f"modelplane fleet address {spec.hostname}: front door health",
            project=cloud_dns.project,
            source_regions=list(cloud_dns.probe_regions),
            check_interval_sec=gcp_check_interval(spec.health_check.interval_seconds),
            timeout_sec=GCP_TIMEOUT_SECONDS,
            healthy_threshold=GCP_HEALTHY_THRESHOLD,
            unhealthy_threshold=spec.health_check.failure_threshold,
            https_health_check=(
                gcp.compute.HealthCheckHttpsHealthCheckArgs(**probe) if self._https else None
            ),
            http_health_check=(
                None if self._https else gcp.compute.HealthCheckHttpHealthCheckArgs(**probe)
            ),
            opts=child,
        )
        self.health_check = check
        self.record_set = gcp.dns.RecordSet(
            f"{name}-record",
            project=cloud_dns.project,
            managed_zone=cloud_dns.managed_zone,
            name=f"{spec.hostname.rstrip('.')}.",
            type="A",
            ttl=spec.ttl_seconds,
            routing_policy=gcp.dns.RecordSetRoutingPolicyArgs(
                wrrs=[
                    gcp.dns.RecordSetRoutingPolicyWrrArgs(
                        weight=1.0,
                        health_checked_targets=(
                            gcp.dns.RecordSetRoutingPolicyWrrHealthCheckedTargetsArgs(
                                external_endpoints=[door.address]
                            )
                        ),
                    )
                    for door in doors
                ],
                health_check=check.id,
            ),
            opts=child,
        )
        return {door.cluster: check.id for door in doors}

    # --- Route 53 -----------------------------------------------------------------------
    def _route53(
        self,
        name: str,
        spec: FleetAddress,
        doors: Sequence[DoorAddress],
        kinds: Mapping[str, AddressKind],
        aws_provider: pulumi.ProviderResource | None,
    ) -> dict[str, pulumi.Output[str]]:
        route53 = spec.route53
        assert route53 is not None
        if aws_provider is None:
            aws_provider = aws.Provider(
                f"{name}-aws",
                **{**aws_provider_settings(), "region": ROUTE53_REGION},
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.aws_provider = aws_provider
        child = pulumi.ResourceOptions(parent=self, provider=aws_provider)
        self.route53_checks: dict[str, aws.route53.HealthCheck] = {}
        self.records: dict[str, aws.route53.Record] = {}
        for door in doors:
            by_ip = kinds[door.cluster] == "ip"
            # With `ip_address`, Route 53 sends `fqdn` as the Host header (and as SNI with
            # enable_sni): the fleet name. Without it, it resolves `fqdn` (the NLB's name)
            # and sends that name: the door must answer HEALTH_PATH for any Host, and a
            # certificate without that name only makes the checker retry without SNI.
            check = aws.route53.HealthCheck(
                f"{name}-{door.cluster}-health",
                type="HTTPS" if self._https else "HTTP",
                ip_address=door.address if by_ip else None,
                fqdn=spec.hostname if by_ip else door.address.rstrip("."),
                enable_sni=True if self._https else None,
                port=self._port,
                resource_path=HEALTH_PATH,
                request_interval=route53_request_interval(spec.health_check.interval_seconds),
                failure_threshold=spec.health_check.failure_threshold,
                tags={"Name": f"{spec.hostname} {door.cluster}", FRONT_DOOR_TAG: door.cluster},
                opts=child,
            )
            self.route53_checks[door.cluster] = check
            region = None if by_ip else nlb_region(door.address)
            answer: dict[str, Any]
            if by_ip:
                answer = {"type": "A", "ttl": spec.ttl_seconds, "records": [door.address]}
            elif region is not None:
                # An alias A record to the NLB (Route 53 answers with its addresses): the
                # door's own check decides (evaluate_target_health off), as for an IP.
                zone = aws.lb.get_hosted_zone_id_output(
                    region=region,
                    load_balancer_type="network",
                    opts=pulumi.InvokeOutputOptions(parent=self, provider=aws_provider),
                )
                alias = aws.route53.RecordAliasArgs(
                    name=door.address.rstrip("."),
                    zone_id=zone.id,
                    evaluate_target_health=False,
                )
                answer = {"type": "A", "aliases": [alias]}
            else:
                answer = {"type": "CNAME", "ttl": spec.ttl_seconds, "records": [door.address]}
            self.records[door.cluster] = aws.route53.Record(
                f"{name}-{door.cluster}",
                zone_id=route53.hosted_zone_id,
                name=spec.hostname,
                set_identifier=door.cluster,
                weighted_routing_policies=[aws.route53.RecordWeightedRoutingPolicyArgs(weight=1)],
                health_check_id=check.id,
                opts=child,
                **answer,
            )
        return {cluster: check.id for cluster, check in self.route53_checks.items()}


def _check_cloud_dns(doors: Sequence[DoorAddress], kinds: Mapping[str, AddressKind]) -> None:
    """Cloud DNS health-checks external endpoints by IP address only (the API's
    `healthCheckedTargets.externalEndpoints`: "The Internet IP addresses to be health
    checked")."""
    for door in doors:
        if kinds[door.cluster] != "ip":
            raise ValueError(
                f"spec.fleetAddress.cloudDns: the front door on cluster {door.cluster!r} has "
                f"the DNS name {door.address!r}, and Cloud DNS health-checks external "
                "endpoints by IPv4 address only (an EKS NLB has a DNS name): use "
                "spec.fleetAddress.route53 instead"
            )


def _check_route53(doors: Sequence[DoorAddress], kinds: Mapping[str, AddressKind]) -> None:
    """A CNAME cannot share its name with any other record (RFC 1034 3.6.2; Route 53 refuses
    it), so a door whose DNS name is not an NLB's (CNAME) cannot join doors that are A
    records (IPs, and NLBs as alias A records)."""
    names = sorted(
        d.cluster for d in doors if kinds[d.cluster] == "name" and nlb_region(d.address) is None
    )
    ips = sorted(d.cluster for d in doors if d.cluster not in names)
    if names and ips:
        raise ValueError(
            "spec.fleetAddress.route53: the front doors mix IPv4 addresses (cluster(s) "
            f"{', '.join(ips)}: A records) and DNS names (cluster(s) {', '.join(names)}: "
            "CNAME records), and Route 53 cannot hold a CNAME and A records at the same name "
            "(a CNAME stands alone at its name): give every front door the same kind of "
            "load balancer address"
        )


__all__ = [
    "FRONT_DOOR_TAG",
    "TYPE",
    "DoorAddress",
    "FleetAddressComponent",
    "gcp_check_interval",
    "route53_request_interval",
]
