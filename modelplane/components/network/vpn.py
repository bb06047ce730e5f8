"""HaVpn: a highly available site-to-site VPN with BGP between a GKE VPC and an EKS VPC.

The recipe of GCP's "Create HA VPN connections between Google Cloud and AWS": a GCP HA VPN
gateway (two interfaces) and Cloud Router; on AWS a virtual private gateway on the VPC, one
customer gateway per HA VPN interface and one VPN connection per customer gateway (AWS picks
the pre-shared keys and inside /30s); back on GCP an external gateway with the four AWS
tunnel addresses (FOUR_IPS_REDUNDANCY), four IKEv2 tunnels and a BGP session on each. The
VPC's route tables learn the GCP ranges by route propagation; the Cloud Router advertises
every subnet plus the cluster's own ranges (pods, services).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp

from modelplane.api import names
from modelplane.components.network.sides import AwsSide, GcpSide

TYPE = "modelplane:network:HaVpn"


class _AwsTunnel(NamedTuple):
    """One tunnel of an AWS VPN connection, as AWS generated it."""

    address: pulumi.Output[str]
    preshared_key: pulumi.Output[str]
    cgw_inside_address: pulumi.Output[str]
    vgw_inside_address: pulumi.Output[str]


def _aws_tunnels(connection: aws.ec2.VpnConnection) -> tuple[_AwsTunnel, _AwsTunnel]:
    return (
        _AwsTunnel(
            connection.tunnel1_address,
            connection.tunnel1_preshared_key,
            connection.tunnel1_cgw_inside_address,
            connection.tunnel1_vgw_inside_address,
        ),
        _AwsTunnel(
            connection.tunnel2_address,
            connection.tunnel2_preshared_key,
            connection.tunnel2_cgw_inside_address,
            connection.tunnel2_vgw_inside_address,
        ),
    )


def _interface_ip(gateway: gcp.compute.HaVpnGateway, index: int) -> pulumi.Output[str | None]:
    return gateway.vpn_interfaces.apply(lambda interfaces: interfaces[index].ip_address)


def gcp_name(*parts: str) -> str:
    """A valid GCP resource name from ``parts`` (`vpn-` first when they start otherwise)."""
    return names.gcp_name(*parts, prefix="vpn")


class HaVpn(pulumi.ComponentResource):
    """An HA VPN between ``gcp_side``'s network and ``aws_side``'s VPC, routed by BGP."""

    def __init__(
        self,
        name: str,
        gcp_side: GcpSide,
        aws_side: AwsSide,
        *,
        gcp_asn: int = 64514,
        aws_asn: int = 64512,
        aws_provider: pulumi.ProviderResource | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TYPE, name, None, opts)
        route_table_ids = _route_table_ids(aws_side)
        gcp_opts = pulumi.ResourceOptions(parent=self)
        aws_opts = pulumi.ResourceOptions(parent=self, provider=aws_provider)
        project, region = gcp_side.project, gcp_side.region

        self.gcp_gateway = gcp.compute.HaVpnGateway(
            f"{name}-gcp-gateway",
            name=gcp_name(name, "gateway"),
            network=gcp_side.network,
            project=project,
            region=region,
            opts=gcp_opts,
        )
        self.router = gcp.compute.Router(
            f"{name}-router",
            name=gcp_name(name, "router"),
            network=gcp_side.network,
            project=project,
            region=region,
            bgp=gcp.compute.RouterBgpArgs(
                asn=gcp_asn,
                advertise_mode="CUSTOM",
                advertised_groups=["ALL_SUBNETS"],
                advertised_ip_ranges=[
                    gcp.compute.RouterBgpAdvertisedIpRangeArgs(range=r) for r in gcp_side.ranges
                ],
            ),
            opts=gcp_opts,
        )

        self.vpn_gateway = aws.ec2.VpnGateway(
            f"{name}-aws-gateway",
            vpc_id=aws_side.vpc_id,
            amazon_side_asn=str(aws_asn),
            region=aws_side.region,
            tags={"Name": name},
            opts=aws_opts,
        )
        self.customer_gateways: list[aws.ec2.CustomerGateway] = []
        self.connections: list[aws.ec2.VpnConnection] = []
        for i in range(2):
            customer_gateway = aws.ec2.CustomerGateway(
                f"{name}-customer-gateway-{i}",
                type="ipsec.1",
                bgp_asn=str(gcp_asn),
                ip_address=_interface_ip(self.gcp_gateway, i),
                region=aws_side.region,
                tags={"Name": f"{name}-{i}"},
                opts=aws_opts,
            )
            self.customer_gateways.append(customer_gateway)
            self.connections.append(
                aws.ec2.VpnConnection(
                    f"{name}-connection-{i}",
                    customer_gateway_id=customer_gateway.id,
                    vpn_gateway_id=self.vpn_gateway.id,
                    type="ipsec.1",
                    static_routes_only=False,
                    region=aws_side.region,
                    tags={"Name": f"{name}-{i}"},
                    opts=aws_opts,
                )
            )
        self.propagations = [
            aws.ec2.VpnGatewayRoutePropagation(
                f"{name}-propagation-{i}",
                vpn_gateway_id=self.vpn_gateway.id,
                route_table_id=table_id,
                region=aws_side.region,
                opts=aws_opts,
            )
            for i, table_id in enumerate(route_table_ids)
        ]

        # Connection c's tunnel t is peer interface 2c + t, reached from HA VPN interface c.
        aws_tunnels = [t for connection in self.connections for t in _aws_tunnels(connection)]
        self.peer_gateway = gcp.compute.ExternalVpnGateway(
            f"{name}-peer-gateway",
            name=gcp_name(name, "aws"),
            project=project,
            redundancy_type="FOUR_IPS_REDUNDANCY",
            interfaces=[
                gcp.compute.ExternalVpnGatewayInterfaceArgs(id=i, ip_address=t.address)
                for i, t in enumerate(aws_tunnels)
            ],
            opts=gcp_opts,
        )
        self.tunnels: list[gcp.compute.VPNTunnel] = []
        self.interfaces: list[gcp.compute.RouterInterface] = []
        self.peers: list[gcp.compute.RouterPeer] = []
        for i, aws_tunnel in enumerate(aws_tunnels):
            shared_secret: pulumi.Output[str] = pulumi.Output.secret(aws_tunnel.preshared_key)
            tunnel = gcp.compute.VPNTunnel(
                f"{name}-tunnel-{i}",
                name=gcp_name(name, "tunnel", str(i)),
                project=project,
                region=region,
                vpn_gateway=self.gcp_gateway.id,
                vpn_gateway_interface=i // 2,
                peer_external_gateway=self.peer_gateway.id,
                peer_external_gateway_interface=i,
                shared_secret=shared_secret,
                ike_version=2,
                router=self.router.id,
                opts=gcp_opts,
            )
            interface = gcp.compute.RouterInterface(
                f"{name}-interface-{i}",
                name=gcp_name(name, "interface", str(i)),
                project=project,
                region=region,
                router=self.router.name,
                ip_range=aws_tunnel.cgw_inside_address.apply(lambda address: f"{address}/30"),
                vpn_tunnel=tunnel.name,
                opts=gcp_opts,
            )
            peer = gcp.compute.RouterPeer(
                f"{name}-bgp-peer-{i}",
                name=gcp_name(name, "peer", str(i)),
                project=project,
                region=region,
                router=self.router.name,
                interface=interface.name,
                peer_ip_address=aws_tunnel.vgw_inside_address,
                peer_asn=aws_asn,
                opts=gcp_opts,
            )
            self.tunnels.append(tunnel)
            self.interfaces.append(interface)
            self.peers.append(peer)

        self.register_outputs(
            {
                "gcpGatewayId": self.gcp_gateway.id,
                "routerId": self.router.id,
                "awsVpnGatewayId": self.vpn_gateway.id,
                "awsConnectionIds": [c.id for c in self.connections],
                "tunnelIds": [t.id for t in self.tunnels],
            }
        )


def _route_table_ids(aws_side: AwsSide) -> Sequence[pulumi.Input[str]]:
    # One propagation per table needs the count at preview: an Output of a list has none.
    ids = aws_side.route_table_ids
    if not isinstance(ids, list | tuple):
        raise TypeError(
            f"HaVpn: the route table ids of {aws_side.cluster!r} must be a plain list, "
            f"not {type(ids).__name__}"
        )
    return ids
