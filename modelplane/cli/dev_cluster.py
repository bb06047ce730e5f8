"""`modelplane dev-cluster up|down|status`: a local kube-apiserver on 127.0.0.1 to try things."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from modelplane.devcluster import (
    CRDInstallError,
    DevCluster,
    DevClusterError,
    GoError,
    ensure_kube_binaries,
    start_dev_cluster,
)
from modelplane.devcluster.rest import KubeRestError
from modelplane.devcluster.server import STATE_FILE

app = typer.Typer(
    help=(
        "A throwaway Kubernetes API server (kube-apiserver + kine/SQLite) on 127.0.0.1, with the "
        "LeaderWorkerSet, Gateway API and Inference Extension CRDs installed. No nodes: objects "
        "are stored and validated, nothing runs."
    ),
    no_args_is_help=True,
)

DEFAULT_DIR = Path(".modelplane/dev-cluster")
DirOption = Annotated[
    Path,
    typer.Option(
        "--dir",
        help="Working directory: state, logs, PKI, database and kubeconfig.",
        file_okay=False,
    ),
]


def _progress(message: str) -> None:
    typer.echo(f"modelplane: {message}", err=True)


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(1)


def _load(directory: Path) -> DevCluster | None:
    state = directory / STATE_FILE
    if not state.is_file():
        return None
    try:
        return DevCluster.load_state(state)
    except DevClusterError as exc:
        raise _fail(str(exc)) from None


def _recorded(directory: Path, *, missing: int) -> DevCluster:
    """The dev cluster `up` recorded in ``directory``; none: says so and exits with the code
    ``missing``."""
    cluster = _load(directory)
    if cluster is None:
        typer.echo(f"no dev cluster in {directory}")
        raise typer.Exit(missing)
    return cluster


def _print_kubeconfig(cluster: DevCluster) -> None:
    path = cluster.kubeconfig_path
    typer.echo(f"kubeconfig: {path}")
    typer.echo(f"export KUBECONFIG={shlex.quote(str(path))}")


@app.command()
def up(directory: DirOption = DEFAULT_DIR) -> None:
    """Build the binaries if needed (minutes, once), start the cluster in the background and
    print its kubeconfig path. Each `up` starts from an empty database."""
    directory = directory.resolve()
    existing = _load(directory)
    if existing is not None:
        if existing.running():
            typer.echo(f"the dev cluster in {directory} is already running at {existing.server}")
            _print_kubeconfig(existing)
            return
        try:
            existing.stop()  # leftovers of a half-dead cluster
        except DevClusterError as exc:
            raise _fail(str(exc)) from None
        (directory / STATE_FILE).unlink(missing_ok=True)
    try:
        binaries = ensure_kube_binaries(progress=_progress)
        cluster = start_dev_cluster(directory, binaries=binaries, progress=_progress)
    except (GoError, DevClusterError, CRDInstallError) as exc:
        raise _fail(str(exc)) from None
    cluster.save_state()
    typer.echo(
        f"dev cluster running at {cluster.server} (Kubernetes v{cluster.kubernetes_version})"
    )
    typer.echo(f"logs: {directory / 'logs'}; stop it with: modelplane dev-cluster down")
    _print_kubeconfig(cluster)


@app.command()
def down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop the dev cluster started by `up` in DIR."""
    directory = directory.resolve()
    cluster = _recorded(directory, missing=0)
    try:
        cluster.stop()
    except DevClusterError as exc:
        raise _fail(str(exc)) from None
    (directory / STATE_FILE).unlink(missing_ok=True)
    typer.echo(f"stopped the dev cluster in {directory}")


@app.command()
def status(directory: DirOption = DEFAULT_DIR) -> None:
    """Show whether the dev cluster in DIR runs (exit code 1 if it does not)."""
    directory = directory.resolve()
    cluster = _recorded(directory, missing=1)
    for process in cluster.processes:
        state = "running" if process.running() else "stopped"
        typer.echo(f"{process.name}: {state} (pid {process.pid}, log {process.log_path})")
    if not cluster.running():
        typer.echo("dev cluster: not running (run `modelplane dev-cluster down` to clean up)")
        raise typer.Exit(1)
    try:
        ready = cluster.rest().get("/readyz", timeout=5)
    except (KubeRestError, OSError) as exc:
        ready = f"not ready ({exc})"
    typer.echo(f"server: {cluster.server} (Kubernetes v{cluster.kubernetes_version}): {ready}")
    _print_kubeconfig(cluster)
