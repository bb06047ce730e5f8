"""Per-stack engine operations: preview, up, destroy, refresh and status of one stack.

The four engine verbs run through one template (:class:`EngineOp`); each returns a
:class:`StackResult` and turns the engine's expected failures (program errors, a stack
locked by another update, a missing stack) into results with a short message; only bugs
raise.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from modelplane import front_door_keys
from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import PlacementLock
from modelplane.driver import stacklock
from modelplane.driver.errors import DriverError, EngineFailed, StackLocked
from modelplane.driver.events import StackProgress
from modelplane.driver.fingerprint import can_skip, stack_fingerprint, update_message
from modelplane.driver.offline import OfflinePreview
from modelplane.driver.project import LEGACY_PROJECT
from modelplane.driver.rendering import refresh_skip_reason
from modelplane.driver.results import Outcome, StackResult
from modelplane.driver.settings import local_state_dir
from modelplane.driver.stack_cache import StackCache, outputs_digest
from modelplane.driver.workspace import (
    TEMPLATES_CONFIG,
    TEMPLATES_ENV,
    UNROUTABLE_CONFIG,
    EngineSession,
    existing_stack,
)
from modelplane.errors import Retryable
from modelplane.stacks import GATEWAY_STACK, StackUnit, mounting

if TYPE_CHECKING:
    from pulumi.automation import Stack

UPSTREAM_ENV = "MODELPLANE_UPSTREAM_OUTPUTS"
EventSink = Callable[[StackUnit, StackProgress, Any], None]
T = TypeVar("T")
SECRET_MASK = "[secret]"
# The engine's closing line after the program's own error message says nothing new.
_GENERIC = re.compile(
    r"an unhandled error occurred: Program exited with non-zero exit code|^update failed$"
)


@dataclass
class RunContext:
    """What every stack of one run shares."""

    session: EngineSession
    fleet_dir: Path
    fleet: FleetSpec
    lock: PlacementLock
    lock_path: Path
    on_event: EventSink | None = None
    on_start: Callable[[StackUnit, StackProgress], None] | None = None
    # Before the engine runs a stack: an error that stops it (a missing plugin), else None.
    check: Callable[[StackUnit], str | None] | None = None
    # Extra keyword arguments of `Stack.up` (refresh, expect_no_changes, policy_packs).
    up_options: dict[str, Any] = field(default_factory=dict)
    # Extra keyword arguments of `Stack.preview` (refresh, policy_packs).
    preview_options: dict[str, Any] = field(default_factory=dict)
    plan_dir: Path = field(default_factory=lambda: Path(".modelplane/plan"))
    # Clusters whose endpoints the gateway leaves out of routes (`.modelplane/routing.json`).
    unroutable: tuple[str, ...] = ()
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # plain values
    masked: dict[str, dict[str, Any]] = field(default_factory=dict)  # secrets masked
    # A stack locked by a live update: wait up to this many seconds for it (0: report it as
    # locked at once, e.g. reconcile retries next round). `say` tells the user.
    lock_wait: float = 0.0
    say: Callable[[str], None] | None = None
    # What the driver remembers of each stack between runs (modelplane.driver.stack_cache);
    # None: every stack is checked through its history.
    cache: StackCache | None = None
    # The stacks this run's `stack ls` listed (None: not listed; select each stack).
    existing: set[str] | None = None
    digests: dict[str, str] = field(default_factory=dict)  # outputs_digest per stack
    # The front-door users the stacks saw in the previous `up` (front_door_hold), or None
    # (a preview: the stacks' config keeps what the last `up` wrote).
    front_door_hold: dict[str, str | None] | None = None
    _subject: list[str | None] = field(default_factory=list)  # [commit subject], once known

    def commit_subject(self) -> str | None:
        """The subject of the fleet folder's git commit (what `pulumi up` alone would record
        as the update's message), or None outside a git work tree; looked up once."""
        if not self._subject:
            self._subject.append(commit_subject(self.fleet_dir))
        return self._subject[0]

    def problem(self, unit: StackUnit, started: float) -> StackResult | None:
        """A failed result when the stack cannot run on this machine, else None."""
        error = self.check(unit) if self.check else None
        if error is None:
            return None
        return StackResult.failed(unit, error, time.monotonic() - started)

    def progress(self, unit: StackUnit) -> StackProgress:
        progress = StackProgress(unit.name)
        if self.on_start:
            self.on_start(unit, progress)
        return progress

    def listener(self, unit: StackUnit, progress: StackProgress) -> Callable[[Any], None]:
        def on_event(event: Any) -> None:
            progress.feed(event)
            if self.on_event:
                self.on_event(unit, progress, event)

        return on_event

    def remember(self, name: str, outputs: Mapping[str, Any]) -> None:
        plain: dict[str, Any] = {}
        masked: dict[str, Any] = {}
        for key, out in outputs.items():
            plain[key] = out.value
            masked[key] = SECRET_MASK if out.secret else out.value
        self.outputs[name] = plain
        self.masked[name] = masked
        self.digests[name] = outputs_digest(plain)

    def exists(self, name: str) -> bool:
        return self.existing is not None and name in self.existing

    def output_digest(self, name: str) -> str:
        """The digest of a stack's outputs: from this run, the stack cache, else the backend
        (one CLI process; a stack that does not exist has no outputs)."""
        if name in self.digests:
            return self.digests[name]
        entry = self.cache.valid(name) if self.cache is not None else None
        if entry is not None:
            self.digests[name] = entry.outputs
            return entry.outputs
        if self.existing is not None and name not in self.existing:
            plain: dict[str, Any] | None = None
        else:
            plain = self.session.plain_outputs(name)
        self.digests[name] = outputs_digest(plain)
        return self.digests[name]


