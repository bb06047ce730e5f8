"""Fleet rollouts, executed: `up` and `reconcile` move replicas to a new revision step by step.

:func:`prepare` fixes, before any stack runs, which revision each replica of the lock renders:
new replicas (and replicas placed before rollouts existed) take the target revision at once,
replicas that must roll keep their recorded revision, rendered from that revision's pod
template (kept in the runtime state's ``rollout`` document and passed to the program). The
first `up` therefore changes nothing a serving replica runs.

:class:`Rollouts` then runs the steps of the pure planner (:func:`modelplane.rollout.plan_step`)
until every rolling deployment is done, halted or out of time: per step, the routes change
first (replicas Ready at the target back in, the next ones out: the gateway stack, with the
``routing`` document's ``unready`` entries), the replicas taken out drain (their in-flight
requests), the lock records their new revision and their deployment stacks run, and the next
round waits until their pods -- newer than the update -- are Ready. Progress is the lock (each
replica's revision) plus the ``rollout`` document, so an interrupted rollout resumes on the
next `up` or `reconcile`. The I/O (running stacks, observing clusters, the clock) comes in as
callables: the unit tests drive it against a simulated fleet.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from modelplane.api.fleet import FleetSpec
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import LockedDeployment, LockedReplica, PlacementLock
from modelplane.api.rollout import Rollout
from modelplane.driver.drain import mark_draining, without
from modelplane.driver.state import ROLLOUT_UNREADY, RolloutRecord, RuntimeState
from modelplane.health.observation import Observation
from modelplane.health.readiness import expected_pods
from modelplane.rollout import (
    ReplicaState,
    RolloutState,
    ServingHealth,
    Step,
    Verdict,
    analyse,
    at_revision,
    plan_step,
    revision,
    template,
    wave_of,
)
from modelplane.scheduler import schedule
from modelplane.scheduler.cordon import cordoned_fleet
from modelplane.stacks import deploy_stack

ALL_AT_ONCE = "AllAtOnce"
ROLLING = "Rolling"
STRATEGIES = {"rolling": ROLLING, "all-at-once": ALL_AT_ONCE}
DRAIN_SETTLE = 2.0
"""Seconds after the routes changed before a replica taken out counts as drained (the
gateway's own reload; requests already sent finish on the old pods, which stay up until the
update)."""
DEFAULT_DRAIN = 30.0
"""At most this long waiting for a replica's in-flight requests (engine metrics)."""
DEFAULT_READY_TIMEOUT = 900.0
"""A replica not Ready at the target this long after its update halts the rollout."""
POLL = 0.5
QUIET_WINDOWS = 3
"""With fewer requests than the analysis needs after this many windows, a step passes."""
ROLLOUT_REASON = ROLLOUT_UNREADY + "updating to revision "


def live(spec: FleetSpec, cluster: str) -> bool:
    """Whether replicas on ``cluster`` run somewhere modelplane can watch (renderTo clusters
    only write files: their replicas change at once)."""
    c = spec.clusters.get(cluster)
    if c is None:
        return False
    existing = c.spec.cluster.existing
    return existing is None or existing.secret_ref is not None


@dataclass
class Prepared:
    lock: PlacementLock
    records: dict[str, RolloutRecord]
    rolling: list[str]  # deployments with replicas to roll
    unknown: list[str] = field(default_factory=list)
    """Replicas whose revision's template the runtime state lost: they change at once."""


def target_of(spec: FleetSpec, dep: ModelDeployment, record: RolloutRecord | None) -> str:
    """The revision replicas go to: the spec's, or -- after the spec's revision failed its
    analysis and was rolled back -- the last good one, until the spec changes."""
    desired = revision(dep, spec.caches)
    if record is not None and record.failed == desired and record.target != desired:
        return record.target
    return desired


