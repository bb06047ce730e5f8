"""EKS zones (issue 36, N2): a zone added to a cluster reaches its node groups, never the control
plane. AWS keeps an EKS cluster in the Availability Zones it was created in (EKS user guide,
"View Amazon EKS networking requirements for VPC and subnets"), and a managed node group's
subnets cannot change in place (aws/containers-roadmap#1338). Rendered from specs/frontier
under Pulumi's mocks; `pytest -k "gke or eks or cloud"`."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from modelplane.api.inference_class import InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.loader import load_fleet
from modelplane.components.cloud.eks import keep_control_plane_subnets
from modelplane.components.inference_cluster import InferenceClusterComponent
from tests.components.cluster_helpers import MNG, planned_cluster
from tests.pulumi_mocks import MockRun

FRONTIER = Path(__file__).resolve().parents[2] / "specs" / "frontier"
SUBNET = "aws:ec2/subnet:Subnet"
MOUNT_TARGET = "aws:efs/mountTarget:MountTarget"
EKS_CLUSTER = "eks:index:Cluster"
INNER_CLUSTER = "aws:eks/cluster:Cluster"


@cache
def _frontier() -> tuple[dict[str, Any], dict[str, InferenceClass]]:
    result = load_fleet(FRONTIER)
    assert not result.errors
    cluster = result.fleet.clusters["eks-us-west"]
    return cluster.model_dump(by_alias=True, exclude_none=True), dict(result.fleet.classes)


def _with_zone(where: str) -> InferenceCluster:
    """specs/frontier's EKS cluster with a pool in a new zone, us-west-2d: its block appended
    (blocks are by position), the pool placed ``first`` or ``last`` among the pools."""
    doc = copy.deepcopy(_frontier()[0])
    eks = doc["spec"]["cluster"]["eks"]
    blocks = ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20"]  # the default, written out
    eks["networking"] = {"vpcCidr": "10.0.0.0/16", "subnetCidrs": [*blocks, "10.0.48.0/20"]}
    pool = {**doc["spec"]["nodePools"][0], "name": "gpu-h200-d", "zones": ["us-west-2d"]}
    pool["capacityBlock"] = {"capacityReservationId": "cr-0fedcba9876543210"}
    pools = doc["spec"]["nodePools"]
    doc["spec"]["nodePools"] = [pool, *pools] if where == "first" else [*pools, pool]
    return planned_cluster(doc)


def _render(cluster: InferenceCluster) -> dict[str, Any]:
    run = MockRun.of(lambda: InferenceClusterComponent("eks-us-west", cluster, _frontier()[1]))
    control_plane = run.one(EKS_CLUSTER)
    return {
        "run": run,
        "cluster": control_plane,
        # pulumi-eks's vpcConfig.subnetIds are the public then the private subnet ids.
        "control_plane": [
            *control_plane.inputs["publicSubnetIds"],
            *control_plane.inputs["privateSubnetIds"],
        ],
        "subnets": {s.name: (s.id, s.inputs) for s in run.of_type(SUBNET)},
        "groups": {g.name: g.inputs["subnetIds"] for g in run.of_type(MNG)},
        "mounts": {m.name: m.inputs for m in run.of_type(MOUNT_TARGET)},
    }


@pytest.fixture(scope="module")
def before() -> dict[str, Any]:
    return _render(planned_cluster(_frontier()[0]))


@pytest.mark.parametrize("where", ["first", "last"])
def test_eks_a_zone_added_to_frontier_reaches_node_groups_not_the_control_plane(
    before: dict[str, Any], where: str
) -> None:
    after = _render(_with_zone(where))
    # The control plane's subnets: unchanged, the first three blocks (a, b, c).
    assert after["control_plane"] == before["control_plane"]
    assert len(before["control_plane"]) == 6
    zones = {
        before["subnets"][n][0]: before["subnets"][n][1]["availabilityZone"]
        for n in before["subnets"]
    }
    assert sorted({zones[s] for s in before["control_plane"]}) == [
        "us-west-2a",
        "us-west-2b",
        "us-west-2c",
    ]
    # Every existing subnet, node group and EFS mount target: unchanged.
    assert {k: v for k, v in after["subnets"].items() if k in before["subnets"]} == before[
        "subnets"
    ]
    assert set(after["subnets"]) - set(before["subnets"]) == {
        "eks-us-west-public-us-west-2d",
        "eks-us-west-private-us-west-2d",
    }
    assert after["subnets"]["eks-us-west-private-us-west-2d"][1]["cidrBlock"] == "10.0.56.0/21"
    assert {k: v for k, v in after["groups"].items() if k in before["groups"]} == before["groups"]
    assert {k: v for k, v in after["mounts"].items() if k in before["mounts"]} == before["mounts"]
    # The new zone serves its node group (and gets an EFS mount target for the caches).
    new_private = after["subnets"]["eks-us-west-private-us-west-2d"][0]
    assert after["groups"]["eks-us-west-gpu-h200-d"] == [new_private]
    assert set(after["mounts"]) - set(before["mounts"]) == {"eks-us-west-efs-us-west-2d"}


def test_eks_the_system_node_group_stays_in_the_control_plane_zones(
    before: dict[str, Any],
) -> None:
    private = {
        inputs["availabilityZone"]: id_
        for id_, inputs in before["subnets"].values()
        if not inputs["mapPublicIpOnLaunch"]
    }
    assert before["groups"]["eks-us-west-system"] == [
        private[z] for z in ("us-west-2a", "us-west-2b", "us-west-2c")
    ]


def test_eks_the_inner_cluster_never_updates_its_subnets(before: dict[str, Any]) -> None:
    # Whatever a later spec renders, the EKS cluster pulumi-eks creates ignores changes to
    # vpcConfig.subnetIds (AWS would refuse subnets in new zones); node groups are untouched.
    cluster = before["cluster"]
    assert keep_control_plane_subnets in cluster.transforms
    assert cluster.transformed(INNER_CLUSTER).ignore_changes == ["vpcConfig.subnetIds"]
    assert not cluster.transformed("aws:eks/nodeGroup:NodeGroup").ignore_changes


def test_eks_control_plane_zones_choose_the_control_plane_blocks() -> None:
    doc = copy.deepcopy(_frontier()[0])
    doc["spec"]["cluster"]["eks"]["networking"] = {
        "vpcCidr": "10.0.0.0/16",
        "subnetCidrs": ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20", "10.0.48.0/20"],
        "zones": ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"],
        "controlPlaneZones": ["us-west-2b", "us-west-2d"],
    }
    rendered = _render(planned_cluster(doc))
    zone_of = {id_: inputs["availabilityZone"] for id_, inputs in rendered["subnets"].values()}
    assert [zone_of[s] for s in rendered["control_plane"]] == ["us-west-2b", "us-west-2d"] * 2
    assert [zone_of[s] for s in rendered["groups"]["eks-us-west-system"]] == [
        "us-west-2b",
        "us-west-2d",
    ]