def locked_message(stack: str, backend: str, project: str = LEGACY_PROJECT) -> str:
    state = local_state_dir(backend)
    where = (
        f"delete {state}/.pulumi/locks/organization/{project}/{stack}/"
        if state is not None
        else f"run `pulumi cancel -s {stack}` (Pulumi Cloud) or remove the lock in the backend"
    )
    return (
        f"stack {stack} is locked by another update (a `modelplane up` or `pulumi up` on it is "
        f"still running). Wait for it to finish and run again; if nothing is running, the lock "
        f"is stale: {where}"
    )


def error_text(exc: Exception, progress: StackProgress | None) -> str:
    """The engine's own error diagnostics, else the tail of its stderr."""
    if progress is not None and progress.errors:
        specific = [e for e in progress.errors if not _GENERIC.search(e)]
        return "\n".join(_short(e) for e in specific or progress.errors)
    stderr = getattr(getattr(exc, "args", [None])[0], "stderr", None)
    text = str(exc)
    if "stderr:" in text:
        text = text.split("stderr:", 1)[1]
    lines = [ln.strip() for ln in (stderr or text).strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    return _short("\n".join(errors[-5:] or lines[-5:]) or type(exc).__name__)


def _short(text: str, limit: int = 2000) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: The engine's failures (Pulumi's automation error classes, most specific first) and what
#: each is to modelplane: the one table the driver classifies them by.
ENGINE_FAILURES: tuple[tuple[str, type[DriverError]], ...] = (
    ("ConcurrentUpdateError", StackLocked),
    ("CommandError", EngineFailed),
)


def classify(
    exc: Exception,
    stack: str,
    progress: StackProgress | None,
    backend: str,
    project: str = LEGACY_PROJECT,
) -> DriverError:
    """The engine failure ``exc`` as a modelplane error with its message for people."""
    from pulumi.automation import errors

    for name, kind in ENGINE_FAILURES:
        if isinstance(exc, getattr(errors, name)):
            if kind is StackLocked or stacklock.is_lock_error(exc):
                return StackLocked(locked_message(stack, backend, project))
            return kind(error_text(exc, progress))
    return EngineFailed(error_text(exc, progress))


def _failure(
    unit: StackUnit,
    exc: Exception,
    progress: StackProgress | None,
    started: float,
    backend: str,
    project: str = LEGACY_PROJECT,
) -> StackResult:
    error = classify(exc, unit.name, progress, backend, project)
    changes = progress.change_counts() if progress else {}
    duration = time.monotonic() - started
    locked = isinstance(error, Retryable)
    shown = None if locked else progress  # locked: its resources are not reported
    return StackResult(
        unit.name,
        unit.tier,
        Outcome.LOCKED if locked else Outcome.FAILED,
        changes=changes,
        duration=duration,
        error=str(error),
        resources=shown.changes() if shown else [],
        warnings=list(shown.warnings) if shown else [],
    )


