"""The dev fleet's own network namespace: where pods have real (private) addresses.

Kubernetes refuses loopback addresses in EndpointSlices, so pod and gateway addresses must be
private (10.x). Those are assigned only inside a network namespace the dev fleet creates for
itself (``ip netns add``), never in the host's: its loopback is up, and one local route makes
the whole of 10.0.0.0/8 local to it (a server can bind any 10.x address there without an
interface per pod). Control planes, controllers, gateways and stand-in model servers all run
inside; the host reaches the API servers and the front door through the bridge of
``agent.py``, on 127.x loopback addresses only.

``ip netns exec`` also bind-mounts ``/etc/netns/<name>/hosts`` over ``/etc/hosts`` for the
processes it starts, which is how LWS leader addresses (pod DNS names) resolve inside.
Creating a namespace needs CAP_NET_ADMIN (root): the error says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from modelplane.errors import EnvironmentProblem

LOCAL_RANGE = "10.0.0.0/8"
NETNS_DIR = Path("/var/run/netns")
ETC_NETNS = Path("/etc/netns")
CLONE_NEWNET = 0x40000000


class NetnsError(EnvironmentProblem, RuntimeError):
    """The namespace could not be created, entered or removed; the message says why."""


def namespace_name(state_dir: Path) -> str:
    """A stable, short name for the fleet whose state lives in ``state_dir``."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]
    return f"mp-{digest}"


def _ip() -> str:
    found = shutil.which("ip") or next(
        (p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if os.access(p, os.X_OK)), None
    )
    if not found:
        raise NetnsError(
            "the dev fleet needs the `ip` command (Debian/Ubuntu package iproute2) to create its "
            "network namespace"
        )
    return found


def _run(argv: Sequence[str]) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if proc.returncode:
        message = (proc.stderr or proc.stdout).strip()
        hint = ""
        if "Operation not permitted" in message or "Permission denied" in message:
            hint = " (creating a network namespace needs root or CAP_NET_ADMIN)"
        raise NetnsError(f"`{' '.join(argv)}` failed: {message}{hint}")


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def create(name: str) -> None:
    """Create the namespace (idempotent), bring its loopback up and make 10/8 local."""
    ip = _ip()
    if not exists(name):
        _run([ip, "netns", "add", name])
    _run([ip, "-n", name, "link", "set", "lo", "up"])
    # "local" route: every 10.x address is this namespace's own (AnyIP), no per-pod interface.
    _run([ip, "-n", name, "route", "replace", "local", LOCAL_RANGE, "dev", "lo"])
    hosts_file(name).parent.mkdir(parents=True, exist_ok=True)
    if not hosts_file(name).exists():
        write_hosts(name, {})


def delete(name: str) -> None:
    if exists(name):
        _run([_ip(), "netns", "delete", name])
    shutil.rmtree(ETC_NETNS / name, ignore_errors=True)


def exec_prefix(name: str) -> list[str]:
    """Prefix an argv with this to run it inside the namespace (the pid stays the command's)."""
    return [_ip(), "netns", "exec", name]


def hosts_file(name: str) -> Path:
    return ETC_NETNS / name / "hosts"


def static_hosts_file(name: str) -> Path:
    return ETC_NETNS / name / "hosts.static"


def set_static_hosts(name: str, entries: dict[str, str]) -> None:
    """Names every rewrite of the hosts file keeps (the fleet's own services)."""
    static_hosts_file(name).write_text(json.dumps(entries, sort_keys=True))
    write_hosts(name, {})


def write_hosts(name: str, entries: dict[str, str]) -> None:
    """Rewrite the namespace's /etc/hosts in place (same inode: running processes see it)."""
    try:
        static = json.loads(static_hosts_file(name).read_text())
    except (OSError, ValueError):
        static = {}
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost"]
    lines += [f"{address}\t{host}" for host, address in sorted({**static, **entries}.items())]
    path = hosts_file(name)
    with open(path, "a+") as handle:
        handle.seek(0)
        handle.truncate()
        handle.write("\n".join(lines) + "\n")


def enter(name: str) -> None:
    """Move the calling thread (call it before starting threads) into the namespace."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fd = os.open(NETNS_DIR / name, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise NetnsError(f"cannot enter network namespace {name}: {os.strerror(errno)}")
    finally:
        os.close(fd)
