"""Run kine (SQLite) and kube-apiserver on 127.0.0.1 as a throwaway development cluster.

Both processes run in their own session (process group), log to files under the workdir and
listen on 127.0.0.1 only. ``DevCluster.stop()`` terminates the groups and waits for them.
The kubeconfig embeds an admin client key: ``kubeconfig_text`` is a secret and is never logged.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from modelplane.devcluster.certs import ADMIN_USER, PKIPaths, write_pki, write_secret
from modelplane.devcluster.crds import CRDInstallError, InstallReport, install_crds
from modelplane.devcluster.launch import (
    LOOPBACK,
    DevClusterError,
    ManagedProcess,
    apiserver_argv,
    controller_manager_argv,
    kine_argv,
    spawn,
)
from modelplane.devcluster.rest import KubeRest, KubeRestError
from modelplane.gobuild.gotool import Progress
from modelplane.gobuild.kube import KubeBinaries, default_progress, ensure_kube_binaries

STATE_FILE = "state.json"


class _PortTaken(DevClusterError):
    pass


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _wait_for_port(process: ManagedProcess, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.running():
            _raise_exited(process)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((LOOPBACK, port)) == 0:
                return
        time.sleep(0.1)
    raise DevClusterError(
        f"{process.name} did not listen on {LOOPBACK}:{port} within {timeout:.0f}s; "
        f"log: {process.log_path}"
    )


def _raise_exited(process: ManagedProcess) -> None:
    tail = process.log_tail()
    if "address already in use" in tail:
        raise _PortTaken(f"{process.name}: port already in use")
    raise DevClusterError(f"{process.name} exited during startup; log: {process.log_path}\n{tail}")


# --------------------------------------------------------------------------- kubeconfig


def render_kubeconfig(
    *,
    name: str,
    server: str,
    ca_cert_pem: bytes,
    client_cert_pem: bytes,
    client_key_pem: bytes,
    user: str = ADMIN_USER,
) -> str:
    """A self-contained kubeconfig (credentials embedded): a secret."""
    import base64

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": b64(ca_cert_pem)},
            }
        ],
        "users": [
            {
                "name": f"{user}@{name}",
                "user": {
                    "client-certificate-data": b64(client_cert_pem),
                    "client-key-data": b64(client_key_pem),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{user}@{name}"}}],
        "current-context": name,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


# --------------------------------------------------------------------------- the cluster


@dataclass
class DevCluster:
    """A running kine + kube-apiserver pair on 127.0.0.1."""

    name: str
    workdir: Path
    server: str
    kubeconfig_path: Path
    pki: PKIPaths
    processes: list[ManagedProcess]
    kubernetes_version: str
    crds: InstallReport | None = None

    @property
    def kubeconfig_text(self) -> str:
        """The kubeconfig, with the admin client key: a secret — never print or log it."""
        return self.kubeconfig_path.read_text()

    @property
    def port(self) -> int:
        return int(self.server.rsplit(":", 1)[1])

    def rest(self) -> KubeRest:
        return KubeRest(self.server, self.pki.ca_cert, self.pki.admin_cert, self.pki.admin_key)

    def running(self) -> bool:
        return bool(self.processes) and all(p.running() for p in self.processes)

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def stop(self) -> None:
        """Terminate the controllers, kube-apiserver, then kine (idempotent)."""
        errors: list[str] = []
        for process in reversed(self.processes):  # apiserver first, then its store
            try:
                process.stop()
            except DevClusterError as exc:
                errors.append(str(exc))
        if errors:
            raise DevClusterError("; ".join(errors))

    def __enter__(self) -> DevCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- persistence for `modelplane dev-cluster up/down` (no secrets in here: only paths)

    def to_state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "workdir": str(self.workdir),
            "server": self.server,
            "kubeconfig": str(self.kubeconfig_path),
            "kubernetes_version": self.kubernetes_version,
            "pki_dir": str(self.pki.ca_cert.parent),
            "processes": [p.to_state() for p in self.processes],
        }

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> DevCluster:
        return cls(
            name=str(data["name"]),
            workdir=Path(data["workdir"]),
            server=str(data["server"]),
            kubeconfig_path=Path(data["kubeconfig"]),
            pki=PKIPaths.under(Path(data["pki_dir"])),
            processes=[ManagedProcess.from_state(p) for p in data["processes"]],
            kubernetes_version=str(data["kubernetes_version"]),
        )

    def save_state(self, path: Path | None = None) -> Path:
        target = path or self.workdir / STATE_FILE
        target.write_text(json.dumps(self.to_state(), indent=2) + "\n")
        return target

    @classmethod
    def load_state(cls, path: Path) -> DevCluster:
        try:
            return cls.from_state(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DevClusterError(f"cannot read the dev-cluster state {path}: {exc}") from None


def wait_until_ready(
    rest: KubeRest, process: ManagedProcess, timeout: float, *, check: Callable[[], None]
) -> None:
    """Poll ``/readyz`` until it answers ``ok``."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        check()
        if not process.running():
            _raise_exited(process)
        try:
            body = rest.get("/readyz", timeout=5)
            if isinstance(body, str) and body.strip() == "ok":
                return
            last = str(body)[:200]
        except KubeRestError as exc:
            last = str(exc)[:500]
        time.sleep(0.25)
    raise DevClusterError(
        f"kube-apiserver not ready after {timeout:.0f}s ({last}); log: {process.log_path}"
    )


