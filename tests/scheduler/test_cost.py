"""Cheapest first (scheduling.md, "Cheapest first"): `pricePerNodeHour` on classes and
`placementPolicy: Cheapest` on deployments; the plan's cost per hour.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from modelplane.api.inference_class import InferenceClass
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import PlacementLock
from modelplane.scheduler import schedule
from modelplane.scheduler.cost import pod_share
from modelplane.scheduler.evidence import explain_plan
from modelplane.scheduler.matching import Matcher
from tests.factories import (
    cluster,
    deployment,
    document,
    fleet,
    gpu_device,
    inference_class,
    nic_device,
    pool,
    role,
)
from tests.scheduler.test_autoscale import with_count


def priced(cls: InferenceClass, price: float | None) -> InferenceClass:
    return cls.model_copy(
        update={"spec": cls.spec.model_copy(update={"price_per_node_hour": price})}
    )


def cheapest(dep: ModelDeployment) -> ModelDeployment:
    return dep.model_copy(
        update={"spec": dep.spec.model_copy(update={"placement_policy": "Cheapest"})}
    )


# A dear 8-GPU class (H100-like) and a cheap 8-GPU class (L4-like), same devices.
DEAR = priced(inference_class("dear", 8), 98.32)
CHEAP = priced(inference_class("cheap", 8), 7.0)
AUTO = {
    "minReplicas": 1,
    "maxReplicas": 8,
    "metrics": [{"type": "queueDepth", "target": 4}],
    "scaleDown": {"stabilizationWindow": "0s", "maxStep": 8},
}


def where(result: Any, key: str = "ml/m") -> list[tuple[str, str]]:
    return sorted((r.cluster, r.pools["unified"]) for r in result.report[key].serving)


def two_clusters(cheap_nodes: int = 1, dear_nodes: int = 2) -> list[Any]:
    """`a` has only the dear class; `z` (sorting last) has the cheap one."""
    return [
        cluster("a", [pool("p", "dear", dear_nodes)]),
        cluster("z", [pool("p", "cheap", cheap_nodes)]),
    ]


@pytest.mark.parametrize(
    ("policy", "replicas", "expected"),
    [
        # Spread (default): a, z, then a again (fewest replicas, then the name).
        ("Spread", 3, [("a", "p"), ("a", "p"), ("z", "p")]),
        # Cheapest: z until its one node is full (two 4-GPU replicas), then a.
        ("Cheapest", 3, [("a", "p"), ("z", "p"), ("z", "p")]),
        ("Cheapest", 2, [("z", "p"), ("z", "p")]),
    ],
)
def test_cheapest_fills_the_cheaper_class_until_it_saturates(
    policy: str, replicas: int, expected: list[tuple[str, str]]
) -> None:
    dep = deployment("m", replicas, tensor=4)
    if policy == "Cheapest":
        dep = cheapest(dep)
    result = schedule(fleet([DEAR, CHEAP], two_clusters(), [dep]))
    assert where(result) == expected
    assert result.report["ml/m"].unplaced == 0


def test_within_a_cluster_the_cheaper_pool_beats_the_best_fit() -> None:
    # Best fit alone picks the 4-GPU pool `tight` (no room left); cheapest picks `roomy`.
    small = priced(inference_class("small", 4), 50.0)
    roomy = priced(inference_class("roomy", 8), 20.0)
    c = cluster("a", [pool("tight", "small", 1), pool("roomy", "roomy", 1)])
    spread = schedule(fleet([small, roomy], [c], [deployment("m", 1, tensor=4)]))
    cheap = schedule(fleet([small, roomy], [c], [cheapest(deployment("m", 1, tensor=4))]))
    assert where(spread) == [("a", "tight")]
    assert where(cheap) == [("a", "roomy")]
    # Half a 20-per-hour node.
    assert cheap.report["ml/m"].cost_per_hour == 10.0
    assert spread.report["ml/m"].cost_per_hour == 50.0


def test_a_pool_without_a_price_comes_after_every_priced_one() -> None:
    unpriced = inference_class("unpriced", 8)
    c = [cluster("a", [pool("p", "unpriced", 1)]), cluster("b", [pool("p", "dear", 1)])]
    one = schedule(fleet([unpriced, DEAR], c, [cheapest(deployment("m", 1, tensor=8))]))
    assert where(one) == [("b", "p")]  # not a, although a sorts first
    assert one.report["ml/m"].cost_per_hour == 98.32
    two = schedule(fleet([unpriced, DEAR], c, [cheapest(deployment("m", 2, tensor=8))]), one.lock)
    assert where(two) == [("a", "p"), ("b", "p")]  # b is full: a
    # A replica on a pool without a price: the deployment's cost is unknown.
    assert two.report["ml/m"].cost_per_hour is None
    assert "costPerHour" not in two.report["ml/m"].as_dict()


def test_equal_prices_still_spread_over_clusters() -> None:
    c = [cluster(n, [pool("p", "cheap", 2)]) for n in ("a", "b", "c")]
    result = schedule(fleet([CHEAP], c, [cheapest(deployment("m", 3, tensor=8))]))
    assert where(result) == [("a", "p"), ("b", "p"), ("c", "p")]


def test_placed_replicas_never_move_to_a_cheaper_pool() -> None:
    # Placed by Spread on a and z; turning Cheapest on later moves nothing, and adds on z.
    first = schedule(fleet([DEAR, CHEAP], two_clusters(), [deployment("m", 2, tensor=4)]))
    assert where(first) == [("a", "p"), ("z", "p")]
    later = schedule(
        fleet([DEAR, CHEAP], two_clusters(), [cheapest(deployment("m", 3, tensor=4))]),
        first.lock,
    )
    kept = {r.name for r in first.report["ml/m"].replicas}
    assert kept <= {r.name for r in later.report["ml/m"].replicas}
    assert where(later) == [("a", "p"), ("z", "p"), ("z", "p")]
    # A re-plan of the written lock changes nothing.
    assert (
        schedule(
            fleet([DEAR, CHEAP], two_clusters(), [cheapest(deployment("m", 3, tensor=4))]),
            later.lock,
        ).lock
        == later.lock
    )


def test_taking_room_a_pending_deployment_needs_still_comes_before_price() -> None:
    # `m` (high priority, 1 GPU, Cheapest) on the cheap 8-GPU node would cost `big` (8 GPUs)
    # its only node: m goes to the dearer 4-GPU nodes of a (big does not fit there).
    dear4 = priced(inference_class("dear4", 4), 60.0)
    c = [cluster("a", [pool("p", "dear4", 1)]), cluster("z", [pool("p", "cheap", 1)])]
    m = cheapest(deployment("m", 1, tensor=1, priority=10))
    big = deployment("big", 1, tensor=8)
    result = schedule(fleet([dear4, CHEAP], c, [m, big]))
    assert where(result) == [("a", "p")]
    assert where(result, "ml/big") == [("z", "p")]
    assert result.report["ml/m"].cost_per_hour == 15.0


@pytest.mark.parametrize("optimize", [False, True])
def test_scale_out_goes_cheap_first_and_scale_in_drains_the_dearest(optimize: bool) -> None:
    f = fleet(
        [DEAR, CHEAP],
        two_clusters(cheap_nodes=1, dear_nodes=4),
        [cheapest(deployment("m", 1, tensor=2, autoscaling=AUTO))],
    )
    lock: PlacementLock | None = None
    seen: list[list[tuple[str, str]]] = []
    for count in (1, 4, 6):
        result = schedule(f, with_count(lock, "ml/m", count) if lock else None, optimize=optimize)
        lock = result.lock
        seen.append(where(result))
    # The cheap node holds four 2-GPU replicas; the fifth and sixth go to the dear pool.
    assert seen == [
        [("z", "p")],
        [("z", "p")] * 4,
        [("a", "p"), ("a", "p"), *[("z", "p")] * 4],
    ]
    assert lock is not None
    down = schedule(f, with_count(lock, "ml/m", 4), optimize=optimize)
    draining = [r for r in down.report["ml/m"].replicas if r.draining]
    assert sorted(r.cluster for r in draining) == ["a", "a"]  # the dear ones drain
    # 4 replicas x a quarter of a 7-per-hour node, plus the two draining ones on a.
    assert down.report["ml/m"].cost_per_hour == round(4 * 7.0 / 4 + 2 * 98.32 / 4, 2)
    # Taken back (scale out while they drain): those draining are back before new ones.
    back = schedule(f, with_count(down.lock, "ml/m", 5), optimize=optimize)
    assert sum(1 for r in back.report["ml/m"].replicas if r.draining) == 1


def test_the_optimizer_places_cheapest_deployments_on_cheaper_pools() -> None:
    c = [
        cluster("a", [pool("p", "dear", 2)]),
        cluster("b", [pool("p", "dear", 2)]),
        cluster("z", [pool("p", "cheap", 2)]),
    ]
    result = schedule(
        fleet(
            [DEAR, CHEAP], c, [cheapest(deployment("m", 3, tensor=8)), deployment("n", 1, tensor=8)]
        ),
        optimize=True,
    )
    assert result.optimize is not None and result.optimize.optimal
    assert sorted(r.cluster for r in result.report["ml/m"].serving).count("z") == 2
    assert result.report["ml/n"].unplaced == 0
    assert result.report["ml/m"].unplaced == 0


CPU = ("16", "64Gi")


@pytest.mark.parametrize(
    ("devices", "tensor", "nodeSelector", "resources", "share"),
    [
        # 1 of 8 GPUs, little CPU: an eighth.
        (None, 1, None, ("1", "4Gi"), 0.125),
        # CPU dominates: 12 of 16 cores.
        (None, 1, None, ("12", "4Gi"), 0.75),
        # Memory dominates: 48 of 64 GiB.
        (None, 2, None, ("1", "48Gi"), 0.75),
        # A consumed NIC: 8 of 16 NICs, 2 of 8 GPUs: half.
        (
            [gpu_device(8), nic_device(16, claim="DRA")],
            2,
            [{"name": "gpu", "count": 2}, {"name": "nic", "count": 8}],
            ("1", "4Gi"),
            0.5,
        ),
        # A Synthetic NIC is matched, not used: it costs nothing.
        (
            [gpu_device(8), nic_device(16)],
            2,
            [{"name": "gpu", "count": 2}, {"name": "nic", "count": 16}],
            ("1", "4Gi"),
            0.25,
        ),
    ],
)
def test_a_pods_share_of_its_node_is_its_largest_share_of_any_resource(
    devices: Any, tensor: int, nodeSelector: Any, resources: tuple[str, str], share: float
) -> None:
    cls = inference_class("k", 8, devices=devices, allocatable=CPU)
    spec = role(tensor, resources=resources)
    if nodeSelector is not None:
        spec["nodeSelector"] = {"devices": nodeSelector}
    dep = ModelDeployment.model_validate(
        document("ModelDeployment", {"name": "m", "namespace": "ml"}, {"replicas": 1, **spec})
    )
    matcher = Matcher({"k": cls})
    demand = matcher.fit("ml/m", "unified", dep.spec.roles["unified"], "k").demand
    assert demand is not None
    assert pod_share(matcher.shape("k"), demand) == pytest.approx(share)


@pytest.mark.parametrize(
    ("kind", "spec_update", "field"),
    [
        ("InferenceClass", {"pricePerNodeHour": -1}, "pricePerNodeHour"),
        ("InferenceClass", {"pricePerNodeHour": "cheap"}, "pricePerNodeHour"),
        ("ModelDeployment", {"placementPolicy": "Cheap"}, "placementPolicy"),
    ],
)
def test_bad_prices_and_policies_name_their_field(
    kind: str, spec_update: dict[str, Any], field: str
) -> None:
    base = (
        document("InferenceClass", {"name": "k"}, {"devices": [gpu_device(8)]})
        if kind == "InferenceClass"
        else document(
            "ModelDeployment", {"name": "m", "namespace": "ml"}, {"replicas": 1, **role(1)}
        )
    )
    base["spec"].update(spec_update)
    model = InferenceClass if kind == "InferenceClass" else ModelDeployment
    with pytest.raises(ValidationError) as err:
        model.model_validate(base)
    assert field in str(err.value)


def test_plan_json_shows_policy_and_cost_only_when_asked_for() -> None:
    plain = schedule(
        fleet(
            [inference_class("h", 8)],
            [cluster("a", [pool("p", "h", 1)])],
            [deployment("m", 1, tensor=8)],
        )
    )
    assert "costPerHour" not in plain.report["ml/m"].as_dict()
    assert "placementPolicy" not in plain.report["ml/m"].as_dict()
    cheap = schedule(fleet([DEAR, CHEAP], two_clusters(), [cheapest(deployment("m", 1, tensor=8))]))
    out = cheap.report["ml/m"].as_dict()
    assert out["placementPolicy"] == "Cheapest"
    assert out["costPerHour"] == 7.0
    evidence = explain_plan(
        fleet([DEAR, CHEAP], two_clusters(), [cheapest(deployment("m", 1, tensor=8))]),
        cheap,
        None,
        ["ml/m"],
    )
    assert [(r["why"], r["costPerHour"]) for r in evidence["ml/m"]["replicas"]] == [
        ("cheapest", 7.0)
    ]


def test_cheapest_plans_are_deterministic_whatever_the_file_order() -> None:
    clusters = [
        cluster(n, [pool("p", "cheap" if i % 2 else "dear", 2)]) for i, n in enumerate("abcdef")
    ]
    deps = [cheapest(deployment(f"m{i}", 3, tensor=2 ** (i % 3))) for i in range(5)]
    one = schedule(fleet([DEAR, CHEAP], clusters, deps))
    two = schedule(fleet([CHEAP, DEAR], list(reversed(clusters)), list(reversed(deps))))
    assert one.lock == two.lock
    # 30 GPUs asked, 48 cheap ones (b, d, f): every replica is on a cheap cluster.
    assert {r.cluster for d in one.report.values() for r in d.serving} == {"b", "d", "f"}
