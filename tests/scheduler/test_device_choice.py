"""One device choice: the kind the scheduler charges is the kind the workload's claim asks for."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.components.workload.claims import claim_requests
from modelplane.scheduler import schedule
from modelplane.scheduler.matching import Matcher
from tests.factories import (
    cluster,
    deployment,
    fleet,
    gpu_device,
    inference_class,
    nic_device,
    pool,
    request,
)

MEM = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
EFA = 'device.attributes["dra.net"].linkType == "efa"'
OTHER = "a.example.com"


@pytest.mark.parametrize(
    ("devices", "requests", "tensor", "chosen", "claimed"),
    [
        # Same name first, although an earlier kind would also do (it used to take "a").
        (
            [gpu_device(8, name="a", driver=OTHER), gpu_device(8)],
            [request("gpu")],
            8,
            ["gpu"],
            ["gpu.nvidia.com"],
        ),
        # The implicit GPU request: the first DRA kind with enough devices (the claim used
        # to take the first DRA kind whatever its count).
        (
            [gpu_device(4, name="small", driver=OTHER), gpu_device(8)],
            None,
            8,
            ["gpu"],
            ["gpu.nvidia.com"],
        ),
        # Selectors: the first kind that satisfies them.
        (
            [gpu_device(8, name="a", memory="40Gi"), gpu_device(8, name="b", driver=OTHER)],
            [request("x", None, MEM.replace("gpu.nvidia.com", OTHER))],
            8,
            ["b"],
            [OTHER],
        ),
        # A request without selectors never lands on a Synthetic kind of another name.
        (
            [nic_device(16), gpu_device(8)],
            [request("gpu"), request("nic", 4)],
            8,
            ["gpu", "nic"],
            ["gpu.nvidia.com"],  # the Synthetic NIC is matched, never claimed
        ),
        (
            [nic_device(16), gpu_device(8)],
            [request("gpu"), request("nic", 4, EFA)],
            8,
            ["gpu", "nic"],
            ["gpu.nvidia.com"],
        ),
    ],
)
def test_scheduler_and_claim_choose_the_same_device(
    devices: list[dict[str, Any]],
    requests: list[dict[str, Any]] | None,
    tensor: int,
    chosen: list[str],
    claimed: list[str],
) -> None:
    cls = inference_class("c", devices=devices)
    dep = deployment("m", tensor=tensor, devices=requests)
    role = dep.spec.roles["unified"]
    fit = Matcher({"c": cls}).fit("ml/m", "unified", role, "c")
    assert fit.demand is not None
    names = [d.name for d in cls.spec.devices]
    assert [names[r.kinds[0]] for r in fit.demand.requests] == chosen
    got = claim_requests(role, cls.spec.devices, pool="p")
    assert [c.device_class_name for c in got] == claimed
    by_name = {d.name: d for d in cls.spec.devices}
    for name in chosen:
        if by_name[name].claim == "DRA":
            assert by_name[name].device_class_name in claimed


def test_the_scheduler_charges_only_the_claimed_kind() -> None:
    """Two 8-GPU kinds on one node: a request named `gpu` claims only the `gpu` devices,
    so one replica fits, not two."""
    cls = inference_class("c", devices=[gpu_device(8, name="a", driver=OTHER), gpu_device(8)])
    f = fleet(
        [cls],
        [cluster("k", [pool("p", "c", 1)])],
        [deployment("m", 2, tensor=8, devices=[request("gpu")])],
    )
    assert len(schedule(f, None).report["ml/m"].replicas) == 1


def test_kinds_of_one_device_class_serve_one_claim() -> None:
    """Two GPU kinds of the same DeviceClass: the claim can be served by either on a real
    node, so the scheduler may spill into the second (3 pods of 2 on 2 + 4 GPUs)."""
    cls = inference_class("c", devices=[gpu_device(2, name="g1"), gpu_device(4, name="g2")])
    f = fleet([cls], [cluster("k", [pool("p", "c", 1)])], [deployment("m", 4, tensor=2)])
    assert len(schedule(f, None).report["ml/m"].replicas) == 3
    dep = deployment("m", tensor=2)
    fit = Matcher({"c": cls}).fit("ml/m", "unified", dep.spec.roles["unified"], "c")
    assert fit.demand is not None and fit.demand.requests[0].kinds == (0, 1)
    assert [
        c.device_class_name
        for c in claim_requests(dep.spec.roles["unified"], cls.spec.devices, pool="p")
    ] == ["gpu.nvidia.com"]