# At most this many `pulumi stack output` reads at once (each is a CLI process).
OUTPUT_READERS = 4


def _read_outputs(ctx: RunContext, names: Sequence[str]) -> None:
    """Fetch the outputs of stacks this run has not seen yet, concurrently: the gateway reads
    every deployment stack's, and each read is two CLI processes (masked and plain), so
    reading them one after another dominated a gateway-only `up`. A stack that does not
    exist has no outputs. (`stack output --stack` needs no `stack select` first.)"""
    from pulumi.automation.errors import StackNotFoundError

    missing = [n for n in dict.fromkeys(names) if n not in ctx.outputs]
    if not missing:
        return

    def read(name: str) -> Any:
        try:
            return ctx.session.workspace(name).stack_outputs(ctx.session.qualified(name))
        except StackNotFoundError:
            return None

    if len(missing) == 1:
        found = [read(missing[0])]
    else:
        with ThreadPoolExecutor(max_workers=min(OUTPUT_READERS, len(missing))) as pool:
            found = list(pool.map(read, missing))
    for name, outputs in zip(missing, found, strict=True):
        if outputs is None:
            ctx.outputs[name], ctx.masked[name] = {}, {}
        else:
            ctx.remember(name, outputs)


def _last_outputs(ctx: RunContext, name: str) -> Mapping[str, Any]:
    """A stack's outputs as its last update left them, secrets masked: the stack cache's,
    else the backend's (nothing for a stack that does not exist)."""
    entry = ctx.cache.valid(name) if ctx.cache is not None else None
    if entry is not None:
        return entry.masked
    if ctx.existing is not None and name not in ctx.existing:
        return {}
    _read_outputs(ctx, [name])
    return ctx.masked.get(name, {})


def front_door_hold(ctx: RunContext, units: Sequence[StackUnit]) -> dict[str, str | None]:
    """What the stacks did with the front-door keys in the previous `up`, read before this
    one runs them (modelplane/front_door_keys.py): ``keep``, the user the front door sent
    (the deployments keep accepting it); ``accepted``, the users every deployment's workload
    gateways took (the only ones the front door may send; JSON). None where unknown (no
    such stack yet, or one made before these outputs): no hold."""
    keep: str | None = None
    accepted: set[str] | None = None
    for unit in units:
        if unit.kind == "InferenceGateway":
            # Every front door sends the same key; the first front door's stack says which.
            if unit.name != GATEWAY_STACK and keep is not None:
                continue
            user = _last_outputs(ctx, unit.name).get("frontDoorUser")
            keep = user if isinstance(user, str) else None
        elif unit.kind == "ModelDeployment":
            users = _last_outputs(ctx, unit.name).get("frontDoorUsers")
            if isinstance(users, list):
                found = {str(u) for u in users}
                accepted = found if accepted is None else accepted & found
    listed = json.dumps(sorted(accepted)) if accepted is not None else None
    return {"keep": keep, "accepted": listed}


def deployed_outputs(ctx: RunContext, name: str) -> tuple[dict[str, Any], frozenset[str]]:
    """A deployed stack's outputs (plain values) and the names of its secret outputs."""
    _read_outputs(ctx, [name])
    secret = frozenset(k for k, v in ctx.masked[name].items() if v == SECRET_MASK)
    return dict(ctx.outputs[name]), secret


def fingerprint_of(ctx: RunContext, unit: StackUnit) -> str:
    return stack_fingerprint(
        ctx.fleet,
        ctx.lock,
        unit,
        {dep: ctx.output_digest(dep) for dep in unit.upstream},
        extra_config=ctx.session.extra_config(unit.name),
        hold=ctx.session.hold_config(unit.name),
        environ=ctx.session.env,
        base_dir=ctx.fleet_dir,
        unroutable=ctx.unroutable,
        project=ctx.session.project,
        environments=ctx.session.environments(unit.name),
    )


