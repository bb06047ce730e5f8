"""`modelplane reconcile`: observe -> plan -> `up` what changed -> report, round after round.

One round (`Reconciler.round`): re-read the specs and the lock, observe every cluster
(`modelplane.observe`), schedule on the effective fleet (`modelplane.health.rules`), remember
since when clusters are unhealthy (`.modelplane/health.json`), then `Fleet.up` with that
plan -- which writes the lock only when it changes and runs only the stacks whose inputs
changed. When neither the specs nor the placement changed since the last successful round,
`up` is not called at all (every `resync` rounds it is, to catch other input changes).

Beside a CI `up`: a stack whose Pulumi lock is held by another update is reported as
locked and retried next round; nothing else is shared.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelplane.api.errors import FleetInvalid
from modelplane.autoscale import Decision, autoscale_fleet
from modelplane.driver.errors import DriverError
from modelplane.driver.fleet import Fleet
from modelplane.driver.observer import Observer
from modelplane.driver.plan import Plan
from modelplane.driver.results import Outcome, RunResult
from modelplane.health.observation import Observation
from modelplane.health.rules import DEFAULT_GRACE, UNREACHABLE, HealthView, observed_schedule
from modelplane.observe import (
    DEFAULT_TIMEOUT,
    observe_fleet,
    read_autoscale_state,
    read_since,
    write_autoscale_state,
    write_since,
)
from modelplane.stacks import deploy_stack

RESYNC_ROUNDS = 10


@dataclass
class Round:
    """What one round saw and did."""

    number: int
    started: float
    observation: Observation | None = None
    plan: Plan | None = None
    view: HealthView | None = None
    run: RunResult | None = None
    skipped_up: bool = False
    error: str | None = None
    moved: list[str] = field(default_factory=list)  # replicas dropped from their cluster
    forgotten: dict[str, int] = field(default_factory=dict)  # stack -> objects dropped from state
    added: list[str] = field(default_factory=list)
    autoscale: dict[str, Decision] = field(default_factory=dict)  # autoscaled deployments
    draining: list[str] = field(default_factory=list)  # replicas that started draining
    drained: dict[str, str] = field(default_factory=dict)  # drains that ended, and why
    duration: float = 0.0

    @property
    def locked(self) -> list[str]:
        return self.run.by_outcome(Outcome.LOCKED) if self.run else []

    @property
    def ok(self) -> bool:
        return self.error is None and (self.run is None or self.run.ok)

    def as_json(self) -> dict[str, Any]:
        view = self.view
        return {
            "round": self.number,
            "started": self.started,
            "duration": round(self.duration, 2),
            "ok": self.ok,
            "error": self.error,
            "unhealthy": {
                name: h.problem for name, h in (view.health.items() if view else []) if h.problem
            },
            "evicting": list(view.evicting) if view else [],
            "removed": self.moved,
            "added": self.added,
            "forgotten": self.forgotten,
            "lockWritten": bool(self.run and self.run.lock_written),
            "up": None if self.run is None else self.run.as_json(),
            "upSkipped": self.skipped_up,
            "locked": self.locked,
            "autoscale": {k: d.as_json() for k, d in self.autoscale.items()},
            "draining": self.draining,
            "drained": self.drained,
        }


def _digest(fleet: Fleet, plan: Plan) -> str:
    """What the stacks are derived from, as far as reconcile can tell: specs + placement."""
    spec = fleet.spec
    parts: dict[str, Any] = {"lock": plan.lock.model_dump(mode="json")}
    for kind in ("classes", "clusters", "deployments", "services", "endpoints", "caches"):
        parts[kind] = {k: v.model_dump(mode="json") for k, v in getattr(spec, kind).items()}
    parts["gateway"] = spec.gateway.model_dump(mode="json") if spec.gateway else None
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class Reconciler:
    def __init__(
        self,
        fleet_dir: Path,
        *,
        lock: Path | None = None,
        backend: str | None = None,
        secrets_provider: str | None = None,
        env: Mapping[str, str] | None = None,
        grace: float = DEFAULT_GRACE,
        timeout: float = DEFAULT_TIMEOUT,
        parallel: int = 4,
        observer_factory: Callable[[], Observer] = Observer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.fleet_dir = fleet_dir
        self.lock = lock
        self.backend = backend
        self.secrets_provider = secrets_provider
        self.env = env
        self.grace = grace
        self.timeout = timeout
        self.parallel = parallel
        self.observer_factory = observer_factory
        self.clock = clock
        self.rounds = 0
        self._applied: str | None = None  # digest of the last successful `up`

    def round(self) -> Round:
        """One observe -> plan -> up pass. Expected problems are in `Round.error`."""
        self.rounds += 1
        current = Round(self.rounds, self.clock())
        started = time.monotonic()
        try:
            self._round(current)
        except FleetInvalid as exc:
            current.error = f"the fleet is invalid ({len(exc.errors)} error(s)): " + "; ".join(
                str(e) for e in exc.errors[:5]
            )
        except DriverError as exc:
            current.error = str(exc)
        current.duration = time.monotonic() - started
        return current

    def _round(self, current: Round) -> None:
        f = Fleet.load(
            self.fleet_dir,
            lock=self.lock,
            backend=self.backend,
            secrets_provider=self.secrets_provider,
            env=self.env,
        )
        observation = observe_fleet(
            f.spec,
            f.path,
            lock=f.previous,
            env=f.env,
            timeout=self.timeout,
            now=self.clock(),
            metrics=True,
        )
        current.observation = observation
        since = read_since(f.state_dir)
        # Autoscaling (scheduling.md, "Autoscaling"): new counts and finished drains go into
        # the lock the scheduler starts from.
        scaled = autoscale_fleet(
            f.spec, f.previous, observation, read_autoscale_state(f.state_dir), observation.at
        )
        current.autoscale = scaled.decisions
        current.drained = scaled.drained
        state = scaled.state
        write_autoscale_state(f.state_dir, state)
        result, view = observed_schedule(
            f.spec, scaled.lock, observation, since, observation.at, self.grace
        )
        current.view = view
        write_since(f.state_dir, view.since)
        plan = Plan(f.previous, result)
        current.plan = plan
        before = {r.name: r.cluster for d in f.previous.deployments.values() for r in d.replicas}
        after = {r.name: r.cluster for d in plan.lock.deployments.values() for r in d.replicas}
        current.moved = sorted(set(before) - set(after))
        current.added = sorted(set(after) - set(before))
        current.draining = sorted(plan.lock.draining() - f.previous.draining())

        def routes_updated() -> None:
            # The routes without the draining replicas are applied: their drain clock starts.
            for name in sorted(plan.lock.draining()):
                state.routes_gone.setdefault(name, self.clock())
            write_autoscale_state(f.state_dir, state)

        digest = _digest(f, plan)
        resync = self.rounds % RESYNC_ROUNDS == 0
        if digest == self._applied and not plan.changed and not resync:
            current.skipped_up = True
            routes_updated()
            return
        # Replicas leaving a cluster whose API is gone cannot be deleted there: drop their
        # objects from the deployment stacks' state instead of failing the stack.
        gone = {
            before[name]
            for name in current.moved
            if view.health.get(before[name]) and view.health[before[name]].code == UNREACHABLE
        }
        if gone:
            moved_from = {
                key
                for key, dep in f.previous.deployments.items()
                for r in dep.replicas
                if r.name in current.moved and r.cluster in gone
            }
            current.forgotten = forget_cluster_objects(
                f, [deploy_stack(k) for k in sorted(moved_from)], gone
            )
        run = f.up(plan, parallel=self.parallel, observer=self.observer_factory())
        current.run = run
        if run.ok:
            self._applied = digest
            routes_updated()


def forget_cluster_objects(fleet: Fleet, stacks: list[str], clusters: set[str]) -> dict[str, int]:
    """Drop from each stack's state the Kubernetes objects managed through the provider of
    an unreachable cluster (`<cluster>-k8s`): they cannot be deleted there, and the
    providers pin `deleteUnreachable: false`. The objects stay on the cluster if it returns.
    Returns how many resources each stack forgot."""
    from pulumi.automation.errors import StackNotFoundError

    suffixes = tuple(f"::{c}-k8s" for c in sorted(clusters))
    out: dict[str, int] = {}
    with fleet._session(Observer()) as session:
        for name in stacks:
            try:
                stack = session.stack(name, create=False)
            except StackNotFoundError:
                continue
            exported = stack.export_stack()
            resources = list((exported.deployment or {}).get("resources") or [])
            dead = {
                f"{r['urn']}::{r.get('id', '')}"
                for r in resources
                if str(r.get("type", "")).startswith("pulumi:providers:kubernetes")
                and str(r.get("urn", "")).endswith(suffixes)
            }
            gone = {r["urn"] for r in resources if r.get("provider") in dead}
            if not gone:
                continue
            keep = []
            for r in resources:
                if r["urn"] in gone:
                    continue
                if r.get("dependencies"):
                    r["dependencies"] = [d for d in r["dependencies"] if d not in gone]
                if r.get("propertyDependencies"):
                    r["propertyDependencies"] = {
                        k: [d for d in v if d not in gone]
                        for k, v in r["propertyDependencies"].items()
                    }
                if r.get("deletedWith") in gone:
                    r.pop("deletedWith")
                keep.append(r)
            exported.deployment["resources"] = keep
            stack.import_stack(exported)
            out[name] = len(gone)
    return out
