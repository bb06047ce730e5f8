"""The two ends of a path between clusters, as their cluster stacks export them (`network`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi


@dataclass(frozen=True)
class GcpSide:
    """A GKE cluster's network."""

    cluster: str
    project: str
    region: str
    network: pulumi.Input[str]
    """The VPC network's id (`projects/<project>/global/networks/<name>`)."""
    ranges: tuple[str, ...]
    """The cluster's node, pod and service ranges."""


@dataclass(frozen=True)
class AwsSide:
    """An EKS cluster's VPC."""

    cluster: str
    region: str
    vpc_id: pulumi.Input[str]
    vpc_cidr: str
    route_table_ids: pulumi.Input[list[str]]
    """Every route table of the VPC (public and private): each gets the other side's ranges."""


Side = GcpSide | AwsSide


def side_of(cluster: str, exported: Mapping[str, Any]) -> Side:
    """The side a cluster stack's `network` output describes."""
    if exported["cloud"] == "GCP":
        return GcpSide(
            cluster,
            exported["project"],
            exported["region"],
            exported["network"],
            tuple(exported["ranges"]),
        )
    return AwsSide(
        cluster,
        exported["region"],
        exported["vpcId"],
        exported["vpcCidr"],
        list(exported["routeTableIds"]),
    )
