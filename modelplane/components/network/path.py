"""ClusterPath: the private path between two provisioned clusters (docs/api.md, "Paths").

GKE and GKE: VPC network peering, one `NetworkPeering` from each side (GCP exchanges the
subnet routes, secondary pod and service ranges included; the workload gateway's internal
load balancer has global access, so any region of a peered network reaches it).
EKS and EKS: a VPC peering connection requested from the first cluster's region and
accepted in the second's (one account), and in each VPC's private route tables a route to
the other VPC (the nodes and the internal load balancers live in the private subnets).
GKE and EKS: an HA VPN with BGP (``modelplane.components.network.vpn.HaVpn``).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp

from modelplane.api.names import child_name
from modelplane.components.cloud.provider_config import aws_provider_settings
from modelplane.components.network.sides import AwsSide, GcpSide, Side
from modelplane.components.network.vpn import HaVpn

GCP_NAME_LIMIT = 63


class ClusterPath(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        a: Side,
        b: Side,
        *,
        aws_providers: dict[str, pulumi.ProviderResource] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """The path between ``a`` and ``b``. ``aws_providers``: an AWS provider per region
        (default: one made here per region, with the stack's ``aws:*`` config)."""
        super().__init__("modelplane:network:ClusterPath", name, None, opts)
        self._aws_providers = dict(aws_providers or {})
        self.kind: str
        outputs: dict[str, Any]
        if isinstance(a, GcpSide) and isinstance(b, GcpSide):
            self.kind, outputs = "gcp-peering", self._gcp_peering(name, a, b)
        elif isinstance(a, AwsSide) and isinstance(b, AwsSide):
            self.kind, outputs = "aws-peering", self._aws_peering(name, a, b)
        else:
            gcp_side = a if isinstance(a, GcpSide) else b
            aws_side = b if isinstance(b, AwsSide) else a
            assert isinstance(gcp_side, GcpSide) and isinstance(aws_side, AwsSide)
            vpn = HaVpn(
                f"{name}-vpn",
                gcp_side,
                aws_side,
                aws_provider=self._aws_provider(aws_side.region),
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.kind, outputs = "ha-vpn", {"vpn": vpn.urn}
        self.register_outputs({"kind": self.kind, **outputs})

    def _aws_provider(self, region: str) -> pulumi.ProviderResource:
        if region not in self._aws_providers:
            self._aws_providers[region] = aws.Provider(
                f"aws-{region}",
                **{**aws_provider_settings(), "region": region},
                opts=pulumi.ResourceOptions(parent=self),
            )
        return self._aws_providers[region]

    def _gcp_peering(self, name: str, a: GcpSide, b: GcpSide) -> dict[str, Any]:
        made: list[gcp.compute.NetworkPeering] = []
        for here, there in ((a, b), (b, a)):
            # GCP refuses a second peering operation on a network while one runs: the
            # reverse direction waits for the first.
            made.append(
                gcp.compute.NetworkPeering(
                    f"{name}-{here.cluster}",
                    name=child_name("mp", here.cluster, "to", there.cluster, limit=GCP_NAME_LIMIT),
                    network=here.network,
                    peer_network=there.network,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=made[:]),
                )
            )
        return {"peerings": [p.id for p in made]}

    def _aws_peering(self, name: str, a: AwsSide, b: AwsSide) -> dict[str, Any]:
        requester = self._aws_provider(a.region)
        accepter = self._aws_provider(b.region)
        tags = {"modelplane.ai/path": f"{a.cluster}-{b.cluster}"}
        connection = aws.ec2.VpcPeeringConnection(
            f"{name}-peering",
            vpc_id=a.vpc_id,
            peer_vpc_id=b.vpc_id,
            peer_region=b.region,
            tags={**tags, "Name": f"{a.cluster}-to-{b.cluster}"},
            opts=pulumi.ResourceOptions(parent=self, provider=requester),
        )
        accepted = aws.ec2.VpcPeeringConnectionAccepter(
            f"{name}-accept",
            vpc_peering_connection_id=connection.id,
            auto_accept=True,
            tags={**tags, "Name": f"{a.cluster}-to-{b.cluster}"},
            opts=pulumi.ResourceOptions(parent=self, provider=accepter),
        )
        routes = []
        for here, there, provider in ((a, b, requester), (b, a, accepter)):
            tables = here.route_table_ids
            assert isinstance(tables, list), "route table ids are a list (one per table)"
            for i, table in enumerate(tables):
                routes.append(
                    aws.ec2.Route(
                        f"{name}-{here.cluster}-route-{i}",
                        route_table_id=table,
                        destination_cidr_block=there.vpc_cidr,
                        vpc_peering_connection_id=connection.id,
                        opts=pulumi.ResourceOptions(
                            parent=self, provider=provider, depends_on=[accepted]
                        ),
                    )
                )
        return {"peering": connection.id, "routes": len(routes)}
