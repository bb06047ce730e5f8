"""The engine verbs: preview, up, destroy, refresh, status, stacks (registered on the app).

They drive the real Pulumi engine through :class:`modelplane.Fleet`. Expected failures (an
invalid fleet, no passphrase, no engine, a failed stack) print a message and exit non-zero,
never a traceback: 2 for an invalid fleet or bad arguments, 1 when a stack failed or the
run could not start.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from modelplane.cli.output import get_console, log_console, print_json

if TYPE_CHECKING:
    from modelplane.driver.fleet import Fleet
    from modelplane.driver.plan import Plan
    from modelplane.driver.results import RunResult

EXIT_FAILED = 1


class Output(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"


class Strategy(StrEnum):
    rolling = "rolling"
    all_at_once = "all-at-once"


_STRATEGIES = {Strategy.rolling: "Rolling", Strategy.all_at_once: "AllAtOnce"}

FleetDir = Annotated[Path, typer.Argument(help="The fleet directory.", show_default=False)]
OutputOpt = Annotated[
    Output,
    typer.Option(
        "--output",
        "-o",
        help="table (with live progress), wide (more columns, nothing shortened) or json.",
    ),
]
NoHeadersOpt = Annotated[
    bool, typer.Option("--no-headers", help="Tables without title and header row (for scripts).")
]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="Pulumi backend URL (file://, s3://, gs://, azblob://, https://api.pulumi.com). "
        "Default: $PULUMI_BACKEND_URL, else file://<fleet>/.modelplane/state.",
        show_default=False,
    ),
]
ParallelOpt = Annotated[
    int, typer.Option("--parallel", "-p", min=1, help="Stacks of one tier run at the same time.")
]
StackOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--stack",
        "-s",
        "--target",
        help="Only this stack (repeatable). Stacks it depends on are not added.",
        show_default=False,
    ),
]
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not preview and ask for confirmation first.")
]
RefreshOpt = Annotated[
    bool,
    typer.Option(
        "--refresh",
        help="Read the real state of each stack's resources first (`pulumi --refresh`).",
    ),
]
ExpectNoChangesOpt = Annotated[
    bool,
    typer.Option("--expect-no-changes", help="Fail (exit 1) when any stack has changes."),
]
PolicyPackOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy-pack",
        help="Run this Pulumi policy pack (a directory) on every stack (repeatable).",
        show_default=False,
    ),
]
PolicyConfigOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy-pack-config",
        help="A JSON file of config for the --policy-pack in the same position "
        "(e.g. a rule's enforcementLevel; repeatable).",
        show_default=False,
    ),
]
LockOpt = Annotated[
    Path | None,
    typer.Option(
        help="Placement lock (default: <fleet>/modelplane.lock.yaml).", show_default=False
    ),
]
SecretsOpt = Annotated[
    str | None,
    typer.Option(
        "--secrets-provider",
        help="Secrets provider for new stacks (passphrase, awskms://..., gcpkms://...). "
        "Default: passphrase on self-managed backends, the service on Pulumi Cloud.",
        show_default=False,
    ),
]

err = log_console(stderr=True)
out = log_console(stderr=False)


def _fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


@contextmanager
def _expected_failures() -> Iterator[None]:
    """An interrupted engine run: say what it may have left behind. (Expected failures,
    `ModelplaneError`, are handled once for every verb: `modelplane.cli.Verbs`.)"""
    try:
        yield
    except KeyboardInterrupt:
        raise _fail(
            "interrupted; a stack interrupted mid-update may need `modelplane refresh`", 130
        ) from None


def _load(
    fleet: Path,
    lock: Path | None,
    backend: str | None,
    secrets: str | None,
    *,
    require_specs: bool = False,
) -> Fleet:
    from modelplane.driver.fleet import Fleet

    return Fleet.load(
        fleet, lock=lock, backend=backend, secrets_provider=secrets, require_specs=require_specs
    )


def _run(output: Output, action: Callable[[Any], RunResult]) -> RunResult:
    from modelplane.driver.observer import Observer
    from modelplane.driver.progress import LiveProgress

    observer = LiveProgress(err) if output is not Output.json else Observer()
    return action(observer)


def _shortfalls(plan: Plan, output: Output) -> None:
    """Say which deployments the plan cannot place completely, and why (table mode)."""
    if output is Output.json:
        return
    for key, report in plan.report.items():
        if report.unplaced:
            err.print(
                f"[yellow]short[/] {escape(key)}: {report.unplaced} of {report.desired} "
                "replica(s) not placed"
                + "".join(f"\n  {escape(reason)}" for reason in report.reasons),
                highlight=False,
            )


def _report(
    run: RunResult, output: Output, plan: Plan | None = None, *, headers: bool = True
) -> None:
    from modelplane.driver.progress import summary_table

    if output is Output.json:
        data = run.as_json()
        if plan is not None:
            data["plan"] = plan.as_json()
        print_json(data)
    else:
        out.print(
            summary_table(
                run,
                wide=output is Output.wide,
                headers=headers,
                note_width=80 if out.is_terminal else None,
            )
        )
        for warning, where in warnings_once(run):
            err.print(
                f"[yellow]warning[/] ({escape(', '.join(where))}): {escape(warning)}",
                highlight=False,
            )
        for r in run.results:
            if r.error:
                err.print(
                    f"[bold red]{escape(r.stack)}[/] {r.outcome.value}:\n{escape(r.error)}",
                    highlight=False,
                )
    if not run.ok:
        raise typer.Exit(EXIT_FAILED)


def warnings_once(run: RunResult) -> list[tuple[str, list[str]]]:
    """Each distinct warning of a run once, with the stacks that reported it (the engine's
    plugin version-skew warning comes from every stack; it is said once per run)."""
    seen: dict[str, list[str]] = {}
    for r in run.results:
        for warning in r.warnings:
            seen.setdefault(warning, []).append(r.stack)
    return list(seen.items())


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _has_changes(run: RunResult) -> bool:
    return any(r.changed for r in run.results)


def _changed_list(run: RunResult) -> str:
    return ", ".join(r.stack for r in run.results if r.changed)


def _summary(run: RunResult) -> Any:
    from modelplane.driver.progress import summary_table

    return summary_table(run)


def _print_problems(run: RunResult) -> None:
    for r in run.results:
        if r.error:
            err.print(f"[bold red]{r.stack}[/] {r.outcome.value}:\n{r.error}", highlight=False)


def preview(
    fleet: FleetDir,
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown",
            help="Also write a pull-request comment (placement diff + each stack's changes) here.",
            show_default=False,
        ),
    ] = None,
    base_lock: Annotated[
        Path | None,
        typer.Option(
            "--base-lock",
            help="Diff the placement in --markdown against this lock (e.g. the base branch's) "
            "instead of the fleet's committed lock. A missing file means an empty placement.",
            show_default=False,
        ),
    ] = None,
    lock: LockOpt = None,
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
    parallel: ParallelOpt = 4,
    stack: StackOpt = None,
    refresh: RefreshOpt = False,
    expect_no_changes: ExpectNoChangesOpt = False,
    policy_pack: PolicyPackOpt = None,
    policy_pack_config: PolicyConfigOpt = None,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
) -> None:
    """Show what `up` would change, without changing anything.

    Plans the placement (the lock file is not written), then runs `pulumi preview` on every
    stack against the new plan. Prints each stack's creates/updates/replaces/deletes; with
    --markdown also writes a comment for a pull request: replicas added, removed or moved
    (and why deployments are short), then the changed resources and properties per stack.
    Preview never creates a stack: a stack not in the backend yet shows the resources it
    would create from the offline render (new), and stacks downstream of a change see the
    changed stacks' new outputs, so they show what `up` will really change.
    """
    with _expected_failures():
        f = _load(fleet, lock, backend, secrets_provider)
        _missing_keys_warning(f, output)
        plan = f.plan()
        _shortfalls(plan, output)
        run = _run(
            output,
            lambda obs: f.preview(
                plan,
                parallel=parallel,
                only=stack,
                observer=obs,
                refresh=refresh,
                policy_packs=policy_pack or (),
                policy_pack_configs=policy_pack_config or (),
            ),
        )
        if markdown is not None:
            from modelplane.driver.markdown import preview_markdown
            from modelplane.scheduler.survive import survive

            markdown.parent.mkdir(parents=True, exist_ok=True)
            markdown.write_text(
                preview_markdown(
                    plan,
                    run,
                    title=f"modelplane preview: `{fleet}`",
                    survive=survive(f.spec, plan.result, losses=1),
                    rollouts=_rollouts_ahead(f, plan),
                ),
                encoding="utf-8",
            )
            if output is not Output.json:
                err.print(f"wrote {markdown}", highlight=False)
    _report(run, output, plan, headers=not no_headers)
    if expect_no_changes and _has_changes(run):
        raise _fail(f"--expect-no-changes: {_changed_list(run)} would change")


def _missing_keys_warning(f: Fleet, output: Output) -> None:
    """`preview` makes no caller key: a missing one is said (the gateway stack's preview
    fails on it when that stack exists; `up` would refuse the fleet)."""
    from modelplane.secrets import CallerKeysMissing, missing_caller_keys

    missing = missing_caller_keys(f.spec, f.path, f.env)
    if missing and output is not Output.json:
        message = str(CallerKeysMissing(missing, f.path))
        err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)


def up(
    fleet: FleetDir,
    all_stacks: Annotated[
        bool, typer.Option("--all", help="Run every stack, also those whose inputs did not change.")
    ] = False,
    prune: Annotated[
        bool,
        typer.Option("--prune", help="Destroy and remove stacks the fleet no longer derives."),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --prune: destroy a cluster stack even while other stacks still hold "
            "objects on it.",
        ),
    ] = False,
    yes: YesOpt = False,
    refresh: RefreshOpt = False,
    expect_no_changes: ExpectNoChangesOpt = False,
    policy_pack: PolicyPackOpt = None,
    policy_pack_config: PolicyConfigOpt = None,
    lock: LockOpt = None,
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
    parallel: ParallelOpt = 4,
    stack: StackOpt = None,
    output: OutputOpt = Output.table,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Then wait until every deployment is READY (see `status`)."),
    ] = False,
    timeout: Annotated[
        str, typer.Option("--timeout", help="How long --wait waits (e.g. 10m).")
    ] = "10m",
    lock_wait: Annotated[
        str,
        typer.Option(
            "--lock-wait",
            help="A stack locked by another running update (e.g. `reconcile`): wait this "
            "long for it, saying so, before reporting it as locked (0: do not wait).",
        ),
    ] = "10m",
    no_headers: NoHeadersOpt = False,
    strategy: Annotated[
        Strategy | None,
        typer.Option(
            "--strategy",
            help="rolling: a changed deployment rolls replica by replica (spec.rollout); "
            "all-at-once: every replica in this run (requests fail while pods restart). "
            "Default: each deployment's spec.rollout.strategy.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Plan, preview and confirm, write the lock, then deploy every stack in order.

    A deployment whose pods change (image, args, env, resources, ...) then rolls out replica
    by replica: out of the routes, drained, updated, Ready, back in the routes, the next
    (spec.rollout; `modelplane rollout status` shows where it stands; an interrupted rollout
    resumes with the next `up`).

    In a terminal, `up` first previews every stack and asks before changing anything; --yes
    skips that (a run without a terminal, e.g. CI, needs --yes).

    Order: clusters, caches, deployments, gateway; the stacks of one tier run in parallel.
    A stack whose inputs (its spec objects, its placement, its upstream stacks' outputs, the
    program) did not change since its last successful update is skipped unless --all. A
    failing stack does not stop its siblings; stacks that depend on it are skipped. State
    goes to the backend (default file://<fleet>/.modelplane/state); secrets are encrypted
    with PULUMI_CONFIG_PASSPHRASE / PULUMI_CONFIG_PASSPHRASE_FILE there.
    """
    with _expected_failures():
        from modelplane.cli.health import parse_duration

        waiting = parse_duration(lock_wait)
        f = _load(fleet, lock, backend, secrets_provider, require_specs=True)
        # Callers' keys: made only by the first `up` in a terminal on a local backend, saying
        # so; anywhere else a missing one is an error naming `modelplane keys create`.
        for made in f.check_gateway_secrets(make_missing=_interactive() and f.first_local_up()):
            err.print(
                f"created caller key {escape(str(made))} (mode 0600; the first `up` on a "
                "local backend makes the missing ones: `modelplane keys list` shows them)",
                highlight=False,
            )
        if not yes and not _interactive():
            raise _fail(
                "`up` changes the fleet's resources and asks for confirmation first, but this is "
                "not an interactive terminal: pass --yes to apply without asking "
                f"(`modelplane up {fleet} --yes`), or run `modelplane preview {fleet}` to review"
            )
        plan = f.plan()
        _shortfalls(plan, output)
        if not yes:
            previewed = _run(
                output,
                lambda obs: f.preview(
                    plan, parallel=parallel, only=stack, observer=obs, refresh=refresh
                ),
            )
            out.print(_summary(previewed))
            if not previewed.ok:
                _print_problems(previewed)
                raise _fail("the preview failed; nothing was changed")
            if expect_no_changes and _has_changes(previewed):
                raise _fail(f"--expect-no-changes: {_changed_list(previewed)} would change")
            what = ", ".join(stack) if stack else f"the stacks of {fleet}"
            where = f.backend_display
            if not typer.confirm(f"Apply these changes to {what} on {where}?", default=False):
                raise _fail("not confirmed; nothing was changed")
        run = _run(
            output,
            lambda obs: f.up(
                plan,
                parallel=parallel,
                all_stacks=all_stacks,
                only=stack,
                observer=obs,
                refresh=refresh,
                expect_no_changes=expect_no_changes,
                policy_packs=policy_pack or (),
                policy_pack_configs=policy_pack_config or (),
                strategy=_STRATEGIES[strategy] if strategy is not None else None,
                lock_wait=waiting,
            ),
        )
        for r in run.rollouts:
            why = f": {r['reason']}" if r.get("reason") else ""
            err.print(escape(f"{r['deployment']}: {r['progress']} ({r['phase']}{why})"))
        if prune and stack is None and run.orphans:
            run.absorb(
                _run(output, lambda obs: f.prune(parallel=parallel, force=force, observer=obs))
            )
    late: list[str] = []
    if wait and run.ok:
        late = _wait(f, plan, run, output, timeout)
    _report(run, output, plan, headers=not no_headers)
    if late:
        raise typer.Exit(EXIT_FAILED)


