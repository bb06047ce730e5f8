"""Scheduler packing: first-fit decreasing, room for larger pending pods, the worst cases."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.scheduler import schedule
from tests.factories import (
    cluster,
    deployment,
    fleet,
    inference_class,
    pool,
)
from tests.scheduler.helpers import H100, gpu_clusters, where

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
