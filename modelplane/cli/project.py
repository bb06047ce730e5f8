"""`modelplane project DIR`: the fleet's own Pulumi project, derived from the root Pulumi.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from modelplane.cli.output import EXIT_INVALID, fail, get_console


def project(
    fleet_dir: Annotated[Path, typer.Argument(metavar="DIR", help="The fleet directory.")],
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 when DIR/Pulumi.yaml is not derived."),
    ] = False,
) -> None:
    """Write DIR/Pulumi.yaml, the fleet's own Pulumi project derived from the repository's
    root Pulumi.yaml (the program in stacks/, the repository's .venv, the fleet's own stack
    config and state), so `cd DIR && pulumi up -s <stack>` runs what `modelplane up DIR` runs.
    The file also records the fleet's uid (`modelplane.fleetUid`), generated on the first
    write and kept: commit it, it tells this fleet from another of the same name on a
    postgres:// backend.
    """
    from modelplane.driver.project import (
        PROJECT_FILE,
        ProjectError,
        fleet_project_text,
        fleet_uid,
        repository_root,
        write_fleet_project,
    )

    if not fleet_dir.is_dir():
        fail(f"{fleet_dir}: not a directory", EXIT_INVALID)
    path = fleet_dir / PROJECT_FILE
    try:
        root = repository_root()
        if check:
            current = path.read_text(encoding="utf-8") if path.is_file() else None
            if current != fleet_project_text(root, fleet_dir):
                fail(
                    f"{path} is not derived from {root / PROJECT_FILE}: "
                    f"run `modelplane project {fleet_dir}`"
                )
            get_console().print(f"{path} is up to date", highlight=False)
            if fleet_uid(fleet_dir) is None:  # derived, from before fleets had a uid
                get_console().print(
                    f"{path} records no fleet uid: `modelplane project {fleet_dir}` adds one "
                    '(docs/architecture.md, "Where runtime state lives")',
                    highlight=False,
                )
            return
        changed = write_fleet_project(root, fleet_dir)
    except ProjectError as exc:
        fail(str(exc))
    get_console().print(f"{'wrote' if changed else 'unchanged'} {path}", highlight=False)
