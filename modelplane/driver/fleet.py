"""``modelplane.Fleet``: the library face of the driver.

::

    from modelplane import Fleet

    fleet = Fleet.load("specs/prod")           # parse + validate; FleetInvalid lists every error
    plan = fleet.plan()                         # pure scheduling: the new lock + report
    result = fleet.up(plan, parallel=4, on_event=lambda event: print(event.stack, event.kind))
    fleet.prune()                               # destroy the stacks the fleet no longer derives
    for r in result.results:
        print(r.stack, r.outcome.value, r.changes)

Every operation returns a :class:`RunResult` with one :class:`StackResult` per stack; a
stack that fails does not raise (its siblings keep going). Expected problems that stop a
run before any stack starts (no passphrase, no engine) raise :class:`DriverError`.
Progress goes to one channel per operation (:func:`modelplane.driver.observer.channel`):
the ``observer`` hooks and the ``on_event`` callback, adapted into an observer once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from modelplane.api.errors import FleetInvalid
from modelplane.api.fleet import FleetSpec
from modelplane.api.loader import LOCK_FILE, load_fleet, no_specs
from modelplane.api.placement_lock import PlacementLock
from modelplane.driver import hosting, rollouts
from modelplane.driver import operations as ops
from modelplane.driver.errors import DriverError
from modelplane.driver.fleet_ca import (
    CertificateRotation,
    ca_stacks,
    ensure_fleet_ca,
    rotate_certificates,
)
from modelplane.driver.front_door import (
    Rotation,
    ensure_front_door_key,
    ever_rotated,
    rotate_front_door_key,
    switch_front_door_key,
)
from modelplane.driver.migrate import Migration
from modelplane.driver.observer import Observer, OnEvent, channel
from modelplane.driver.offline import OfflinePreview
from modelplane.driver.plan import Plan
from modelplane.driver.plugins import missing_for_stack
from modelplane.driver.project import LEGACY_PROJECT, fleet_organization, fleet_project_name
from modelplane.driver.rendering import refresh_skip_reason
from modelplane.driver.results import Outcome, RunResult, StackResult
from modelplane.driver.runner import run_tiers, tier_of_stack_name
from modelplane.driver.settings import (
    default_backend,
    is_diy,
    redact_url,
    resolve_backend,
    resolve_secrets,
    scrub,
    state_root,
    url_secrets,
)
from modelplane.driver.stack_cache import StackCache
from modelplane.driver.state import RuntimeState, is_shared
from modelplane.driver.workspace import EngineSession
from modelplane.errors import ModelplaneError
from modelplane.health.observation import Observation
from modelplane.lock import read_lock, write_lock
from modelplane.observe.front_doors import FrontDoor
from modelplane.scheduler import DEFAULT_TIME_LIMIT, schedule
from modelplane.scheduler.cordon import cordoned_fleet
from modelplane.secrets import (
    CallerKeysMissing,
    CallerKeysTooShort,
    gateway_secret_errors,
    missing_caller_keys,
    private_dir,
    short_caller_keys,
    write_new_key_file,
)
from modelplane.stacks import (
    GATEWAY_STACK,
    StackUnit,
    Tier,
    cluster_stack,
    deploy_stack,
    gateway_stack_names,
    gateway_stacks,
    stack_units,
)

# ``on_event(event)`` or ``on_event(stack_name, event)`` (:data:`OnEvent`): a
# :class:`~modelplane.driver.events.StackEvent` for each stack-level step (queued, started,
# resource, diagnostic, summary, engine, finished, skipped); the engine's own event, where
# there is one, is ``event.engine_event``. Called from worker threads; an exception it
# raises is reported once and never fails a stack.
__all__ = ["DEFAULT_PARALLEL", "Fleet", "FleetStatus", "OnEvent"]

DEFAULT_PARALLEL = 4


@dataclass
class FleetStatus:
    """Placement, each stack's last result and outputs, endpoints and service addresses."""

    backend: str
    lock: PlacementLock
    stacks: list[ops.StackStatus] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)

    def stack(self, name: str) -> ops.StackStatus:
        return next(s for s in self.stacks if s.stack == name)

    @property
    def endpoints(self) -> dict[str, Any]:
        """Each deployment stack's ``endpoints`` output."""
        return {
            s.stack: s.outputs["endpoints"]
            for s in self.stacks
            if s.stack.startswith("deploy-") and "endpoints" in s.outputs
        }

    @property
    def gateway(self) -> dict[str, Any]:
        """The gateway stack's outputs (ModelService addresses)."""
        return next((s.outputs for s in self.stacks if s.stack == "gateway"), {})

    def front_doors(self, spec: FleetSpec) -> list[FrontDoor]:
        """Every front door with the address its gateway stack last exported."""
        by_name = {s.stack: s.outputs for s in self.stacks}
        return [
            FrontDoor(name, cluster, _address(by_name.get(name, {}).get("address")))
            for name, cluster in gateway_stacks(spec)
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "backend": redact_url(self.backend),
            "placement": {
                key: [r.model_dump(mode="json") for r in dep.replicas]
                for key, dep in self.lock.deployments.items()
            },
            "stacks": [s.as_json() for s in self.stacks],
            "orphans": self.orphans,
            "endpoints": self.endpoints,
            "gateway": self.gateway,
        }


