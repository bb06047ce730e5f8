"""Scheduler capacity: packing on nodes, devices, best-fit pools, CEL, disaggregated roles."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.api.names import replica_name
from modelplane.scheduler import schedule
from tests.factories import (
    cluster,
    deployment,
    fleet,
    gpu_device,
    inference_class,
    lock,
    nic_device,
    pool,
    request,
    role,
)
from tests.scheduler.helpers import EFA, H100, MEM, gpu_clusters, pools_of, where

# -- capacity -------------------------------------------------------------------------------


def test_kept_replicas_of_every_deployment_are_charged_before_filling() -> None:
    """A new high-priority deployment does not take capacity a kept replica holds."""
    f = fleet(
        [H100],
        gpu_clusters(("a", 1)),
        [deployment("low", 1, tensor=8), deployment("high", 1, tensor=8, priority=10)],
    )
    previous = lock({"ml/low": [(replica_name("low", "a", 0), "a", 0, {"unified": "p"})]})
    result = schedule(f, previous)
    assert where(result, "ml/low") == [("a", 0)]
    assert where(result, "ml/high") == []
    assert result.report["ml/high"].reasons == ["a: pool p has 0 free nodes, unified needs 1"]


def test_capacity_is_shared_across_deployments() -> None:
    f = fleet(
        [H100], gpu_clusters(("a", 2)), [deployment("x", 1, tensor=8), deployment("y", 2, tensor=8)]
    )
    result = schedule(f, None)
    assert len(where(result, "ml/x")) + len(where(result, "ml/y")) == 2
    assert result.report["ml/y"].unplaced == 1


@pytest.mark.parametrize(
    ("tensors", "placed"),
    [
        ([1, 4, 3], [1, 1, 1]),  # 1 + 4 + 3 share one 8-GPU node
        ([1, 4, 3, 1], [1, 1, 1, 0]),  # and then it is full
        ([4, 4, 4], [1, 1, 0]),
        ([2, 2, 2, 2], [1, 1, 1, 1]),
        ([8, 1], [1, 0]),
    ],
)
def test_sub_node_packing(tensors: list[int], placed: list[int]) -> None:
    deps = [deployment(f"d{i}", 1, tensor=t) for i, t in enumerate(tensors)]
    result = schedule(fleet([H100], gpu_clusters(("a", 1)), deps), None)
    assert [len(where(result, f"ml/d{i}")) for i in range(len(tensors))] == placed


def test_best_fit_nodes_keep_a_whole_node_free_for_a_gang() -> None:
    """Two 4-GPU replicas share one node, so a 2-node gang still finds 2 whole nodes."""
    deps = [
        deployment("a4", 1, tensor=4, priority=2),
        deployment("b4", 1, tensor=4, priority=2),
        deployment("gang", 1, tensor=8, pipeline=2, priority=1),
    ]
    result = schedule(fleet([H100], gpu_clusters(("a", 3)), deps), None)
    assert [len(where(result, f"ml/{d}")) for d in ("a4", "b4", "gang")] == [1, 1, 1]


@pytest.mark.parametrize(
    ("nodes", "guests", "fits", "reason"),
    [
        (2, [], True, None),
        (1, [], False, "a: pool p has 1 free node, unified needs 2"),
        (2, [1], False, "a: pool p has 1 free node, unified needs 2"),
        (3, [1], True, None),
        (3, [4, 4, 4], False, "a: pool p has 1 free node, unified needs 2"),
    ],
)
def test_multi_node_gang_needs_distinct_nodes_with_room(
    nodes: int, guests: list[int], fits: bool, reason: str | None
) -> None:
    """tensor 8 x pipeline 2: two pods, each 8 GPUs, on two distinct nodes."""
    deps = [deployment(f"g{i}", 1, tensor=t, priority=9) for i, t in enumerate(guests)]
    deps.append(deployment("gang", 1, tensor=8, pipeline=2))
    result = schedule(fleet([H100], gpu_clusters(("a", nodes)), deps), None)
    assert all(len(where(result, f"ml/g{i}")) == 1 for i in range(len(guests)))
    assert len(where(result, "ml/gang")) == (1 if fits else 0)
    assert result.report["ml/gang"].reasons == ([reason] if reason else [])


def test_workers_of_a_role_may_share_a_node() -> None:
    """Four 2-GPU single-node workers fit one 8-GPU node; a fifth does not."""
    four = schedule(
        fleet([H100], gpu_clusters(("a", 1)), [deployment("m", 1, tensor=2, workers=4)]), None
    )
    assert where(four, "ml/m") == [("a", 0)]
    five = schedule(
        fleet([H100], gpu_clusters(("a", 1)), [deployment("m", 1, tensor=2, workers=5)]), None
    )
    # a "free node" has room for one more pod; the role needs one per pod
    assert five.report["ml/m"].reasons == ["a: pool p has 1 free node, unified needs 5"]


def test_data_local_topology_sets_gpus_per_node_and_nodes_per_worker() -> None:
    """tensor 4 x data 4 / dataLocal 2: 2 nodes per worker, 8 GPUs per node."""
    dep = deployment("m", 2, tensor=4, data=4, data_local=2)
    result = schedule(fleet([H100], gpu_clusters(("a", 3)), [dep]), None)
    assert where(result, "ml/m") == [("a", 0)]
    assert result.report["ml/m"].reasons == ["a: pool p has 1 free node, unified needs 2"]


@pytest.mark.parametrize(
    ("claim", "nic_count", "placed"),
    [
        ("Synthetic", 16, 8),  # matched, never used up: eight 1-GPU replicas share the NICs
        ("DRA", 16, 1),  # consumed: the first replica takes all sixteen
        ("DRA", 4, 4),
        ("Synthetic", 17, 0),  # more than a node has: never matches
    ],
)
def test_synthetic_devices_are_matched_not_consumed(
    claim: str, nic_count: int, placed: int
) -> None:
    cls = inference_class("efa", devices=[gpu_device(8), nic_device(16, claim=claim)])
    dep = deployment(
        "m",
        10,
        tensor=1,
        devices=[request("gpu", None, MEM.format("40Gi")), request("nic", nic_count, EFA)],
    )
    result = schedule(fleet([cls], [cluster("a", [pool("p", "efa", 1)])], [dep]), None)
    assert len(where(result, "ml/m")) == placed
    if placed == 0:
        assert result.report["ml/m"].reasons == ["a: no pool matches unified device nic"]


def test_requests_of_one_pod_take_distinct_devices() -> None:
    """Two requests served by the same 8-GPU kind take 4 + 4 of it, not the same 4."""
    dep = deployment(
        "m",
        3,
        tensor=4,
        devices=[request("gpu", None, MEM.format("40Gi")), request("more", 4, MEM.format("40Gi"))],
    )
    result = schedule(fleet([H100], gpu_clusters(("a", 2)), [dep]), None)
    assert where(result, "ml/m") == [("a", 0), ("a", 1)]


def test_a_request_takes_the_first_device_kind_with_room() -> None:
    """Two GPU kinds on a node: when the first is used up, the second serves."""
    cls = inference_class(
        "mixed",
        devices=[gpu_device(2, name="g1", memory="80Gi"), gpu_device(4, name="g2", memory="80Gi")],
    )
    dep = deployment("m", 4, tensor=2, devices=[request("gpu", None, MEM.format("80Gi"))])
    result = schedule(fleet([cls], [cluster("a", [pool("p", "mixed", 1)])], [dep]), None)
    assert len(where(result, "ml/m")) == 3  # 2 from g1's 2 and g2's 4


@pytest.mark.parametrize(
    ("gpus", "tensor", "fits"),
    [(8, 8, True), (8, 4, True), (4, 8, False), (1, 1, True)],
)
def test_a_role_without_node_selector_needs_gpus_per_node(
    gpus: int, tensor: int, fits: bool
) -> None:
    cls = inference_class("c", gpus)
    result = schedule(
        fleet([cls], [cluster("a", [pool("p", "c", 1)])], [deployment("m", 1, tensor=tensor)]), None
    )
    assert len(where(result, "ml/m")) == (1 if fits else 0)
    if not fits:
        assert result.report["ml/m"].reasons == ["a: no pool matches unified device gpu"]


def test_a_role_without_node_selector_ignores_synthetic_devices() -> None:
    cls = inference_class("c", devices=[gpu_device(8, claim="Synthetic")])
    result = schedule(
        fleet([cls], [cluster("a", [pool("p", "c", 1)])], [deployment("m", 1, tensor=8)]), None
    )
    assert where(result, "ml/m") == []


# -- pools: best fit, CEL -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pools", "expected"),
    [
        ([("big", 4), ("small", 1)], "small"),  # least room left after it
        ([("small", 1), ("big", 4)], "small"),
        ([("one", 2), ("two", 2)], "one"),  # ties by pool order
        ([("two", 2), ("one", 2)], "two"),
        ([("empty", 0), ("big", 3)], "big"),
    ],
)
def test_best_fit_pool(pools: list[tuple[str, int]], expected: str) -> None:
    c = cluster("a", [pool(name, "h100", nodes) for name, nodes in pools])
    result = schedule(fleet([H100], [c], [deployment("m", 1, tensor=8)]), None)
    assert pools_of(result, "ml/m") == [{"unified": expected}]


def test_best_fit_counts_what_is_already_used() -> None:
    """Pool x (2 nodes) has one node in use; pool y (2 nodes) is empty: x has less room."""
    c = cluster("a", [pool("y", "h100", 2), pool("x", "h100", 2)])
    previous = lock({"ml/guest": [(replica_name("guest", "a", 0), "a", 0, {"unified": "x"})]})
    deps = [deployment("guest", 1, tensor=8), deployment("m", 1, tensor=8)]
    result = schedule(fleet([H100], [c], deps), previous)
    assert pools_of(result, "ml/m") == [{"unified": "x"}]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (MEM.format("100Gi"), "h200"),
        (MEM.format("80Gi"), "h100"),  # both match; best fit picks the smaller pool
        ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"', "h200"),
        (
            'device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("9.0.0")) >= 0',
            "h100",
        ),
        ('"unknown.example.com" in device.attributes', None),
        ('device.attributes["gpu.nvidia.com"].missing == 1', None),
    ],
)
def test_cel_selectors_choose_pools(selector: str, expected: str | None) -> None:
    h200 = inference_class("h200", 8, memory="141Gi", product="NVIDIA H200")
    c = cluster("a", [pool("h200", "h200", 2), pool("h100", "h100", 1)])
    dep = deployment("m", 1, tensor=8, devices=[request("gpu", None, selector)])
    result = schedule(fleet([H100, h200], [c], [dep]), None)
    if expected is None:
        assert where(result, "ml/m") == []
        assert result.report["ml/m"].reasons == ["a: no pool matches unified device gpu"]
    else:
        assert pools_of(result, "ml/m") == [{"unified": expected}]


def test_qualified_attribute_names_use_their_own_domain() -> None:
    cls = inference_class(
        "c",
        devices=[
            {
                **gpu_device(8),
                "attributes": {"resource.kubernetes.io/pcieRoot": {"string": "pci0"}},
            }
        ],
    )
    sel = 'device.attributes["resource.kubernetes.io"].pcieRoot == "pci0"'
    dep = deployment("m", 1, tensor=8, devices=[request("gpu", None, sel)])
    result = schedule(fleet([cls], [cluster("a", [pool("p", "c", 1)])], [dep]), None)
    assert where(result, "ml/m") == [("a", 0)]


# -- disaggregation -------------------------------------------------------------------------


def _disagg(
    prefill_mem: str = "40Gi", decode_mem: str = "100Gi", decode_workers: int = 1, replicas: int = 1
) -> Any:
    return deployment(
        "pd",
        replicas,
        prefill=role(8, devices=[request("gpu", None, MEM.format(prefill_mem))]),
        decode=role(
            8, workers=decode_workers, devices=[request("gpu", None, MEM.format(decode_mem))]
        ),
    )


H200 = inference_class("h200", 8, memory="141Gi", product="NVIDIA H200")


def test_disaggregated_roles_land_on_one_cluster_on_their_own_pools() -> None:
    a = cluster("a", [pool("h100", "h100", 2)])  # no pool for decode
    b = cluster("b", [pool("h100", "h100", 1), pool("h200", "h200", 2)])
    result = schedule(fleet([H100, H200], [a, b], [_disagg()]), None)
    assert where(result, "ml/pd") == [("b", 0)]
    assert pools_of(result, "ml/pd") == [{"prefill": "h100", "decode": "h200"}]


def test_disaggregated_roles_may_share_a_pool() -> None:
    b = cluster("b", [pool("h200", "h200", 2)])
    result = schedule(fleet([H200], [b], [_disagg()]), None)
    assert pools_of(result, "ml/pd") == [{"prefill": "h200", "decode": "h200"}]
    short = schedule(fleet([H200], [cluster("b", [pool("h200", "h200", 1)])], [_disagg()]), None)
    assert short.report["ml/pd"].reasons == ["b: no room for prefill and decode together"]


def test_an_earlier_role_gives_way_so_a_later_one_fits() -> None:
    """prefill's best fit (h200, 1 node) would leave decode no room; prefill takes h100."""
    c = cluster("c", [pool("h100", "h100", 3), pool("h200", "h200", 1)])
    result = schedule(fleet([H100, H200], [c], [_disagg()]), None)
    assert pools_of(result, "ml/pd") == [{"prefill": "h100", "decode": "h200"}]


def test_a_shortfall_names_the_role_that_does_not_fit() -> None:
    """Prefill fits on each cluster, decode (2 workers) does not."""
    a = cluster("a", [pool("h100", "h100", 1), pool("h200", "h200", 1)])
    b = cluster("b", [pool("h100", "h100", 1)])
    result = schedule(fleet([H100, H200], [a, b], [_disagg(decode_workers=2)]), None)
    assert where(result, "ml/pd") == []
    assert result.report["ml/pd"].reasons == [
        "a: pool h200 has 1 free node, decode needs 2",
        "b: no pool matches decode device gpu",
    ]
