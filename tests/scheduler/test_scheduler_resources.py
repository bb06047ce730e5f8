"""CPU and memory: a class's per-node allocatable, charged like devices (scheduling.md)."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.api import machines
from modelplane.devfleet.nodes import node_shape
from modelplane.scheduler import schedule
from tests.factories import cluster, deployment, fleet, inference_class, pool

GIB = 1024**3


def gke(machine: str) -> dict[str, Any]:
    return {
        "provider": "GKE",
        "gke": {"machineType": machine, "accelerator": {"type": "nvidia-l4", "count": 8}},
    }


def eks(instance: str) -> dict[str, Any]:
    return {
        "provider": "EKS",
        "eks": {"instanceType": instance, "accelerator": {"type": "nvidia-l40s", "count": 8}},
    }


@pytest.mark.parametrize(
    ("allocatable", "provisioning", "cpu_milli", "memory_bytes"),
    [
        (("16", "64Gi"), None, 16000, 64 * GIB),
        (("7500m", "30000Mi"), gke("g2-standard-8"), 7500, 30000 * 1024**2),  # explicit wins
        # 8 vCPU: 60 + 10 + 10 + 10 m reserved; 32 GiB: 1 + 0.8 + 0.8 + 0.96 GiB + 100 MiB.
        (None, gke("g2-standard-8"), 7910, 29022 * 1024**2),
        # 48 vCPU: 80 + 0.25 % x 44000 = 190 m; 384 GiB - (11 x 250 + 255 + 100) MiB.
        (None, eks("g6e.12xlarge"), 47810, 384 * GIB - 3105 * 1024**2),
        (None, gke("n9-unknown-8"), None, None),  # unknown machine: unchecked
        (None, None, None, None),  # capabilities only: unchecked
    ],
)
def test_node_allocatable(
    allocatable: tuple[str, str] | None,
    provisioning: dict[str, Any] | None,
    cpu_milli: int | None,
    memory_bytes: int | None,
) -> None:
    cls = inference_class("c", 8, allocatable=allocatable, provisioning=provisioning)
    got = cls.spec.node_allocatable
    pair = (got.cpu_milli, got.memory_bytes) if got is not None else (None, None)
    assert pair == (cpu_milli, memory_bytes)
    # The dev fleet's simulated nodes offer exactly what the scheduler charges.
    shape = node_shape(cls)
    if got is None:
        assert (shape.cpu, shape.memory) == ("96", "1000Gi")
    else:
        assert (shape.cpu, int(shape.memory)) == (f"{cpu_milli}m", memory_bytes)


def test_derived_memory_is_what_the_multicloud_l4_pool_offers() -> None:
    got = machines.derived("GKE", "g2-standard-8")
    assert got is not None and 28 * GIB < got.memory_bytes < 29 * GIB


@pytest.mark.parametrize("optimize", [False, True])
@pytest.mark.parametrize(
    ("allocatable", "resources", "placed", "reason"),
    [
        # Memory: two 32Gi pods per 64Gi node although 8 GPUs are free.
        (("64", "64Gi"), ("4", "32Gi"), 4, "(cpu/memory: 2 more nodes have the devices)"),
        # CPU: three 5-core pods per 16-core node.
        (("16", "256Gi"), ("5", "8Gi"), 6, "(cpu/memory: 2 more nodes have the devices)"),
        # No allocatable: CPU and memory unchecked, the 16 GPUs bound it.
        (None, ("64", "1000Gi"), 16, ""),
        # A pod larger than a whole node matches no pool.
        (
            ("16", "64Gi"),
            ("4", "100Gi"),
            0,
            "a: no pool of the cluster offers unified's cpu 4, memory 100Gi per pod",
        ),
    ],
)
def test_cpu_and_memory_are_charged_per_node(
    allocatable: tuple[str, str] | None,
    resources: tuple[str, str],
    placed: int,
    reason: str,
    optimize: bool,
) -> None:
    f = fleet(
        [inference_class("gpu8", 8, allocatable=allocatable)],
        [cluster("a", [pool("p", "gpu8", 2)])],
        [deployment("m", 20, tensor=1, resources=resources)],
    )
    result = schedule(f, None, optimize=optimize)
    report = result.report["ml/m"]
    assert len(report.replicas) == placed
    if placed < 16:
        (why,) = report.reasons
        assert why.endswith(reason) if reason.startswith("(") else why == reason
        if reason.startswith("("):
            assert why.startswith("a: pool p has 0 free nodes, unified needs 1")
    # What the lock charges, re-charged from the lock, still fits: nothing moves.
    again = schedule(f, result.lock, optimize=optimize)
    assert again.lock == result.lock


def test_a_kept_replica_that_no_longer_fits_the_memory_is_re_placed() -> None:
    small = inference_class("gpu8", 8, allocatable=("64", "64Gi"))
    roomy = inference_class("gpu8", 8)
    clusters = [cluster("a", [pool("p", "gpu8", 1)])]
    deps = [deployment("m", 3, tensor=1, resources=("4", "32Gi"))]
    first = schedule(fleet([roomy], clusters, deps), None)
    assert len(first.report["ml/m"].replicas) == 3
    second = schedule(fleet([small], clusters, deps), first.lock)
    assert [r.index for r in second.report["ml/m"].replicas] == [0, 1]
