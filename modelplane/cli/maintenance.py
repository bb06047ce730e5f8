"""`modelplane drain DIR CLUSTER` and `modelplane uncordon DIR CLUSTER`: cluster
maintenance without an outage (docs/architecture.md, "Cluster maintenance").

`drain` cordons the cluster (runtime state, `.modelplane/cordons.json`), then runs
reconcile rounds until no replica is left on it: each round the scheduler places
replacements elsewhere, they join the routes once Ready, and only then do the old ones
leave the routes, drain their in-flight requests and go (`modelplane.driver.drain`).
Interrupted, the cordon stays and the next `drain`, `reconcile` (or `up`, which places the
replacements) continues. `uncordon` lets the scheduler use the cluster again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from modelplane.cli.engine_verbs import (
    BackendOpt,
    FleetDir,
    LockOpt,
    ParallelOpt,
    SecretsOpt,
    YesOpt,
    _expected_failures,
    _fail,
    _interactive,
    _load,
    err,
    out,
)
from modelplane.cli.health import GraceOpt, _say_round, parse_duration
from modelplane.cli.output import print_json

ClusterArg = Annotated[str, typer.Argument(help="The InferenceCluster.", show_default=False)]


def _confirm(yes: bool, verb: str, fleet: Path, cluster: str, question: str) -> None:
    if yes:
        return
    if not _interactive():
        raise _fail(
            f"`{verb}` changes where the fleet's replicas may run and asks for confirmation "
            f"first, but this is not an interactive terminal: pass --yes "
            f"(`modelplane {verb} {fleet} {cluster} --yes`)",
            2,
        )
    if not typer.confirm(question, default=False):
        raise _fail("not confirmed; nothing was changed")


def _left(fleet_dir: Path, lock: Path | None, cluster: str) -> dict[str, Any]:
    """The replicas still on `cluster` in the committed lock: serving and draining."""
    from modelplane.driver.drain import progress
    from modelplane.scheduler.cordon import cordoned_fleet

    f = _load(fleet_dir, lock, None, None)
    found = progress(cordoned_fleet(f.spec, [cluster]), f.previous).get(cluster)
    return found or {"serving": [], "draining": []}


def drain(
    fleet: FleetDir,
    cluster: ClusterArg,
    yes: YesOpt = False,
    timeout: Annotated[
        str, typer.Option("--timeout", help="How long to wait for the cluster to empty.")
    ] = "30m",
    interval: Annotated[
        str, typer.Option("--interval", help="Time between reconcile rounds (e.g. 5s).")
    ] = "5s",
    grace: GraceOpt = "5m",
    lock: LockOpt = None,
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
    parallel: ParallelOpt = 4,
    output: Annotated[
        str, typer.Option("--output", "-o", help="table (one line per event) or json (lines).")
    ] = "table",
) -> None:
    """Move every replica off CLUSTER, make-before-break, and keep it out of new placements.

    The cluster is cordoned (no new replicas; the cordon survives restarts), then reconcile
    rounds run until no replica is left on it: each replica's replacement is placed on
    another cluster by the scheduler and joins the routes once Ready; only then does the
    old replica leave the routes, finish its in-flight requests and get deleted. At most
    the deployment's rollout budget (spec.rollout maxUnavailable/maxSurge) moves at once.
    A replica with no room elsewhere stays and serves (said each round). Interrupted, the
    cordon stays: `drain` again or `reconcile` continues. Exit 1 when --timeout passes
    first.
    """
    from modelplane.driver.reconcile import Reconciler

    if output not in ("table", "json"):
        raise typer.BadParameter("--output is table or json")
    limit, every = parse_duration(timeout), parse_duration(interval)
    with _expected_failures():
        f = _load(fleet, lock, backend, secrets_provider, require_specs=True)
        if cluster not in f.spec.clusters:
            known = ", ".join(sorted(f.spec.clusters)) or "none"
            raise _fail(f"{fleet}: no InferenceCluster {cluster} (clusters: {known})", 2)
        here = _left(fleet, lock, cluster)
        _confirm(
            yes,
            "drain",
            fleet,
            cluster,
            f"Cordon {cluster} and move its {len(here['serving'])} serving replica(s) "
            "to other clusters?",
        )
        if f.runtime.cordon(cluster, time.time()):
            err.print(f"cordoned {escape(cluster)}: no new replicas", highlight=False)
        reconciler = Reconciler(
            fleet,
            lock=lock,
            backend=backend,
            secrets_provider=secrets_provider,
            grace=parse_duration(grace),
            parallel=parallel,
            metrics_stale_after=2 * max(every, 5.0),
        )
        try:
            left = _rounds(reconciler, fleet, lock, cluster, every, limit, output)
        finally:
            reconciler.close()
    if output == "json":
        print_json({"cluster": cluster, "cordoned": True, "drained": not left, "left": left})
    if left:
        raise _fail(
            f"{cluster} still hosts {', '.join(left)} after {timeout}; it stays cordoned: "
            f"run `modelplane drain {fleet} {cluster}` again (or `reconcile`) to continue"
        )
    if output != "json":
        out.print(f"drained {escape(cluster)}: no replica left; it stays cordoned", highlight=False)


def _rounds(
    reconciler: Any,
    fleet: Path,
    lock: Path | None,
    cluster: str,
    every: float,
    limit: float,
    output: str,
) -> list[str]:
    """Reconcile rounds until no replica is left on `cluster` or `limit` seconds passed;
    the replicas left."""
    deadline = time.monotonic() + limit
    stop = threading.Event()
    while True:
        current = reconciler.round()
        if output == "json":
            print_json(current.as_json())
        else:
            _say_round(current, out, err)
            for name in current.retired:
                out.print(f"replica {name} leaves {cluster}: its replacement serves")
            for key, why in stuck(current.plan, cluster).items():
                out.print(
                    f"{key}: no room elsewhere for a replacement; its replicas on {cluster} "
                    f"keep serving ({'; '.join(why)})",
                    highlight=False,
                )
        here = _left(fleet, lock, cluster)
        left: list[str] = [*here["serving"], *here["draining"]]
        if not left or time.monotonic() >= deadline:
            return left
        stop.wait(max(0.0, min(every - current.duration, deadline - time.monotonic())))


def stuck(plan: Any, cluster: str) -> dict[str, list[str]]:
    """The deployments with serving replicas on `cluster` that got no replacement (no
    surge placed: no room elsewhere), with the scheduler's reasons."""
    out: dict[str, list[str]] = {}
    for key, report in plan.report.items() if plan is not None else []:
        serving = [r for r in report.replicas if not r.draining]
        if any(r.cluster == cluster for r in serving) and len(serving) <= report.desired:
            out[key] = list(report.reasons)
    return out


def uncordon(
    fleet: FleetDir,
    cluster: ClusterArg,
    yes: YesOpt = False,
) -> None:
    """Let the scheduler place new replicas on CLUSTER again (ends a `drain`'s cordon).

    Nothing moves back by itself (kept replicas never move): the next plan places there
    what needs placing."""
    from modelplane.driver.settings import state_root
    from modelplane.driver.state import RuntimeState

    runtime = RuntimeState.at(state_root(fleet))
    if cluster not in runtime.cordons():
        out.print(f"{escape(cluster)} is not cordoned: nothing to do", highlight=False)
        return
    _confirm(yes, "uncordon", fleet, cluster, f"Let new replicas be placed on {cluster} again?")
    runtime.uncordon(cluster)
    out.print(f"uncordoned {escape(cluster)}: new replicas may be placed there", highlight=False)


def register(app: typer.Typer) -> None:
    from modelplane.cli.engine_verbs import _help

    for command in (drain, uncordon):
        app.command(command.__name__, help=_help(command.__doc__))(command)
