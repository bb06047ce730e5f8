"""The fleet scheduler, rule by rule (design/scheduling.md)."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.api.inference_cluster import Taint
from modelplane.api.model_deployment import Toleration
from modelplane.api.names import replica_name
from modelplane.api.placement_lock import PlacementLock
from modelplane.scheduler import ScheduleResult, schedule
from modelplane.scheduler.taints import tolerates
from tests.factories import (
    cluster,
    deployment,
    fleet,
    gpu_device,
    inference_class,
    lock,
    model_cache,
    nic_device,
    pool,
    request,
    role,
    taint,
)

MEM = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{}")) >= 0'
EFA = 'device.attributes["dra.net"].linkType == "efa"'
H100 = inference_class("h100", 8)


def where(result: ScheduleResult, key: str) -> list[tuple[str, int]]:
    """(cluster, index) of every replica of a deployment, in lock order."""
    return [(r.cluster, r.index) for r in result.lock.deployments[key].replicas]


def pools_of(result: ScheduleResult, key: str) -> list[dict[str, str]]:
    return [dict(r.pools) for r in result.lock.deployments[key].replicas]


def gpu_clusters(*specs: tuple[str, int]) -> list[Any]:
    """Clusters with one h100 pool `p` of the given node count each."""
    return [cluster(name, [pool("p", "h100", nodes)]) for name, nodes in specs]


# -- names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cluster_name", "index", "expected"),
    [
        ("cluster-a", 0, "my-model-5ab63"),
        ("cluster-a", 1, "my-model-609c5"),
        ("cluster-b", 0, "my-model-f0b76"),
    ],
)
def test_replica_names(cluster_name: str, index: int, expected: str) -> None:
    assert replica_name("my-model", cluster_name, index) == expected


def test_the_lock_names_replicas_by_the_sha256_rule() -> None:
    f = fleet(
        [H100],
        gpu_clusters(("cluster-a", 2), ("cluster-b", 1)),
        [deployment("my-model", 3, tensor=8)],
    )
    replicas = schedule(f, None).lock.deployments["ml/my-model"].replicas
    assert [(r.name, r.cluster, r.index) for r in replicas] == [
        ("my-model-5ab63", "cluster-a", 0),
        ("my-model-609c5", "cluster-a", 1),
        ("my-model-f0b76", "cluster-b", 0),
    ]


# Two slots whose derived names collide: sha256 of "my-model-c900-0" and "my-model-c964-0"
# share their first five hex digits.
COLLIDING = [("c900", 1), ("c964", 1)]


@pytest.mark.parametrize(
    ("previous", "names"),
    [
        # a new plan: the slot that sorts first keeps the derived name, the other retries
        (None, {"c900": "my-model-35e12", "c964": "my-model-6b2f5"}),
        # the previous lock's names are kept, whichever slot had the derived one
        (
            {"c964": "my-model-35e12"},
            {"c900": replica_name("my-model", "c900", 0, 1), "c964": "my-model-35e12"},
        ),
        ({"c900": "my-model-0ld00"}, {"c900": "my-model-0ld00", "c964": "my-model-35e12"}),
    ],
    ids=["new", "kept-second", "kept-other-name"],
)
def test_replica_names_that_collide_are_made_unique(
    previous: dict[str, str] | None, names: dict[str, str]
) -> None:
    from modelplane.api.placement_lock import duplicate_entries

    assert replica_name("my-model", "c900", 0) == replica_name("my-model", "c964", 0)
    f = fleet([H100], gpu_clusters(*COLLIDING), [deployment("my-model", 2, tensor=8)])
    before = (
        None
        if previous is None
        else lock({"ml/my-model": [(n, c, 0, {"unified": "p"}) for c, n in previous.items()]})
    )
    result = schedule(f, before)
    assert {r.cluster: r.name for r in result.lock.deployments["ml/my-model"].replicas} == names
    assert duplicate_entries(result.lock) == []
    # the lock it writes plans again to the same names
    assert schedule(f, result.lock).lock == result.lock


# -- output shape ---------------------------------------------------------------------------


def test_every_deployment_has_an_entry_sorted_and_reported() -> None:
    f = fleet(
        [H100], gpu_clusters(("a", 1)), [deployment("zeta", 0), deployment("alpha", 2, tensor=8)]
    )
    result = schedule(f, None)
    assert list(result.lock.deployments) == ["ml/alpha", "ml/zeta"]
    assert list(result.report) == ["ml/alpha", "ml/zeta"]
    assert result.lock.deployments["ml/zeta"].replicas == []
    zeta, alpha = result.report["ml/zeta"], result.report["ml/alpha"]
    assert (zeta.desired, zeta.unplaced, zeta.reasons) == (0, 0, [])
    assert (alpha.desired, len(alpha.replicas), alpha.unplaced) == (2, 1, 1)
    assert alpha.replicas == result.lock.deployments["ml/alpha"].replicas
    assert alpha.as_dict() == {
        "desired": 2,
        "replicas": [
            {"name": alpha.replicas[0].name, "cluster": "a", "index": 0, "pools": {"unified": "p"}}
        ],
        "unplaced": 1,
        "reasons": ["a: pool p has 0 free nodes, unified needs 1"],
    }
    assert result.short


# -- fill: spread, then pack ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("clusters", "replicas", "expected"),
    [
        # spread: each new replica to the cluster hosting fewest, ties to the first name
        ([("a", 4), ("b", 4)], 3, [("a", 0), ("a", 1), ("b", 0)]),
        ([("b", 4), ("a", 4), ("c", 4)], 4, [("a", 0), ("a", 1), ("b", 0), ("c", 0)]),
        # pack when forced: a is full after one
        ([("a", 1), ("b", 4)], 3, [("a", 0), ("b", 0), ("b", 1)]),
        # a cluster with no room is skipped
        ([("a", 0), ("b", 2)], 2, [("b", 0), ("b", 1)]),
    ],
)
def test_spread_then_pack(
    clusters: list[tuple[str, int]], replicas: int, expected: list[tuple[str, int]]
) -> None:
    f = fleet([H100], gpu_clusters(*clusters), [deployment("m", replicas, tensor=8)])
    assert where(schedule(f, None), "ml/m") == expected


# -- retain ---------------------------------------------------------------------------------


def test_kept_replicas_do_not_move_when_a_better_cluster_appears() -> None:
    before = fleet([H100], gpu_clusters(("b", 4)), [deployment("m", 2, tensor=8)])
    first = schedule(before, None)
    assert where(first, "ml/m") == [("b", 0), ("b", 1)]
    after = fleet([H100], gpu_clusters(("a", 4), ("b", 4)), [deployment("m", 3, tensor=8)])
    second = schedule(after, first.lock)
    assert where(second, "ml/m") == [("a", 0), ("b", 0), ("b", 1)]
    kept = {r.name for r in first.lock.deployments["ml/m"].replicas}
    assert kept <= {r.name for r in second.lock.deployments["ml/m"].replicas}


def test_planning_the_produced_lock_again_changes_nothing() -> None:
    f = fleet(
        [H100],
        gpu_clusters(("a", 2), ("b", 1)),
        [deployment("m", 2, tensor=4), deployment("n", 3, tensor=2)],
    )
    first = schedule(f, None)
    assert schedule(f, first.lock) == first


@pytest.mark.parametrize(
    ("locked", "replicas", "expected"),
    [
        # drop from the cluster hosting most; ties to the name sorting last; highest index
        ([("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)], 3, [("a", 0), ("b", 0), ("c", 0)]),
        ([("a", 0), ("a", 1), ("a", 2), ("b", 0)], 2, [("a", 0), ("b", 0)]),
        ([("a", 0), ("a", 3), ("b", 0)], 2, [("a", 0), ("b", 0)]),
        ([("a", 0), ("b", 0)], 1, [("a", 0)]),
        ([("a", 0), ("b", 0)], 0, []),
    ],
)
def test_scale_down_order(
    locked: list[tuple[str, int]], replicas: int, expected: list[tuple[str, int]]
) -> None:
    f = fleet(
        [H100], gpu_clusters(("a", 8), ("b", 8), ("c", 8)), [deployment("m", replicas, tensor=8)]
    )
    previous = lock(
        {"ml/m": [(replica_name("m", c, i), c, i, {"unified": "p"}) for c, i in locked]}
    )
    assert where(schedule(f, previous), "ml/m") == expected


def test_lowest_free_index_is_reused() -> None:
    f = fleet([H100], gpu_clusters(("cluster-a", 4)), [deployment("my-model", 3, tensor=8)])
    previous = lock(
        {
            "ml/my-model": [
                ("my-model-5ab63", "cluster-a", 0, {"unified": "p"}),
                (replica_name("my-model", "cluster-a", 2), "cluster-a", 2, {"unified": "p"}),
            ]
        }
    )
    result = schedule(f, previous)
    assert where(result, "ml/my-model") == [("cluster-a", 0), ("cluster-a", 1), ("cluster-a", 2)]
    assert result.lock.deployments["ml/my-model"].replicas[1].name == "my-model-609c5"


def test_replicas_of_removed_deployments_hold_their_capacity_until_pruned() -> None:
    classes, clusters = [H100], gpu_clusters(("a", 1))
    first = schedule(fleet(classes, clusters, [deployment("old", 1, tensor=8)]), None)
    second = schedule(fleet(classes, clusters, [deployment("new", 1, tensor=8)]), first.lock)
    assert list(second.lock.deployments) == ["ml/new"]
    assert list(second.lock.removed) == ["ml/old"]  # its stack still runs (no prune yet)
    assert where(second, "ml/new") == []
    pruned = second.lock.model_copy(update={"removed": {}})
    third = schedule(fleet(classes, clusters, [deployment("new", 1, tensor=8)]), pruned)
    assert where(third, "ml/new") == [("a", 0)]


@pytest.mark.parametrize(
    "edit",
    [
        "cluster removed",
        "labels no longer match",
        "pool removed",
        "class edited",
        "maxNodeCount lowered",
        "shape grew",
        "became disaggregated",
    ],
)
def test_drift_re_places_what_may_no_longer_stay(edit: str) -> None:
    """Pinned on a/p; after the edit it may not stay there, and lands on b."""
    big = inference_class("big", devices=[gpu_device(8, memory="80Gi")])
    labels = {"tier": "gold"}
    dep = deployment(
        "m",
        1,
        tensor=4,
        devices=[request("gpu", None, MEM.format("80Gi"))],
        selector={"matchLabels": labels},
    )
    a = cluster("a", [pool("p", "big", 1, max_nodes=2)], labels=labels)
    b = cluster("b", [pool("q", "big", 2)], labels=labels)
    other = deployment("other", 0, tensor=8)
    first = schedule(fleet([big], [a, b], [dep, other]), None)
    assert where(first, "ml/m") == [("a", 0)]

    classes, clusters, deps = [big], [a, b], [dep, other]
    if edit == "cluster removed":
        clusters = [b]
    elif edit == "labels no longer match":
        clusters = [cluster("a", [pool("p", "big", 1, max_nodes=2)]), b]
    elif edit == "pool removed":  # replaced by pool r without nodes
        clusters = [cluster("a", [pool("r", "big", 0)], labels=labels), b]
    elif edit == "class edited":  # pool p now of a class whose memory fails the selector
        small = inference_class("small", devices=[gpu_device(8, memory="40Gi")])
        classes = [big, small]
        clusters = [cluster("a", [pool("p", "small", 1, max_nodes=2)], labels=labels), b]
    elif edit == "maxNodeCount lowered":  # the other deployment, kept, now fills a/p alone
        clusters = [cluster("a", [pool("p", "big", 1, max_nodes=1)], labels=labels), b]
        other_locked = lock(
            {"ml/other": [(replica_name("other", "a", 0), "a", 0, {"unified": "p"})]}
        )
        deps = [dep, deployment("other", 1, tensor=8, priority=1)]
        previous = PlacementLock(deployments={**first.lock.deployments, **other_locked.deployments})
        result = schedule(fleet(classes, clusters, deps), previous)
        assert where(result, "ml/other") == [("a", 0)]
        assert where(result, "ml/m") == [("b", 0)]
        return
    elif edit == "shape grew":  # 4 -> 8 GPUs per pod, and a/p has 1 node with a 4-GPU guest
        deps = [
            deployment(
                "m",
                1,
                tensor=8,
                devices=[request("gpu", None, MEM.format("80Gi"))],
                selector={"matchLabels": labels},
            ),
            deployment("other", 1, tensor=4, priority=5),
        ]
        clusters = [cluster("a", [pool("p", "big", 1)], labels=labels), b]
        previous = PlacementLock(
            deployments={
                **first.lock.deployments,
                **lock(
                    {"ml/other": [(replica_name("other", "a", 0), "a", 0, {"unified": "p"})]}
                ).deployments,
            }
        )
        result = schedule(fleet(classes, clusters, deps), previous)
        assert where(result, "ml/other") == [("a", 0)]
        assert where(result, "ml/m") == [("b", 0)]
        return
    elif edit == "became disaggregated":
        deps = [
            deployment("m", 1, prefill=role(4), decode=role(4), selector={"matchLabels": labels}),
            other,
        ]
        clusters = [cluster("a", [pool("p", "big", 1)], labels=labels), b]
        result = schedule(fleet(classes, clusters, deps), first.lock)
        # not kept (no pools for the new roles): placed anew, a sorts first
        assert pools_of(result, "ml/m") == [{"prefill": "p", "decode": "p"}]
        return
    result = schedule(fleet(classes, clusters, deps), first.lock)
    assert where(result, "ml/m") == [("b", 0)]
    assert pools_of(result, "ml/m") == [{"unified": "q"}]


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


# -- taints and tolerations -----------------------------------------------------------------


def _tol(key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> Toleration:
    return Toleration.model_validate(
        {"key": key, "operator": operator, "value": value, "effect": effect}
    )


MAINT = Taint.model_validate({"key": "maint", "value": "on", "effect": "NoSchedule"})
EVICT = Taint.model_validate({"key": "maint", "value": "on", "effect": "NoExecute"})
BARE = Taint.model_validate({"key": "drain", "effect": "NoSchedule"})


@pytest.mark.parametrize(
    ("toleration", "taint_", "expected"),
    [
        (_tol("maint", "Equal", "on", "NoSchedule"), MAINT, True),
        (_tol("maint", "Equal", "on"), MAINT, True),  # empty effect matches any effect
        (_tol("maint", "Equal", "on"), EVICT, True),
        (_tol("maint", "Equal", "off"), MAINT, False),  # Equal needs the value equal
        (_tol("other", "Equal", "on"), MAINT, False),  # ... and the key
        (_tol("maint", "Exists"), MAINT, True),  # Exists: any value
        (_tol("maint", "Exists", effect="NoExecute"), MAINT, False),  # effect must match
        (_tol("maint", "Exists", effect="NoExecute"), EVICT, True),
        (_tol("", "Exists"), MAINT, True),  # empty key + Exists tolerates everything
        (_tol("", "Exists"), EVICT, True),
        (_tol("", "Exists", effect="NoSchedule"), EVICT, False),
        (_tol("drain", "Equal", ""), BARE, True),  # empty value equals empty value
        (_tol("drain", "Exists"), BARE, True),
    ],
)
def test_toleration_semantics(toleration: Toleration, taint_: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint_) is expected


@pytest.mark.parametrize(
    ("effect", "tolerations", "expected", "renamed"),
    [
        ("NoSchedule", [], [("a", 0), ("b", 0)], False),  # kept stays, new goes to b
        ("NoExecute", [], [("b", 0), ("b", 1)], True),  # kept is evicted and re-placed on b
        ("NoExecute", [{"key": "maint", "operator": "Exists"}], [("a", 0), ("b", 0)], False),
        (
            "NoSchedule",
            [{"key": "maint", "operator": "Equal", "value": "on", "effect": "NoSchedule"}],
            [("a", 0), ("b", 0)],
            False,
        ),
    ],
)
def test_taints_block_new_replicas_and_no_execute_evicts(
    effect: str,
    tolerations: list[dict[str, str]],
    expected: list[tuple[str, int]],
    renamed: bool,
) -> None:
    a = cluster("a", [pool("p", "h100", 4)], taints=[taint("maint", "on", effect)])
    b = cluster("b", [pool("p", "h100", 4)])
    dep = deployment("m", 2, tensor=8, tolerations=tolerations)
    previous = lock({"ml/m": [(replica_name("m", "a", 0), "a", 0, {"unified": "p"})]})
    result = schedule(fleet([H100], [a, b], [dep]), previous)
    assert where(result, "ml/m") == expected
    names = {r.name for r in result.lock.deployments["ml/m"].replicas}
    assert (replica_name("m", "a", 0) not in names) is renamed


def test_an_untolerated_taint_is_a_reason() -> None:
    a = cluster(
        "byo-us-east",
        [pool("p", "h100", 4)],
        taints=[taint("modelplane.ai/maintenance", "on", "NoSchedule")],
    )
    b = cluster(
        "c",
        [pool("p", "h100", 4)],
        taints=[taint("x", "", "NoExecute"), taint("y", "1", "NoSchedule")],
    )
    result = schedule(fleet([H100], [a, b], [deployment("m", 1, tensor=8)]), None)
    assert result.report["ml/m"].reasons == [
        "byo-us-east: taint modelplane.ai/maintenance=on:NoSchedule not tolerated",
        "c: taints x:NoExecute, y=1:NoSchedule not tolerated",
    ]


# -- clusterSelector and ModelCache ---------------------------------------------------------

LABELLED = [
    ("a", {"cloud": "aws", "region": "us-west"}),
    ("b", {"cloud": "gcp", "region": "us-east"}),
    ("c", {"cloud": "aws", "region": "eu-west", "gpu": "h100"}),
    ("d", {}),
]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, ["a", "b", "c", "d"]),
        ({"matchLabels": {"cloud": "aws"}}, ["a", "c"]),
        ({"matchLabels": {"cloud": "aws", "region": "us-west"}}, ["a"]),
        (
            {
                "matchExpressions": [
                    {"key": "region", "operator": "In", "values": ["us-west", "us-east"]}
                ]
            },
            ["a", "b"],
        ),
        (
            {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["us-west"]}]},
            ["b", "c", "d"],
        ),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, ["c"]),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, ["a", "b", "d"]),
        (
            {
                "matchLabels": {"cloud": "aws"},
                "matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}],
            },
            ["a"],
        ),
    ],
)
def test_cluster_selector(selector: dict[str, Any], expected: list[str]) -> None:
    clusters = [cluster(n, [pool("p", "h100", 4)], labels=lab) for n, lab in LABELLED]
    result = schedule(
        fleet([H100], clusters, [deployment("m", 4, tensor=8, selector=selector)]), None
    )
    assert sorted({c for c, _ in where(result, "ml/m")}) == expected


@pytest.mark.parametrize(
    ("cache_selector", "dep_selector", "expected", "reasons"),
    [
        (None, None, ["a", "b"], []),
        (
            {"matchLabels": {"cloud": "aws"}},
            None,
            ["a"],
            ["b: not covered by ModelCache ml/weights"],
        ),
        (
            {"matchLabels": {"cloud": "aws"}},
            {"matchLabels": {"cloud": "gcp"}},
            [],
            ["b: not covered by ModelCache ml/weights"],
        ),
    ],
)
def test_model_cache_coverage(
    cache_selector: dict[str, Any] | None,
    dep_selector: dict[str, Any] | None,
    expected: list[str],
    reasons: list[str],
) -> None:
    clusters = [
        cluster("a", [pool("p", "h100", 1)], labels={"cloud": "aws"}),
        cluster("b", [pool("p", "h100", 1)], labels={"cloud": "gcp"}),
    ]
    dep = deployment("m", 2, tensor=8, cache="weights", selector=dep_selector)
    cache = model_cache("weights", selector=cache_selector)
    result = schedule(fleet([H100], clusters, [dep], [cache]), None)
    assert sorted({c for c, _ in where(result, "ml/m")}) == expected
    assert [r for r in result.report["ml/m"].reasons if "ModelCache" in r] == reasons


def test_a_cache_that_stops_covering_a_cluster_drops_its_replicas() -> None:
    clusters = [
        cluster("a", [pool("p", "h100", 1)], labels={"cloud": "aws"}),
        cluster("b", [pool("p", "h100", 1)], labels={"cloud": "gcp"}),
    ]
    dep = deployment("m", 1, tensor=8, cache="weights")
    previous = lock({"ml/m": [(replica_name("m", "a", 0), "a", 0, {"unified": "p"})]})
    cache = model_cache("weights", selector={"matchLabels": {"cloud": "gcp"}})
    result = schedule(fleet([H100], clusters, [dep], [cache]), previous)
    assert where(result, "ml/m") == [("b", 0)]


# -- priority -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("priorities", "winner"),
    [((0, 0), "aaa"), ((0, 5), "zzz"), ((5, 0), "aaa"), ((-1, 0), "zzz")],
)
def test_priority_wins_scarce_capacity(priorities: tuple[int, int], winner: str) -> None:
    deps = [
        deployment("aaa", 1, tensor=8, priority=priorities[0]),
        deployment("zzz", 1, tensor=8, priority=priorities[1]),
    ]
    result = schedule(fleet([H100], gpu_clusters(("a", 1)), deps), None)
    assert {k for k, r in result.report.items() if r.replicas} == {f"ml/{winner}"}


def test_priority_order_packs_larger_pods_first_within_a_pool() -> None:
    """The lower-priority deployment still fits next to the higher one."""
    deps = [deployment("hi", 2, tensor=2, priority=3), deployment("lo", 1, tensor=4)]
    result = schedule(fleet([H100], gpu_clusters(("a", 1)), deps), None)
    assert (len(where(result, "ml/hi")), len(where(result, "ml/lo"))) == (2, 1)


# -- reasons --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("clusters", "dep", "reasons"),
    [
        ([], deployment("m", 1, tensor=8), ["the fleet has no InferenceCluster"]),
        (
            [cluster("a", [pool("p", "h100", 1)], labels={"x": "1"})],
            deployment("m", 1, tensor=8, selector={"matchLabels": {"x": "2"}}),
            ["no InferenceCluster matches clusterSelector"],
        ),
        (
            [cluster("gke-us-central", [pool("p", "h100", 1)])],
            deployment(
                "m",
                1,
                prefill=role(8),
                decode=role(8, devices=[request("gpu", None, MEM.format("141Gi"))]),
            ),
            ["gke-us-central: no pool matches decode device gpu"],
        ),
        (
            [cluster("eks-us-west", [pool("gpu-h200", "h100", 1)])],
            deployment("m", 1, prefill=role(1), decode=role(8, pipeline=2)),
            ["eks-us-west: pool gpu-h200 has 1 free node, decode needs 2"],
        ),
        (
            [
                cluster("b", [pool("p", "h100", 0)]),
                cluster("a", [pool("p", "h100", 0), pool("q", "h100", 1)]),
            ],
            deployment("m", 1, tensor=8, pipeline=2),
            [
                "a: pool q has 1 free node, unified needs 2",
                "b: pool p has 0 free nodes, unified needs 2",
            ],
        ),
        (
            [cluster("a", [pool("p", "h100", 1)])],
            deployment(
                "m",
                1,
                tensor=4,
                devices=[request("gpu", None, MEM.format("40Gi")), request("nic", 1, EFA)],
            ),
            ["a: no pool matches unified device nic"],
        ),
    ],
)
def test_reasons(clusters: list[Any], dep: Any, reasons: list[str]) -> None:
    result = schedule(fleet([H100], clusters, [dep]), None)
    assert result.report[dep.key].reasons == reasons
    assert result.report[dep.key].unplaced == dep.spec.replicas


def test_no_reasons_when_nothing_is_short() -> None:
    result = schedule(fleet([H100], gpu_clusters(("a", 1)), [deployment("m", 1, tensor=8)]), None)
    assert result.report["ml/m"].reasons == []
    assert not result.short


# -- packing: first-fit decreasing, no room taken from larger pending pods -----------------

L1 = inference_class("l1", 1)


@pytest.mark.parametrize(
    ("priorities", "expected"),
    [
        # same priority: m1 (8 GPUs) first, then m0 fills c0: 10 GPUs, the optimum
        ((0, 0), {"ml/m0": [("c0", 0), ("c0", 1)], "ml/m1": [("c1", 0)]}),
        # m0 first by priority: c0 twice (c1 would cost m1 8 GPUs of room for 1), then c1
        ((1, 0), {"ml/m0": [("c0", 0), ("c0", 1), ("c1", 0)], "ml/m1": []}),
        # m1 first by priority and by size
        ((0, 1), {"ml/m0": [("c0", 0), ("c0", 1)], "ml/m1": [("c1", 0)]}),
    ],
)
def test_larger_replicas_first_and_no_stranded_big_nodes(
    priorities: tuple[int, int], expected: dict[str, list[tuple[str, int]]]
) -> None:
    f = fleet(
        [L1, H100],
        [cluster("c0", [pool("p", "l1", 2)]), cluster("c1", [pool("p", "h100", 1)])],
        [
            deployment("m0", 3, tensor=1, priority=priorities[0]),
            deployment("m1", 5, tensor=8, priority=priorities[1]),
        ],
    )
    result = schedule(f, None)
    assert {k: where(result, k) for k in expected} == expected
    assert schedule(f, result.lock) == result


def test_spread_yields_only_to_room_a_larger_pending_pod_could_use() -> None:
    """small (1 GPU) spreads over a and b unless that breaks a node big (8 GPUs) needs."""
    clusters = gpu_clusters(("a", 2), ("b", 1))
    spread = schedule(fleet([H100], clusters, [deployment("small", 2, tensor=1, priority=1)]), None)
    assert where(spread, "ml/small") == [("a", 0), ("b", 0)]
    both = schedule(
        fleet(
            [H100],
            clusters,
            [deployment("small", 2, tensor=1, priority=1), deployment("big", 2, tensor=8)],
        ),
        None,
    )
    assert where(both, "ml/small") == [("a", 0), ("a", 1)]
    assert where(both, "ml/big") == [("a", 0), ("b", 0)]
    assert (
        schedule(
            fleet(
                [H100],
                clusters,
                [deployment("small", 2, tensor=1, priority=1), deployment("big", 2, tensor=8)],
            ),
            both.lock,
        )
        == both
    )


@pytest.mark.parametrize(
    ("nodes", "replicas", "placed"), [(3, 6, 6), (3, 7, 6), (2, 4, 4), (1, 1, 0)]
)
def test_multi_node_workers_use_the_roomiest_nodes_when_tightest_fails(
    nodes: int, replicas: int, placed: int
) -> None:
    """Six 2x2-GPU workers (pods on distinct nodes) fill three 8-GPU nodes exactly."""
    f = fleet([H100], gpu_clusters(("a", nodes)), [deployment("m", replicas, tensor=2, pipeline=2)])
    result = schedule(f, None)
    assert len(where(result, "ml/m")) == placed
    assert schedule(f, result.lock) == result


# -- packing: the worst cases of bench/packing_quality.py, reduced -------------------------

G2 = inference_class("g2", 2)
G4 = inference_class("g4", 4)
G8 = inference_class("g8", 8)


@pytest.mark.parametrize(
    ("clusters", "deployments", "expected"),
    [
        # fewer choices: big (anywhere) goes to b, where small (zone a only) cannot go
        (
            [
                cluster("a", [pool("p", "g8", 1)], labels={"zone": "a"}),
                cluster("b", [pool("p", "g8", 1)], labels={"zone": "b"}),
            ],
            [
                deployment("big", 1, tensor=8),
                deployment("small", 2, tensor=4, selector={"matchLabels": {"zone": "a"}}),
            ],
            {"ml/big": [("b", 0)], "ml/small": [("a", 0), ("a", 1)]},
        ),
        # as many clusters each, but m0 can go to b and m1 cannot: m0 leaves a to m1
        (
            [
                cluster("a", [pool("p", "g8", 1)], labels={"zone": "a"}),
                cluster("b", [pool("p", "g4", 1)], labels={"zone": "b"}),
                cluster("c", [pool("p", "g2", 1)], labels={"zone": "a"}),
            ],
            [
                deployment("m0", 1, tensor=4),
                deployment("m1", 5, tensor=2, selector={"matchLabels": {"zone": "a"}}),
            ],
            {"ml/m0": [("b", 0)], "ml/m1": [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("c", 0)]},
        ),
        # a 2-GPU pod on a's 2-GPU nodes would cost m1's 1+1-GPU workers both nodes (4
        # devices of room for 2): m0 goes to b's single node, which such workers cannot use
        (
            [cluster("a", [pool("p", "g2", 2)]), cluster("b", [pool("p", "g8", 1)])],
            [deployment("m0", 1, tensor=2), deployment("m1", 2, tensor=1, pipeline=2)],
            {"ml/m0": [("b", 0)], "ml/m1": [("a", 0), ("a", 1)]},
        ),
        # worst fit seats two 2-GPU pods and a 1+1-GPU worker on two 4-GPU nodes
        (
            [cluster("a", [pool("p", "g4", 2)])],
            [deployment("x", 2, tensor=2), deployment("y", 1, tensor=1, pipeline=2)],
            {"ml/x": [("a", 0), ("a", 1)], "ml/y": [("a", 0)]},
        ),
        # second thoughts: m3 takes a node although it costs m4's 1+1-GPU workers all
        # their room; without it m4 places 8 replicas (16 GPUs instead of 8)
        (
            [cluster("a", [pool("p", "g8", 2)])],
            [deployment("m3", 1, tensor=8), deployment("m4", 8, tensor=1, pipeline=2)],
            {"ml/m3": [], "ml/m4": [("a", i) for i in range(8)]},
        ),
        # second thoughts: m0's third 2+2-GPU worker takes zone a's room from m1 (zone a
        # only); without it m1 places both 4-GPU replicas (16 GPUs instead of 12)
        (
            [
                cluster("a", [pool("p", "g4", 2)], labels={"zone": "a"}),
                cluster("b", [pool("p", "g4", 2)], labels={"zone": "b"}),
            ],
            [
                deployment("m0", 3, tensor=2, pipeline=2),
                deployment("m1", 2, tensor=4, selector={"matchLabels": {"zone": "a"}}),
            ],
            {"ml/m0": [("b", 0), ("b", 1)], "ml/m1": [("a", 0), ("a", 1)]},
        ),
        # second thoughts never trade a higher priority's GPUs for a lower one's
        (
            [cluster("a", [pool("p", "g8", 2)])],
            [
                deployment("m3", 1, tensor=8, priority=1),
                deployment("m4", 8, tensor=1, pipeline=2),
            ],
            {"ml/m3": [("a", 0)], "ml/m4": []},
        ),
    ],
    ids=[
        "fewer-choices",
        "other-choices",
        "gang-room",
        "worst-fit-packing",
        "second-thoughts-gang",
        "second-thoughts-selector",
        "second-thoughts-priority",
    ],
)
def test_packing_worst_cases(
    clusters: list[Any], deployments: list[Any], expected: dict[str, list[tuple[str, int]]]
) -> None:
    f = fleet([G2, G4, G8], clusters, deployments)
    result = schedule(f, None)
    assert {k: where(result, k) for k in expected} == expected
    assert schedule(f, result.lock) == result


def test_second_thoughts_beside_capacity_held_by_a_removed_deployment() -> None:
    """A removed deployment's held node stays held while second thoughts take m3 out."""
    first = schedule(
        fleet([G8], [cluster("a", [pool("p", "g8", 3)])], [deployment("old", 1, tensor=8)])
    )
    f = fleet(
        [G8],
        [cluster("a", [pool("p", "g8", 3)])],
        [deployment("m3", 1, tensor=8), deployment("m4", 8, tensor=1, pipeline=2)],
    )
    result = schedule(f, first.lock)
    assert list(result.lock.removed) == ["ml/old"]
    assert where(result, "ml/m3") == []
    assert where(result, "ml/m4") == [("a", i) for i in range(8)]
    assert schedule(f, result.lock) == result