def _wait(f: Fleet, plan: Plan, run: RunResult, output: Output, timeout: str) -> list[str]:
    """`up --wait`: observe until every deployment whose stack changed is READY; say who
    is not and why."""
    from modelplane.cli.health import parse_duration, wait_ready

    limit = parse_duration(timeout)
    ran = {r.stack for r in run.results if r.outcome.value == "succeeded"}
    keys = [u.key for u in f.stacks(plan) if u.kind == "ModelDeployment" and u.name in ran]
    if not keys:
        return []
    view = wait_ready(f, keys, limit)
    late = [d for d in view.deployments if d.key in keys and d.ready < d.desired]
    if output is not Output.json:
        for d in late:
            why = next((c.message for c in d.conditions if c.status != "True"), "")
            err.print(f"[yellow]not ready[/] {d.key} after {limit:.0f}s: {why}", highlight=False)
        if not late:
            err.print(f"ready: {len(keys)} deployment(s)", highlight=False)
    return [d.key for d in late]


def destroy(
    fleet: FleetDir,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    remove: Annotated[
        bool, typer.Option("--remove", help="Also delete the stacks and their history.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Destroy a cluster stack even while other stacks still hold objects on it.",
        ),
    ] = False,
    lock: LockOpt = None,
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
    parallel: ParallelOpt = 4,
    stack: StackOpt = None,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
) -> None:
    """Delete every resource of the fleet's stacks, in reverse order.

    Gateway first, then deployments, caches and clusters last, so no cluster goes while
    workloads on it remain. Stacks in the backend that the fleet no longer derives are
    destroyed too. Asks for confirmation on a terminal unless --yes; a non-interactive run
    needs --yes.
    """
    with _expected_failures():
        f = _load(fleet, lock, backend, secrets_provider)
        if not yes:
            if not sys.stdin.isatty():
                raise _fail("destroy deletes every resource of the fleet; pass --yes to confirm")
            what = ", ".join(stack) if stack else f"every stack of {fleet}"
            if not typer.confirm(f"Destroy {what} on {f.backend_display}?", default=False):
                raise typer.Exit(EXIT_FAILED)
        run = _run(
            output,
            lambda obs: f.destroy(
                parallel=parallel, only=stack, remove=remove, force=force, observer=obs
            ),
        )
    _report(run, output, headers=not no_headers)


