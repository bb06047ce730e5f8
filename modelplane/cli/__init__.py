"""The `modelplane` command line: one typer app, verbs registered from sibling modules."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="modelplane",
    help="Serve large language models across a fleet of Kubernetes clusters, on Pulumi.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def main() -> None:
    from modelplane.cli import commands  # noqa: F401  (registers the verbs)

    app()