def prepare(
    spec: FleetSpec,
    lock: PlacementLock,
    records: Mapping[str, RolloutRecord],
    *,
    strategy: str | None = None,
    now: float = 0.0,
) -> Prepared:
    """The lock the stacks render first, and the rollouts to run after (pure)."""
    out: dict[str, RolloutRecord] = {}
    deployments: dict[str, LockedDeployment] = {}
    rolling: list[str] = []
    unknown: list[str] = []
    for key, locked in lock.deployments.items():
        dep = spec.deployments.get(key)
        if dep is None:
            deployments[key] = locked
            continue
        record = copy.deepcopy(records.get(key))  # the caller's records stay as they were
        desired = revision(dep, spec.caches)
        target = target_of(spec, dep, record)
        templates = dict(record.templates) if record is not None else {}
        templates[desired] = template(dep, spec.caches)
        how = strategy or dep.spec.rollout.strategy
        replicas = []
        for r in locked.replicas:
            rev = r.revision
            if rev is not None and rev != target and how != ALL_AT_ONCE and live(spec, r.cluster):
                if rev not in templates:
                    unknown.append(f"{r.name} ({key}, revision {rev})")
            if rev is None or (
                rev != target
                and (how == ALL_AT_ONCE or not live(spec, r.cluster) or rev not in templates)
            ):
                rev = target  # new, placed before rollouts, or nothing to roll it with
            replicas.append(r if rev == r.revision else r.model_copy(update={"revision": rev}))
        if all(r.revision == target for r in replicas) and any(r.surge for r in replicas):
            # no rollout left (e.g. finished all at once): surge replicas count as ordinary
            replicas = [r.model_copy(update={"surge": False}) for r in replicas]
        deployments[key] = locked.model_copy(update={"replicas": replicas})
        in_use = {r.revision for r in replicas} | {target}
        if record is not None and record.stable:
            in_use.add(record.stable)
        if record is not None:
            in_use |= set(record.previous.values())  # which roles an update changed
        kept = {k: v for k, v in templates.items() if k in in_use}
        outdated = any(r.revision != target for r in replicas)
        if outdated:
            rolling.append(key)
            if record is None or record.target not in (target, desired):
                old = {r.revision for r in replicas if r.revision != target}
                record = RolloutRecord(
                    target=target,
                    stable=next(iter(old)) if len(old) == 1 else None,
                    started=now,
                )
            elif record.phase in ("Complete",):
                record.phase, record.started = "Progressing", now
        if record is None:
            record = RolloutRecord(target=target, stable=target, phase="Complete")
        elif not outdated and record.phase == "Progressing":
            # finished another way (all at once, or every replica replaced)
            record.phase, record.stable, record.reason, record.updating = "Complete", target, "", {}
        record.templates = kept
        out[key] = record
    new_lock = lock.model_copy(update={"deployments": deployments})
    return Prepared(new_lock, out, rolling, unknown)


def release(state: RuntimeState, lock: PlacementLock, rolling: Iterable[str]) -> None:
    """Route again the replicas a rollout took out of the routes whose deployment has no
    rollout left (changed all at once, or its rollout interrupted and replaced)."""
    keep = {r.name for k in rolling for r in lock.replicas_of(k)}
    routing = state.routing()
    unready = {
        n: why
        for n, why in routing.unready.items()
        if n in keep or not why.startswith(ROLLOUT_UNREADY)
    }
    if unready != routing.unready:
        state.set_routing(routing.unroutable, unready)


def templates_env(lock: PlacementLock, records: Mapping[str, RolloutRecord]) -> str:
    """`MODELPLANE_REVISION_TEMPLATES` for the program: the templates of the revisions the
    lock's replicas run, per deployment ("" when none is needed)."""
    out: dict[str, dict[str, object]] = {}
    for key, locked in lock.deployments.items():
        record = records.get(key)
        if record is None:
            continue
        wanted = {r.revision for r in locked.replicas if r.revision in record.templates}
        if wanted:
            out[key] = {rev: record.templates[rev] for rev in sorted(wanted)}
    return json.dumps(out, sort_keys=True, separators=(",", ":")) if out else ""


def unfinished(spec: FleetSpec, lock: PlacementLock, records: Mapping[str, RolloutRecord]) -> bool:
    """Whether a rollout has steps left that an `up` would take (not paused or halted):
    `reconcile` runs `up` for it even when nothing else changed."""
    for key, record in records.items():
        if key not in spec.deployments or record.paused or record.phase == "Paused":
            continue
        target = target_of(spec, spec.deployments[key], record)
        if any(r.revision != target for r in lock.replicas_of(key)):
            return True
    return False


