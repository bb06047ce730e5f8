"""More than one front door (docs/api.md, "More than one front door"): the spec, its errors,
the stacks each front door and the fleet address get, the paths from every front door, the
health answer, reconcile's plan around a dead front door and `status`'s view of each."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelplane.api.inference_gateway import HEALTH_PATH
from modelplane.api.loader import load_fleet
from modelplane.api.network import fleet_paths, must_reach
from modelplane.api.placement_lock import PlacementLock
from modelplane.components.gateway import HEALTH_ROUTE, health_manifests
from modelplane.driver.runner import tier_of_stack_name
from modelplane.observe.front_doors import FrontDoor, probe, probe_all
from modelplane.stacks import (
    FLEET_ADDRESS_STACK,
    Tier,
    gateway_stacks,
    is_gateway_stack,
    stack_units,
)
from tests.network.test_network_addresses import _classes, _eks, _existing, _gke
from tests.spec_docs import gateway, write_fleet


def _gateway(doors: list[str], **spec: Any) -> dict[str, Any]:
    doc = gateway(doors[0])
    doc["spec"]["additionalFrontDoors"] = [{"inferenceClusterRef": d} for d in doors[1:]]
    doc["spec"].update(spec)
    return doc


def _load(root: Path, clusters: list[dict[str, Any]], gw: dict[str, Any]) -> Any:
    write_fleet(root, _classes(), "classes.yaml")
    for doc in clusters:
        write_fleet(root, [doc], f"{doc['metadata']['name']}.yaml")
    write_fleet(root, [gw], "gateway.yaml")
    return load_fleet(root)


ROUTE53 = {"hostname": "llm.example.com", "route53": {"hostedZoneId": "Z0123ABC"}}
CLOUD_DNS = {"hostname": "llm.example.com", "cloudDns": {"project": "p", "managedZone": "z"}}

# (id, clusters, front doors, fleetAddress, the stacks of the front doors, address stack?)
STACKS = [
    ("one front door", [_gke("a"), _gke("b")], ["a"], None, [("gateway", "a")], False),
    ("two front doors", [_gke("a"), _gke("b")], ["a", "b"], None,
     [("gateway", "a"), ("gateway-b", "b")], False),
    ("three, Route 53 in front", [_eks("a"), _eks("b"), _gke("c")], ["b", "a", "c"], ROUTE53,
     [("gateway", "b"), ("gateway-a", "a"), ("gateway-c", "c")], True),
    ("two, Cloud DNS in front", [_gke("a"), _gke("b")], ["a", "b"], CLOUD_DNS,
     [("gateway", "a"), ("gateway-b", "b")], True),
    ("a name the platform points: no stack", [_existing("x"), _existing("y")], ["x", "y"],
     {"hostname": "llm.example.com"}, [("gateway", "x"), ("gateway-y", "y")], False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("clusters", "doors", "address", "stacks", "address_stack"),
    [c[1:] for c in STACKS],
    ids=[c[0] for c in STACKS],
)
def test_frontdoors_each_front_door_is_a_stack_and_the_fleet_address_reads_them(
    tmp_path: Path,
    clusters: list[dict[str, Any]],
    doors: list[str],
    address: dict[str, Any] | None,
    stacks: list[tuple[str, str]],
    address_stack: bool,
) -> None:
    gw = _gateway(doors, **({"fleetAddress": address} if address else {}))
    loaded = _load(tmp_path, clusters, gw)
    assert loaded.errors == []
    fleet = loaded.fleet
    assert gateway_stacks(fleet) == stacks
    units = {u.name: u for u in stack_units(fleet, PlacementLock())}
    for name, door in stacks:
        unit = units[name]
        assert (unit.tier, unit.kind, unit.key) == (Tier.GATEWAY, "InferenceGateway", door)
        assert unit.depends_on[0] == f"cluster-{door}"
        assert is_gateway_stack(name) and tier_of_stack_name(name) == Tier.GATEWAY
    # every front door's second pass reads the same workload gateways
    assert len({units[n].reads for n, _ in stacks}) == 1
    if address_stack:
        unit = units[FLEET_ADDRESS_STACK]
        assert (unit.tier, unit.kind) == (Tier.ADDRESS, "FleetAddress")
        assert list(unit.depends_on) == [n for n, _ in stacks]
        assert tier_of_stack_name(FLEET_ADDRESS_STACK) == Tier.ADDRESS
    else:
        assert FLEET_ADDRESS_STACK not in units
    assert not is_gateway_stack("gatewayx") and not is_gateway_stack("cluster-gateway")


def test_frontdoors_every_front_door_must_reach_every_cluster(tmp_path: Path) -> None:
    """Paths are planned from each front door: both doors reach the third cluster, and each
    the other."""
    fleet = _load(tmp_path, [_gke("a"), _gke("b"), _eks("c")], _gateway(["a", "b"])).fleet
    assert sorted(must_reach(fleet)) == [("a", "b"), ("a", "c"), ("b", "a"), ("b", "c")]
    kinds = {(p.door, p.cluster): p.kind for p in fleet_paths(fleet)}
    assert kinds == {
        ("a", "b"): "gcp-peering",
        ("a", "c"): "ha-vpn",
        ("b", "a"): "gcp-peering",
        ("b", "c"): "ha-vpn",
    }
    # one path stack per pair, whichever door asked for it
    paths = [u.name for u in stack_units(fleet, PlacementLock()) if u.kind == "ClusterPath"]
    assert paths == ["path-a-b", "path-a-c", "path-b-c"]


# (id, clusters, the gateway's spec overrides, {(object, field): message part})
ERRORS = [
    ("unknown front door", [_gke("a")], {"additionalFrontDoors": [{"inferenceClusterRef": "z"}]},
     {"spec.additionalFrontDoors[0].inferenceClusterRef": "'z' does not exist"}),
    ("a cluster twice", [_gke("a"), _gke("b")],
     {"additionalFrontDoors": [{"inferenceClusterRef": "b"}, {"inferenceClusterRef": "a"}]},
     {"spec.additionalFrontDoors": "a named twice"}),
    ("cloud DNS over an EKS front door", [_gke("a"), _eks("b")],
     {"additionalFrontDoors": [{"inferenceClusterRef": "b"}], "fleetAddress": CLOUD_DNS},
     {"spec.fleetAddress.cloudDns": "EKS cluster 'b'"}),
    ("both DNS providers", [_gke("a")],
     {"fleetAddress": {**CLOUD_DNS, **ROUTE53}}, {"spec.fleetAddress": "at most one"}),
    ("a front door outside the fleet with more", [_gke("a")],
     {"cluster": {"existing": {"secretRef": {"name": "k", "key": "kubeconfig"}}},
      "additionalFrontDoors": [{"inferenceClusterRef": "a"}]},
     {"spec.additionalFrontDoors": "needs spec.cluster.inferenceClusterRef"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("clusters", "spec", "expected"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS]
)
def test_frontdoors_bad_input_names_the_file_object_and_field(
    tmp_path: Path, clusters: list[dict[str, Any]], spec: dict[str, Any], expected: dict[str, str]
) -> None:
    gw = gateway("a")
    gw["spec"].update(spec)
    loaded = _load(tmp_path, clusters, gw)
    found = {e.path: e for e in loaded.errors}
    for path, part in expected.items():
        assert path in found, [str(e) for e in loaded.errors]
        error = found[path]
        assert part in error.message, error.message
        assert error.object == "InferenceGateway default" and error.file.endswith("gateway.yaml")


def test_frontdoors_the_health_answer_needs_no_key() -> None:
    """Traefik: an IngressRoute to its own ping on the callers' listener, above any route;
    Envoy Gateway: an HTTPRoute answered directly. Neither names a key check."""
    for tls, entry in ((False, "web"), (True, "websecure")):
        [route] = health_manifests("Traefik", tls)
        assert route["kind"] == "IngressRoute" and route["metadata"]["name"] == HEALTH_ROUTE
        assert route["spec"]["entryPoints"] == [entry]
        [rule] = route["spec"]["routes"]
        assert rule["match"] == f"Path(`{HEALTH_PATH}`)" and "middlewares" not in rule
        assert rule["services"] == [{"name": "ping@internal", "kind": "TraefikService"}]
        assert rule["priority"] > 10_000
        assert ("tls" in route["spec"]) is tls
    answer, route = health_manifests("EnvoyGateway", True)
    assert answer["kind"] == "HTTPRouteFilter"
    assert answer["spec"]["directResponse"]["statusCode"] == 200
    [rule] = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "Exact", "value": HEALTH_PATH}}]
    assert rule["filters"][0]["extensionRef"]["name"] == answer["metadata"]["name"]
    assert route["spec"]["parentRefs"][0]["sectionName"] == "websecure"


@pytest.fixture
def front_door() -> Iterator[str]:
    """A front door on 127.0.0.1 that answers its health path 200 and anything else 401."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200 if self.path == HEALTH_PATH else 401)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_frontdoors_status_asks_each_front_door_its_health_path(front_door: str) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
    assert probe(front_door, https=False) is None
    assert probe(None, https=False) == "no address yet"
    answers = probe_all(
        [FrontDoor("gateway", "a", front_door), FrontDoor("gateway-b", "b", closed)],
        https=False,
        timeout=2.0,
    )
    assert answers["a"] is None
    assert answers["b"] is not None and answers["b"].startswith("no answer")


