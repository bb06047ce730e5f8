"""One reconcile round's decision: a pure function of what was observed and remembered.

``decide(RoundInputs) -> RoundPlan``: autoscaling, scheduling on the effective fleet (the
health rules), which replicas move, which clusters and replicas leave the routes, whether
the gateway goes first, which stacks' objects are forgotten and which stacks ``up`` runs.
No I/O and no engine: :mod:`modelplane.driver.reconcile` reads the inputs and carries the
plan out (writes the state, runs the stacks).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import PlacementLock
from modelplane.autoscale import AutoscaleState, Decision, autoscale_fleet
from modelplane.driver.drain import finish, retire, without
from modelplane.driver.plan import Plan
from modelplane.health.observation import Observation
from modelplane.health.rules import (
    UNREACHABLE,
    HealthView,
    observed_schedule,
    unready_replicas,
    unroutable_clusters,
)
from modelplane.health.spill import (
    DEFAULT_COOLDOWN,
    DEFAULT_SPILL_AFTER,
    Cooldown,
    cooldowns,
    stuck,
)
from modelplane.scheduler.cordon import cordoned_fleet
from modelplane.stacks import deploy_stack, gateway_stacks, stack_units

RESYNC_ROUNDS = 10


@dataclass(frozen=True)
class Applied:
    """What the reconciler remembers of its last successful ``up``."""

    digest: str | None = None  # specs + placement + route exclusions
    specs: str | None = None  # the specs part alone


@dataclass(frozen=True)
class RoundInputs:
    """Everything a round decides from."""

    spec: FleetSpec
    previous: PlacementLock  # the committed lock
    observation: Observation
    unhealthy_since: Mapping[str, float]  # .modelplane/health.json
    autoscale: AutoscaleState  # .modelplane/autoscale.json
    were_unroutable: frozenset[str]  # .modelplane/routing.json, before this round
    applied: Applied
    round_number: int
    grace: float
    cordons: frozenset[str] = frozenset()  # .modelplane/cordons.json (driver.drain)
    were_unready: frozenset[str] = frozenset()  # .modelplane/routing.json, before this round
    held: Mapping[str, int] = field(default_factory=dict)  # model -> requests the router holds
    capacity: Mapping[str, Cooldown] = field(default_factory=dict)  # .modelplane/capacity.json
    spill_after: float = DEFAULT_SPILL_AFTER  # a replica Unschedulable this long is re-placed
    cooldown: float = DEFAULT_COOLDOWN  # and its pool cools down this long


@dataclass
class RoundPlan:
    """What a round does, decided before anything runs."""

    plan: Plan
    view: HealthView
    autoscale: dict[str, Decision]
    drained: dict[str, str]
    autoscale_state: AutoscaleState  # to remember (routes_gone is stamped after `up`)
    unhealthy_since: dict[str, float]  # to remember
    moved: list[str]  # replicas dropped from their cluster
    added: list[str]
    draining: list[str]  # replicas that started draining
    unroutable: dict[str, str]  # cluster -> why out of routes
    unready: dict[str, str]  # replica -> why out of routes
    applied: Applied  # what a successful `up` of this plan applies
    retired: list[str] = field(default_factory=list)  # draining off cordoned clusters
    skip_up: bool = False  # nothing changed since the last successful up
    routes_first: bool = False  # the gateway stack alone first
    forget: list[str] = field(default_factory=list)  # stacks whose dead objects are dropped
    dead: list[str] = field(default_factory=list)  # unreachable clusters replicas leave
    only: list[str] | None = None  # the stacks `up` runs (None: every stack)
    gateways: list[str] = field(default_factory=list)  # the live front doors' stacks
    dead_front_doors: list[str] = field(default_factory=list)  # their clusters unreachable
    changed_deployments: list[str] = field(default_factory=list)
    woken: dict[str, str] = field(default_factory=dict)  # deployment -> the model that woke it
    spilled: dict[str, str] = field(default_factory=dict)  # stuck replica -> where, why
    capacity: dict[str, Cooldown] = field(default_factory=dict)  # to remember

    def rest_after_routes(self, routes_ok: bool) -> list[str] | None:
        """The stacks the main ``up`` runs once the routes-first run ended (``[]``: none,
        the gateway already ran with these inputs)."""
        if routes_ok and self.only is not None and not self.changed_deployments:
            return []
        return self.only


def spec_digest(spec: FleetSpec) -> str:
    """What the stacks are derived from besides the placement: the specs."""
    parts: dict[str, Any] = {}
    for kind in ("classes", "clusters", "deployments", "services", "endpoints", "caches"):
        parts[kind] = {k: v.model_dump(mode="json") for k, v in getattr(spec, kind).items()}
    parts["gateway"] = spec.gateway.model_dump(mode="json") if spec.gateway else None
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def inputs_digest(
    specs: str,
    lock: PlacementLock,
    unroutable: Mapping[str, str],
    unready: Mapping[str, str] | None = None,
) -> str:
    """What the stacks are derived from, as far as reconcile can tell: specs + placement +
    the clusters and replicas left out of routes."""
    parts = {
        "specs": specs,
        "lock": lock.model_dump(mode="json"),
        "unroutable": sorted(unroutable),
        "unready": sorted(unready or {}),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def placement_changed(spec: FleetSpec, previous: PlacementLock, lock: PlacementLock) -> list[str]:
    """The deployment stacks whose replicas differ between the two locks."""
    out = []
    for key in sorted(set(previous.deployments) | set(lock.deployments)):
        if key not in spec.deployments:
            continue
        before = previous.deployments.get(key)
        after = lock.deployments.get(key)
        if (before and before.model_dump()) != (after and after.model_dump()):
            out.append(deploy_stack(key))
    return out


def decide(inputs: RoundInputs) -> RoundPlan:
    """The round's plan (pure)."""
    spec, previous, observation = inputs.spec, inputs.previous, inputs.observation
    # Autoscaling (scheduling.md, "Autoscaling"): new counts and finished drains go into
    # the lock the scheduler starts from.
    scaled = autoscale_fleet(
        spec, previous, observation, inputs.autoscale, observation.at, inputs.held
    )
    # Cordons (driver.drain): finished drains leave the lock, replicas whose replacements
    # serve start draining, and the scheduler places replacements off cordoned clusters.
    closed = cordoned_fleet(spec, inputs.cordons)
    ended = finish(closed, scaled.lock, observation, inputs.autoscale.routes_gone, observation.at)
    scaled.state.routes_gone.update(ended.routes_gone)
    start, retired = retire(
        closed, ended.lock, observation, inputs.were_unready, inputs.were_unroutable
    )
    # Spill (health.spill): replicas stuck Unschedulable leave the lock, their pools cool down.
    found = stuck(start, observation, observation.at, inputs.spill_after)
    full = cooldowns(inputs.capacity, found, observation, observation.at, inputs.cooldown)
    start = without(start, found)
    result, view = observed_schedule(
        closed, start, observation, inputs.unhealthy_since, observation.at, inputs.grace, full
    )
    plan = Plan(previous, result)
    before = {r.name: r.cluster for d in previous.deployments.values() for r in d.replicas}
    after = {r.name: r.cluster for d in plan.lock.deployments.values() for r in d.replicas}
    moved = sorted(set(before) - set(after))
    unroutable = unroutable_clusters(spec, plan.lock, view.health)
    specs = spec_digest(spec)
    out = RoundPlan(
        plan=plan,
        view=view,
        autoscale=scaled.decisions,
        drained={**scaled.drained, **ended.drained},
        autoscale_state=scaled.state,
        unhealthy_since=dict(view.since),
        moved=moved,
        added=sorted(set(after) - set(before)),
        draining=sorted(plan.lock.draining() - previous.draining()),
        retired=retired,
        unroutable=unroutable,
        # A replica joins the routes once its pods are seen Ready (a new one: next round).
        unready=unready_replicas(plan.lock, observation, unroutable),
        applied=Applied(specs=specs),
        woken=scaled.woken,
        spilled={
            name: f"{s.cluster}/{','.join(s.pools)}: unschedulable since {s.since:.0f}"
            + (f" ({s.reason})" if s.reason else "")
            for name, s in found.items()
        },
        capacity=full,
    )
    digest = inputs_digest(specs, plan.lock, out.unroutable, out.unready)
    out.applied = Applied(digest, specs)
    resync = inputs.round_number % RESYNC_ROUNDS == 0
    if digest == inputs.applied.digest and not plan.changed and not resync:
        out.skip_up = True
        return out
    out.changed_deployments = placement_changed(spec, previous, plan.lock)
    # A front door whose cluster is unreachable is dead like the cluster: its stack cannot
    # run; the other front doors' stacks carry the routes (api.md, "More than one front door").
    doors = gateway_stacks(spec)
    dead_doors = {
        door for door, health in view.health.items() if health and health.code == UNREACHABLE
    }
    live = [name for name, door in doors if door not in dead_doors]
    # With every front door's cluster unreachable, they all still run (as one front door
    # always did): the stack fails and the round says so.
    out.gateways = live or [name for name, _ in doors]
    out.dead_front_doors = sorted(door for _, door in doors if door in dead_doors) if live else []
    has_gateway = bool(out.gateways)
    # 1. Routes first: dead endpoints leave the HTTPRoutes before anything else runs, when
    # a cluster became unroutable or replicas leave a cluster whose endpoints were routed.
    # Also in a process's first round (a new leader's, a restarted reconcile's): a cluster is
    # unroutable only while the lock keeps replicas there, i.e. while they are routed.
    were = inputs.were_unroutable
    drop_routes = bool(set(unroutable) - were) or any(before[n] not in were for n in moved)
    out.routes_first = has_gateway and drop_routes
    # 2. Replicas leaving a cluster whose API is gone cannot be deleted there: their objects
    # are forgotten from the deployment stacks' state (and recorded as orphans).
    gone = {
        before[n]
        for n in moved
        if view.health.get(before[n]) and view.health[before[n]].code == UNREACHABLE
    }
    if gone:
        out.dead = sorted(gone)
        out.forget = [
            deploy_stack(key)
            for key, dep in sorted(previous.deployments.items())
            if any(r.name in moved and r.cluster in gone for r in dep.replicas)
        ]
    # 3. The rest: only the changed deployment stacks (and the gateway) when the specs are
    # those of the last successful round; otherwise every stack, by fingerprint.
    if specs == inputs.applied.specs and not resync:
        out.only = out.changed_deployments + out.gateways
    elif out.dead_front_doors:
        skipped = {name for name, _ in doors} - set(out.gateways)
        out.only = [u.name for u in stack_units(spec, plan.lock) if u.name not in skipped]
    return out
