"""`modelplane render DIR --out OUT`: the whole fleet, offline, as files.

Mount with `app.add_typer(render.app)` (no name: its one command is `render`),
or register the function directly: `app.command("render")(render.render)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Render a fleet offline (Pulumi mocks): resources and Kubernetes manifests per stack.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

FleetDir = Annotated[Path, typer.Argument(help="The fleet directory (spec YAML files).")]
OutDir = Annotated[Path, typer.Option("--out", "-o", help="Directory to write the rendering into.")]
Stacks = Annotated[
    list[str] | None,
    typer.Option("--stack", "-s", help="Only these stacks (and the stacks they read from)."),
]


@app.command("render")
def render(fleet_dir: FleetDir, out: OutDir, stack: Stacks = None) -> None:
    """Run every stack's program in process under Pulumi's mock runtime -- no CLI, no
    credentials, no network -- after planning the fleet against its lock, and write
    OUT/<stack>/resources.yaml (type, name, parent, inputs; secret values redacted),
    OUT/<stack>/outputs.yaml and OUT/<stack>/manifests/*.yaml (applyable Kubernetes YAML).
    """
    from modelplane.api.errors import FleetInvalid
    from modelplane.render import RenderError, render_fleet

    try:
        result = render_fleet(fleet_dir, out, stacks=stack or None)
    except FleetInvalid as exc:
        from modelplane.cli.output import EXIT_INVALID, err_console, error_table

        err_console.print(error_table(exc.errors))
        raise typer.Exit(EXIT_INVALID) from None
    except (RenderError, ValueError) as exc:
        typer.echo(f"render failed: {exc}", err=True)
        raise typer.Exit(1) from None
    for s in result.stacks:
        typer.echo(f"{s.name}: {s.resources} resources, {len(s.manifests)} manifests")
    typer.echo(f"wrote {result.out_dir} ({result.manifest_count} manifests)")