def test_frontdoors_the_fleet_address_stack_reads_every_front_doors_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `fleet-address` program: each front door's stack's `address`, in the front doors'
    order, into Route 53 records; a front door without an address yet is left out (with a
    warning), not a failed stack."""
    import asyncio
    import json

    import pulumi

    from modelplane.program import UPSTREAM_ENV, Context, run_fleet_address
    from tests.pulumi_mocks import MockRun

    gw = _gateway(["b", "a", "c"], fleetAddress=ROUTE53)
    fleet = _load(tmp_path, [_eks("a"), _eks("b"), _eks("c")], gw).fleet
    units = stack_units(fleet, PlacementLock())
    [unit] = [u for u in units if u.name == FLEET_ADDRESS_STACK]
    outputs = {
        "gateway": {"address": "nlb-b.elb.us-west-2.amazonaws.com"},
        "gateway-a": {"address": "nlb-a.elb.us-east-1.amazonaws.com"},
        "gateway-c": {"address": None},
    }
    upstream = tmp_path / "upstream.json"
    upstream.write_text(json.dumps(outputs))
    monkeypatch.setenv(UPSTREAM_ENV, str(upstream))
    ctx = Context(tmp_path, fleet, PlacementLock(), units, unit, "organization", False)

    def program() -> None:
        pulumi.Output.from_input(asyncio.ensure_future(run_fleet_address(ctx)))

    zones = {"us-west-2": "Z18D5FSROUN65G", "us-east-1": "Z26RNL4JYFTOTI"}
    run = MockRun(
        answers={"aws:lb/getHostedZoneId:getHostedZoneId": lambda a: {"id": zones[a["region"]]}}
    )
    run.run(program)
    records = {r.inputs["setIdentifier"]: r for r in run.of_type("aws:route53/record:Record")}
    aliases = {k: (r.inputs["type"], r.inputs["aliases"][0]) for k, r in records.items()}
    assert aliases == {
        "b": ("A", {"name": "nlb-b.elb.us-west-2.amazonaws.com", "zoneId": zones["us-west-2"],
                    "evaluateTargetHealth": False}),
        "a": ("A", {"name": "nlb-a.elb.us-east-1.amazonaws.com", "zoneId": zones["us-east-1"],
                    "evaluateTargetHealth": False}),
    }  # fmt: skip
    checks = run.of_type("aws:route53/healthCheck:HealthCheck")
    assert sorted(c.inputs["fqdn"] for c in checks) == sorted(
        a["name"] for _, a in aliases.values()
    )
    assert all(r.inputs["name"] == "llm.example.com" for r in records.values())
