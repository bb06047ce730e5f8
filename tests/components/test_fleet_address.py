"""FleetAddressComponent: one hostname over the front doors, health-checked (modelplane/components/fleet_address.py)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pytest
from google.protobuf import json_format

from modelplane.api.inference_gateway import HEALTH_PATH, FleetAddress
from modelplane.components.fleet_address import (
    FRONT_DOOR_TAG,
    DoorAddress,
    FleetAddressComponent,
    gcp_check_interval,
    route53_request_interval,
)
from tests.pulumi_mocks import MockRun, Registered, decode

COMPONENT = "modelplane:gateway:FleetAddress"
GCP_CHECK = "gcp:compute/healthCheck:HealthCheck"
RECORD_SET = "gcp:dns/recordSet:RecordSet"
R53_CHECK = "aws:route53/healthCheck:HealthCheck"
R53_RECORD = "aws:route53/record:Record"
AWS_PROVIDER = "pulumi:providers:aws"

HOST = "llm.example.com"
IP_DOORS = [DoorAddress("gke-west", "203.0.113.10"), DoorAddress("gke-east", "198.51.100.7")]
NAME_DOORS = [
    DoorAddress("eks-east", "a1b2-1234.elb.us-east-1.amazonaws.com"),
    DoorAddress("eks-west", "c3d4-5678.elb.us-west-2.amazonaws.com"),
]
OTHER_NAME_DOORS = [
    DoorAddress("lb-east", "east.lb.example.net"),
    DoorAddress("lb-west", "west.lb.example.net"),
]
NLB_ZONES = {"us-east-1": "Z26RNL4JYFTOTI", "us-west-2": "Z18D5FSROUN65G"}
HOSTED_ZONE_ID = "aws:lb/getHostedZoneId:getHostedZoneId"
CLOUD_DNS = {"project": "proj-dns", "managedZone": "example-com"}
ROUTE53 = {"hostedZoneId": "Z0123456789ABC"}


def fleet_address(provider: str | None, *, interval: int = 30, **extra: Any) -> FleetAddress:
    data: dict[str, Any] = {
        "hostname": HOST,
        "ttlSeconds": 20,
        "healthCheck": {"intervalSeconds": interval, "failureThreshold": 4},
        **extra,
    }
    if provider == "CloudDNS":
        data["cloudDns"] = CLOUD_DNS
    elif provider == "Route53":
        data["route53"] = ROUTE53
    return FleetAddress.model_validate(data)


class OutputsRecorder:
    """The outputs each component registers (the mock monitor drops them)."""

    def __init__(self, run: MockRun) -> None:
        self.by_urn: dict[str, dict[str, Any]] = {}
        inner = run.monitor.RegisterResourceOutputs

        def record(request: Any) -> Any:
            self.by_urn[request.urn] = decode(json_format.MessageToDict(request.outputs))
            return inner(request)

        run.monitor.RegisterResourceOutputs = record  # type: ignore[method-assign]


def render(
    spec: FleetAddress,
    doors: list[DoorAddress],
    *,
    https: bool = True,
    own_provider: bool = False,
) -> tuple[MockRun, FleetAddressComponent, OutputsRecorder]:
    # The provider's table of NLB hosted zones, per region (a data source).
    run = MockRun(
        answers={HOSTED_ZONE_ID: lambda a: {"id": NLB_ZONES[a["region"]], **a}},
    )
    outputs = OutputsRecorder(run)

    def program() -> FleetAddressComponent:
        provider = aws.Provider("route53-given", region="us-east-1") if own_provider else None
        return FleetAddressComponent("fleet", spec, doors, https=https, aws_provider=provider)

    return run, run.run(program), outputs


def children(run: MockRun) -> list[Registered]:
    component = run.one(COMPONENT)
    return [r for r in run if r.urn != component.urn and r.name != "route53-given"]


# --- Cloud DNS ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("https", "port", "probe", "other"),
    [
        (True, 443, "httpsHealthCheck", "httpHealthCheck"),
        (False, 80, "httpHealthCheck", "httpsHealthCheck"),
    ],
)
def test_cloud_dns_one_check_over_weighted_ip_targets(
    https: bool, port: int, probe: str, other: str
) -> None:
    run, _, _ = render(fleet_address("CloudDNS"), IP_DOORS, https=https)
    check, record = run.one(GCP_CHECK), run.one(RECORD_SET)
    assert check.inputs["project"] == "proj-dns"
    assert check.inputs["sourceRegions"] == ["us-central1", "us-east4", "europe-west1"]
    assert check.inputs["checkIntervalSec"] == 30
    assert check.inputs["unhealthyThreshold"] == 4
    assert check.inputs["healthyThreshold"] == 2
    assert check.inputs["timeoutSec"] < check.inputs["checkIntervalSec"]
    assert check.inputs[probe] == {"port": port, "requestPath": HEALTH_PATH, "host": HOST}
    assert other not in check.inputs
    assert (record.inputs["project"], record.inputs["managedZone"]) == ("proj-dns", "example-com")
    assert (record.inputs["name"], record.inputs["type"], record.inputs["ttl"]) == (
        f"{HOST}.",
        "A",
        20,
    )
    assert "rrdatas" not in record.inputs  # the answer is the healthy targets only
    assert record.get("routingPolicy.wrrs") == [
        {"weight": 1, "healthCheckedTargets": {"externalEndpoints": [door.address]}}
        for door in IP_DOORS
    ]
    assert record.get("routingPolicy.healthCheck") == check.id
    assert record.depends_on(check)


@pytest.mark.parametrize(
    ("interval", "expected"),
    [(10, 30), (29, 30), (30, 30), (45, 45), (120, 120), (300, 300)],
)
def test_cloud_dns_interval_is_at_least_30(interval: int, expected: int) -> None:
    assert gcp_check_interval(interval) == expected
    run, _, _ = render(fleet_address("CloudDNS", interval=interval), IP_DOORS)
    check = run.one(GCP_CHECK)
    assert check.inputs["checkIntervalSec"] == expected
    assert check.inputs["timeoutSec"] < expected


def test_cloud_dns_custom_probe_regions_and_single_door() -> None:
    spec = fleet_address(
        None, cloudDns={**CLOUD_DNS, "probeRegions": ["asia-east1", "us-west1", "europe-west4"]}
    )
    run, component, _ = render(spec, IP_DOORS[:1])
    assert run.one(GCP_CHECK).inputs["sourceRegions"] == ["asia-east1", "us-west1", "europe-west4"]
    assert run.one(RECORD_SET).get("routingPolicy.wrrs.0.healthCheckedTargets") == {
        "externalEndpoints": ["203.0.113.10"]
    }
    assert list(component.health_checks) == ["gke-west"]


def test_cloud_dns_children_parented_and_outputs() -> None:
    run, component, outputs = render(fleet_address("CloudDNS"), IP_DOORS)
    parent = run.one(COMPONENT)
    assert parent.name == "fleet"
    assert sorted(r.type for r in children(run)) == [GCP_CHECK, RECORD_SET]
    assert all(r.parent == parent.urn for r in children(run))
    assert run.of_type(AWS_PROVIDER) == []
    check_id = run.one(GCP_CHECK).id
    assert (component.hostname, component.dns_provider) == (HOST, "CloudDNS")
    assert {c: run.value(i) for c, i in component.health_checks.items()} == {
        "gke-west": check_id,
        "gke-east": check_id,
    }
    assert outputs.by_urn[parent.urn] == {
        "hostname": HOST,
        "provider": "CloudDNS",
        "doors": ["gke-west", "gke-east"],
        "healthChecks": {"gke-west": check_id, "gke-east": check_id},
    }


# --- Route 53 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doors", "record_type"),
    [(IP_DOORS, "A"), (NAME_DOORS, "alias"), (OTHER_NAME_DOORS, "CNAME"),
     (IP_DOORS[:1] + NAME_DOORS[1:], "mixed")],
    ids=["ip-doors", "nlb-doors", "other-name-doors", "an-ip-and-an-nlb"],
)  # fmt: skip
@pytest.mark.parametrize(
    ("https", "check_type", "port"), [(True, "HTTPS", 443), (False, "HTTP", 80)]
)
def test_route53_weighted_records_each_with_its_own_check(
    doors: list[DoorAddress], record_type: str, https: bool, check_type: str, port: int
) -> None:
    run, _, _ = render(fleet_address("Route53"), doors, https=https)
    checks = {c.inputs["tags"][FRONT_DOOR_TAG]: c for c in run.of_type(R53_CHECK)}
    records = {r.inputs["setIdentifier"]: r for r in run.of_type(R53_RECORD)}
    # registration order is the resolution order of inputs: compare as sets
    assert set(records) == set(checks) == {d.cluster for d in doors}
    assert len(records) == len(doors)
    for door in doors:
        check, record = checks[door.cluster], records[door.cluster]
        assert check.inputs["type"] == check_type
        assert check.inputs["port"] == port
        assert check.inputs["resourcePath"] == HEALTH_PATH
        assert check.inputs["failureThreshold"] == 4
        assert check.inputs.get("enableSni") is (True if https else None)
        assert check.inputs["tags"]["Name"]
        by_ip = door.address[0].isdigit()
        if by_ip:  # the IP is probed, the fleet name is the Host header and SNI
            assert (check.inputs["ipAddress"], check.inputs["fqdn"]) == (door.address, HOST)
        else:  # Route 53 resolves the load balancer's name and probes what it answers
            assert "ipAddress" not in check.inputs
            assert check.inputs["fqdn"] == door.address
        assert record.inputs["zoneId"] == ROUTE53["hostedZoneId"]
        assert record.inputs["name"] == HOST
        if by_ip or "example.net" in door.address:
            kind = "A" if by_ip else "CNAME"
            assert (record.inputs["type"], record.inputs["ttl"]) == (kind, 20)
            assert record.inputs["records"] == [door.address]
        else:  # an NLB: an alias A record to it, in its region's NLB zone, the door's check
            region = door.address.split(".elb.")[1].split(".")[0]
            assert record.inputs["type"] == "A" and "records" not in record.inputs
            assert record.inputs["aliases"] == [
                {"name": door.address, "zoneId": NLB_ZONES[region], "evaluateTargetHealth": False}
            ]
        assert record.inputs["weightedRoutingPolicies"] == [{"weight": 1}]
        assert record.inputs["healthCheckId"] == check.id
        assert record.depends_on(check)


@pytest.mark.parametrize(("interval", "expected"), [(10, 10), (29, 10), (30, 30), (120, 30)])
def test_route53_request_interval_is_10_or_30(interval: int, expected: int) -> None:
    assert route53_request_interval(interval) == expected
    run, _, _ = render(fleet_address("Route53", interval=interval), IP_DOORS)
    assert [c.inputs["requestInterval"] for c in run.of_type(R53_CHECK)] == [expected] * 2


@pytest.mark.parametrize("own_provider", [False, True], ids=["made", "given"])
def test_route53_provider(own_provider: bool) -> None:
    run, _, _ = render(fleet_address("Route53"), NAME_DOORS, own_provider=own_provider)
    parent = run.one(COMPONENT)
    providers = run.of_type(AWS_PROVIDER)
    assert len(providers) == 1
    provider = providers[0]
    if own_provider:
        assert provider.name == "route53-given" and provider.parent != parent.urn
    else:  # Route 53 is global: its API is in us-east-1
        assert provider.name == "fleet-aws" and provider.parent == parent.urn
        assert provider.inputs["region"] == "us-east-1"
    for resource in run.of_type(R53_CHECK) + run.of_type(R53_RECORD):
        assert run.provider_of(resource) == provider, resource.name


def test_route53_children_parented_and_outputs() -> None:
    run, component, outputs = render(fleet_address("Route53"), IP_DOORS)
    parent = run.one(COMPONENT)
    assert sorted(r.type for r in children(run)) == sorted(
        [R53_CHECK, R53_CHECK, R53_RECORD, R53_RECORD, AWS_PROVIDER]
    )
    assert all(r.parent == parent.urn for r in children(run))
    ids = {c.inputs["tags"][FRONT_DOOR_TAG]: c.id for c in run.of_type(R53_CHECK)}
    assert len(set(ids.values())) == 2
    assert {c: run.value(i) for c, i in component.health_checks.items()} == ids
    assert outputs.by_urn[parent.urn] == {
        "hostname": HOST,
        "provider": "Route53",
        "doors": ["gke-west", "gke-east"],
        "healthChecks": ids,
    }


# --- Errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "doors", "message"),
    [
        (None, IP_DOORS, r"spec\.fleetAddress sets neither cloudDns nor route53"),
        ("CloudDNS", [], r"spec\.fleetAddress llm\.example\.com: no front doors"),
        ("Route53", [], r"spec\.fleetAddress llm\.example\.com: no front doors"),
        (
            "CloudDNS",
            [IP_DOORS[0], NAME_DOORS[0]],
            r"spec\.fleetAddress\.cloudDns: .*cluster 'eks-east'.*use spec\.fleetAddress\.route53",
        ),
        (
            "Route53",
            [IP_DOORS[0], OTHER_NAME_DOORS[1]],
            r"spec\.fleetAddress\.route53: .*gke-west.*A records.*lb-west.*CNAME",
        ),
        (
            "Route53",
            [IP_DOORS[0], DoorAddress("gke-west", "192.0.2.1")],
            r"cluster\(s\) gke-west given twice",
        ),
        (
            "Route53",
            [DoorAddress("v6", "2001:db8::1")],
            r"cluster 'v6' has address '2001:db8::1', neither an IPv4 address nor a DNS name",
        ),
        (
            "CloudDNS",
            [DoorAddress("odd", "not an address")],
            r"cluster 'odd' has address 'not an address'",
        ),
    ],
    ids=[
        "no-provider",
        "no-doors-cloud-dns",
        "no-doors-route53",
        "dns-name-on-cloud-dns",
        "mixed-a-cname",
        "cluster-twice",
        "ipv6",
        "garbage",
    ],
)
def test_refused(provider: str | None, doors: list[DoorAddress], message: str) -> None:
    run = MockRun()
    with pytest.raises(ValueError, match=message):
        run.run(lambda: FleetAddressComponent("fleet", fleet_address(provider), doors, https=True))
    assert run.resources == []  # nothing half-built


def test_component_is_a_pulumi_component() -> None:
    run, component, _ = render(fleet_address("CloudDNS"), IP_DOORS)
    assert isinstance(component, pulumi.ComponentResource)
    assert run.one(COMPONENT).custom is False