def start_dev_cluster(
    workdir: Path,
    *,
    name: str = "modelplane-dev",
    binaries: KubeBinaries | None = None,
    crds: bool = True,
    crds_dir: Path | None = None,
    timeout: float = 120.0,
    progress: Progress | None = None,
) -> DevCluster:
    """Start kine + kube-apiserver on free 127.0.0.1 ports, wait for ``/readyz``, install the
    CRDs, write ``<workdir>/kubeconfig`` and return the running cluster.

    Every start is fresh: the previous database and PKI under ``workdir`` are replaced.
    Logs: ``<workdir>/logs/{kine,kube-apiserver}.log``.
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    say: Progress = progress or (lambda _message: None)
    if binaries is None:
        binaries = ensure_kube_binaries(progress=progress or default_progress)
    last_error: DevClusterError | None = None
    for _attempt in range(3):
        try:
            return _start_once(workdir, name, binaries, crds, crds_dir, timeout, say)
        except _PortTaken as exc:  # another process grabbed a port between probe and bind
            last_error = exc
    raise DevClusterError(f"could not find free ports on {LOOPBACK}: {last_error}")


def _start_once(
    workdir: Path,
    name: str,
    binaries: KubeBinaries,
    crds: bool,
    crds_dir: Path | None,
    timeout: float,
    say: Progress,
) -> DevCluster:
    for stale in ("kine", "pki", "apiserver-certs"):
        shutil.rmtree(workdir / stale, ignore_errors=True)
    logs = workdir / "logs"
    kine_dir = workdir / "kine"
    kine_dir.mkdir(parents=True)
    pki = write_pki(workdir / "pki")
    cert_dir = workdir / "apiserver-certs"
    cert_dir.mkdir(mode=0o700)

    kine_port = free_port()
    api_port = free_port()
    while api_port == kine_port:
        api_port = free_port()
    server = f"https://{LOOPBACK}:{api_port}"
    cluster = DevCluster(
        name=name,
        workdir=workdir,
        server=server,
        kubeconfig_path=workdir / "kubeconfig",
        pki=pki,
        processes=[],
        kubernetes_version=binaries.kubernetes_version,
    )
    started = time.monotonic()
    try:
        say(f"starting kine on {LOOPBACK}:{kine_port}")
        kine = spawn(
            "kine",
            kine_argv(binaries.kine, port=kine_port, database=kine_dir / "state.db"),
            cwd=kine_dir,
            log_path=logs / "kine.log",
        )
        cluster.processes.append(kine)
        _wait_for_port(kine, kine_port, timeout=30)

        say(f"starting kube-apiserver v{binaries.kubernetes_version} on {server}")
        apiserver = spawn(
            "kube-apiserver",
            apiserver_argv(
                binaries.kube_apiserver,
                port=api_port,
                etcd_port=kine_port,
                pki=pki,
                cert_dir=cert_dir,
            ),
            cwd=workdir,
            log_path=logs / "kube-apiserver.log",
        )
        cluster.processes.append(apiserver)

        def kine_alive() -> None:
            if not kine.running():
                _raise_exited(kine)

        remaining = max(10.0, timeout - (time.monotonic() - started))
        wait_until_ready(cluster.rest(), apiserver, remaining, check=kine_alive)
        write_secret(
            cluster.kubeconfig_path,
            render_kubeconfig(
                name=name,
                server=server,
                ca_cert_pem=pki.ca_cert.read_bytes(),
                client_cert_pem=pki.admin_cert.read_bytes(),
                client_key_pem=pki.admin_key.read_bytes(),
            ),
        )
        if binaries.kube_controller_manager.exists():
            say("starting kube-controller-manager (garbage collector and the other controllers)")
            cluster.processes.append(
                spawn(
                    "kube-controller-manager",
                    controller_manager_argv(
                        binaries.kube_controller_manager,
                        kubeconfig=cluster.kubeconfig_path,
                        pki=pki,
                    ),
                    cwd=workdir,
                    log_path=logs / "kube-controller-manager.log",
                )
            )
        if crds:
            say("installing CRDs (LeaderWorkerSet, Gateway API, Inference Extension)")
            cluster.crds = install_crds(cluster.rest(), crds_dir)
            for skipped in cluster.crds.skipped:
                say(f"skipped (rejected by the server): {skipped}")
        say(f"dev cluster ready in {time.monotonic() - started:.1f}s")
        return cluster
    except BaseException as exc:
        try:
            cluster.stop()
        except DevClusterError as stop_error:
            print(f"modelplane: while cleaning up: {stop_error}", file=sys.stderr)
        if isinstance(exc, DevClusterError):
            raise
        if isinstance(exc, CRDInstallError):
            raise DevClusterError(f"installing CRDs failed: {exc}") from None
        if isinstance(exc, OSError):
            raise DevClusterError(f"starting the dev cluster failed: {exc}") from None
        raise
