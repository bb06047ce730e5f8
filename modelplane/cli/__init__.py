"""The `modelplane` command line: one typer app, verbs registered from sibling modules."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from modelplane.errors import ModelplaneError


class Verbs(TyperGroup):
    """The verbs, with the one handler of expected failures: a `ModelplaneError` from any
    verb is printed (`output.report_error`) and exits with its code, never a traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ModelplaneError as exc:
            from modelplane.cli.output import report_error

            raise typer.Exit(report_error(exc)) from None


app = typer.Typer(
    cls=Verbs,
    name="modelplane",
    help="Serve large language models across a fleet of Kubernetes clusters, on Pulumi.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# The pure verbs (commands.py) need none of the engine, dev-cluster or health modules:
# invoked directly, only they are registered, which keeps `validate`/`plan` start-up short.
PURE_VERBS = frozenset({"validate", "plan", "schema"})
pure_only = False


# Garbage-collector thresholds for the command line: a verb builds many long-lived objects
# (the spec models, the fleet, the schedule), and at Python's default (a young-generation
# collection every 700 allocations) the collector re-examines them thousands of times:
# ~2 s of CPU in `plan` on a 1,000-cluster fleet (docs/benchmarks.md). Cycles are still
# collected, every 50,000 allocations (the pure verbs collect none: see main).
GC_THRESHOLDS = (50_000, 20, 10)


def main() -> None:
    import gc
    import os
    import sys
    from pathlib import Path

    if sys.argv[1:] == ["--version"]:
        # Nothing else to do: no verb module to import (they take ~0.9 s together).
        from modelplane import __version__

        print(f"modelplane {__version__}")
        return
    gc.set_threshold(*GC_THRESHOLDS)
    global pure_only
    pure_only = len(sys.argv) > 1 and sys.argv[1] in PURE_VERBS
    if pure_only:
        # validate/plan/schema keep what they build until they exit and make few cycles:
        # no cyclic collection at all (a few MB more at the peak on a 1,000-cluster plan;
        # the scheduler's own pause would otherwise end in one sweep over everything it
        # allocated, ~0.3 s).
        gc.disable()
    from modelplane.cli import commands  # noqa: F401  (registers the verbs)

    # `file:${MODELPLANE_DEV_FLEET_STATE}/...` kubeconfigs (specs/dev) resolve against the dev
    # fleet's default state here, also inside stack programs that run in other directories.
    os.environ.setdefault(
        "MODELPLANE_DEV_FLEET_STATE", str(Path.cwd().resolve() / ".modelplane" / "dev-fleet")
    )
    try:
        app()
    finally:
        # The process ends here: without this, the interpreter's final collections walk
        # every object the verb built (~0.8 s of CPU after a 1,000-cluster `plan`). Frozen
        # objects are left to the operating system; files are closed as usual.
        gc.freeze()