def _address(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _prune_removed(lock: PlacementLock, keep: set[str], clusters: Collection[str]) -> PlacementLock:
    """`lock` without the removed deployments whose `deploy-` stack is not in `keep`, and
    without the address blocks of clusters gone from the specs (not in `clusters`) whose
    `cluster-` stack is not in `keep` (their blocks are free again)."""
    removed = {k: d for k, d in lock.removed.items() if deploy_stack(k) in keep}
    network = lock.network
    if network is not None:
        held = {
            name: entry
            for name, entry in network.clusters.items()
            if name in clusters or cluster_stack(name) in keep
        }
        if held != network.clusters:
            network = network.model_copy(update={"clusters": held})
    if removed == lock.removed and network is lock.network:
        return lock
    return lock.model_copy(update={"removed": removed, "network": network})


def _scaled_counts(lock: PlacementLock) -> dict[str, int]:
    return {
        k: d.autoscaled_replicas
        for k, d in lock.deployments.items()
        if d.autoscaled_replicas is not None
    }


def _with_scaled(lock: PlacementLock, counts: Mapping[str, int]) -> PlacementLock:
    """The committed lock with the autoscaled counts `reconcile` last applied (runtime
    state in a shared backend): a CI `up` from a checkout does not undo them."""
    changed = {
        key: dep.model_copy(update={"autoscaled_replicas": counts[key]})
        for key, dep in lock.deployments.items()
        if key in counts
        and dep.autoscaled_replicas is not None
        and dep.autoscaled_replicas != counts[key]
    }
    if not changed:
        return lock
    return lock.model_copy(update={"deployments": {**lock.deployments, **changed}})


class Fleet:
    """A validated fleet directory and the Pulumi stacks derived from it."""

    def __init__(
        self,
        path: Path,
        spec: FleetSpec,
        previous: PlacementLock,
        lock_path: Path,
        *,
        backend: str | None = None,
        secrets_provider: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path.resolve()
        self.spec = spec
        self.previous = previous
        self.lock_path = lock_path.resolve()
        self.env = dict(os.environ if env is None else env)
        # The fleet's own Pulumi project: its stacks are never another fleet's.
        self.project = fleet_project_name(self.path)
        self.backend = resolve_backend(self.path, backend, self.env)
        # ... in its organization, when it names one (Pulumi Cloud; `organization` elsewhere).
        self.organization = fleet_organization(self.path, self_managed=is_diy(self.backend))
        self.secrets_provider = secrets_provider
        # Before each stack's engine run: why this process must not act now (a reconcile
        # that lost its leader lease), else None. The stack fails with that reason.
        self.fence: Callable[[], str | None] | None = None
        self._runtime: RuntimeState | None = None
        if is_shared(self.backend):
            self.previous = _with_scaled(self.previous, self.runtime.scaled())

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        lock: str | Path | None = None,
        backend: str | None = None,
        secrets_provider: str | None = None,
        env: Mapping[str, str] | None = None,
        require_specs: bool = False,
    ) -> Fleet:
        """Parse and validate every spec and the lock; raises FleetInvalid with every error.
        With ``require_specs`` (``up``), a fleet folder without a spec is one.

        ``backend``: any Pulumi backend URL (default ``PULUMI_BACKEND_URL``, else
        ``file://<fleet>/.modelplane/state``). ``env``: the environment the engine runs with
        (default ``os.environ``; the passphrase and ``MODELPLANE_SECRET_*`` come from it).
        """
        path = Path(path)
        if not path.is_dir():
            raise DriverError(f"{path} is not a fleet directory")
        loaded = load_fleet(path)
        errors = list(loaded.errors)
        lock_path = Path(lock) if lock else path / LOCK_FILE
        previous = PlacementLock()
        try:
            previous = read_lock(lock_path)
        except FleetInvalid as exc:
            errors.extend(exc.errors)
        if require_specs and not loaded.errors and loaded.fleet.empty:
            errors.append(no_specs(path))
        if errors:
            raise FleetInvalid(errors)
        return cls(
            path,
            loaded.fleet,
            previous,
            lock_path,
            backend=backend,
            secrets_provider=secrets_provider,
            env=env,
        )

    # -- pure ------------------------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        return state_root(self.path)

    @property
    def backend_display(self) -> str:
        """The backend URL as shown to people: its password masked (``user:****@host``)."""
        return redact_url(self.backend)

    def scrub(self, text: str) -> str:
        """``text`` without the backend URL's credentials (engine messages quote the URL)."""
        return scrub(text, url_secrets(self.backend))

    @property
    def runtime(self) -> RuntimeState:
        """The fleet's runtime state (health, routing, ...): ``.modelplane/*.json``, or the
        backend's database when it is ``postgres://`` (shared between hosts)."""
        if self._runtime is None:
            self._runtime = RuntimeState.for_backend(
                self.backend, self.state_dir, self.path, self.env
            )
        return self._runtime

    def check_gateway_secrets(self, *, make_missing: bool = False) -> list[Path]:
        """Before `up` runs any stack: a caller's key file modelplane keeps (in the fleet's
        `.modelplane/` or the dev fleet's state) that does not exist is CallerKeysMissing,
        every one named with the command that makes it -- never a new key made silently
        (security review M3) -- unless ``make_missing`` (the CLI's first `up` in a terminal
        on a local backend, :meth:`first_local_up`), which makes them and returns the files.
        Then a gateway secret no source has, or a caller's keys malformed or all expired, is
        a FleetInvalid naming file, object and field -- it would otherwise fail the gateway
        stack after the others were applied (api.md "Callers", "Keys"); an unexpired key
        shorter than the rule is CallerKeysTooShort, every caller named (security review L8)."""
        missing = missing_caller_keys(self.spec, self.path, self.env)
        if missing and not make_missing:
            raise CallerKeysMissing(missing, self.path)
        skip = frozenset(m.caller for m in missing)  # made below, once nothing else is wrong
        errors = gateway_secret_errors(self.spec, self.path, self.env, skip_callers=skip)
        if errors:
            raise FleetInvalid(errors)
        short = short_caller_keys(self.spec, self.path, self.env, skip_callers=skip)
        if short:
            raise CallerKeysTooShort(short, self.path)
        made: list[Path] = []
        for entry in missing:
            assert entry.path is not None and entry.home is not None
            write_new_key_file(entry.path, entry.home)
            made.append(entry.path)
        return made

    def first_local_up(self) -> bool:
        """Whether this is the fleet's first `up` on a local ``file://`` backend: the backend
        holds no gateway stack yet (so no caller has been given a key it published)."""
        url = urlparse(self.backend)
        if url.scheme != "file":
            return False
        stacks = Path(url2pathname(url.path)) / ".pulumi" / "stacks"
        return not any(stacks.rglob(f"{GATEWAY_STACK}.json*")) if stacks.is_dir() else True

    def plan(self, optimize: bool = False, time_limit: float = DEFAULT_TIME_LIMIT) -> Plan:
        """Schedule against the committed lock (pure: nothing is written); with `optimize`,
        new replicas are placed by the MILP solver within `time_limit` seconds."""
        spec = cordoned_fleet(self.spec, self.runtime.cordons())  # scheduler.cordon
        result = schedule(spec, self.previous, optimize=optimize, time_limit=time_limit)
        # Replicas a rollout has not reached keep their revision (what preview and plan show).
        prepared = rollouts.prepare(self.spec, result.lock, self.runtime.rollouts())
        return Plan(self.previous, replace(result, lock=prepared.lock))

    def stacks(self, plan: Plan | None = None) -> list[StackUnit]:
        """The derived stacks, in tier order (placement from ``plan``, else the lock)."""
        return stack_units(self.spec, plan.lock if plan else self.previous)

    # -- engine ----------------------------------------------------------------------------

    def preview(
        self,
        plan: Plan | None = None,
        *,
        parallel: int = DEFAULT_PARALLEL,
        on_event: OnEvent | None = None,
        only: Iterable[str] | None = None,
        observer: Observer | None = None,
        refresh: bool = False,
        policy_packs: Iterable[str] = (),
        policy_pack_configs: Iterable[str] = (),
    ) -> RunResult:
        """``pulumi preview`` of every stack against the new plan; writes nothing but state
        locks, and creates no stack. The plan's lock goes to ``.modelplane/plan/`` for the
        program to read. Stacks not in the backend yet (and stacks that need a cluster stack
        that is not) show their offline render instead (``new`` / ``rendered``); stacks
        downstream of a changed deployment or cache stack see its rendered outputs."""
        plan = plan or self.plan()
        observer = channel(observer, on_event)
        with self.session(observer) as session:
            plan_lock = self.state_dir / "plan" / LOCK_FILE
            plan_lock.parent.mkdir(parents=True, exist_ok=True)
            write_lock(plan_lock, plan.lock)
            every = self.stacks(plan)
            units = self._select(every, only)
            # Listing the stacks also initialises a fresh backend before stacks run in parallel.
            existing = set(session.list_stacks())
            ctx = self._context(session, plan.lock, plan_lock, observer)
            ensure_front_door_key(session, sorted(existing), session.env, write=False)
            needs = ca_stacks(self.spec)
            ensure_fleet_ca(
                session, [u.name for u in every if u.name in needs], session.env, write=False
            )
            if refresh:
                ctx.preview_options["refresh"] = True
            packs = [str(p) for p in policy_packs]
            if packs:
                ctx.preview_options["policy_packs"] = packs
            configs = [str(c) for c in policy_pack_configs]
            if configs:
                ctx.preview_options["policy_pack_configs"] = configs
            offline = OfflinePreview(
                self.path,
                plan_lock,
                every,
                existing,
                lambda name: ops.deployed_outputs(ctx, name) if name in existing else None,
            )
            return self._run(
                "preview",
                units,
                lambda u: ops.preview_stack(ctx, u, offline),
                parallel,
                observer,
                blocking=lambda r: False,
            )

    def up(
        self,
        plan: Plan | None = None,
        *,
        parallel: int = DEFAULT_PARALLEL,
        on_event: OnEvent | None = None,
        all_stacks: bool = False,
        only: Iterable[str] | None = None,
        observer: Observer | None = None,
        refresh: bool = False,
        expect_no_changes: bool = False,
        policy_packs: Iterable[str] = (),
        policy_pack_configs: Iterable[str] = (),
        strategy: str | None = None,
        rollout_timeout: float | None = None,
        lock_wait: float = 0.0,
    ) -> RunResult:
        """Plan (unless given), write the lock, then ``pulumi up`` stack by stack in tiers.

        A deployment whose revision changed rolls out replica by replica after that
        (:mod:`modelplane.driver.rollouts`; ``strategy`` ``AllAtOnce`` overrides every
        deployment's ``spec.rollout.strategy``; ``rollout_timeout``: seconds the rollouts may
        take in this run, then they halt and resume on the next ``up``).

        A stack locked by another live update is waited for up to ``lock_wait`` seconds
        (saying so), else reported as locked; a lock left by a killed update on this host
        is cancelled (``pulumi cancel``) and its pending creates settled by ``pulumi refresh
        --import-pending-creates`` / ``--clear-pending-creates``
        (:mod:`modelplane.driver.stacklock`).

        Stacks whose inputs did not change since their last successful update are skipped
        unless ``all_stacks`` or ``refresh``. Stacks in the backend that the fleet no longer
        derives are reported (``orphans``); :meth:`prune` destroys them. ``refresh``,
        ``expect_no_changes``, ``policy_packs`` and ``policy_pack_configs`` are passed to every
        ``pulumi up`` (``--refresh``, ``--expect-no-changes``, ``--policy-pack``,
        ``--policy-pack-config``); with a policy pack no stack is skipped (each is judged).
        """
        if self.spec.empty:  # nothing to deploy: tearing down is destroy's job
            raise FleetInvalid([no_specs(self.path)])
        self.check_gateway_secrets()
        started = time.monotonic()
        plan = plan or self.plan()
        observer = channel(observer, on_event)
        with self.session(observer) as session:
            units = self._select(self.stacks(plan), only)
            # Listing the stacks first also initialises a fresh backend before stacks run
            # in parallel.
            existing = session.list_stacks()
            # A removed deployment holds its capacity while its stack exists (scheduling.md).
            lock = _prune_removed(plan.lock, keep=set(existing), clusters=self.spec.clusters)
            # Replicas that must roll keep their revision until their step (docs/architecture.md).
            runtime = self.runtime
            before = runtime.rollouts()
            prepared = rollouts.prepare(self.spec, lock, before, strategy=strategy, now=time.time())
            lock = prepared.lock
            if prepared.records != before:
                runtime.set_rollouts(prepared.records)
            rollouts.release(runtime, lock, prepared.rolling)
            if prepared.unknown:
                observer.message(
                    "no pod template remembered for the revision of "
                    + ", ".join(prepared.unknown)
                    + " (runtime state lost): changed at once, not rolled"
                )
            written = write_lock(self.lock_path, lock)
            self.previous = lock
            if is_shared(self.backend):
                self.runtime.set_scaled(_scaled_counts(lock))
            observer.message(f"{'wrote' if written else 'unchanged'}: {self.lock_path}")
            ctx = self._context(session, lock, self.lock_path, observer)
            ensure_front_door_key(session, [u.name for u in self.stacks(plan)], session.env)
            needs = ca_stacks(self.spec)
            ensure_fleet_ca(
                session, [u.name for u in self.stacks(plan) if u.name in needs], session.env
            )
            # What the stacks did with the front-door keys last time, before any runs now
            # (only once the key was rotated: before that there is one key, nothing to hold).
            if ever_rotated(session, session.env):
                ctx.front_door_hold = ops.front_door_hold(ctx, self.stacks(plan))
            ctx.lock_wait, ctx.say = lock_wait, observer.message
            if refresh:
                ctx.up_options["refresh"] = True
            if expect_no_changes:
                ctx.up_options["expect_no_changes"] = True
            packs = [str(p) for p in policy_packs]
            if packs:
                ctx.up_options["policy_packs"] = packs
            configs = [str(c) for c in policy_pack_configs]
            if configs:
                ctx.up_options["policy_pack_configs"] = configs
            run = self._run(
                "up", units, lambda u: ops.up_stack(ctx, u, force=all_stacks), parallel, observer
            )
            run.lock_path, run.lock_written = str(self.lock_path), written
            ready = [
                k
                for k in prepared.rolling
                if all(r.ok for r in run.results if r.stack == deploy_stack(k))
            ]
            selected = only is None or any(deploy_stack(k) in only for k in ready)
            if ready and selected and not expect_no_changes:
                self._roll(session, lock, ready, observer, run, rollout_timeout)
            if only is None:
                names = {u.name for u in units}
                run.orphans = [n for n in existing if n not in names]
            run.duration = time.monotonic() - started
            return run

    def prune(
        self,
        *,
        parallel: int = DEFAULT_PARALLEL,
        on_event: OnEvent | None = None,
        force: bool = False,
        observer: Observer | None = None,
    ) -> RunResult:
        """Destroy and remove the stacks in the backend that the fleet no longer derives
        (``up``'s ``orphans``), in reverse tier order, then drop from the lock the removed
        deployments whose stacks are gone (their capacity is free). A cluster stack among
        them is not destroyed while another stack still holds objects on it, unless
        ``force``. ``modelplane up --prune`` runs this after ``up``."""
        started = time.monotonic()
        observer = channel(observer, on_event)
        with self.session(observer) as session:
            existing = session.list_stacks()
            names = {u.name for u in self.stacks()}
            orphans = [self._orphan_unit(n) for n in existing if n not in names]
            run = RunResult("destroy", self.backend_display, lock_path=str(self.lock_path))
            if not orphans:
                return run
            ctx = self._context(session, self.previous, self.lock_path, observer)
            refused = {} if force else self._still_hosting(session, orphans, existing)
            run = self._run(
                "destroy",
                orphans,
                lambda u: self._refused(u, refused) or ops.destroy_stack(ctx, u, remove=True),
                parallel,
                observer,
                reverse=True,
            )
            run.lock_path = str(self.lock_path)
            for r in run.results:
                if r.ok:
                    r.note = "no longer in the fleet: destroyed and removed"
            gone = {r.stack for r in run.results if r.ok}
            lock = _prune_removed(
                self.previous, keep=set(existing) - gone, clusters=self.spec.clusters
            )
            if write_lock(self.lock_path, lock):
                run.lock_written = True
                observer.message(
                    f"wrote: {self.lock_path} (pruned deployments and address blocks dropped)"
                )
            self.previous = lock
            run.duration = time.monotonic() - started
            return run

    def destroy(
        self,
        *,
        parallel: int = DEFAULT_PARALLEL,
        on_event: OnEvent | None = None,
        only: Iterable[str] | None = None,
        remove: bool = False,
        force: bool = False,
        observer: Observer | None = None,
    ) -> RunResult:
        """Destroy every stack of the fleet that exists in the backend (also stacks the
        fleet no longer derives), in reverse tier order; ``remove`` deletes the stacks too.
        A cluster stack is not destroyed while a stack outside the run still holds objects
        on it (it fails saying which), unless ``force``."""
        observer = channel(observer, on_event)
        with self.session(observer) as session:
            existing = set(session.list_stacks())
            derived = self.stacks()
            names = {u.name for u in derived}
            units = [u for u in derived if u.name in existing]
            units += [self._orphan_unit(n) for n in sorted(existing - names)]
            units = self._select(units, only, known=[u.name for u in derived] + sorted(existing))
            ctx = self._context(session, self.previous, self.lock_path, observer)
            refused = {} if force else self._still_hosting(session, units, existing)
            return self._run(
                "destroy",
                units,
                lambda u: (
                    self._refused(u, refused)
                    # The program's providers (today's kubeconfigs), where the fleet still
                    # derives the stack; an orphan's program is gone: its state's providers.
                    or ops.destroy_stack(ctx, u, remove=remove, run_program=u.name in names)
                ),
                parallel,
                observer,
                reverse=True,
            )

    def refresh(
        self,
        *,
        parallel: int = DEFAULT_PARALLEL,
        on_event: OnEvent | None = None,
        only: Iterable[str] | None = None,
        observer: Observer | None = None,
    ) -> RunResult:
        """``pulumi refresh`` of every existing stack: read the real state of its resources.

        Stacks that only act on renderTo clusters have nothing live to read: they are not
        refreshed and their result says why."""
        observer = channel(observer, on_event)
        with self.session(observer) as session:
            existing = set(session.list_stacks())
            units = [u for u in self._select(self.stacks(), only) if u.name in existing]
            ctx = self._context(session, self.previous, self.lock_path, observer)
            return self._run(
                "refresh",
                units,
                lambda u: ops.refresh_stack(
                    ctx, u, refresh_skip_reason(self.spec, self.previous, u)
                ),
                parallel,
                observer,
                blocking=lambda r: False,
            )

    def status(self, *, parallel: int = DEFAULT_PARALLEL) -> FleetStatus:
        """Placement from the lock plus every stack's last result, sync state and outputs."""
        with self.session() as session:
            existing = set(session.list_stacks())
            units = self.stacks()
            ctx = self._context(session, self.previous, self.lock_path, Observer())
            statuses: dict[str, ops.StackStatus] = {}

            def one(unit: StackUnit) -> StackResult:
                statuses[unit.name] = ops.status_stack(ctx, unit, existing)
                return StackResult(unit.name, unit.tier, Outcome.SUCCEEDED)

            run_tiers(units, one, parallel=parallel, blocking=lambda r: False)
            return FleetStatus(
                self.backend_display,
                self.previous,
                [statuses[u.name] for u in units],
                sorted(existing - {u.name for u in units}),
            )

    def resources(self, stack: str) -> list[dict[str, Any]]:
        """The resources in a stack's state (``pulumi stack export``; secrets stay encrypted).

        Empty when the stack does not exist or holds nothing (e.g. after ``destroy``).
        """
        from pulumi.automation.errors import StackNotFoundError

        with self.session() as session:
            try:
                exported = session.stack(stack, create=False).export_stack()
            except StackNotFoundError:
                return []
        return list((exported.deployment or {}).get("resources") or [])

    def cluster_kubeconfigs(self) -> dict[str, str]:
        """The kubeconfig of every cloud cluster (GKE, EKS) whose cluster stack has run: its
        ``kubeconfig`` output, the only place it exists. Secrets: for the observation only,
        never printed. Without such clusters no engine is started."""
        from pulumi.automation.errors import CommandError, StackNotFoundError

        wanted = {
            cluster_stack(name): name
            for name, c in self.spec.clusters.items()
            if c.spec.cluster.existing is None
        }
        if not wanted:
            return {}
        out: dict[str, str] = {}
        with self.session() as session:
            existing = set(session.list_stacks())
            for stack_name, name in sorted(wanted.items()):
                if stack_name not in existing:
                    continue
                try:
                    outputs = session.stack(stack_name, create=False).outputs()
                except (StackNotFoundError, CommandError):
                    continue
                value = outputs.get("kubeconfig")
                if value is not None and isinstance(value.value, str) and value.value:
                    out[name] = value.value
        return out

    # -- internals -------------------------------------------------------------------------

    def _roll(
        self,
        session: EngineSession,
        lock: PlacementLock,
        keys: list[str],
        observer: Observer,
        run: RunResult,
        deadline: float | None,
    ) -> None:
        """Step the rollouts of ``keys`` (:class:`rollouts.Rollouts`); each step's stack
        results join ``run`` (a failed step fails the run)."""
        from modelplane.observe import observe_fleet

        kubeconfigs = self.cluster_kubeconfigs()
        units = {u.name: u for u in self.stacks()}

        def apply(new: PlacementLock, stacks: list[str]) -> bool:
            if write_lock(self.lock_path, new):
                run.lock_written = True
            self.previous = new
            ctx = self._context(session, new, self.lock_path, observer)
            ok = True
            for name in stacks:
                result = ops.up_stack(ctx, units[name])
                observer.stack_finished(result)
                if not result.ok:
                    ok = False
                    run.results = [r for r in run.results if r.stack != name] + [result]
            return ok

        def observe(new: PlacementLock, deployments: list[str]) -> Observation:
            return observe_fleet(
                self.spec,
                self.path,
                lock=new,
                env=self.env,
                kubeconfigs=kubeconfigs,
                timeout=5.0,
                metrics_of=deployments,
                only_replicas=True,
            )

        world = rollouts.World(
            apply,
            observe,
            observer.message,
            gateways=tuple(gateway_stack_names(self.spec)),
        )
        stepper = rollouts.Rollouts(self.spec, self.runtime, world, deadline=deadline)
        self.previous = stepper.run(lock, keys)
        run.rollouts = [o.as_json() for o in stepper.outcomes.values()]
        for o in stepper.outcomes.values():
            why = f": {o.reason}" if o.reason else ""
            observer.message(f"{o.key}: {o.progress} ({o.phase}{why})")

    def migrate(
        self, old_project: str = LEGACY_PROJECT, observer: Observer | None = None
    ) -> Migration:
        """Move this fleet's stacks from ``old_project`` (the one project every fleet shared
        before) to the fleet's own (``pulumi stack rename``), and its runtime documents on
        ``postgres://`` from the old key (the directory's name) to the project's."""
        from modelplane.driver.migrate import migrate_stacks
        from modelplane.driver.state import FLEET_ID_ENV

        with self.session(observer) as session:
            session.auto_migrate = False
            session._legacy_checked = True  # this is the move itself
            done = migrate_stacks(session, old_project)
        store = self.runtime.store
        if is_shared(self.backend) and not self.env.get(FLEET_ID_ENV):
            adopt = getattr(store, "adopt", None)
            if adopt is not None:
                done.runtime_documents = adopt(self.path.name)
        return done

    def rotate_front_door_key(
        self, *, after: timedelta, grace: timedelta, observer: Observer | None = None
    ) -> Rotation:
        """A new front-door key in every stack that reads it, sent from ``after`` on; the
        older keys end ``grace`` from now (modelplane/front_door_keys.py)."""
        with self.session(observer) as session:
            session.list_stacks()  # a fresh backend is initialised before config is set
            return rotate_front_door_key(
                session, [u.name for u in self.stacks()], session.env, after=after, grace=grace
            )

    def rotate_certificates(self, observer: Observer | None = None) -> CertificateRotation:
        """New certificates for the workload gateways and the front door at the next `up`
        (the certificates' generation counted up; modelplane/driver/fleet_ca.py)."""
        with self.session(observer) as session:
            existing = set(session.list_stacks())
            needs = ca_stacks(self.spec)
            return rotate_certificates(
                session, [u.name for u in self.stacks() if u.name in needs & existing]
            )

    def switch_front_door_key(
        self, *, grace: timedelta, observer: Observer | None = None
    ) -> Rotation:
        """The front-door key a rotation added is sent from now on; the older keys end
        ``grace`` from now (modelplane/front_door_keys.py)."""
        with self.session(observer) as session:
            session.list_stacks()
            return switch_front_door_key(
                session, [u.name for u in self.stacks()], session.env, grace=grace
            )

    @contextmanager
    def session(self, observer: Observer | None = None) -> Iterator[EngineSession]:
        """An engine session for this fleet: checks secrets and the engine (before any stack
        runs), cleans up after the run. ``observer`` hears its progress messages."""
        observer = observer or Observer()
        secrets = resolve_secrets(self.backend, self.secrets_provider, self.env)
        private_dir(self.state_dir)  # workspaces, a file:// state: 0700, ignoring itself
        session = EngineSession(
            self.state_dir / "workspaces",
            self.backend,
            secrets,
            self.env,
            observer.message,
            config_dir=self.path,
            project=self.project,
            organization=self.organization,
        )
        session.expected = {u.name for u in stack_units(self.spec, self.previous)}
        session.fleet_label = str(self.path)
        session.auto_migrate = self.backend == default_backend(self.path)
        session.cache = StackCache(self.runtime.store, {})
        try:
            session.start()
            yield session
        except ModelplaneError as exc:  # the engine's messages may quote the backend URL
            text = str(exc)
            if self.scrub(text) != text:
                exc.args = (self.scrub(text),)
            raise
        finally:
            try:
                session.cache.save()
            except Exception as exc:  # a memory, never a reason to fail the run
                observer.message(f"could not save the stack cache: {exc}")
            session.close()

    def _context(
        self,
        session: EngineSession,
        lock: PlacementLock,
        lock_path: Path,
        observer: Observer,
    ) -> ops.RunContext:
        runtime = self.runtime
        unroutable = runtime.routing().exclusions()
        templates = rollouts.templates_env(lock, runtime.rollouts())
        session.set_program_inputs(self.path, lock_path, unroutable, templates)
        spec = self.spec
        fence = self.fence

        def check(unit: StackUnit) -> str | None:
            return (fence() if fence else None) or missing_for_stack(spec, unit, session.env)

        return ops.RunContext(
            session,
            self.path,
            spec,
            lock,
            lock_path,
            on_event=observer.stack_event,
            on_start=observer.stack_started,
            check=check,
            plan_dir=self.state_dir / "plan",
            unroutable=unroutable,
            cache=session.cache,
            existing=session.existing,
            digests=session.digests,
        )

    def _run(
        self,
        operation: str,
        units: list[StackUnit],
        run: Callable[[StackUnit], StackResult],
        parallel: int,
        observer: Observer,
        *,
        reverse: bool = False,
        blocking: Callable[[StackResult], bool] | None = None,
    ) -> RunResult:
        started = time.monotonic()

        def wrapped(unit: StackUnit) -> StackResult:
            observer.stack_queued(unit)
            result = run(unit)
            observer.stack_finished(result)
            return result

        observer.run_started(operation, units)
        results = run_tiers(
            units,
            wrapped,
            parallel=parallel,
            reverse=reverse,
            blocking=blocking,
            on_skip=observer.stack_skipped,
        )
        for r in results:  # the engine's messages may quote the backend URL
            r.error = self.scrub(r.error) if r.error else r.error
            r.warnings = [self.scrub(w) for w in r.warnings]
        run_result = RunResult(operation, self.backend_display, results)
        run_result.duration = time.monotonic() - started
        observer.run_finished(run_result)
        return run_result

    def _still_hosting(
        self, session: EngineSession, units: list[StackUnit], existing: Iterable[str]
    ) -> dict[str, list[str]]:
        """Cluster stacks among `units` on which a stack outside `units` still holds
        objects (read from the stacks' exported state), with those stacks."""
        from pulumi.automation.errors import StackNotFoundError

        clusters = [u.name for u in units if u.tier == Tier.CLUSTERS]
        if not clusters:
            return {}
        leaving = {u.name for u in units}
        others = sorted(
            n for n in existing if n not in leaving and tier_of_stack_name(n) != Tier.CLUSTERS
        )
        states: dict[str, list[dict[str, Any]]] = {}
        for name in others:
            try:
                exported = session.stack(name, create=False).export_stack()
            except StackNotFoundError:
                continue
            states[name] = list((exported.deployment or {}).get("resources") or [])
        gateway = self.spec.gateway
        gateway_cluster = gateway.spec.cluster.inference_cluster_ref if gateway else None
        return hosting.still_hosting(clusters, states, gateway_cluster)

    @staticmethod
    def _refused(unit: StackUnit, refused: Mapping[str, list[str]]) -> StackResult | None:
        stacks = refused.get(unit.name)
        if not stacks:
            return None
        return StackResult(unit.name, unit.tier, Outcome.FAILED, error=hosting.refusal(stacks))

    @staticmethod
    def _orphan_unit(name: str) -> StackUnit:
        return StackUnit(name, tier_of_stack_name(name), "orphan", name)

    @staticmethod
    def _select(
        units: list[StackUnit], only: Iterable[str] | None, known: list[str] | None = None
    ) -> list[StackUnit]:
        if only is None:
            return units
        wanted = list(dict.fromkeys(only))
        valid = known if known is not None else [u.name for u in units]
        unknown = [n for n in wanted if n not in valid]
        if unknown:
            raise DriverError(
                f"no stack named {', '.join(unknown)} in this fleet; its stacks are: "
                + (", ".join(dict.fromkeys(valid)) or "(none)")
            )
        return [u for u in units if u.name in wanted]
