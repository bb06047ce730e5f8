"""Health-aware scheduling and the readiness view (scheduling.md "Health-aware scheduling"):
the pure rules over a hand-built observation."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from modelplane.api.model_service import ModelService
from modelplane.api.placement_lock import PlacementLock
from modelplane.health.observation import (
    CacheObservation,
    ClusterObservation,
    Observation,
    PoolObservation,
    ReplicaObservation,
    RoutesObservation,
)
from modelplane.health.readiness import readiness
from modelplane.health.rules import (
    UNHEALTHY_KEY,
    cluster_health,
    effective_fleet,
    observed_schedule,
    remember,
)
from modelplane.observe.cluster import _job_state
from modelplane.scheduler import schedule
from tests.factories import cluster, deployment, fleet, inference_class, lock, model_cache, pool

NOW = 10_000.0
GRACE = 300.0


def healthy(
    name: str,
    *,
    ready: dict[str, int] | None = None,
    gw: str | None = "10.0.0.1",
    replicas: dict[str, ReplicaObservation] | None = None,
) -> ClusterObservation:
    ready = ready if ready is not None else {"gpu": 2}
    return ClusterObservation(
        name,
        reachable=True,
        pools={p: PoolObservation(max(n, 2), n, 8 * n) for p, n in ready.items()},
        gateway_address=gw,
        replicas=replicas or {},
    )


def down(name: str) -> ClusterObservation:
    return ClusterObservation(name, reachable=False, error="cannot reach https://x: refused")


def three_clusters(nodes: int = 2, max_nodes: int | None = None) -> Any:
    return fleet(
        [inference_class("h100", 8)],
        [cluster(n, [pool("gpu", "h100", nodes, max_nodes)]) for n in ("a", "b", "c")],
        [deployment("m", 3, tensor=8)],
    )


def obs(*clusters: ClusterObservation) -> Observation:
    return Observation(NOW, {c.name: c for c in clusters})


# -- cluster health -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seen", "code", "problem"),
    [
        (None, None, None),
        (ClusterObservation("a", observed=False, error="renderTo"), None, None),
        (down("a"), "unreachable", "API unreachable (cannot reach https://x: refused)"),
        (healthy("a", ready={"gpu": 0}), "not-ready", "not Ready (0 of 2 nodes Ready)"),
        (
            ClusterObservation("a", reachable=True, gateway_address="x"),
            "not-ready",
            "not Ready (no nodes in its node pools)",
        ),
        (
            healthy("a", gw=None),
            "no-gateway-address",
            "no gateway address (inference-gateway has none)",
        ),
        (
            ClusterObservation(
                "a", reachable=True, pools={"gpu": PoolObservation(2, 2, 16)}, gateway_found=False
            ),
            None,
            None,
        ),
        (healthy("a", ready={"gpu": 1}), None, None),
    ],
    ids=[
        "no-observation",
        "not-observed",
        "unreachable",
        "nodes-not-ready",
        "no-nodes",
        "no-gateway",
        "gateway-not-created-yet",
        "partly-ready-is-healthy",
    ],
)
def test_cluster_health(
    seen: ClusterObservation | None, code: str | None, problem: str | None
) -> None:
    spec = three_clusters().clusters["a"]
    h = cluster_health(spec, seen)
    assert (h.code, h.problem) == (code, problem)


def test_no_gateway_expected_when_the_platform_has_none() -> None:
    """servingStack.install false and no platform gateway: no address is expected."""
    spec = three_clusters().clusters["a"]
    spec = spec.model_copy(
        update={
            "spec": spec.spec.model_copy(
                update={
                    "serving_stack": spec.spec.serving_stack.model_copy(update={"install": False})
                }
            )
        }
    )
    assert cluster_health(spec, healthy("a", gw=None)).healthy


@pytest.mark.parametrize(
    ("previous", "unhealthy", "expected"),
    [
        ({}, {"a"}, {"a": NOW}),
        ({"a": NOW - 50}, {"a"}, {"a": NOW - 50}),
        ({"a": NOW - 50}, set(), {}),
        ({"a": NOW - 50, "b": NOW - 5}, {"b", "c"}, {"b": NOW - 5, "c": NOW}),
    ],
)
def test_remember_since(
    previous: dict[str, float], unhealthy: set[str], expected: dict[str, float]
) -> None:
    f = three_clusters()
    observation = obs(*(down(n) if n in unhealthy else healthy(n) for n in f.clusters))
    health = {n: cluster_health(c, observation.cluster(n)) for n, c in f.clusters.items()}
    assert remember(previous, health, NOW) == expected


# -- scheduling -----------------------------------------------------------------------------


def placed(result: Any, key: str = "ml/m") -> list[str]:
    return [r.cluster for r in result.report[key].replicas]


def test_new_replicas_avoid_unhealthy_clusters_with_the_reason() -> None:
    f = three_clusters(nodes=1)
    observation = obs(
        healthy("a", ready={"gpu": 1}), down("b"), healthy("c", ready={"gpu": 1}, gw=None)
    )
    result, view = observed_schedule(f, None, observation, {}, NOW, GRACE)
    assert placed(result) == ["a"]
    assert result.report["ml/m"].reasons == [
        "a: pool gpu has 0 free nodes, unified needs 1",
        "b: API unreachable (cannot reach https://x: refused): no new replicas",
        "c: no gateway address (inference-gateway has none): no new replicas",
    ]
    assert view.evicting == []


@pytest.mark.parametrize(
    ("unhealthy_for", "kept_on_b"),
    [(0.0, True), (GRACE - 1, True), (GRACE, False), (GRACE + 100, False)],
)
def test_pinned_replica_kept_for_the_grace_period_then_replaced(
    unhealthy_for: float, kept_on_b: bool
) -> None:
    f = three_clusters()
    previous = schedule(f).lock
    assert placed(schedule(f)) == ["a", "b", "c"]
    observation = obs(healthy("a"), down("b"), healthy("c"))
    result, view = observed_schedule(
        f, previous, observation, {"b": NOW - unhealthy_for}, NOW, GRACE
    )
    clusters = placed(result)
    assert len(clusters) == 3
    assert ("b" in clusters) is kept_on_b
    assert view.evicting == ([] if kept_on_b else ["b"])
    if not kept_on_b:  # re-placed on a healthy cluster (spread: a has room, fewest, by name)
        assert sorted(clusters) == ["a", "a", "c"]
    # the kept replicas never move
    kept = {(r.cluster, r.index) for r in previous.deployments["ml/m"].replicas if r.cluster != "b"}
    assert kept <= {(r.cluster, r.index) for r in result.lock.deployments["ml/m"].replicas}


def test_recovery_does_not_move_replicas_back() -> None:
    f = three_clusters()
    first = schedule(f).lock
    moved, _ = observed_schedule(
        f, first, obs(healthy("a"), down("b"), healthy("c")), {"b": NOW - GRACE}, NOW, GRACE
    )
    back, view = observed_schedule(
        f,
        moved.lock,
        obs(healthy("a"), healthy("b"), healthy("c")),
        {"b": NOW - GRACE},
        NOW + 30,
        GRACE,
    )
    assert back.lock == moved.lock
    assert view.since == {}


def test_observed_pool_capacity_caps_placement_with_the_reason() -> None:
    f = three_clusters(nodes=2)
    f.deployments["ml/m"] = deployment("m", 5, tensor=8)
    observation = obs(healthy("a", ready={"gpu": 1}), healthy("b"), healthy("c", ready={"gpu": 0}))
    result, view = observed_schedule(f, None, observation, {}, NOW, GRACE)
    assert sorted(placed(result)) == ["a", "b", "b"]
    assert view.capped == {("a", "gpu"): (1, 2)}
    assert result.report["ml/m"].reasons == [
        "a: pool gpu has 0 free nodes, unified needs 1 (1 of 2 nodes Ready)",
        "b: pool gpu has 0 free nodes, unified needs 1",
        "c: not Ready (0 of 2 nodes Ready): no new replicas",
    ]


def test_autoscaled_pools_are_not_capped() -> None:
    f = three_clusters(nodes=1, max_nodes=4)
    view = effective_fleet(
        f, obs(healthy("a", ready={"gpu": 1}), healthy("b"), healthy("c")), {}, NOW
    )
    assert view.capped == {}
    assert view.fleet.clusters["a"].spec.node_pools[0].capacity_nodes == 4


def test_effective_fleet_taints_and_leaves_the_specs_alone() -> None:
    f = three_clusters()
    view = effective_fleet(
        f, obs(healthy("a"), down("b"), healthy("c")), {"b": NOW - GRACE}, NOW, GRACE
    )
    taints = [t.describe() for t in view.fleet.clusters["b"].spec.taints]
    assert taints == [f"{UNHEALTHY_KEY}=unreachable:NoExecute"]
    assert f.clusters["b"].spec.taints == []


def test_a_toleration_of_every_taint_tolerates_health_taints_too() -> None:
    f = three_clusters()
    f.deployments["ml/m"] = deployment("m", 3, tensor=8, tolerations=[{"operator": "Exists"}])
    result, _ = observed_schedule(f, None, obs(healthy("a"), down("b"), healthy("c")), {}, NOW)
    assert placed(result) == ["a", "b", "c"]


# -- readiness ------------------------------------------------------------------------------


def rep(
    pods: int, ready: int, *reasons: str, created: float = NOW - 60, running: int | None = None
) -> ReplicaObservation:
    return ReplicaObservation(
        pods,
        ready,
        reasons=reasons,
        created=created,
        running_pods=pods if running is None else running,
    )


def one_replica_each() -> PlacementLock:
    """ml/m placed once on each of the clusters a, b and c."""
    return lock({"ml/m": [(f"m-{c}0", c, 0, {"unified": "gpu"}) for c in ("a", "b", "c")]})


def test_readiness_counts_ready_replicas_and_says_why_the_others_are_not() -> None:
    f = three_clusters()
    f.deployments["ml/m"] = deployment("m", 4, tensor=8)
    placement = one_replica_each()
    observation = obs(
        healthy("a", replicas={"m-a0": rep(1, 1, created=NOW - 120)}),
        down("b"),
        healthy("c", replicas={"m-c0": rep(1, 0, "m-c0-x: ContainersNotReady")}),
    )
    view = readiness(f, placement, observation, shortfall={"ml/m": ["a: pool gpu is full"]})
    d = view.deployment("ml/m")
    assert (d.ready, d.desired, d.placed, d.clusters, d.age) == (1, 4, 3, ["a", "b", "c"], 120)
    assert [(r.name, r.phase, r.reason) for r in d.replicas] == [
        ("m-a0", "Ready", ""),
        ("m-b0", "Unknown", "cluster API unreachable (cannot reach https://x: refused)"),
        ("m-c0", "NotReady", "m-c0-x: ContainersNotReady"),
    ]
    assert [(c.type, c.status, c.reason) for c in d.conditions] == [
        ("ReplicasScheduled", "False", "Shortfall"),
        ("ReplicasReady", "False", "ClusterUnreachable"),
    ]
    assert d.conditions[0].message == "3 of 4 placed: a: pool gpu is full"
    assert d.conditions[1].message.startswith("1 of 4 ready: m-b0 (b): Unknown")
    assert [(c.nodes, c.devices) for c in view.clusters] == [("2/2", 16), ("", None), ("2/2", 16)]
    assert [(c.name, c.health) for c in view.clusters] == [
        ("a", "Healthy"),
        ("b", "Unreachable"),
        ("c", "Healthy"),
    ]
    data = view.as_json()
    assert data["deployments"]["ml/m"]["ready"] == "1/4"
    assert not view.all_ready


@pytest.mark.parametrize(
    ("seen", "phase"),
    [
        (None, "Pending"),
        (rep(0, 0), "Pending"),
        (rep(1, 0, "p: Unschedulable", running=0), "Pending"),
        (rep(1, 0, "p: ContainersNotReady"), "NotReady"),
        (rep(1, 1), "Ready"),
    ],
)
def test_replica_phase_goes_from_pending_to_ready(
    seen: ReplicaObservation | None, phase: str
) -> None:
    f = three_clusters()
    f.deployments["ml/m"] = deployment("m", 1, tensor=8)
    placement = lock({"ml/m": [("m-a0", "a", 0, {"unified": "gpu"})]})
    observation = obs(healthy("a", replicas={"m-a0": seen} if seen else {}))
    d = readiness(f, placement, observation).deployment("ml/m")
    assert d.replicas[0].phase == phase
    assert d.ready == (1 if phase == "Ready" else 0)


def _chat(f: Any) -> Any:
    """``f`` with the ModelService ml/chat over deployment m."""
    f.services["ml/chat"] = ModelService.model_validate(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": "chat", "namespace": "ml"},
            "spec": {
                "endpoints": [{"selector": {"matchLabels": {"modelplane.ai/deployment": "m"}}}]
            },
        }
    )
    return f


def test_service_counts_routable_endpoints() -> None:
    f = _chat(three_clusters())
    placement = one_replica_each()
    observation = obs(
        healthy("a", replicas={"m-a0": rep(1, 1)}),
        down("b"),
        healthy("c", replicas={"m-c0": rep(1, 1)}, gw=None),
    )
    s = readiness(f, placement, observation, service_urls={"ml/chat": "http://gw/ml/chat"}).service(
        "ml/chat"
    )
    assert (s.url, s.endpoints, s.routable) == ("http://gw/ml/chat", 3, 1)
    assert s.unroutable == [
        "m-b0: Unknown, cluster API unreachable (cannot reach https://x: refused)",
        "m-c0: cluster c no gateway address (inference-gateway has none)",
    ]


def test_observation_json_round_trips() -> None:
    observation = obs(healthy("a", replicas={"m-a0": rep(2, 1, "p: x")}), down("b"))
    assert Observation.from_json(observation.as_json()) == observation
    routed = dataclasses.replace(
        observation, routes=RoutesObservation(services={"ml/chat": ("m-a0", "ep")})
    )
    assert Observation.from_json(routed.as_json()) == routed


# -- model caches ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "state", "reason"),
    [
        ({}, "Hydrating", "0 failed attempt(s)"),
        ({"failed": 2}, "Hydrating", "2 failed attempt(s)"),
        ({"succeeded": 1}, "Hydrated", ""),
        (
            {
                "failed": 6,
                "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                ],
            },
            "Failed",
            "BackoffLimitExceeded",
        ),
    ],
)
def test_hydration_job_state(status: dict[str, Any], state: str, reason: str) -> None:
    assert _job_state({"status": status}) == CacheObservation(state, reason)


def test_model_cache_resolved_where_the_replicas_run() -> None:
    f = three_clusters()
    f.caches["ml/weights"] = model_cache("weights")
    f.deployments["ml/m"] = deployment("m", 2, tensor=8, cache="weights")
    placement = lock(
        {"ml/m": [("m-a0", "a", 0, {"unified": "gpu"}), ("m-b0", "b", 0, {"unified": "gpu"})]}
    )
    hydrated = {"ml/weights": CacheObservation("Hydrated")}
    observation = obs(
        dataclasses.replace(healthy("a"), caches=hydrated),
        dataclasses.replace(
            healthy("b"),
            caches={"ml/weights": CacheObservation("Hydrating", "1 failed attempt(s)")},
        ),
        down("c"),
    )
    view = readiness(f, placement, observation)
    cache = view.caches[0]
    assert (cache.key, cache.hydrated) == ("ml/weights", 1)
    assert cache.clusters["c"][0] == "Unknown"
    (cond,) = [c for c in view.deployment("ml/m").conditions if c.type == "ModelCacheResolved"]
    assert (cond.status, cond.reason) == ("False", "NotHydrated")
    assert cond.message == "ml/weights: b: Hydrating (1 failed attempt(s))"
    assert view.as_json()["caches"]["ml/weights"]["hydrated"] == "1/3"
    observation = obs(
        dataclasses.replace(healthy("a"), caches=hydrated),
        dataclasses.replace(healthy("b"), caches=hydrated),
        down("c"),
    )
    (cond,) = [
        c
        for c in readiness(f, placement, observation).deployment("ml/m").conditions
        if c.type == "ModelCacheResolved"
    ]
    assert (cond.status, cond.message) == ("True", "ml/weights hydrated on a, b")


# -- routes ---------------------------------------------------------------------------------


def _with_gateway(f: Any, cluster_ref: str) -> Any:
    from modelplane.api.inference_gateway import InferenceGateway

    gateway = InferenceGateway.model_validate(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "InferenceGateway",
            "metadata": {"name": "default"},
            "spec": {"cluster": {"inferenceClusterRef": cluster_ref}},
        }
    )
    return dataclasses.replace(f, gateway=gateway)


PLACED_ON_ALL = lock(
    {
        "ml/m": [
            ("m-a0", "a", 0, {"unified": "gpu"}),
            ("m-b0", "b", 0, {"unified": "gpu"}),
            ("m-c0", "c", 0, {"unified": "gpu"}),
        ]
    }
)


@pytest.mark.parametrize(
    ("seen", "placement", "unroutable"),
    [
        ((healthy("a"), healthy("b"), healthy("c")), PLACED_ON_ALL, {}),
        (
            (healthy("a"), down("b"), healthy("c")),
            PLACED_ON_ALL,
            {"b": "API unreachable (cannot reach https://x: refused)"},
        ),
        (
            (healthy("a"), healthy("b"), healthy("c", gw=None)),
            PLACED_ON_ALL,
            {"c": "no gateway address (inference-gateway has none)"},
        ),
        # not Ready nodes: the pods may still serve; the routes keep them
        ((healthy("a"), healthy("b", ready={"gpu": 0}), healthy("c")), PLACED_ON_ALL, {}),
        # the gateway's own cluster is never left out (nothing routes when it is down)
        ((down("a"), healthy("b"), healthy("c")), PLACED_ON_ALL, {}),
        # a cluster without replicas changes no route
        (
            (healthy("a"), down("b"), healthy("c")),
            lock({"ml/m": [("m-a0", "a", 0, {"unified": "gpu"})]}),
            {},
        ),
    ],
    ids=["healthy", "unreachable", "no-gateway", "not-ready", "gateway-cluster", "no-replicas"],
)
def test_unroutable_clusters(
    seen: tuple[ClusterObservation, ...], placement: Any, unroutable: dict[str, str]
) -> None:
    from modelplane.health.rules import unroutable_clusters

    f = _with_gateway(three_clusters(), "a")
    view = effective_fleet(f, obs(*seen), {}, NOW, GRACE)
    assert unroutable_clusters(f, placement, view.health) == unroutable


@pytest.mark.parametrize(
    ("routes", "routable", "unroutable", "routes_error"),
    [
        (
            RoutesObservation(services={"ml/chat": ("m-a0", "m-c0", "m-old")}),
            1,
            [
                "m-b0: not in the route (yet)",
                "m-c0: cluster c no gateway address (inference-gateway has none)",
                "m-old: in the route, but no longer placed",
            ],
            None,
        ),
        (
            RoutesObservation(services={"ml/chat": ("m-a0", "m-b0", "m-c0")}),
            2,
            ["m-c0: cluster c no gateway address (inference-gateway has none)"],
            None,
        ),
        (
            RoutesObservation(services={}),
            0,
            [
                "m-a0: not in the route (yet)",
                "m-b0: not in the route (yet)",
                "m-c0: not in the route (yet)",
            ],
            None,
        ),
        (
            RoutesObservation(observed=False, error="gateway cluster a: refused"),
            2,
            ["m-c0: cluster c no gateway address (inference-gateway has none)"],
            "gateway routes not observed: gateway cluster a: refused",
        ),
    ],
    ids=["live-route-decides", "all-in-route", "no-route", "routes-not-observed"],
)
def test_service_routability_comes_from_the_live_route(
    routes: RoutesObservation, routable: int, unroutable: list[str], routes_error: str | None
) -> None:
    f = _chat(three_clusters())
    observation = Observation(
        NOW,
        {
            c.name: c
            for c in (
                healthy("a", replicas={"m-a0": rep(1, 1)}),
                healthy("b", replicas={"m-b0": rep(1, 1)}),
                healthy("c", replicas={"m-c0": rep(1, 1)}, gw=None),
            )
        },
        routes,
    )
    s = readiness(f, PLACED_ON_ALL, observation).service("ml/chat")
    assert (s.endpoints, s.routable, s.unroutable, s.routes_error) == (
        3,
        routable,
        unroutable,
        routes_error,
    )
    assert s.as_json()["routesObserved"] == (routes_error is None)