def progress(lock: PlacementLock, key: str, record: RolloutRecord | None) -> str:
    """`rollout: 1/3 replicas at revision abc123` (plan, preview, status)."""
    replicas = lock.replicas_of(key)
    target = record.target if record is not None else "?"
    at = sum(1 for r in replicas if r.revision == target)
    return f"rollout: {at}/{len(replicas)} replicas at revision {target}"


# --------------------------------------------------------------------------- execution


@dataclass
class Outcome:
    """How one deployment's rollout ended in this run."""

    key: str
    phase: str
    reason: str = ""
    steps: int = 0
    seconds: float = 0.0
    progress: str = ""

    def as_json(self) -> dict[str, object]:
        return {
            "deployment": self.key,
            "phase": self.phase,
            "reason": self.reason,
            "steps": self.steps,
            "seconds": round(self.seconds, 2),
            "progress": self.progress,
        }


@dataclass
class World:
    """The I/O a rollout needs. ``apply(lock, stacks)``: write the lock and run those stacks
    (the gateway's routes read the runtime state's exclusions), True when they succeeded;
    ``observe(lock, deployments)``: the clusters now (engine metrics of those deployments'
    replicas); ``message``: progress for people."""

    apply: Callable[[PlacementLock, list[str]], bool]
    observe: Callable[[PlacementLock, list[str]], Observation]
    message: Callable[[str], None] = lambda _m: None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    # The front doors' stacks (`gateway`, `gateway-<cluster>`; none: no routes to change).
    gateways: tuple[str, ...] = ()


