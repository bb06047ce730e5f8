"""`modelplane reconcile`: observe -> plan -> `up` what changed -> report, round after round.

One round (`Reconciler.round`): re-read the specs and the lock, observe every cluster
(`modelplane.observe`; GKE/EKS kubeconfigs read from their cluster stacks' outputs),
delete the recorded orphans of clusters that answer again (`modelplane.driver.orphans`),
schedule on the effective fleet (`modelplane.health.rules`), remember since when clusters
are unhealthy (`.modelplane/health.json`) and which clusters' endpoints stay out of routes
(`.modelplane/routing.json`), then:

1. routes first: when a cluster became unroutable or replicas leave a cluster whose
   endpoints were still routed, the front doors' stacks alone (`gateway`, `gateway-<cluster>`;
   not those of front doors whose cluster is unreachable), so dead endpoints leave the
   HTTPRoutes before anything else runs;
2. objects of replicas leaving an unreachable cluster are recorded as orphans and dropped
   from the deployment stacks' state;
3. `Fleet.up` with that plan -- only the deployment stacks whose placement changed and the
   gateway when the specs did not change since the last successful round (every stack,
   skipping unchanged ones by fingerprint, otherwise).

When neither the specs, the placement nor the unroutable clusters changed since the last
successful round, `up` is not called at all (every `resync` rounds it is, to catch other
input changes).

Beside a CI `up`: a stack whose Pulumi lock is held by another update is reported as
locked and retried next round; nothing else is shared.

A round is read -> decide -> apply: the decision (`modelplane.driver.decide.decide`) is a
pure function of the observation and the remembered state; this module reads those and
carries the decision out. The remembered state is `modelplane.driver.state`'s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelplane.api.errors import FleetInvalid
from modelplane.api.notices import scalable_to_zero
from modelplane.api.placement_lock import PlacementLock
from modelplane.autoscale import Decision
from modelplane.driver.decide import Applied, RoundInputs, RoundPlan, decide, inputs_digest
from modelplane.driver.errors import DriverError
from modelplane.driver.fleet import Fleet
from modelplane.driver.observer import Observer
from modelplane.driver.orphans import delete_orphans, orphan_of
from modelplane.driver.plan import Plan
from modelplane.driver.results import Outcome, RunResult
from modelplane.driver.rollouts import unfinished
from modelplane.driver.settings import resolve_backend, scrub, state_root, url_secrets
from modelplane.driver.state import RuntimeState
from modelplane.health.observation import Observation
from modelplane.health.phases import merged, remember
from modelplane.health.rules import DEFAULT_GRACE, HealthView
from modelplane.health.spill import DEFAULT_COOLDOWN, DEFAULT_SPILL_AFTER
from modelplane.observe import DEFAULT_TIMEOUT, kubeconfig_for, observe_fleet, probe_reachable
from modelplane.observe.cluster import DEFAULT_STALE_AFTER
from modelplane.observe.kube import KubeError, KubeReader, parse_kubeconfig
from modelplane.observe.router import router_metrics
from modelplane.secrets import CallerKeysMissing, CallerKeysTooShort
from modelplane.wake import parse_held, sleeping_models

WAKE_PREFIX = "model "  # a probe's answer: held requests for a model at zero


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
    retired: list[str] = field(default_factory=list)  # draining off cordoned clusters
    drained: dict[str, str] = field(default_factory=dict)  # drains that ended, and why
    unroutable: dict[str, str] = field(default_factory=dict)  # cluster -> why out of routes
    unready: dict[str, str] = field(default_factory=dict)  # replica -> why out of routes
    routes_first: RunResult | None = None  # the gateway stack alone, before the rest
    orphans_deleted: list[str] = field(default_factory=list)
    orphan_errors: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase
    duration: float = 0.0
    woken: dict[str, str] = field(default_factory=dict)  # deployment -> model that woke it
    spilled: dict[str, str] = field(default_factory=dict)  # stuck replica -> where, why
    # replica -> its start phases (epoch seconds), observed and recorded (driver.phases)
    phases: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def locked(self) -> list[str]:
        return self.run.by_outcome(Outcome.LOCKED) if self.run else []

    @property
    def ok(self) -> bool:
        return self.error is None and (self.run is None or self.run.ok)

    def phase(self, name: str, started: float) -> None:
        self.phases[name] = round(time.monotonic() - started, 2)

    def record(self, decided: RoundPlan) -> None:
        """What the round decided."""
        self.plan, self.view = decided.plan, decided.view
        self.autoscale, self.drained = decided.autoscale, decided.drained
        self.moved, self.added, self.draining = decided.moved, decided.added, decided.draining
        self.retired = decided.retired
        self.unroutable, self.unready = decided.unroutable, decided.unready

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
            "unroutable": self.unroutable,
            "unready": self.unready,
            "routesFirst": None if self.routes_first is None else self.routes_first.as_json(),
            "orphansDeleted": self.orphans_deleted,
            "orphanErrors": self.orphan_errors,
            "phases": self.phases,
            "lockWritten": bool(
                (self.run and self.run.lock_written)
                or (self.routes_first and self.routes_first.lock_written)
            ),
            "up": None if self.run is None else self.run.as_json(),
            "upSkipped": self.skipped_up,
            "locked": self.locked,
            "autoscale": {k: d.as_json() for k, d in self.autoscale.items()},
            "draining": self.draining,
            "retired": self.retired,
            "drained": self.drained,
            "woken": self.woken,
            "spilled": self.spilled,
        }


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
        metrics_stale_after: float = DEFAULT_STALE_AFTER,
        parallel: int = 4,
        observer_factory: Callable[[], Observer] = Observer,
        clock: Callable[[], float] = time.time,
        fence: Callable[[], str | None] | None = None,
        spill_after: float = DEFAULT_SPILL_AFTER,
        cooldown: float = DEFAULT_COOLDOWN,
    ) -> None:
        self.fleet_dir = fleet_dir
        self.spill_after = spill_after
        self.cooldown = cooldown
        self.lock = lock
        self.backend = backend
        self.secrets_provider = secrets_provider
        self.env = env
        self.grace = grace
        self.timeout = timeout
        self.metrics_stale_after = metrics_stale_after
        self.parallel = parallel
        self.observer_factory = observer_factory
        self.clock = clock
        # Why this process must not act now (not the leader), else None: checked before
        # the round's `up` and by the driver before every stack's engine run.
        self.fence = fence
        self.rounds = 0
        self._applied = Applied()  # what the last successful `up` applied
        # For the probe between rounds: each observed cluster's kubeconfig and whether its
        # API answered in the last round.
        self._probe_targets: dict[str, str] = {}
        self._reachable: dict[str, bool] = {}
        # For the wake probe: the model names with a deployment at zero behind them, and
        # what reads the OpenAI router's held requests (api.md, "Scale to zero").
        self._sleeping: list[str] = []
        self._read_held: Callable[[], dict[str, int] | None] | None = None

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
        except (DriverError, CallerKeysMissing, CallerKeysTooShort) as exc:
            # A caller's key missing here (an emptyDir copy of the fleet) is said each round,
            # never made anew (security review M3); so is a short one (L8).
            current.error = str(exc)
        if current.error or current.orphan_errors:  # a message may quote the backend URL
            secrets = self._backend_secrets()
            current.error = scrub(current.error, secrets) if current.error else current.error
            current.orphan_errors = [scrub(e, secrets) for e in current.orphan_errors]
        current.duration = time.monotonic() - started
        return current

    def _backend_secrets(self) -> tuple[str, ...]:
        """The credentials of the backend URL (its password), which no log line shows."""
        env = dict(os.environ if self.env is None else self.env)
        try:
            return url_secrets(resolve_backend(self.fleet_dir, self.backend, env))
        except DriverError:
            return url_secrets(self.backend)

    def close(self) -> None:
        """Stop: forget the replicas this reconciler kept out of the routes until Ready
        (`.modelplane/routing.json` `unready`), so that a later plain `up` routes every
        placed replica again. The unroutable clusters stay (any `up` honours them)."""
        env = dict(os.environ if self.env is None else self.env)
        backend = resolve_backend(self.fleet_dir, self.backend, env)
        state = RuntimeState.for_backend(backend, state_root(self.fleet_dir), self.fleet_dir, env)
        state.clear_unready()

    def probe(self, timeout: float | None = None) -> dict[str, bool]:
        """The clusters whose API server answers differently from the last round's
        observation, each with whether it answers now (False: gone, True: back):
        `GET /version` on each, in parallel. Run between rounds; a non-empty answer means
        the next round should start now."""
        out: dict[str, bool] = {}
        if self._probe_targets:
            limit = min(self.timeout, 2.0) if timeout is None else timeout
            now = probe_reachable(self._probe_targets, self.fleet_dir, limit)
            out = {name: up for name, up in now.items() if up != self._reachable.get(name, up)}
        if self._sleeping and self._read_held is not None:
            held = self._read_held() or {}
            for model in self._sleeping:
                if held.get(model, 0) > 0:
                    out[f"{WAKE_PREFIX}{model}"] = True
        return out

    def _remember_reachability(
        self, f: Fleet, observation: Observation, kubeconfigs: Mapping[str, str]
    ) -> None:
        self._probe_targets, self._reachable = {}, {}
        for name in f.spec.clusters:
            seen = observation.cluster(name)
            if seen is None or not seen.observed:
                continue  # no kubeconfig: nothing to probe
            text, _ = kubeconfig_for(f.spec, name, f.path, f.env, kubeconfigs)
            if text is not None:
                self._probe_targets[name] = text
                self._reachable[name] = seen.reachable

    def _kubeconfigs(self, f: Fleet) -> dict[str, str]:
        try:
            return f.cluster_kubeconfigs()
        except DriverError:
            return {}

    def _clean_orphans(
        self, f: Fleet, observation: Observation, kubeconfigs: Mapping[str, str], current: Round
    ) -> None:
        """Delete the recorded orphans of clusters that answer again."""
        waiting = {o.cluster for o in f.runtime.orphans()}
        readers: dict[str, KubeReader] = {}
        for name in sorted(waiting):
            seen = observation.cluster(name)
            if name not in f.spec.clusters or seen is None or not seen.reachable:
                continue
            text, _ = kubeconfig_for(f.spec, name, f.path, f.env, kubeconfigs)
            if text is None:
                continue
            try:
                readers[name] = KubeReader(parse_kubeconfig(text, str(f.path)), self.timeout)
            except KubeError as exc:
                current.orphan_errors.append(f"{name}: {exc}")
        if readers:
            done, errors = delete_orphans(f.runtime, readers)
            current.orphans_deleted += done
            current.orphan_errors += errors

    def _round(self, current: Round) -> None:
        f = Fleet.load(
            self.fleet_dir,
            lock=self.lock,
            backend=self.backend,
            secrets_provider=self.secrets_provider,
            env=self.env,
        )
        f.fence = self.fence
        state = f.runtime
        t = time.monotonic()
        kubeconfigs = self._kubeconfigs(f)
        observation = observe_fleet(
            f.spec,
            f.path,
            lock=f.previous,
            env=f.env,
            kubeconfigs=kubeconfigs,
            timeout=self.timeout,
            now=self.clock(),
            metrics=True,
            stale_after=self.metrics_stale_after,
        )
        current.observation = observation
        held = self._held(f, kubeconfigs)
        current.phase("observe", t)
        self._remember_reachability(f, observation, kubeconfigs)
        t = time.monotonic()
        self._clean_orphans(f, observation, kubeconfigs, current)
        current.phase("orphans", t)
        if unfinished(f.spec, f.previous, state.rollouts()):
            self._applied = Applied()  # a rollout has steps left: this round's `up` takes them
        decided = decide(
            RoundInputs(
                spec=f.spec,
                previous=f.previous,
                observation=observation,
                unhealthy_since=state.unhealthy_since(),
                autoscale=state.autoscale(),
                were_unroutable=frozenset(state.routing().unroutable),
                were_unready=frozenset(state.routing().unready),
                cordons=frozenset(state.cordons()),
                applied=self._applied,
                round_number=self.rounds,
                grace=self.grace,
                held=held or {},
                capacity=state.capacity(),
                spill_after=self.spill_after,
                cooldown=self.cooldown,
            )
        )
        current.spilled = dict(decided.spilled)
        current.woken = dict(decided.woken)
        self._sleeping = sleeping_models(f.spec, decided.plan.lock)
        self._apply(f, state, decided, current)

    def _held(self, f: Fleet, kubeconfigs: Mapping[str, str]) -> dict[str, int] | None:
        """Per model name, the requests the OpenAI router holds now (None: none could be
        read); only asked when some deployment may be at zero."""
        if not any(scalable_to_zero(d) for d in f.spec.deployments.values()):
            self._read_held = None
            return {}
        spec, path, env, configs = f.spec, f.path, dict(f.env), dict(kubeconfigs)
        limit = min(self.timeout, 2.0)

        def read() -> dict[str, int] | None:
            texts, why = router_metrics(spec, path, env, configs, limit)
            return None if why else parse_held(texts)

        self._read_held = read
        return read()

    def _apply(self, f: Fleet, state: RuntimeState, decided: RoundPlan, current: Round) -> None:
        """Carry a round's plan out: remember the state, then routes first, forget, up."""
        why = self.fence() if self.fence else None
        if why:  # fencing: a reconciler that lost its lease writes nothing
            raise DriverError(f"not acting: {why}")
        current.record(decided)
        state.set_autoscale(decided.autoscale_state)
        state.set_unhealthy_since(decided.unhealthy_since)
        state.set_routing(decided.unroutable, decided.unready)
        state.set_capacity(decided.capacity)
        plan = decided.plan

        def routes_updated() -> None:
            # The routes without the draining replicas are applied: their drain clock starts.
            for name in sorted(plan.lock.draining()):
                decided.autoscale_state.routes_gone.setdefault(name, self.clock())
            state.set_autoscale(decided.autoscale_state)

        started = self.clock()

        def phases(routed: bool) -> None:
            recorded = remember(
                state.replica_phases(),
                plan.lock,
                started,
                routed=self.clock() if routed else None,
                added=decided.added,
                unready=decided.unready,
                unroutable=decided.unroutable,
            )
            state.set_replica_phases(recorded)
            current.phases = replica_phases(current.observation, plan.lock, recorded)

        if decided.skip_up:
            current.skipped_up = True
            routes_updated()
            phases(routed=True)
            return
        if decided.routes_first:
            t = time.monotonic()
            current.routes_first = f.up(
                plan,
                only=decided.gateways,
                parallel=max(1, len(decided.gateways)),
                observer=self.observer_factory(),
            )
            current.phase("routesFirst", t)
        if decided.forget:
            t = time.monotonic()
            current.forgotten = forget_cluster_objects(f, decided.forget, set(decided.dead))
            current.phase("forget", t)
        t = time.monotonic()
        routes_ok = current.routes_first is not None and current.routes_first.ok
        only = decided.rest_after_routes(routes_ok)
        if only == [] and current.routes_first is not None:
            run = current.routes_first  # the gateway already ran with these inputs
        else:
            run = f.up(plan, only=only, parallel=self.parallel, observer=self.observer_factory())
        current.run = run
        current.phase("up", t)
        if run.ok:
            # What `up` wrote: the plan's lock with each replica's revision recorded (rollouts).
            written = inputs_digest(
                decided.applied.specs or "", f.previous, decided.unroutable, decided.unready
            )
            self._applied = Applied(written, decided.applied.specs)
            routes_updated()
        else:  # retry every stack (by fingerprint) next round
            self._applied = Applied(self._applied.digest, None)
        phases(routed=run.ok)


