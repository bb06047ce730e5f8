"""`modelplane rollout status|pause|resume|undo DIR [ns/name]`: a deployment's rollout for
people (docs/api.md, "spec.rollout"; docs/architecture.md, "Rollouts").

They read and change the fleet's runtime state (the ``rollout`` document); the next `up` or
`reconcile` round carries the change out: a paused rollout moves no further replica out of
the routes, a resumed one continues (also one halted by a timeout or a failed step), an undone
one goes back to the last good revision and does not try the spec's revision again until the
spec changes. pause/resume/undo ask first, like `up`; --yes skips that.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from modelplane.cli.engine_verbs import (
    FleetDir,
    LockOpt,
    Output,
    OutputOpt,
    YesOpt,
    _help,
    err,
    out,
)
from modelplane.cli.output import print_json

if TYPE_CHECKING:
    from modelplane.driver.state import RolloutRecord

app = typer.Typer(help="Show, pause, resume or undo a deployment's rollout.", no_args_is_help=True)

DeploymentArg = Annotated[
    str, typer.Argument(help="The deployment, as namespace/name.", show_default=False)
]


def _load(fleet: Path, lock: Path | None):  # type: ignore[no-untyped-def]
    from modelplane.driver.fleet import Fleet

    return Fleet.load(fleet, lock=lock)


def _record(fleet: Path, key: str, lock: Path | None):  # type: ignore[no-untyped-def]
    f = _load(fleet, lock)
    if key not in f.spec.deployments:
        err.print(
            f"[red]error[/]: no ModelDeployment {escape(key)} in {escape(str(fleet))}; its "
            f"deployments are: {escape(', '.join(f.spec.deployments) or '(none)')}",
            highlight=False,
        )
        raise typer.Exit(2)
    records = f.runtime.rollouts()
    return f, records


def _confirm(what: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        err.print(
            f"[red]error[/]: {escape(what)} asks for confirmation first, but this is not an "
            "interactive terminal: pass --yes",
            highlight=False,
        )
        raise typer.Exit(1)
    if not typer.confirm(f"{what}?", default=False):
        err.print("not confirmed; nothing was changed", highlight=False)
        raise typer.Exit(1)


def status(
    fleet: FleetDir,
    deployment: Annotated[
        str | None, typer.Argument(help="Only this deployment (namespace/name).")
    ] = None,
    lock: LockOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Each deployment's rollout: phase, target and last good revision, replicas at the
    target, why it halted or rolled back."""
    from modelplane.driver.rollouts import progress

    if deployment:  # an unknown one is an error naming the fleet's deployments
        f, records = _record(fleet, deployment, lock)
    else:
        f = _load(fleet, lock)
        records = f.runtime.rollouts()
    keys = [deployment] if deployment else sorted(f.spec.deployments)
    rows = []
    for key in keys:
        record = records.get(key)
        if record is None:
            rows.append({"deployment": key, "phase": "None"})
            continue
        rows.append(
            {
                "deployment": key,
                **record.as_json(),
                "progress": progress(f.previous, key, record),
            }
        )
        rows[-1].pop("templates")
    if output is Output.json:
        print_json(rows)
        return
    for row in rows:
        line = f"{row['deployment']}: {row['phase']}"
        if "progress" in row:
            line += f", {row['progress']}"
            if row.get("stable") and row["stable"] != row["target"]:
                line += f" (last good {row['stable']})"
            if row.get("paused"):
                line += ", paused"
            if row.get("reason"):
                line += f": {row['reason']}"
        out.print(escape(line), highlight=False)


def _change(
    fleet: Path,
    deployment: str,
    yes: bool,
    question: Callable[[RolloutRecord], str],
    change: Callable[[RolloutRecord], None],
    usable: Callable[[RolloutRecord], bool] | None = None,
    why: str | None = None,
) -> RolloutRecord:
    """Change the deployment's remembered rollout (one ``usable`` for the change, else exit 1
    saying ``why``) once the person says yes to ``question``, and record it."""
    f, records = _record(fleet, deployment, None)
    record = records.get(deployment)
    if record is None or (usable is not None and not usable(record)):
        raise typer.Exit(_nothing(deployment, why) if why else _nothing(deployment))
    _confirm(question(record), yes)
    change(record)
    f.runtime.set_rollouts(records)
    return record


def pause(fleet: FleetDir, deployment: DeploymentArg, yes: YesOpt = False) -> None:
    """Move no further replica of the deployment out of the routes (replicas being updated
    finish and are routed again)."""

    def change(record: RolloutRecord) -> None:
        record.paused = True

    _change(fleet, deployment, yes, lambda _: f"Pause the rollout of {deployment}", change)
    out.print(f"paused: {escape(deployment)}", highlight=False)


def resume(fleet: FleetDir, deployment: DeploymentArg, yes: YesOpt = False) -> None:
    """Continue a paused or halted rollout with the next `up` or `reconcile` round."""

    def change(record: RolloutRecord) -> None:
        record.paused = False
        if record.phase == "Paused":
            record.phase, record.reason = "Progressing", ""
        record.updating = {}

    _change(fleet, deployment, yes, lambda _: f"Resume the rollout of {deployment}", change)
    out.print(
        f"resumed: {escape(deployment)} (the next `up` or `reconcile` round continues it)",
        highlight=False,
    )


def undo(fleet: FleetDir, deployment: DeploymentArg, yes: YesOpt = False) -> None:
    """Roll the deployment back to its last good revision; the spec's revision is not tried
    again until the spec changes."""

    def change(record: RolloutRecord) -> None:
        record.failed, record.target = record.target, str(record.stable)
        record.phase, record.reason = "RolledBack", f"revision {record.failed} undone by a person"
        record.paused, record.updating = False, {}

    record = _change(
        fleet,
        deployment,
        yes,
        lambda r: f"Roll {deployment} back to revision {r.stable}",
        change,
        usable=lambda r: bool(r.stable) and r.stable != r.target,
        why="no earlier good revision to go back to",
    )
    out.print(
        f"undone: {escape(deployment)} goes back to revision {record.target} with the next "
        "`up` or `reconcile` round",
        highlight=False,
    )


def _nothing(key: str, why: str = "no rollout recorded (run `modelplane up` first)") -> int:
    err.print(f"[red]error[/]: {escape(key)}: {escape(why)}", highlight=False)
    return 1


for _verb in (status, pause, resume, undo):
    app.command(_verb.__name__, help=_help(_verb.__doc__))(_verb)