@dataclass
class Rollouts:
    spec: FleetSpec
    state: RuntimeState
    world: World
    drain: float = DEFAULT_DRAIN
    settle: float = DRAIN_SETTLE
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    deadline: float | None = None  # seconds in all (None: until done or halted)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    _full: dict[str, PlacementLock] = field(default_factory=dict)  # no room at this lock
    _said: set[str] = field(default_factory=set)

    def run(self, lock: PlacementLock, keys: Iterable[str]) -> PlacementLock:
        """Step the rollouts of ``keys`` until each is done or halted; the final lock."""
        pending = [k for k in keys if k in self.spec.deployments]
        records = self.state.rollouts()
        started = self.world.clock()
        for key in pending:
            self.outcomes[key] = Outcome(key, "Progressing")
        lock = self._retired(lock, pending, records)  # an interrupted surge step's leftovers
        while pending:
            observation = self.world.observe(lock, pending)
            now = self.world.clock()
            routing = self.state.routing()
            unready = dict(routing.unready)
            routes_before = dict(unready)
            updates: dict[str, list[str]] = {}
            placed: dict[str, list[LockedReplica]] = {}
            retiring: dict[str, list[str]] = {}
            waiting = False
            for key in list(pending):
                record = records[key]
                step, new = self._step(
                    key, lock, record, observation, routing.unroutable, unready, now
                )
                outcome = self.outcomes[key]
                record.phase, record.reason = step.state.phase, step.state.reason
                record.stable, record.failed = step.state.stable, step.state.failed
                record.target = step.state.target
                record.updated = now
                for name in step.route:
                    unready.pop(name, None)
                    record.updating.pop(name, None)
                    record.previous.pop(name, None)
                if step.route:
                    record.watching = now
                if step.state.phase == "RolledBack" and outcome.phase != "RolledBack":
                    self.world.message(f"rollout {key}: {step.state.reason}")
                    outcome.phase = "RolledBack"
                # Surplus replicas leave by draining (the lock), the others by the routes.
                if step.retire:
                    retiring[key] = list(step.retire)
                    record.retiring = sorted({*record.retiring, *step.retire})
                    for name in step.retire:
                        unready.pop(name, None)  # draining says it from now on
                for name in step.unroute:
                    if name not in step.retire:
                        unready[name] = ROLLOUT_REASON + step.state.target
                fresh = [n for n in step.update if self._revision(lock, key, n) != record.target]
                if fresh:
                    updates[key] = fresh
                    for name in fresh:
                        record.updating[name] = now
                        was = self._revision(lock, key, name)
                        if was is not None:
                            record.previous[name] = was
                if new:
                    placed[key] = new
                    for r in new:
                        record.updating[r.name] = now
                timed_out = self._timed_out(record, now)
                if step.done and not step.waiting and not step.hold and not new:
                    outcome.phase, outcome.reason = record.phase, record.reason
                    record.updating, record.previous = {}, {}
                    pending.remove(key)
                elif timed_out:
                    record.phase = outcome.phase = "Paused"
                    record.reason = outcome.reason = timed_out
                    pending.remove(key)
                elif not (
                    step.route
                    or step.unroute
                    or fresh
                    or new
                    or step.retire
                    or step.waiting
                    or step.update
                    or step.state.reason.startswith("analysis:")
                ):
                    # held: paused, halted, or the budget allows nothing now and nothing moves
                    outcome.phase = "Paused" if record.paused else record.phase
                    outcome.reason = record.reason or "held: " + ", ".join(step.hold)
                    pending.remove(key)
                else:
                    analysing = step.state.reason.startswith("analysis:")
                    waiting = waiting or bool(step.waiting) or analysing
                    if step.route or step.unroute or fresh or new:
                        outcome.steps += 1
                outcome.seconds = now - started
            self.state.set_rollouts(records)
            # 1. The routes: replicas Ready at the target in, the next ones out (a retired
            # one by draining in the lock, which also counts a surge replica as ordinary).
            before_lock = lock
            for key, names in retiring.items():
                lock = _mark(lock, key, names)
            if unready != routes_before or lock != before_lock:
                self.state.set_routing(routing.unroutable, unready)
                if self.world.gateways:
                    gone = sorted(n for k in retiring for n in retiring[k])
                    change = _describe(routes_before, unready)
                    change = "; ".join(
                        p for p in (change, ", ".join(gone) + " draining" if gone else "") if p
                    )
                    self.world.message("rollout: routes " + change)
                    if not self.world.apply(lock, list(self.world.gateways)):
                        self._halt(pending, records, "a gateway stack failed")
                        break
                out = [n for n in unready if n not in routes_before]
                out += [n for k in retiring for n in retiring[k]]
                if out:
                    self._drained(lock, out)
            # 2. The workloads: drained surplus replicas go, updated ones change, surge
            # replicas are placed (out of the routes until Ready).
            if retiring:
                lock = without(lock, [n for k in retiring for n in retiring[k]])
                # The next surge replicas go in the same deployment stack run.
                for key in sorted(set(retiring) - set(placed)):
                    if key in pending:
                        _, new = self._step(
                            key, lock, records[key], observation, routing.unroutable, unready, now
                        )
                        if new:
                            placed[key] = new
                            for r in new:
                                records[key].updating[r.name] = now
            changed = sorted({*updates, *retiring, *placed})
            if updates:
                lock = _with_revisions(lock, updates, records)
            if placed:
                lock = _with_placed(lock, placed)
                for key, new in placed.items():
                    for r in new:
                        unready[r.name] = ROLLOUT_REASON + records[key].target
                self.state.set_routing(routing.unroutable, unready)
            if changed:
                stacks = [deploy_stack(k) for k in changed]
                what = [n for k in sorted(updates) for n in updates[k]]
                parts = (
                    (["updating " + ", ".join(what)] if what else [])
                    + [f"placing {r.name} on {r.cluster}" for k in placed for r in placed[k]]
                    + [f"removing {n}" for k in retiring for n in retiring[k]]
                )
                self.world.message("rollout: " + "; ".join(parts))
                ok = self.world.apply(lock, stacks)
                for key in retiring:
                    records[key].retiring = []
                self.state.set_rollouts(records)
                if not ok:
                    self._halt(changed, records, "the deployment stack failed")
                    pending = [k for k in pending if k not in changed]
            elif waiting and unready == routes_before and lock == before_lock:
                self.world.sleep(POLL)
            if self.deadline is not None and self.world.clock() - started > self.deadline:
                self._halt(pending, records, f"not done after {self.deadline:.0f}s")
                break
        for key, outcome in self.outcomes.items():
            outcome.progress = progress(lock, key, records.get(key))
        return lock

    # -- internals ------------------------------------------------------------------------

    def _step(
        self,
        key: str,
        lock: PlacementLock,
        record: RolloutRecord,
        observation: Observation,
        unroutable: Mapping[str, str],
        unready: Mapping[str, str],
        now: float,
    ) -> tuple[Step, list[LockedReplica]]:
        """The step planned for ``key`` and the surge replicas placed for it."""
        dep = self.spec.deployments[key]
        locked = lock.deployments[key]
        desired = revision(dep, self.spec.caches)
        pods: dict[str | None, int] = {}

        def expected(rev: str | None) -> int:
            if rev not in pods:
                made_of = record.templates.get(rev or "")
                at = at_revision(dep, made_of) if rev != desired and made_of else dep
                pods[rev] = expected_pods(at)
            return pods[rev]

        labels = {n: c.metadata.labels for n, c in self.spec.clusters.items()}
        states = []
        for r in locked.replicas:
            if r.draining:
                continue
            states.append(
                ReplicaState(
                    name=r.name,
                    cluster=r.cluster,
                    revision=r.revision,
                    ready=_ready(
                        observation,
                        r.cluster,
                        r.name,
                        expected(r.revision),
                        record.updating,
                        changed_roles(record, r.name, r.revision),
                    ),
                    routed=r.name not in unready and r.cluster not in unroutable,
                    wave=wave_of(r.cluster, labels.get(r.cluster, {}), dep.spec.rollout.waves),
                )
            )
        verdict = self._verdict(dep, record, states, observation, now)
        count = locked.autoscaled_replicas or dep.spec.replicas
        state = RolloutState(
            target=record.target,
            stable=record.stable,
            phase=record.phase,  # type: ignore[arg-type]
            reason=record.reason,
            failed=record.failed,
        )
        spec = dep.spec.rollout

        def plan(rollout: Rollout) -> Step:
            return plan_step(
                desired, states, rollout, count, state=state, verdict=verdict, paused=record.paused
            )

        step = plan(spec)
        new: list[LockedReplica] = []
        if step.place:
            # Make-before-break: the scheduler places the surge replicas on spare capacity
            # (tried again once the lock changed).
            if self._full.get(key) != lock:
                new = self._place(key, lock, step.place, step.state.target)
            if not new:
                self._full[key] = lock
                step = self._no_room(key, step, spec, count, plan)
        gate = spec.analysis
        if step.route:
            # A replica joining the routes now is routed before an old one is retired in
            # its stead; with a gate, watched for a window before any replica leaves.
            gated = gate is not None and step.state.phase == "Progressing"
            leaving = set(step.unroute) if gated else set(step.retire) & set(step.unroute)
            if leaving:
                step = replace(
                    step,
                    unroute=[n for n in step.unroute if n not in leaving],
                    update=[n for n in step.update if n not in leaving],
                    retire=[n for n in step.retire if n not in leaving],
                    hold=[*step.hold, *sorted(leaving)],
                )
            if gated:
                new = []
        return step, new

    def _place(self, key: str, lock: PlacementLock, n: int, target: str) -> list[LockedReplica]:
        """Up to ``n`` surge replicas of ``key`` at revision ``target``, where the scheduler
        finds spare capacity (scheduler.cordon: the lock keeps them beyond the count);
        nothing else of the lock changes."""
        fleet = cordoned_fleet(self.spec, self.state.cordons())
        result = schedule(fleet, lock, surge={key: n})
        names = {r.name for r in lock.replicas_of(key)}
        new = [r for r in result.lock.replicas_of(key) if r.name not in names and not r.draining]
        return [r.model_copy(update={"revision": target, "surge": True}) for r in new[:n]]

    def _no_room(
        self, key: str, step: Step, spec: Rollout, count: int, plan: Callable[[Rollout], Step]
    ) -> Step:
        """No spare capacity for a surge replica: roll within maxUnavailable instead; with
        maxUnavailable 0, wait for the surge replicas already placed, else halt."""
        unavailable, surge = spec.budget(count)
        if unavailable > 0:
            if key not in self._said:
                self._said.add(key)
                self.world.message(
                    f"rollout {key}: no spare capacity for a surge replica; "
                    f"rolling within maxUnavailable {unavailable}"
                )
            return plan(spec.model_copy(update={"max_surge": 0}))
        moving = step.route or step.unroute or step.update or step.retire or step.waiting
        if moving:
            return replace(step, place=0)
        why = (
            f"halted: no spare capacity for a surge replica (maxSurge {surge}) and "
            "maxUnavailable is 0; free capacity or allow maxUnavailable, then "
            "`modelplane rollout resume`"
        )
        return replace(step, place=0, state=replace(step.state, phase="Paused", reason=why))

    def _retired(
        self, lock: PlacementLock, keys: Iterable[str], records: Mapping[str, RolloutRecord]
    ) -> PlacementLock:
        """The old replicas an interrupted surge step marked draining: drained (their
        routes went with that step), then removed from the lock and their workloads."""
        names: dict[str, list[str]] = {}
        for key in keys:
            record = records[key]
            draining = {r.name for r in lock.replicas_of(key) if r.draining}
            if left := [n for n in record.retiring if n in draining]:
                names[key] = left
            record.retiring = left
        if not names:
            return lock
        gone = [n for k in sorted(names) for n in names[k]]
        self._drained(lock, gone)
        lock = without(lock, gone)
        self.world.message("rollout: removing " + ", ".join(gone))
        ok = self.world.apply(lock, [deploy_stack(k) for k in sorted(names)])
        for key in names:
            records[key].retiring = []
        self.state.set_rollouts(dict(records))
        if not ok:
            self._halt(list(names), dict(records), "the deployment stack failed")
        return lock

    def _verdict(
        self,
        dep: ModelDeployment,
        record: RolloutRecord,
        states: list[ReplicaState],
        observation: Observation,
        now: float,
    ) -> Verdict | None:
        """The analysis gate: the routed replicas at the target against the routed outdated
        ones, from their engines' counters, once the step's window is over (None: no gate,
        or nothing to compare)."""
        gate = dep.spec.rollout.analysis
        if gate is None or record.phase != "Progressing":
            return None
        new = [s for s in states if s.revision == record.target and s.routed and s.ready]
        old = [s for s in states if s.revision != record.target and s.routed]
        if not new or not old:
            return None
        since = record.watching if record.watching is not None else now
        if now - since < gate.window:
            return Verdict("wait", f"watching revision {record.target} for {gate.window:g}s")
        verdict = analyse(_health(observation, new), _health(observation, old), gate)
        if verdict.outcome == "wait" and now - since >= QUIET_WINDOWS * gate.window:
            return None  # too little traffic to judge: no evidence against the revision
        return verdict

    def _timed_out(self, record: RolloutRecord, now: float) -> str:
        late = sorted(n for n, t in record.updating.items() if now - t > self.ready_timeout)
        if not late:
            return ""
        return (
            f"{', '.join(late)} not Ready at revision {record.target} "
            f"{self.ready_timeout:.0f}s after the update: halted"
        )

    def _revision(self, lock: PlacementLock, key: str, name: str) -> str | None:
        return next((r.revision for r in lock.replicas_of(key) if r.name == name), None)

    def _drained(self, lock: PlacementLock, names: list[str]) -> None:
        """Wait for the in-flight requests of replicas just taken out of the routes: the
        gateway's settle time, then until their engines run no request (when their metrics
        can be read), at most ``drain`` seconds."""
        self.world.sleep(self.settle)
        keys = sorted(
            {k for k, d in lock.deployments.items() for r in d.replicas if r.name in names}
        )
        end = self.world.clock() + self.drain
        while self.world.clock() < end:
            seen = self.world.observe(lock, keys)
            busy = [n for n in names if _running(seen, lock, n) > 0]
            if not busy:
                return
            self.world.sleep(POLL)

    def _halt(self, keys: Iterable[str], records: dict[str, RolloutRecord], why: str) -> None:
        for key in keys:
            records[key].phase = "Paused"
            records[key].reason = why
            outcome = self.outcomes.setdefault(key, Outcome(key, "Paused"))
            outcome.phase, outcome.reason = "Paused", why
        self.state.set_rollouts(records)


