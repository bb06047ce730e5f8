"""Starting a local Kubernetes control plane: its processes and their command lines.

One launcher for `modelplane dev-cluster` (`modelplane.devcluster.server`, on 127.0.0.1) and
`modelplane dev-fleet` (`modelplane.devfleet.cluster`, on a cluster's own address inside the
fleet's network namespace). The argv builders take the host to bind and advertise, and the
flags one caller adds; `spawn` takes an exec prefix (``ip netns exec <ns>``) and an
environment. Every process runs in its own session (process group) and logs to a file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelplane.devcluster.certs import PKIPaths
from modelplane.errors import EnvironmentProblem

LOOPBACK = "127.0.0.1"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KINE_SQLITE_PARAMS = (
    "_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate"
    "&_stmt_cache_size=20&cache=shared"
)


class DevClusterError(EnvironmentProblem, RuntimeError):
    """The development cluster could not be started, reached or stopped."""


# --------------------------------------------------------------------------- processes


@dataclass
class ManagedProcess:
    """A process started in its own session (its pid is also its process-group id)."""

    name: str
    pid: int
    executable: str
    log_path: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def running(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_runs(self.pid, self.executable)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process group, then SIGKILL it if it is still there after ``timeout``."""
        if self.running():
            self._signal(signal.SIGTERM)
            if not self._wait(timeout):
                self._signal(signal.SIGKILL)
                if not self._wait(5.0):
                    raise DevClusterError(f"{self.name} (pid {self.pid}) did not exit")
        elif self.popen is not None:
            self.popen.wait()
        # Stragglers in the group (none expected: both binaries are single processes).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        try:
            if os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def _wait(self, timeout: float) -> bool:
        if self.popen is not None:
            try:
                self.popen.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not pid_runs(self.pid, self.executable):
                self._reap()
                return True
            time.sleep(0.1)
        return not pid_runs(self.pid, self.executable)

    def _reap(self) -> None:
        """Collect the exit status if this process started it (no zombie left behind); a
        process started by another command is reaped by its new parent (init)."""
        deadline = time.monotonic() + 5.0
        while True:
            try:
                # (0, 0) while the other threads of a zombie leader are still exiting
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except OSError:  # ChildProcessError: not our child, or already reaped
                return
            if pid or time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def to_state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "executable": self.executable,
            "log": str(self.log_path),
        }

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> ManagedProcess:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),
            executable=str(data["executable"]),
            log_path=Path(data["log"]),
        )


def pid_runs(pid: int, executable: str) -> bool:
    """Whether ``pid`` is alive (not a zombie) and runs ``executable`` (guards pid reuse)."""
    proc = Path(f"/proc/{pid}")
    if Path("/proc/self").exists():
        try:
            argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            stat = (proc / "stat").read_text()
        except OSError:
            return False
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        return state not in ("Z", "X") and argv0 == executable
    try:  # macOS and other systems without /proc
        out = subprocess.run(
            ["ps", "-o", "stat=,command=", "-p", str(pid)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return False
    if not out:
        return False
    stat, _, command = out.partition(" ")
    return not stat.startswith("Z") and command.strip().startswith(executable)


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    log_path: Path,
    prefix: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ManagedProcess:
    """Start ``prefix + argv`` in its own session, its output (fresh each start) in
    ``log_path``. ``prefix`` must exec the command in place (``ip netns exec`` does), so the
    pid is the command's."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            [*prefix, *argv],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group; survives the CLI that started it
            close_fds=True,
            env=None if env is None else dict(env),
        )
    return ManagedProcess(name, popen.pid, str(argv[0]), log_path, popen)


def clean_env() -> dict[str, str]:
    """This process's environment without kubeconfig, Pulumi and proxy settings (the
    components talk to their own API server directly)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "PULUMI"))}
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env.pop(proxy, None)
    env["NO_PROXY"] = "*"
    return env


# --------------------------------------------------------------------------- command lines


def kine_argv(kine: Path, *, port: int, database: Path, host: str = LOOPBACK) -> list[str]:
    return [
        str(kine),
        f"--listen-address={host}:{port}",
        f"--endpoint=sqlite://{database}?{KINE_SQLITE_PARAMS}",
        "--metrics-bind-address=0",  # no metrics listener at all
    ]


def apiserver_argv(
    kube_apiserver: Path,
    *,
    port: int,
    etcd_port: int,
    pki: PKIPaths,
    cert_dir: Path,
    host: str = LOOPBACK,
    service_range: str = SERVICE_CLUSTER_IP_RANGE,
    authorization: str = "RBAC",
    extra: Sequence[str] = (),
) -> list[str]:
    """envtest-style flags, everything bound to and advertised on ``host``."""
    return [
        str(kube_apiserver),
        f"--etcd-servers=http://{host}:{etcd_port}",
        f"--bind-address={host}",
        f"--advertise-address={host}",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        *extra,
        f"--service-account-issuer=https://{host}:{port}",
        f"--service-account-key-file={pki.sa_public_key}",
        f"--service-account-signing-key-file={pki.sa_private_key}",
        f"--service-cluster-ip-range={service_range}",
        f"--authorization-mode={authorization}",
        "--allow-privileged=true",
        "--disable-admission-plugins=ServiceAccount",
        # Endpoints may not point at loopback; there is no network to reconcile anyway.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
    ]


def controller_manager_argv(
    kube_controller_manager: Path,
    *,
    kubeconfig: Path,
    pki: PKIPaths,
    host: str = LOOPBACK,
    extra: Sequence[str] = (),
) -> list[str]:
    """Every default controller (the garbage collector among them), no serving port."""
    return [
        str(kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--controllers=*",
        f"--service-account-private-key-file={pki.sa_private_key}",
        f"--root-ca-file={pki.ca_cert}",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.ca_key}",
        f"--bind-address={host}",
        "--secure-port=0",
        *extra,
        "--profiling=false",
    ]


def scheduler_argv(
    kube_scheduler: Path, *, config: Path, kubeconfig: Path, host: str = LOOPBACK
) -> list[str]:
    return [
        str(kube_scheduler),
        f"--config={config}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={host}",
        "--secure-port=10259",
        "--profiling=false",
    ]