def _rendered_result(
    ctx: RunContext, unit: StackUnit, offline: OfflinePreview, reason: str, started: float
) -> StackResult:
    """A stack the engine cannot preview: its offline render (never a stack in the backend)."""
    from modelplane.render.runner import RenderError

    # A stack this machine cannot run (a cloud SDK or plugin missing) fails before its render,
    # which imports the same SDKs and would fail less clearly.
    problem = ctx.problem(unit, started)
    if problem is not None:
        return problem
    try:
        rendered = offline.render(unit.name)
    except RenderError as exc:
        error = f"{reason}, but the offline render failed: {exc.cause}"
        return StackResult.failed(unit, error, time.monotonic() - started)
    new = offline.is_new(unit.name)
    result = StackResult(unit.name, unit.tier, Outcome.NEW if new else Outcome.RENDERED)
    result.changes = {"create": rendered.count} if new else {}
    result.resources = list(rendered.resources) if new else []
    result.note = f"{reason} ({rendered.count} resources)"
    result.duration = time.monotonic() - started
    offline.mark_changed(unit.name)
    return result


class EngineOp:
    """One engine operation on one stack: the template the four verbs share.

    ``run`` checks the machine (``RunContext.check``), selects the stack, calls
    ``stack.<verb>(...)`` with the live listener, and turns the outcome into a
    :class:`StackResult`; the engine's expected failures (program errors, a locked stack, a
    missing stack) become failed or locked results. A verb overrides only its hooks.
    """

    verb = ""
    create = False  # create the stack when it is not in the backend

    def __init__(self, ctx: RunContext, unit: StackUnit) -> None:
        self.ctx = ctx
        self.unit = unit
        self.started = time.monotonic()
        self.extra_env: dict[str, str] = {}
        self.recovered = False  # a stale stack lock was broken
        self.deadline = 0.0  # until when a live lock is waited for
        self.stack: Stack | None = None  # once selected
        self.window = (0.0, 0.0)  # when the engine ran the verb (Unix seconds)

    # -- hooks -----------------------------------------------------------------------------

    def early(self) -> StackResult | None:
        """A result without the engine, before the machine check (nothing to run)."""
        return None

    def prepare(self) -> StackResult | None:
        """After the machine check, before the stack is selected: a result that stops here."""
        return None

    def skip(self, stack: Stack) -> StackResult | None:
        """With the stack selected, before the engine runs: a result that skips it."""
        return None

    def options(self) -> dict[str, Any]:
        """Extra keyword arguments of ``stack.<verb>``."""
        return {}

    def done(self, stack: Stack, outcome: Any, result: StackResult) -> None:
        """After a successful operation: outputs, notes, clean-up."""

    def invoke(self, stack: Stack, on_event: Callable[[Any], None], **options: Any) -> Any:
        """Run the verb through the Automation API (``stack.<verb>(...)``)."""
        return getattr(stack, self.verb)(on_event=on_event, **options)

    # -- the template ----------------------------------------------------------------------

    def result(self, outcome: Outcome, **fields: Any) -> StackResult:
        return StackResult(
            self.unit.name,
            self.unit.tier,
            outcome,
            duration=time.monotonic() - self.started,
            **fields,
        )

    def run(self) -> StackResult:
        from pulumi.automation.errors import CommandError

        ctx, unit = self.ctx, self.unit
        stopped = self.early() or ctx.problem(unit, self.started) or self.prepare()
        if stopped is not None:
            return stopped
        progress: StackProgress | None = None
        # One lock handler for every CLI call of the operation (`locking`): selecting the
        # stack, reading its history, the verb itself and what `done` reads.
        self.deadline = time.monotonic() + ctx.lock_wait
        try:
            stack = self.locking(
                lambda: ctx.session.stack(
                    unit.name,
                    create=self.create,
                    extra_env=self.extra_env,
                    exists=ctx.exists(unit.name),
                )
            )
            self.stack = stack
            skipped = self.locking(lambda: self.skip(stack))
            if skipped is not None:
                return skipped
            while True:
                progress = ctx.progress(unit)
                self.window = (time.time(), self.window[1])
                try:
                    outcome = self.invoke(
                        stack,
                        ctx.listener(unit, progress),
                        color="never",
                        suppress_progress=True,
                        **self.options(),
                    )
                    break
                except CommandError as exc:
                    if not self.locked_again(exc):
                        raise
            self.window = (self.window[0], time.time())
            result = self.result(
                Outcome.SUCCEEDED,
                changes=progress.change_counts(),
                resources=progress.changes(),
                warnings=list(progress.warnings),
            )
            self.locking(lambda: self.done(stack, outcome, result))
            result.duration = time.monotonic() - self.started
            return result
        except CommandError as exc:
            return _failure(
                unit, exc, progress, self.started, ctx.session.backend, ctx.session.project
            )

    def locking(self, call: Callable[[], T]) -> T:
        """``call()`` (CLI calls of this operation), run again while :meth:`locked_again`
        says so: a stale lock broken, or a live one waited for."""
        from pulumi.automation.errors import CommandError

        while True:
            try:
                return call()
            except CommandError as exc:
                if not self.locked_again(exc):
                    raise

    def locked_again(self, exc: Exception) -> bool:
        """``exc`` says the stack is locked: break a stale lock of a killed update (and
        settle its pending operations, :func:`stacklock.recover`), or wait for a live one
        until ``self.deadline``; True to run the call again."""
        if not stacklock.is_lock_error(exc) or self.verb == "preview":
            return False
        say = self.ctx.say or (lambda _m: None)
        text = str(exc)
        gone = stacklock.all_stale(text)
        if gone and not self.recovered:  # once: a lock that stays is not ours to break
            self.recovered = True
            recovery = stacklock.recover(self.locked_stack(), rendered=self.renders())
            if recovery.refreshes and self.ctx.cache is not None:
                self.ctx.cache.forget(self.unit.name)  # its state changed outside an update
            say(
                f"{self.unit.name}: the update of {gone[0].describe()} was killed; its lock is "
                f"released (pulumi cancel); {recovery.describe()}; running again"
            )
            return True
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        held = ", ".join(h.describe() for h in stacklock.holders(text)) or "another update"
        say(
            f"{self.unit.name} is locked by {held} (another `up` or `reconcile`): "
            f"waiting for it, up to {left:.0f}s more"
        )
        time.sleep(min(LOCK_POLL, left))
        return True

    def locked_stack(self) -> Stack:
        """The stack to recover: the selected one, else (its selection met the lock) one made
        without a CLI call; a locked stack exists."""
        if self.stack is not None:
            return self.stack
        ws = self.ctx.session.workspace(self.unit.name, self.extra_env)
        return existing_stack(self.ctx.session.qualified(self.unit.name), ws)

    def renders(self) -> bool:
        """Every cluster the stack acts on renders manifests (renderTo): nothing to refresh."""
        return refresh_skip_reason(self.ctx.fleet, self.ctx.lock, self.unit) is not None


