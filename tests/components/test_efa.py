"""EFA on EKS: interfaces a device plugin advertises (`claim: ExtendedResource`), requested by
the pods that land on them, consumed by the scheduler, installed on `fabric: EFA` clusters."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from modelplane.api.inference_class import ClassDevice
from modelplane.api.names import replica_name
from modelplane.api.placement_lock import LockedReplica
from modelplane.components.model_deployment import replica_manifests
from modelplane.components.workload.targets import ClusterTarget
from modelplane.devfleet.nodes import cluster_nodes
from modelplane.scheduler import schedule
from tests.factories import cluster, deployment, fleet, gpu_device, inference_class, pool, request

EFA = "vpc.amazonaws.com/efa"
LINK = 'device.attributes["vpc.amazonaws.com"].linkType == "efa"'


def efa_nic(count: int = 16, claim: str = "ExtendedResource") -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": "nic",
        "driver": "vpc.amazonaws.com",
        "claim": claim,
        "count": count,
        "attributes": {"linkType": {"string": "efa"}},
    }
    if claim == "ExtendedResource":
        device["resourceName"] = EFA
    return device


@pytest.mark.parametrize(
    ("device", "fragment"),
    [
        ({"name": "nic", "driver": "x.io", "claim": "ExtendedResource"}, "resourceName"),
        (
            {"name": "nic", "driver": "x.io", "claim": "ExtendedResource", "resourceName": "efa"},
            "domain/name",
        ),
        (
            {"name": "nic", "driver": "x.io", "claim": "Synthetic", "resourceName": EFA},
            "only for claim ExtendedResource",
        ),
    ],
)
def test_extended_resource_devices_name_their_resource(
    device: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ValidationError, match=fragment):
        ClassDevice.model_validate(device)


@pytest.mark.parametrize(("claim", "placed"), [("ExtendedResource", 2), ("Synthetic", 4)])
def test_the_scheduler_consumes_extended_resource_devices(claim: str, placed: int) -> None:
    """Two 8-GPU nodes with 16 NICs each; 4-GPU pods asking 16 NICs: the NICs bound it to
    one pod per node once they are consumed (Synthetic ones are only matched)."""
    cls = inference_class("p5", devices=[gpu_device(8), efa_nic(16, claim)])
    dep = deployment("m", 4, tensor=4, devices=[request("gpu"), request("nic", 16, LINK)])
    result = schedule(fleet([cls], [cluster("k", [pool("p", "p5", 2)])], [dep]), None)
    assert len(result.report["ml/m"].replicas) == placed


def test_pods_request_the_interfaces_and_claim_only_the_gpus() -> None:
    cls = inference_class("p5", devices=[gpu_device(8), efa_nic(16)])
    k = cluster("k", [pool("p", "p5", 2)])
    dep = deployment("m", 1, tensor=8, devices=[request("gpu"), request("nic", 16, LINK)])
    locked = LockedReplica(
        name=replica_name("m", "k", 0), cluster="k", index=0, pools={"unified": "p"}
    )
    manifests = replica_manifests(dep, locked, ClusterTarget.from_spec(k, {"p5": cls}, None))  # type: ignore[arg-type]
    rct = next(m for m in manifests if m["kind"] == "ResourceClaimTemplate")
    assert [r["name"] for r in rct["spec"]["spec"]["devices"]["requests"]] == ["gpu"]
    workload = next(m for m in manifests if m["kind"] == "Deployment")
    engine = next(
        c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == "engine"
    )
    assert engine["resources"]["limits"] == {EFA: "16"}
    assert engine["resources"]["requests"][EFA] == "16"


def test_dev_fleet_nodes_advertise_the_extended_resource() -> None:
    cls = inference_class("p5", devices=[gpu_device(8), efa_nic(16)])
    nodes = cluster_nodes("k", cluster("k", [pool("p", "p5", 1)]), {"p5": cls}, "10.244.0.0/16")
    gpu_node = next(n for n in nodes.nodes if n["metadata"]["labels"]["modelplane.ai/pool"] == "p")
    assert gpu_node["status"]["allocatable"][EFA] == "16"
    drivers = {s["spec"]["driver"] for s in nodes.slices}
    assert drivers == {"gpu.nvidia.com"}
