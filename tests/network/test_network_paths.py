"""Paths from the front door to every cluster (docs/api.md, "Paths"): which path each pair
gets, the stacks that build them, refused pairs, and the cloud resources of each path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelplane.api.loader import load_fleet
from modelplane.api.network import fleet_paths
from modelplane.api.placement_lock import PlacementLock
from modelplane.components.network.path import ClusterPath
from modelplane.components.network.sides import AwsSide, GcpSide, side_of
from modelplane.stacks import Tier, path_stack, stack_units
from tests.components.test_network_vpn import CONNECTION, HA_GATEWAY, HA_IPS, connection_outputs
from tests.network.test_network_addresses import _classes, _eks, _existing, _gke
from tests.pulumi_mocks import MockRun
from tests.spec_docs import gateway, write_fleet

NET = {"nodeCidrs": ["192.168.0.0/20"]}
HA_OUTPUTS = {"vpnInterfaces": [{"id": i, "ipAddress": ip} for i, ip in enumerate(HA_IPS)]}

# (id, clusters, the front door's cluster, {cluster: path kind or None})
PAIRS = [
    ("gke to gke", [_gke("a"), _gke("b")], "a", {"b": "gcp-peering"}),
    ("eks to eks", [_eks("a"), _eks("b")], "b", {"a": "aws-peering"}),
    ("gke to eks", [_gke("g"), _eks("e")], "g", {"e": "ha-vpn"}),
    ("eks to gke", [_gke("g"), _eks("e")], "e", {"g": "ha-vpn"}),
    ("existing declared from its side", [_gke("g"), _existing("x", {**NET, "connectedTo": ["g"]})],
     "g", {"x": "declared"}),
    ("existing door declared from its side", [_existing("x", {**NET, "connectedTo": ["e"]}), _eks("e")],
     "x", {"e": "declared"}),
    ("existing without a network: its own address", [_gke("g"), _existing("x")], "g",
     {"x": "gateway-address"}),
    ("two existing without networks", [_existing("x"), _existing("y")], "x", {"y": "gateway-address"}),
    ("existing door without a network cannot reach an internal LB", [_existing("x"), _gke("g")],
     "x", {"g": None}),
    ("existing with a network not connected", [_gke("g"), _existing("x", NET)], "g", {"x": None}),
]  # fmt: skip


def _load(root: Path, docs: list[dict[str, Any]], door: str | None) -> Any:
    write_fleet(root, _classes(), "classes.yaml")
    for doc in docs:
        write_fleet(root, [doc], f"{doc['metadata']['name']}.yaml")
    if door is not None:
        write_fleet(root, [gateway(door)], "gateway.yaml")
    return load_fleet(root)


@pytest.mark.parametrize(
    ("docs", "door", "kinds"), [c[1:] for c in PAIRS], ids=[c[0] for c in PAIRS]
)
def test_network_every_pair_gets_its_path_or_is_refused(
    tmp_path: Path, docs: list[dict[str, Any]], door: str, kinds: dict[str, str | None]
) -> None:
    loaded = _load(tmp_path, docs, door)
    assert {p.cluster: p.kind for p in fleet_paths(loaded.fleet)} == kinds
    refused = [name for name, kind in kinds.items() if kind is None]
    assert len(loaded.errors) == len(refused)
    for error in loaded.errors:
        other = refused[0]
        assert f"the front door on {door} cannot reach {other}" in error.message
        assert "connectedTo" in error.message and error.file.endswith(".yaml")
    built = [u for u in stack_units(loaded.fleet, PlacementLock()) if u.kind == "ClusterPath"]
    created = [n for n, k in kinds.items() if k in ("gcp-peering", "aws-peering", "ha-vpn")]
    assert [u.name for u in built] == [path_stack(door, n) for n in created]
    for unit in built:
        assert unit.tier == Tier.PATHS
        assert set(unit.depends_on) == {f"cluster-{c}" for c in unit.key.split("/")}


def test_network_connected_to_must_name_a_cluster(tmp_path: Path) -> None:
    loaded = _load(
        tmp_path, [_gke("g"), _existing("x", {**NET, "connectedTo": ["g", "nope"]})], "g"
    )
    [error] = loaded.errors
    assert (error.object, error.path) == (
        "InferenceCluster x",
        "spec.cluster.existing.network.connectedTo[1]",
    )
    assert "'nope' does not exist" in error.message


def test_network_one_path_stack_per_pair_in_name_order() -> None:
    assert path_stack("z", "a") == path_stack("a", "z") == "path-a-z"


GCP_A = GcpSide(
    "a", "proj-a", "us-central1", "projects/proj-a/global/networks/a-net", ("10.0.0.0/17",)
)
GCP_B = GcpSide(
    "b", "proj-b", "europe-west4", "projects/proj-b/global/networks/b-net", ("10.1.0.0/17",)
)
AWS_A = AwsSide("a", "us-west-2", "vpc-a", "10.0.0.0/17", ["rtb-a1", "rtb-a2"])
AWS_B = AwsSide("b", "eu-west-1", "vpc-b", "10.1.0.0/17", ["rtb-b1"])  # fmt: skip


def test_network_gcp_peering_both_ways_one_after_the_other() -> None:
    run = MockRun()
    path = run.run(lambda: ClusterPath("path-a-b", GCP_A, GCP_B))
    assert path.kind == "gcp-peering"
    peerings = {
        p.inputs["name"]: p for p in run.of_type("gcp:compute/networkPeering:NetworkPeering")
    }
    assert {n: (p.inputs["network"], p.inputs["peerNetwork"]) for n, p in peerings.items()} == {
        "mp-a-to-b": (GCP_A.network, GCP_B.network),
        "mp-b-to-a": (GCP_B.network, GCP_A.network),
    }
    assert peerings["mp-b-to-a"].depends_on(peerings["mp-a-to-b"])
    component = run.one("modelplane:network:ClusterPath")
    assert all(p.parent == component.urn for p in peerings.values())


def test_network_aws_peering_is_requested_accepted_and_routed_both_ways() -> None:
    run = MockRun()
    path = run.run(lambda: ClusterPath("path-a-b", AWS_A, AWS_B))
    assert path.kind == "aws-peering"
    providers = {p.inputs["region"]: p for p in run.of_type("pulumi:providers:aws")}
    assert set(providers) == {"us-west-2", "eu-west-1"}
    connection = run.one("aws:ec2/vpcPeeringConnection:VpcPeeringConnection")
    assert (connection.inputs["vpcId"], connection.inputs["peerVpcId"]) == ("vpc-a", "vpc-b")
    assert connection.inputs["peerRegion"] == "eu-west-1"
    assert run.provider_of(connection) == providers["us-west-2"]
    accepter = run.one("aws:ec2/vpcPeeringConnectionAccepter:VpcPeeringConnectionAccepter")
    assert accepter.inputs["autoAccept"] is True
    assert accepter.inputs["vpcPeeringConnectionId"] == connection.id
    assert run.provider_of(accepter) == providers["eu-west-1"]
    routes = {
        r.inputs["routeTableId"]: (r.inputs["destinationCidrBlock"], run.provider_of(r))
        for r in run.of_type("aws:ec2/route:Route")
    }
    assert routes == {
        "rtb-a1": ("10.1.0.0/17", providers["us-west-2"]),
        "rtb-a2": ("10.1.0.0/17", providers["us-west-2"]),
        "rtb-b1": ("10.0.0.0/17", providers["eu-west-1"]),
    }
    for route in run.of_type("aws:ec2/route:Route"):
        assert route.inputs["vpcPeeringConnectionId"] == connection.id
        assert route.depends_on(accepter)  # a route to a pending peering fails


def test_network_gke_and_eks_are_joined_by_the_ha_vpn() -> None:
    run = MockRun(outputs={HA_GATEWAY: HA_OUTPUTS, CONNECTION: connection_outputs})
    path = run.run(lambda: ClusterPath("path-a-b", AWS_A, GCP_B))
    assert path.kind == "ha-vpn"
    vpn = run.one("modelplane:network:HaVpn")
    assert vpn.parent == run.one("modelplane:network:ClusterPath").urn
    assert len(run.of_type("gcp:compute/vPNTunnel:VPNTunnel")) == 4
    [provider] = run.of_type("pulumi:providers:aws")
    assert provider.inputs["region"] == "us-west-2"
    gateway_ = run.one("aws:ec2/vpnGateway:VpnGateway")
    assert gateway_.inputs["vpcId"] == "vpc-a"
    assert run.provider_of(gateway_) == provider
    propagated = run.of_type("aws:ec2/vpnGatewayRoutePropagation:VpnGatewayRoutePropagation")
    assert sorted(p.inputs["routeTableId"] for p in propagated) == ["rtb-a1", "rtb-a2"]


def test_network_cluster_stacks_export_what_a_path_needs() -> None:
    """The `network` output of a GKE and an EKS cluster stack, read back as path sides."""
    from modelplane.components.inference_cluster import InferenceClusterComponent
    from tests.components.cluster_helpers import EKS_CLASSES, eks_cluster, gke_class, gke_cluster

    run = MockRun()
    gke = run.run(lambda: InferenceClusterComponent("g", gke_cluster(), {"h100-gke": gke_class()}))
    side = side_of("g", MockRun.value(pulumi_all(gke.network)))
    assert isinstance(side, GcpSide)
    assert (side.project, side.region) == ("acme-ml", "us-central1")
    assert side.ranges == ("10.0.128.0/20", "10.0.0.0/17", "10.0.144.0/20")
    network = run.one("gcp:compute/network:Network")
    assert side.network == network.id

    run = MockRun()
    eks = run.run(lambda: InferenceClusterComponent("e", eks_cluster(), EKS_CLASSES))
    side = side_of("e", MockRun.value(pulumi_all(eks.network)))
    assert isinstance(side, AwsSide)
    assert (side.region, side.vpc_cidr) == ("us-west-2", "10.0.0.0/17")
    assert side.vpc_id == run.one("aws:ec2/vpc:Vpc").id
    private = [t for t in run.of_type("aws:ec2/routeTable:RouteTable") if "private" in t.name]
    assert sorted(side.route_table_ids) == sorted(t.id for t in private)  # type: ignore[arg-type]


def pulumi_all(value: dict[str, Any]) -> Any:
    import pulumi

    return pulumi.Output.from_input(value)


def test_network_a_changed_address_entry_or_path_end_changes_its_stacks_inputs(
    tmp_path: Path,
) -> None:
    """A cluster stack whose lock entry changes, and a path stack whose cluster changes, are
    not skipped as unchanged by `up`."""
    from modelplane.driver.fingerprint import owned_inputs
    from modelplane.network import plan_addresses

    fleet = _load(tmp_path, [_gke("a"), _gke("b")], "a").fleet
    lock = PlacementLock(network=plan_addresses(fleet, PlacementLock()).network)
    units = {u.name: u for u in stack_units(fleet, lock)}
    before = owned_inputs(fleet, lock, units["cluster-b"])
    assert before["addresses"]["block"] == "10.1.0.0/16"
    moved = lock.model_copy(deep=True)
    assert moved.network is not None
    moved.network.clusters["b"] = moved.network.clusters["b"].model_copy(
        update={"block": "10.9.0.0/16"}
    )
    assert owned_inputs(fleet, moved, units["cluster-b"]) != before
    path = owned_inputs(fleet, lock, units["path-a-b"])
    assert set(path["clusters"]) == {"a", "b"}
    moved_b = _gke("b")
    moved_b["spec"]["cluster"]["gke"]["region"] = "europe-west4"
    moved_b["spec"]["nodePools"][0]["zones"] = ["europe-west4-a"]
    write_fleet(tmp_path, [moved_b], "b.yaml")
    again = load_fleet(tmp_path).fleet
    assert owned_inputs(again, lock, units["path-a-b"]) != path