def changed_roles(record: RolloutRecord, name: str, revision: str | None) -> set[str] | None:
    """The roles whose pods an update of replica ``name`` to ``revision`` replaces: those
    whose template differs between the revision it came from and ``revision`` (every role
    when the cache changed; None: not known, every role)."""
    was = record.previous.get(name)
    old = record.templates.get(was or "")
    new = record.templates.get(revision or "")
    if not old or not new:
        return None
    if old.get("modelCacheRef") != new.get("modelCacheRef"):
        return None
    before, after = old.get("roles") or {}, new.get("roles") or {}
    return {role for role in {*before, *after} if before.get(role) != after.get(role)}


def _ready(
    observation: Observation,
    cluster: str,
    name: str,
    expected: int,
    updating: Mapping[str, float],
    changed: set[str] | None = None,
) -> bool:
    """Every pod of the replica Ready; for a replica being updated, only pods created after
    its update count (creation times have whole seconds) -- of the roles the update
    changed, when known (a prefill/decode change of one role leaves the other's pods
    as they are)."""
    seen = observation.cluster(cluster)
    if seen is None or not seen.reachable:
        return False
    got = seen.replicas.get(name)
    if got is None or got.pods < expected or got.ready_pods < got.pods:
        return False
    if got.ready_groups < got.groups:
        return False
    since = updating.get(name)
    if since is None:
        return True
    if changed is not None and got.role_created and set(changed) <= set(got.role_created):
        return all(got.role_created[role] >= since - 1.0 for role in changed)
    return got.created is not None and got.created >= since - 1.0