def refresh(
    fleet: FleetDir,
    lock: LockOpt = None,
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
    parallel: ParallelOpt = 4,
    stack: StackOpt = None,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
) -> None:
    """Read the real state of every stack's resources into the state (`pulumi refresh`).

    Use it after changes made outside modelplane, or after an interrupted update. The next
    `up` then runs every refreshed stack again.
    """
    with _expected_failures():
        f = _load(fleet, lock, backend, secrets_provider)
        run = _run(output, lambda obs: f.refresh(parallel=parallel, only=stack, observer=obs))
    _report(run, output, headers=not no_headers)


def status(
    fleet: FleetDir,
    lock: LockOpt = None,
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
    parallel: ParallelOpt = 4,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
) -> None:
    """Show whether the models serve, then each stack's last result, endpoints and addresses.

    Readiness (observed on the clusters): per deployment READY n/m, placed, clusters, age
    and conditions with reasons; `-o wide` adds one row per replica (cluster, pool, phase,
    reason); per ModelService its URL and routable endpoints; per cluster its health.
    Placement comes from the lock; for each derived stack: its last operation and result,
    whether its inputs changed since (so `up` would run it), and its outputs (secret
    values are masked). Stacks left in the backend that the fleet no longer has are listed.
    """
    from modelplane.cli.health import fleet_readiness, readiness_tables

    with _expected_failures():
        f = _load(fleet, lock, backend, secrets_provider)
        st = f.status(parallel=parallel)
        services = st.gateway.get("services")
        view = fleet_readiness(
            f, services if isinstance(services, dict) else None, front_doors=st.front_doors(f.spec)
        )
    from modelplane.driver.drain import describe, progress
    from modelplane.scheduler.cordon import cordoned_fleet

    cordons = f.runtime.cordons()
    cooling = f.runtime.capacity()
    rollouts = _rollout_lines(f)
    if output is Output.json:
        left = progress(cordoned_fleet(f.spec, cordons), f.previous)
        cordoned = {n: {"since": since, **left.get(n, {})} for n, since in cordons.items()}
        print_json(
            {
                **st.as_json(),
                "readiness": view.as_json(),
                "cordoned": cordoned,
                "capacity": {k: c.as_json() for k, c in cooling.items()},
                "rollouts": rollouts,
            }
        )
        return
    from modelplane.driver.progress import status_tables

    wide, headers = output is Output.wide, not no_headers
    for table in [
        *readiness_tables(view, wide=wide),
        *status_tables(st, wide=wide, headers=headers),
    ]:
        out.print(table)
    for line in describe(f.spec, f.previous, cordons):
        out.print(f"[yellow]{escape(line)}[/]", highlight=False)
    from modelplane.health.rules import describe_cooldown

    for key, cool in cooling.items():
        cluster, _, pool = key.partition("/")
        out.print(f"[yellow]{escape(describe_cooldown(cluster, pool, cool))}[/]", highlight=False)
    for r in rollouts:
        if r["phase"] != "Complete" or r["reason"]:
            why = f": {r['reason']}" if r["reason"] else ""
            out.print(escape(f"rollout {r['deployment']}: {r['phase']}, {r['progress']}{why}"))


