"""HaVpn: GCP HA VPN to AWS site-to-site VPN, four tunnels with BGP (modelplane/components/network/vpn.py)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pulumi
import pulumi_aws as aws
import pytest
from pulumi.runtime.mocks import MockResourceArgs

from modelplane.components.network.sides import AwsSide, GcpSide
from modelplane.components.network.vpn import HaVpn, gcp_name
from tests.components.cluster_helpers import assert_no_plaintext
from tests.pulumi_mocks import MockRun, Registered, Secret

HA_GATEWAY = "gcp:compute/haVpnGateway:HaVpnGateway"
ROUTER = "gcp:compute/router:Router"
EXTERNAL = "gcp:compute/externalVpnGateway:ExternalVpnGateway"
TUNNEL = "gcp:compute/vPNTunnel:VPNTunnel"
INTERFACE = "gcp:compute/routerInterface:RouterInterface"
PEER = "gcp:compute/routerPeer:RouterPeer"
VGW = "aws:ec2/vpnGateway:VpnGateway"
CGW = "aws:ec2/customerGateway:CustomerGateway"
CONNECTION = "aws:ec2/vpnConnection:VpnConnection"
PROPAGATION = "aws:ec2/vpnGatewayRoutePropagation:VpnGatewayRoutePropagation"

HA_IPS = ["203.0.113.1", "203.0.113.2"]
RANGES = ("10.4.0.0/20", "10.5.0.0/16", "10.6.0.0/20")
GCP = GcpSide("gke-west", "proj-1", "us-west1", "projects/proj-1/global/networks/net", RANGES)
AWS = AwsSide("eks-east", "us-east-1", "vpc-123", "10.8.0.0/17", ["rtb-public", "rtb-private"])


def connection_outputs(args: MockResourceArgs) -> dict[str, Any]:
    """AWS's generated tunnel details: connection c's tunnel t is tunnel k = 2c + t."""
    c = int(args.name.rsplit("-", 1)[1])
    out: dict[str, Any] = {}
    for t in (1, 2):
        k = 2 * c + t - 1
        out[f"tunnel{t}Address"] = f"198.51.100.{k}"
        out[f"tunnel{t}PresharedKey"] = f"psk-{k}"
        out[f"tunnel{t}CgwInsideAddress"] = f"169.254.{10 + k}.2"
        out[f"tunnel{t}VgwInsideAddress"] = f"169.254.{10 + k}.1"
    return out


def vpn_run(name: str = "west-east") -> tuple[MockRun, HaVpn]:
    run = MockRun(
        outputs={
            HA_GATEWAY: {
                "vpnInterfaces": [{"id": i, "ipAddress": ip} for i, ip in enumerate(HA_IPS)]
            },
            CONNECTION: connection_outputs,
        }
    )

    def program() -> HaVpn:
        provider = aws.Provider("aws-east", region=AWS.region)
        return HaVpn(name, GCP, AWS, aws_provider=provider)

    return run, run.run(program)


def by_name(resources: list[Registered]) -> list[Registered]:
    return sorted(resources, key=lambda r: int(r.name.rsplit("-", 1)[1]))


def test_network_vpn_tunnels_pair_ha_interfaces_with_aws_tunnels() -> None:
    run, vpn = vpn_run()
    gateway, external, router = run.one(HA_GATEWAY), run.one(EXTERNAL), run.one(ROUTER)
    assert external.inputs["redundancyType"] == "FOUR_IPS_REDUNDANCY"
    assert external.inputs["interfaces"] == [
        {"id": k, "ipAddress": f"198.51.100.{k}"} for k in range(4)
    ]
    tunnels = by_name(run.of_type(TUNNEL))
    assert [t.name for t in tunnels] == [f"west-east-tunnel-{k}" for k in range(4)]
    assert len(vpn.tunnels) == 4
    for k, (tunnel, interface) in enumerate(zip(tunnels, [0, 0, 1, 1], strict=True)):
        assert tunnel.inputs["vpnGateway"] == gateway.id
        assert tunnel.inputs["vpnGatewayInterface"] == interface
        assert tunnel.inputs["peerExternalGateway"] == external.id
        assert tunnel.inputs["peerExternalGatewayInterface"] == k
        assert tunnel.inputs["ikeVersion"] == 2
        assert tunnel.inputs["router"] == router.id
        assert tunnel.inputs["sharedSecret"] == Secret(f"psk-{k}")
        assert tunnel.inputs["project"] == "proj-1"
        assert tunnel.inputs["region"] == "us-west1"
        assert_no_plaintext(run, f"psk-{k}")


def test_network_vpn_bgp_sessions_use_aws_inside_addresses() -> None:
    run, _ = vpn_run()
    router = run.one(ROUTER)
    tunnels = by_name(run.of_type(TUNNEL))
    interfaces = by_name(run.of_type(INTERFACE))
    peers = by_name(run.of_type(PEER))
    assert len(interfaces) == len(peers) == 4
    for k, (tunnel, interface, peer) in enumerate(zip(tunnels, interfaces, peers, strict=True)):
        assert interface.inputs["ipRange"] == f"169.254.{10 + k}.2/30"
        assert interface.inputs["vpnTunnel"] == tunnel.inputs["name"]
        assert interface.inputs["router"] == router.inputs["name"]
        assert peer.inputs["peerIpAddress"] == f"169.254.{10 + k}.1"
        assert peer.inputs["peerAsn"] == 64512
        assert peer.inputs["interface"] == interface.inputs["name"]
        assert peer.inputs["router"] == router.inputs["name"]


def test_network_vpn_router_advertises_subnets_and_cluster_ranges() -> None:
    run, _ = vpn_run()
    router = run.one(ROUTER)
    assert router.inputs["network"] == GCP.network
    assert (router.inputs["project"], router.inputs["region"]) == ("proj-1", "us-west1")
    assert router.get("bgp.asn") == 64514
    assert router.get("bgp.advertiseMode") == "CUSTOM"
    assert router.get("bgp.advertisedGroups") == ["ALL_SUBNETS"]
    assert [r["range"] for r in router.get("bgp.advertisedIpRanges")] == list(RANGES)
    gateway = run.one(HA_GATEWAY)
    assert (gateway.inputs["network"], gateway.inputs["region"]) == (GCP.network, "us-west1")


def test_network_vpn_aws_side() -> None:
    run, _ = vpn_run()
    vgw = run.one(VGW)
    assert vgw.inputs["vpcId"] == "vpc-123"
    assert vgw.inputs["amazonSideAsn"] == "64512"
    cgws = by_name(run.of_type(CGW))
    assert [(c.inputs["ipAddress"], c.inputs["bgpAsn"], c.inputs["type"]) for c in cgws] == [
        (ip, "64514", "ipsec.1") for ip in HA_IPS
    ]
    connections = by_name(run.of_type(CONNECTION))
    for cgw, connection in zip(cgws, connections, strict=True):
        assert connection.inputs["customerGatewayId"] == cgw.id
        assert connection.inputs["vpnGatewayId"] == vgw.id
        assert connection.inputs["type"] == "ipsec.1"
        assert connection.inputs["staticRoutesOnly"] is False
        assert "tunnel1PresharedKey" not in connection.inputs  # AWS generates the keys
    propagations = run.of_type(PROPAGATION)
    assert {p.name: p.inputs["routeTableId"] for p in propagations} == {
        "west-east-propagation-0": "rtb-public",
        "west-east-propagation-1": "rtb-private",
    }
    assert all(p.inputs["vpnGatewayId"] == vgw.id for p in propagations)
    for r in [vgw, *cgws, *connections, *propagations]:
        provider = run.provider_of(r)
        assert provider is not None and provider.name == "aws-east", r.name
        assert r.inputs["region"] == "us-east-1"


def test_network_vpn_children_parented_and_outputs() -> None:
    run, vpn = vpn_run()
    component = run.one("modelplane:network:HaVpn")
    children = [r for r in run if r.type not in (component.type, "pulumi:providers:aws")]
    assert Counter(r.type for r in children) == {
        HA_GATEWAY: 1, ROUTER: 1, EXTERNAL: 1, TUNNEL: 4, INTERFACE: 4, PEER: 4,
        VGW: 1, CGW: 2, CONNECTION: 2, PROPAGATION: 2,
    }  # fmt: skip
    assert all(r.parent == component.urn for r in children)
    assert run.value(vpn.gcp_gateway.id) == run.one(HA_GATEWAY).id
    assert [run.value(c.id) for c in vpn.connections] == [
        r.id for r in by_name(run.of_type(CONNECTION))
    ]


@pytest.mark.parametrize(
    "parts",
    [
        ("west-east", "tunnel", "3"),
        ("West_East.VPN",),
        ("1-to-2", "peer", "0"),
        ("x" * 80, "router"),
    ],
)
def test_network_vpn_gcp_names_are_valid(parts: tuple[str, ...]) -> None:
    name = gcp_name(*parts)
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name), name


def test_network_vpn_needs_plain_route_table_list() -> None:
    side = AwsSide("eks-east", "us-east-1", "vpc-123", "10.8.0.0/17", pulumi.Output.from_input([]))
    with pytest.raises(TypeError, match="plain list"):
        MockRun().run(lambda: HaVpn("x", GCP, side))
