"""`modelplane dev-fleet up|down|status`: a local fleet of real control planes with simulated
GPU nodes (kwok), LeaderWorkerSet and Traefik, for trying modelplane and for its tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from modelplane.devfleet import fleet as devfleet
from modelplane.devfleet.netns import NetnsError
from modelplane.gobuild.gotool import GoError

app = typer.Typer(
    help=(
        "A local fleet of real Kubernetes control planes (kube-apiserver, controller-manager, "
        "scheduler) with simulated GPU nodes (kwok, DRA ResourceSlices from the specs' "
        "InferenceClasses), the LeaderWorkerSet controller and Traefik gateways, in a network "
        "namespace of its own. Needs root (or CAP_NET_ADMIN) for the namespace."
    ),
    no_args_is_help=True,
)

StateOption = Annotated[
    Path | None,
    typer.Option(
        "--state",
        help="State directory (default: $MODELPLANE_DEV_FLEET_STATE, else .modelplane/dev-fleet).",
        file_okay=False,
    ),
]
OutputOption = Annotated[str, typer.Option("--output", "-o", help="table or json")]


def _progress(message: str) -> None:
    typer.echo(f"modelplane: {message}", err=True)


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(1)


def _print_status(report: dict[str, object], output: str) -> None:
    if output == "json":
        typer.echo(json.dumps(report, indent=2))
        return
    table = Table(title=f"dev fleet ({escape(str(report['state']))})", expand=False)
    for column in ("CLUSTER", "API", "PROCESSES", "NODES READY", "GATEWAYS", "KUBECONFIG"):
        table.add_column(column, overflow="fold")
    for c in report["clusters"]:  # type: ignore[attr-defined]
        procs = c["processes"]
        up = sum(1 for v in procs.values() if v)
        gateways = ", ".join(
            f"{g['name']}={','.join(g['addresses']) or '-'}"
            + ("" if g["programmed"] else " (not programmed)")
            for g in c["gateways"]
        )
        table.add_row(
            escape(c["name"]),
            escape(c["server"]) + ("" if c["apiReachable"] else " (unreachable)"),
            f"{up}/{len(procs)}",
            f"{c['nodesReady']}/{c['nodes']}",
            escape(gateways or "-"),
            escape(c["kubeconfig"]),
        )
    console = Console()
    console.print(table)
    address = report.get("fleetAddress")
    if isinstance(address, dict):
        doors = ", ".join(address.get("frontDoors") or []) or "no front door"
        console.print(escape(f"fleet address {address['url']} -> {doors}"), highlight=False)


@app.command()
def up(
    clusters: Annotated[int, typer.Option("--clusters", help="How many clusters.")] = 3,
    state: StateOption = None,
    specs: Annotated[
        Path | None,
        typer.Option(
            "--specs", help="Fleet specs whose node pools to simulate (default specs/dev)."
        ),
    ] = None,
    prometheus: Annotated[
        bool,
        typer.Option(
            "--prometheus",
            help="Also run a Prometheus per cluster scraping the serving pods (as the serving "
            "stack's does; `reconcile` reads autoscaling metrics from it).",
        ),
    ] = False,
    output: OutputOption = "table",
) -> None:
    """Build the binaries if needed (once), start the clusters in the background and print
    where their kubeconfigs are. Each `up` starts from empty clusters."""
    root = devfleet.state_dir(state)
    if specs is None and devfleet.DEFAULT_SPECS.is_dir():
        specs = devfleet.DEFAULT_SPECS
    try:
        fleet = devfleet.up(
            root, clusters=clusters, specs=specs, progress=_progress, prometheus=prometheus
        )
        report = devfleet.status(fleet)
    except (devfleet.DevFleetError, GoError, NetnsError) as exc:
        raise _fail(str(exc)) from None
    _print_status(report, output)
    if output != "json":
        typer.echo(f"stop it with: modelplane dev-fleet down --state {root}")


@app.command()
def down(state: StateOption = None) -> None:
    """Stop every process of the dev fleet and remove its network namespace and keys."""
    root = devfleet.state_dir(state)
    try:
        found = devfleet.down(root, progress=_progress)
    except devfleet.DevFleetError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"stopped the dev fleet in {root}" if found else f"no dev fleet in {root}")


@app.command()
def status(state: StateOption = None, output: OutputOption = "table") -> None:
    """Clusters, processes, Ready nodes and Gateway addresses (exit 1 if not running)."""
    root = devfleet.state_dir(state)
    try:
        fleet = devfleet.DevFleet.load(root)
    except devfleet.DevFleetError as exc:
        raise _fail(str(exc)) from None
    if fleet is None:
        if output == "json":
            typer.echo(json.dumps({"state": str(root), "running": False, "clusters": []}))
        else:
            typer.echo(f"no dev fleet in {root}")
        raise typer.Exit(1)
    report = devfleet.status(fleet)
    _print_status(report, output)
    if not report["running"]:
        raise typer.Exit(1)


@app.command("fleet-address")
def fleet_address(
    clusters: Annotated[
        list[str],
        typer.Argument(
            help="The dev clusters whose front doors the fleet address sends to (none: no "
            "front door, every request 404).",
            show_default=False,
        ),
    ] = [],  # noqa: B006 - typer reads the default, never mutates it
    state: StateOption = None,
) -> None:
    """Point the fleet address (the stand-in for a global load balancer, http://127.77.<slot>.9)
    at these clusters' front doors: it asks each its health path every second and sends
    requests to the healthy ones, as a DNS name a platform points at its front doors."""
    root = devfleet.state_dir(state)
    try:
        fleet = devfleet.DevFleet.load(root)
        if fleet is None:
            raise devfleet.DevFleetError(f"no dev fleet in {root}")
        urls = devfleet.point_fleet_address(fleet, clusters)
    except devfleet.DevFleetError as exc:
        raise _fail(str(exc)) from None
    from modelplane.devfleet.fleet_address import host

    typer.echo(f"http://{host(fleet.slot)} -> {', '.join(urls) or '(no front door)'}")
