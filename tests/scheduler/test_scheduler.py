"""Scheduler basics: replica names, the result's shape, spread then pack, retain."""

from __future__ import annotations

import pytest

from modelplane.api.names import replica_name
from modelplane.api.placement_lock import PlacementLock
from modelplane.scheduler import schedule
from tests.factories import (
    cluster,
    deployment,
    fleet,
    gpu_device,
    inference_class,
    lock,
    pool,
    request,
    role,
)
from tests.scheduler.helpers import H100, MEM, gpu_clusters, pools_of, where

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
