"""Scheduler constraints: taints, clusterSelector, ModelCache, priority, reasons."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.api.inference_cluster import Taint
from modelplane.api.model_deployment import Toleration
from modelplane.api.names import replica_name
from modelplane.scheduler import schedule
from modelplane.scheduler.taints import tolerates
from tests.factories import (
    cluster,
    deployment,
    fleet,
    lock,
    model_cache,
    pool,
    request,
    role,
    taint,
)
from tests.scheduler.helpers import EFA, H100, MEM, gpu_clusters, where

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