def _rollouts_ahead(f: Fleet, plan: Plan) -> dict[str, str]:
    """The rollouts `up` would run, by the committed lock's revisions (plan, preview)."""
    from modelplane.rollout import lock_progress

    labels = {n: c.metadata.labels for n, c in f.spec.clusters.items()}
    out = {}
    for key, dep in f.spec.deployments.items():
        kept = {r.name for r in plan.lock.replicas_of(key)}
        replicas = [r for r in plan.previous.replicas_of(key) if r.name in kept]
        progress = lock_progress(dep, replicas, labels, f.spec.caches)
        if progress is not None:
            out[key] = progress.line
    return out


def _rollout_lines(f: Fleet) -> list[dict[str, Any]]:
    """Each deployment's remembered rollout (runtime state) for `status`."""
    from modelplane.driver.rollouts import progress

    out = []
    for key, record in sorted(f.runtime.rollouts().items()):
        if key not in f.spec.deployments:
            continue
        out.append(
            {
                "deployment": key,
                "phase": "Paused" if record.paused else record.phase,
                "target": record.target,
                "stable": record.stable,
                "reason": record.reason,
                "progress": progress(f.previous, key, record),
            }
        )
    return out


def migrate(
    fleet: FleetDir,
    lock: LockOpt = None,
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
    from_project: Annotated[
        str,
        typer.Option("--from", help="The project the stacks are in now."),
    ] = "modelplane",
    output: OutputOpt = Output.table,
) -> None:
    """Move the fleet's stacks to its own Pulumi project (`pulumi stack rename`).

    Every fleet is a Pulumi project of its own: the `name` in DIR/Pulumi.yaml, else
    modelplane-<directory name>. Stacks made before that are in project `modelplane`,
    which all fleets shared; this moves the stacks this fleet derives (state, history,
    resource URNs) to its project, and on a postgres:// backend its runtime state to the
    project's key. Nothing in the clouds changes. On the fleet's own default state
    (.modelplane/state) `up` does this by itself.
    """
    with _expected_failures():
        f = _load(fleet, lock, backend, secrets_provider)
        done = f.migrate(from_project)
    if output is Output.json:
        print_json(done.as_json())
        return
    console = get_console()
    moved = ", ".join(done.moved) or "none"
    console.print(
        f"moved from project {done.old_project} to {done.project}: {moved}", highlight=False
    )
    for name, why in done.kept.items():
        console.print(f"kept {name}: {why}", highlight=False)
    if done.runtime_documents:
        console.print(f"runtime state: {done.runtime_documents} document(s) moved", highlight=False)