def replica_phases(
    observation: Observation | None,
    lock: PlacementLock,
    recorded: Mapping[str, Mapping[str, float]],
) -> dict[str, dict[str, float]]:
    """Every placed replica's start phases: observed from its pods, recorded by reconcile."""
    out: dict[str, dict[str, float]] = {}
    for dep in lock.deployments.values():
        for r in dep.replicas:
            seen = observation.cluster(r.cluster) if observation is not None else None
            got = seen.replicas.get(r.name) if seen is not None else None
            both = merged(got.phases if got is not None else {}, recorded.get(r.name))
            if both:
                out[r.name] = both
    return out


def _provider_cluster(resource: Mapping[str, Any]) -> str:
    """`dev-3` from a provider reference `urn:...::pulumi:providers:kubernetes::dev-3-k8s::<id>`."""
    name = str(resource.get("provider", "")).split("::")[-2]
    return name[: -len("-k8s")] if name.endswith("-k8s") else name


def forget_cluster_objects(fleet: Fleet, stacks: list[str], clusters: set[str]) -> dict[str, int]:
    """Drop from each stack's state the Kubernetes objects managed through the provider of
    an unreachable cluster (`<cluster>-k8s`): they cannot be deleted there, and the
    providers pin `deleteUnreachable: false`. Each is recorded as an orphan first
    (`modelplane.driver.orphans`), deleted when the cluster answers again.
    Returns how many resources each stack forgot."""
    from pulumi.automation.errors import StackNotFoundError

    suffixes = tuple(f"::{c}-k8s" for c in sorted(clusters))
    out: dict[str, int] = {}
    with fleet.session() as session:
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
            # Recorded before the state forgets them: deleted when the cluster is back.
            orphans = [
                orphan_of(_provider_cluster(r), name, r) for r in resources if r["urn"] in gone
            ]
            fleet.runtime.record_orphans([o for o in orphans if o is not None])
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
