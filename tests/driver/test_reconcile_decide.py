"""A reconcile round's decision (`modelplane.driver.decide`): a pure function of the
observation and the remembered state, tested without the engine or any cluster."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.placement_lock import PlacementLock
from modelplane.autoscale import AutoscaleState
from modelplane.driver.decide import RESYNC_ROUNDS, Applied, RoundInputs, decide
from modelplane.health.observation import (
    ClusterObservation,
    Observation,
    PoolObservation,
    ReplicaObservation,
)
from modelplane.scheduler import schedule
from modelplane.stacks import GATEWAY_STACK
from tests.factories import cluster, deployment, fleet, inference_class, pool
from tests.spec_docs import gateway

NOW = 10_000.0
GRACE = 300.0


def _spec(replicas: int = 3, nodes: int = 1) -> FleetSpec:
    return dataclasses.replace(
        fleet(
            [inference_class("h100", 8)],
            [cluster(n, [pool("gpu", "h100", nodes)]) for n in ("a", "b", "c")],
            [deployment("m", replicas, tensor=8)],
        ),
        gateway=InferenceGateway.model_validate(gateway("a")),
    )


SPEC = _spec()
LOCK = schedule(SPEC, None).lock
ON = {r.name: r.cluster for r in LOCK.replicas_of("ml/m")}
DEPLOY = "deploy-ml-m"


def _cluster(name: str, *, up: bool = True) -> ClusterObservation:
    if not up:
        return ClusterObservation(name, reachable=False, error="cannot reach https://x")
    ready = {r: ReplicaObservation(1, 1) for r, c in ON.items() if c == name}
    return ClusterObservation(
        name,
        reachable=True,
        pools={"gpu": PoolObservation(2, 2, 16)},
        gateway_address="10.0.0.1",
        replicas=ready,
    )


def _seen(*down: str) -> Observation:
    return Observation(NOW, {n: _cluster(n, up=n not in down) for n in ("a", "b", "c")})


def _inputs(**overrides: Any) -> RoundInputs:
    base = RoundInputs(
        spec=SPEC,
        previous=LOCK,
        observation=_seen(),
        unhealthy_since={},
        autoscale=AutoscaleState(),
        were_unroutable=frozenset(),
        applied=Applied(),
        round_number=1,
        grace=GRACE,
    )
    return dataclasses.replace(base, **overrides)


def test_the_layout_of_the_tests() -> None:
    assert sorted(ON.values()) == ["a", "b", "c"], "one replica per cluster"


def test_a_first_round_runs_every_stack() -> None:
    plan = decide(_inputs())
    assert not plan.skip_up and not plan.routes_first and not plan.forget
    assert plan.only is None  # nothing applied yet: every stack, by fingerprint
    assert plan.moved == plan.added == [] and plan.unroutable == plan.unready == {}
    assert plan.applied.digest and plan.applied.specs


def test_nothing_changed_since_the_last_successful_up_skips_it() -> None:
    applied = decide(_inputs()).applied
    again = decide(_inputs(applied=applied, round_number=2))
    assert again.skip_up and again.only is None


def test_every_resync_rounds_up_runs_anyway() -> None:
    applied = decide(_inputs()).applied
    plan = decide(_inputs(applied=applied, round_number=RESYNC_ROUNDS))
    assert not plan.skip_up and plan.only is None  # the specs are not trusted: every stack


@dataclass
class Case:
    name: str
    down: tuple[str, ...]
    since: dict[str, float] = field(default_factory=dict)
    were: frozenset[str] = frozenset()
    applied: bool = True  # a successful up happened before
    routes_first: bool = False
    moved_from: str | None = None
    forget: list[str] = field(default_factory=list)
    only: list[str] | None = None
    unroutable: tuple[str, ...] = ()


CASES = [
    # b just went down: its endpoints leave the routes first; its replica stays (grace).
    Case("down-within-grace", ("b",), routes_first=True, only=[GATEWAY_STACK], unroutable=("b",)),
    # the same, already out of the routes: nothing new to drop first; the gateway runs (its
    # inputs changed) with the rest
    Case(
        "down-already-unroutable",
        ("b",),
        were=frozenset({"b"}),
        only=[GATEWAY_STACK],
        unroutable=("b",),
    ),
    # a process's first round (a new leader's after a takeover): the lock routes b's
    # replica, so its endpoints leave the routes first all the same
    Case("down-first-round", ("b",), applied=False, routes_first=True, unroutable=("b",)),
    # past the grace period: the replica leaves b; b is unreachable, so its objects are
    # forgotten from the deployment stack's state (recorded as orphans)
    Case(
        "down-past-grace",
        ("b",),
        since={"b": NOW - GRACE - 1},
        routes_first=True,
        moved_from="b",
        forget=[DEPLOY],
        only=[DEPLOY, GATEWAY_STACK],
    ),
    # the gateway's own cluster is never unroutable, but its replica still moves
    Case(
        "gateway-cluster-past-grace",
        ("a",),
        since={"a": NOW - GRACE - 1},
        routes_first=True,
        moved_from="a",
        forget=[DEPLOY],
        only=[DEPLOY, GATEWAY_STACK],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_cluster_going_down(case: Case) -> None:
    applied = decide(_inputs()).applied if case.applied else Applied()
    plan = decide(
        _inputs(
            observation=_seen(*case.down),
            unhealthy_since=case.since,
            were_unroutable=case.were,
            applied=applied,
            round_number=2,
        )
    )
    assert not plan.skip_up
    assert tuple(plan.unroutable) == case.unroutable
    assert plan.routes_first is case.routes_first
    assert plan.forget == case.forget
    assert plan.dead == (sorted(case.down) if case.forget else [])
    if case.moved_from is None:
        assert plan.moved == []
    else:
        (moved,) = plan.moved
        assert ON[moved] == case.moved_from
    expected_only = case.only if case.applied else None
    assert plan.only == expected_only


def test_a_first_deployment_with_a_cluster_down_has_no_routes_first_run() -> None:
    """Nothing is routed yet (no replica is placed on a cluster that is down)."""
    plan = decide(_inputs(previous=PlacementLock(), observation=_seen("b")))
    assert plan.added and plan.unroutable == {} and not plan.routes_first
    assert plan.only is None


def test_after_a_successful_routes_first_run_only_changed_deployments_run() -> None:
    applied = decide(_inputs()).applied
    plan = decide(_inputs(observation=_seen("b"), applied=applied, round_number=2))
    assert plan.routes_first and plan.only == [GATEWAY_STACK]
    assert plan.rest_after_routes(routes_ok=True) == []  # the gateway already ran
    assert plan.rest_after_routes(routes_ok=False) == [GATEWAY_STACK]
    moved = decide(
        _inputs(
            observation=_seen("b"),
            unhealthy_since={"b": NOW - GRACE - 1},
            applied=applied,
            round_number=2,
        )
    )
    assert moved.rest_after_routes(routes_ok=True) == [DEPLOY, GATEWAY_STACK]


def test_a_new_replica_waits_outside_the_routes_until_ready() -> None:
    plan = decide(_inputs(spec=_spec(replicas=4, nodes=2)))
    (added,) = plan.added
    assert plan.unready == {added: "no pods yet"}
    assert plan.only is None and plan.changed_deployments == [DEPLOY]


def test_the_decision_is_pure() -> None:
    inputs = _inputs(observation=_seen("b"), unhealthy_since={"b": NOW - GRACE - 1})
    first, second = decide(inputs), decide(inputs)
    assert first.plan.lock == second.plan.lock and first.applied == second.applied
    assert first.forget == second.forget and first.moved == second.moved
    assert inputs.previous == LOCK and isinstance(inputs.previous, PlacementLock)


TWO_DOORS = dataclasses.replace(
    SPEC,
    gateway=InferenceGateway.model_validate(
        {**gateway("a"), "spec": {**gateway("a")["spec"], "additionalFrontDoors": [
            {"inferenceClusterRef": "b"}
        ]}}
    ),
)  # fmt: skip

# (id, clusters down, the front doors' stacks run, dead front doors, unroutable)
DOORS = [
    ("both front doors live: nothing to run", (), [], [], ()),
    ("the first front door dead", ("a",), ["gateway-b"], ["a"], ("a",)),
    ("the second front door dead", ("b",), ["gateway"], ["b"], ("b",)),
    # no live front door: they all run (and fail), as one front door always did
    ("every front door dead", ("a", "b"), ["gateway", "gateway-b"], [], ("a", "b")),
]


@pytest.mark.parametrize(
    ("down", "gateways", "dead", "unroutable"), [c[1:] for c in DOORS], ids=[c[0] for c in DOORS]
)
def test_a_dead_front_door_is_a_dead_cluster(
    down: tuple[str, ...], gateways: list[str], dead: list[str], unroutable: tuple[str, ...]
) -> None:
    """With several front doors, one whose cluster is unreachable gets no stack run (routes
    first, and the rest), and its cluster's replicas leave the other front doors' routes."""
    base = _inputs(spec=TWO_DOORS)
    applied = decide(base).applied
    plan = decide(
        dataclasses.replace(base, observation=_seen(*down), applied=applied, round_number=2)
    )
    assert plan.skip_up is (not down)
    assert plan.gateways == gateways
    assert plan.dead_front_doors == dead
    assert tuple(plan.unroutable) == unroutable
    if down:
        assert plan.routes_first
        assert (
            plan.only is not None and [s for s in plan.only if s.startswith("gateway")] == gateways
        )