def stacks(
    fleet: FleetDir,
    lock: LockOpt = None,
    planned: Annotated[
        bool, typer.Option("--planned", help="Use the new plan's placement instead of the lock.")
    ] = False,
    output: OutputOpt = Output.table,
    no_headers: NoHeadersOpt = False,
) -> None:
    """List the Pulumi stacks derived from the fleet (pure: no engine, no state).

    One stack per InferenceCluster (cluster-<name>), ModelCache (cache-<ns>-<name>),
    ModelDeployment (deploy-<ns>-<name>) and the gateway, with their tier and the stacks
    whose outputs they read. Run one by hand with `pulumi up -s <stack>`.
    """
    from rich.table import Table

    with _expected_failures():
        f = _load(fleet, lock, None, None)
        units = f.stacks(f.plan() if planned else None)
    if output is Output.json:
        print_json(
            [
                {
                    "name": u.name,
                    "tier": u.tier.name.lower(),
                    "kind": u.kind,
                    "owns": u.key,
                    "dependsOn": list(u.upstream),
                }
                for u in units
            ]
        )
        return
    headers = not no_headers
    table = Table(
        title=f"stacks of {fleet}" if headers else None, title_justify="left", show_header=headers
    )
    for col in ("stack", "tier", "owns", "reads outputs of"):
        table.add_column(col)
    for u in units:
        cells = (u.name, u.tier.name.lower(), f"{u.kind} {u.key}", ", ".join(u.upstream))
        table.add_row(*map(escape, cells))
    out.print(table)


def _help(doc: str | None) -> str:
    """A docstring as help text: each paragraph on one line, so the terminal wraps it.

    Square brackets are escaped: typer renders help as rich markup, which would swallow
    e.g. a literal ``[secret]``."""
    import inspect

    from rich.markup import escape

    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(escape(" ".join(p.split())) for p in paragraphs)


def _version(value: bool) -> None:
    if value:
        from modelplane import __version__

        typer.echo(f"modelplane {__version__}")
        raise typer.Exit(0)


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            callback=_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Serve large language models across a fleet of Kubernetes clusters, on Pulumi."""


def register(app: typer.Typer) -> None:
    """Mount the engine verbs (and `--version`) on the `modelplane` app."""
    if app.registered_callback is None:
        app.callback()(_root)
    for command in (preview, up, destroy, refresh, status, stacks, migrate):
        app.command(command.__name__, help=_help(command.__doc__))(command)