LOCK_POLL = 5.0


def commit_subject(directory: Path) -> str | None:
    """The subject line of HEAD's commit of the git work tree holding ``directory``."""
    import subprocess

    try:
        done = subprocess.run(
            ["git", "-C", str(directory), "log", "-1", "--format=%s"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    subject = done.stdout.strip() if done.returncode == 0 else ""
    return subject or None


class UpOp(EngineOp):
    """``pulumi up``; skipped when the inputs equal those of the last successful update
    (known from the stack cache without any CLI process, else from the stack's history)."""

    verb = "up"
    create = True

    def __init__(self, ctx: RunContext, unit: StackUnit, force: bool) -> None:
        super().__init__(ctx, unit)
        self.force = force
        self.message = ""
        self.fingerprint = ""
        self.known_changed = False
        self.synced = False
        self.environments: list[str] = []

    def checks_everything(self) -> bool:
        """A refresh reads every resource, a policy pack judges every one: nothing skipped."""
        options = self.ctx.up_options
        return bool(options.get("refresh") or options.get("policy_packs"))

    def program_config(self) -> dict[str, str | None]:
        """The run-time decisions this stack's program reads, as its stack config: the
        gateway's unroutable clusters and replicas, a deployment's older revisions' pod
        templates during a rollout (None: no such key)."""
        unit = self.unit
        hold = self.ctx.front_door_hold
        if unit.kind == "InferenceGateway":
            listed = json.dumps(sorted(self.ctx.unroutable)) if self.ctx.unroutable else None
            held = {} if hold is None else {front_door_keys.ACCEPTED_CONFIG: hold["accepted"]}
            return {UNROUTABLE_CONFIG: listed, **held}
        if unit.kind == "ModelDeployment":
            every = self.ctx.session.program_env.get(TEMPLATES_ENV) or "{}"
            mine = json.loads(every).get(unit.key)
            held = {} if hold is None else {front_door_keys.KEEP_CONFIG: hold["keep"]}
            return {TEMPLATES_CONFIG: json.dumps(mine, sort_keys=True) if mine else None, **held}
        if unit.kind == "ModelCache":
            # The sources replicas still read (modelplane.rollout.cache_use): the templates
            # of the deployments mounting the cache, by deployment.
            every = json.loads(self.ctx.session.program_env.get(TEMPLATES_ENV) or "{}")
            users = mounting(self.ctx.fleet, unit.key)
            mine = {k: v for k, v in every.items() if k in users}
            return {TEMPLATES_CONFIG: json.dumps(mine, sort_keys=True) if mine else None}
        return {}

    def sync_program_config(self) -> None:
        """Write :meth:`program_config` into the stack's config (once, the stack existing),
        so a hand-run `pulumi up -s` reads what this run reads."""
        if self.synced:
            return
        self.synced = True
        values = self.program_config()
        if values:
            self.ctx.session.sync_config(self.unit.name, values)

    def prepare(self) -> StackResult | None:
        if self.ctx.exists(self.unit.name):
            self.sync_program_config()
        self.fingerprint = fingerprint_of(self.ctx, self.unit)
        self.message = update_message(self.fingerprint, self.ctx.commit_subject())
        self.environments = self.ctx.session.environments(self.unit.name)
        if self.force or self.ctx.cache is None or self.checks_everything():
            return None
        if self.environments:
            return None  # ESC values the driver cannot see: the engine runs it every time
        here = self.ctx.cache.updated_here(self.unit.name)
        if here is not None and here != self.fingerprint:
            # This run updated the stack with other inputs (a rollout's earlier step): it
            # changes again, whatever the history says.
            self.known_changed = True
            return None
        entry = self.ctx.cache.valid(self.unit.name)
        if entry is None:
            return None
        if entry.fingerprint != self.fingerprint:
            self.known_changed = True  # the last update had other inputs: no history to read
            return None
        name = self.unit.name
        self.ctx.masked[name] = dict(entry.masked)
        self.ctx.digests[name] = entry.outputs
        return self.result(
            Outcome.UNCHANGED,
            outputs=dict(entry.masked),
            note="inputs unchanged since its last successful update",
        )

    def skip(self, stack: Stack) -> StackResult | None:
        self.sync_program_config()  # a stack this run created
        if self.force or self.known_changed or self.checks_everything():
            return None
        if self.ctx.existing is not None and not self.ctx.exists(self.unit.name):
            return None  # made in this run: no update to compare with (no `stack history`)
        last = stack.history(page_size=1, show_secrets=False)
        entry = last[0] if last else None
        if entry is None or not can_skip(
            self.fingerprint, entry.kind, entry.result, entry.message, self.environments
        ):
            return None
        name = self.unit.name
        self.ctx.remember(name, stack.outputs())
        if self.ctx.cache is not None:
            self.ctx.cache.seen(
                name, self.fingerprint, self.ctx.outputs[name], self.ctx.masked[name]
            )
        return self.result(
            Outcome.UNCHANGED,
            outputs=self.ctx.masked[name],
            note="inputs unchanged since its last successful update",
        )

    def options(self) -> dict[str, Any]:
        return {"message": self.message, **self.ctx.up_options}

    def invoke(self, stack: Stack, on_event: Callable[[Any], None], **options: Any) -> Any:
        return run_up(stack, on_event, options)

    def done(self, stack: Stack, outcome: Any, result: StackResult) -> None:
        name = self.unit.name
        self.ctx.remember(name, outcome.outputs)
        result.outputs = self.ctx.masked[name]
        if self.ctx.existing is not None:
            self.ctx.existing.add(name)
        if self.ctx.cache is not None:
            if self.ctx.up_options.get("refresh"):
                # A refresh inside the update may change the state without the program.
                self.ctx.cache.forget(name)
            else:
                self.ctx.cache.updated(
                    name,
                    self.fingerprint,
                    self.ctx.outputs[name],
                    self.ctx.masked[name],
                    self.window,
                )


@dataclass
class UpOutcome:
    """What :func:`run_up` returns: the stack's outputs after the update."""

    outputs: dict[str, Any]
    stdout: str = ""
    stderr: str = ""


STACK_TYPE = "pulumi:pulumi:Stack"


def _masked(value: Any) -> bool:
    """A secret as the engine's events show it (a secret signature, ciphertext hidden)."""
    return isinstance(value, dict) and SECRET_SIG in value


SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's secret signature key


def run_up(stack: Stack, on_event: Callable[[Any], None], options: Mapping[str, Any]) -> UpOutcome:
    """``pulumi up`` of ``stack`` (as ``Stack.up`` runs it), and its outputs without the three
    CLI processes ``Stack.up`` starts after every update (``stack output`` twice, ``stack
    history --show-secrets``): the engine's own events carry the stack's outputs, secrets
    masked; only a stack with secret outputs needs one ``stack output --show-secrets``.
    """
    from pulumi.automation import OutputValue
    from pulumi.automation._stack import ExecKind, _cleanup, _parse_extra_args

    shown: dict[str, Any] = {}
    seen: list[bool] = []

    def listen(event: Any) -> None:
        outputs_event = getattr(event, "res_outputs_event", None)
        if outputs_event is not None and outputs_event.metadata.type == STACK_TYPE:
            new = outputs_event.metadata.new
            shown.clear()
            shown.update(dict(new.outputs or {}) if new is not None else {})
            seen.append(True)
        on_event(event)

    # A policy pack judges the preview first, as a plain `pulumi up` does: a mandatory
    # violation then stops the update before it changes anything.
    preview = [] if options.get("policy_packs") else ["--skip-preview"]
    args = ["up", "--yes", *preview, *_parse_extra_args(**options)]
    args += ["--exec-kind", ExecKind.LOCAL.value]
    log, thread, stop, tmp, server = stack._setup_event_log(
        "up", listen, stack.workspace.pulumi_version or ""
    )
    args += ["--event-log", log]
    try:
        result = stack._run_pulumi_cmd_sync(args)
    finally:
        _cleanup(tmp, thread, stop, None, server)  # every event handled after this
    secret = {k for k, v in shown.items() if _masked(v)}
    plain: dict[str, Any] = dict(shown)
    if not seen:  # an engine that sent no outputs event for the stack: ask the backend
        read = stack.workspace.stack_outputs(stack.name)
        plain = {k: v.value for k, v in read.items()}
        secret = {k for k, v in read.items() if v.secret}
    elif secret:  # the secret values themselves: one process
        text = stack._run_pulumi_cmd_sync(["stack", "output", "--json", "--show-secrets"]).stdout
        plain = dict(json.loads(text or "{}"))
    outputs = {k: OutputValue(value=v, secret=k in secret) for k, v in plain.items()}
    return UpOutcome(outputs, result.stdout, result.stderr)


class PreviewOp(EngineOp):
    """``pulumi preview`` of an existing stack; with ``offline``: new stacks and stacks
    that need new clusters from the offline render, downstream stacks seeing rendered
    outputs."""

    verb = "preview"

    def __init__(self, ctx: RunContext, unit: StackUnit, offline: OfflinePreview | None) -> None:
        super().__init__(ctx, unit)
        self.offline = offline
        self.seen: list[str] = []

    def early(self) -> StackResult | None:
        if self.offline is None:
            return None
        reason = self.offline.offline_reason(self.unit)
        if reason is None:
            return None
        return _rendered_result(self.ctx, self.unit, self.offline, reason, self.started)

    def prepare(self) -> StackResult | None:
        from modelplane.render.runner import RenderError

        if self.offline is None:
            return None
        try:
            overrides = self.offline.overrides(self.unit)
        except RenderError as exc:
            return self.result(
                Outcome.FAILED,
                error=f"the offline render of upstream stack {exc.stack} failed: {exc.cause}",
            )
        if overrides:
            path = self.ctx.plan_dir / f"upstream-{self.unit.name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(overrides, sort_keys=True), encoding="utf-8")
            self.extra_env[UPSTREAM_ENV] = str(path)
            self.seen = sorted(overrides)
        return None

    def options(self) -> dict[str, Any]:
        return {"diff": True, **self.ctx.preview_options}

    def done(self, stack: Stack, outcome: Any, result: StackResult) -> None:
        if self.seen:
            result.note = (
                f"sees the new outputs of {', '.join(self.seen)} (offline render of the head)"
            )
        if self.offline is not None and result.changed:
            self.offline.mark_changed(self.unit.name)


class RefreshOp(EngineOp):
    """``pulumi refresh``; ``skip_reason``: nothing live to read (renderTo)."""

    verb = "refresh"

    def __init__(self, ctx: RunContext, unit: StackUnit, skip_reason: str | None) -> None:
        super().__init__(ctx, unit)
        self.skip_reason = skip_reason

    def early(self) -> StackResult | None:
        if self.skip_reason is None:
            return None
        return StackResult(self.unit.name, self.unit.tier, Outcome.UNCHANGED, note=self.skip_reason)

    def options(self) -> dict[str, Any]:
        # The program's providers, so a refresh reads with today's credentials, not the
        # kubeconfig frozen in the state.
        return {"run_program": True}

    def done(self, stack: Stack, outcome: Any, result: StackResult) -> None:
        self.ctx.remember(self.unit.name, stack.outputs())
        result.outputs = self.ctx.masked[self.unit.name]


class DestroyOp(EngineOp):
    """``pulumi destroy``; with ``remove`` the stack and its workspace are deleted too;
    ``run_program``: with the program's providers (a stack the fleet still derives)."""

    verb = "destroy"

    def __init__(self, ctx: RunContext, unit: StackUnit, remove: bool, run_program: bool) -> None:
        super().__init__(ctx, unit)
        self.remove = remove
        self.run_program = run_program

    def options(self) -> dict[str, Any]:
        return {"run_program": True} if self.run_program else {}

    def done(self, stack: Stack, outcome: Any, result: StackResult) -> None:
        if self.ctx.cache is not None:
            self.ctx.cache.forget(self.unit.name)
        if self.remove:
            stack.workspace.remove_stack(stack.name)
            self.ctx.session.forget(self.unit.name)
            self.ctx.session.remove_work_dir(self.unit.name)
            result.note = "stack removed from the backend"


def up_stack(ctx: RunContext, unit: StackUnit, *, force: bool = False) -> StackResult:
    return UpOp(ctx, unit, force).run()


def preview_stack(
    ctx: RunContext, unit: StackUnit, offline: OfflinePreview | None = None
) -> StackResult:
    return PreviewOp(ctx, unit, offline).run()


def refresh_stack(ctx: RunContext, unit: StackUnit, skip_reason: str | None = None) -> StackResult:
    return RefreshOp(ctx, unit, skip_reason).run()


def destroy_stack(
    ctx: RunContext, unit: StackUnit, *, remove: bool = False, run_program: bool = False
) -> StackResult:
    return DestroyOp(ctx, unit, remove, run_program).run()


@dataclass
class StackStatus:
    stack: str
    exists: bool
    last_kind: str | None = None
    last_result: str | None = None
    last_time: str | None = None
    in_sync: bool | None = None  # inputs equal to those of the last successful update
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "exists": self.exists,
            "lastKind": self.last_kind,
            "lastResult": self.last_result,
            "lastTime": self.last_time,
            "inSync": self.in_sync,
            "outputs": self.outputs,
            "error": self.error,
        }


def status_stack(ctx: RunContext, unit: StackUnit, existing: set[str]) -> StackStatus:
    from pulumi.automation.errors import CommandError

    if unit.name not in existing:
        return StackStatus(unit.name, exists=False)
    try:
        stack = ctx.session.stack(unit.name, create=False)
        history = stack.history(page_size=1, show_secrets=False)
        ctx.remember(unit.name, stack.outputs())
        status = StackStatus(unit.name, exists=True, outputs=ctx.masked[unit.name])
        if history:
            entry = history[0]
            status.last_kind, status.last_result = entry.kind, entry.result
            when = entry.end_time or entry.start_time
            status.last_time = when.isoformat() if when else None
            status.in_sync = can_skip(
                fingerprint_of(ctx, unit),
                entry.kind,
                entry.result,
                entry.message,
                ctx.session.environments(unit.name),
            )
        return status
    except CommandError as exc:
        return StackStatus(unit.name, exists=True, error=error_text(exc, None))