def _health(observation: Observation, replicas: Iterable[ReplicaState]) -> ServingHealth:
    total = ServingHealth()
    for r in replicas:
        seen = observation.cluster(r.cluster)
        got = seen.replicas.get(r.name) if seen is not None else None
        m = (got.metrics or {}) if got is not None else {}
        total += ServingHealth(
            int(m.get("requests", 0)),
            int(m.get("errors", 0)),
            float(m.get("ttftSum", 0.0)),
            int(m.get("ttftCount", 0)),
        )
    return total


def _running(observation: Observation, lock: PlacementLock, name: str) -> float:
    cluster = next(
        (r.cluster for d in lock.deployments.values() for r in d.replicas if r.name == name), None
    )
    seen = observation.cluster(cluster) if cluster else None
    got = seen.replicas.get(name) if seen is not None else None
    if got is None or not got.metrics:
        return 0.0
    return float(got.metrics.get("runningRequests", 0.0))


def _with_revisions(
    lock: PlacementLock, updates: Mapping[str, list[str]], records: Mapping[str, RolloutRecord]
) -> PlacementLock:
    deployments = dict(lock.deployments)
    for key, names in updates.items():
        target = records[key].target
        locked = deployments[key]
        replicas = [
            r.model_copy(update={"revision": target}) if r.name in names else r
            for r in locked.replicas
        ]
        deployments[key] = locked.model_copy(update={"replicas": replicas})
    return lock.model_copy(update={"deployments": deployments})


def _describe(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    back = sorted(set(before) - set(after))
    out = sorted(set(after) - set(before))
    parts = ([f"{', '.join(back)} back in"] if back else []) + (
        [f"{', '.join(out)} out"] if out else []
    )
    return "; ".join(parts)


def _mark(lock: PlacementLock, key: str, names: list[str]) -> PlacementLock:
    locked = mark_draining(lock.deployments[key], names)
    return lock.model_copy(update={"deployments": {**lock.deployments, key: locked}})


def _with_placed(lock: PlacementLock, placed: Mapping[str, list[LockedReplica]]) -> PlacementLock:
    deployments = dict(lock.deployments)
    for key, new in placed.items():
        locked = deployments[key]
        deployments[key] = locked.model_copy(update={"replicas": [*locked.replicas, *new]})
    return lock.model_copy(update={"deployments": deployments})
