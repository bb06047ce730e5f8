"""A Pulumi stack lock held by someone else: who holds it, whether the holder is gone, and
recovering a stack that a killed update left behind (docs/architecture.md, "Crash safety").

The DIY backends (``file://``, ``postgres://``, ``s3://``...) write one lock per running
update and name its holder in the engine's ``ConcurrentUpdateError``::

    .../.pulumi/locks/organization/modelplane/<stack>/<uuid>.json...: created by
    root@host (pid 17317) at 2026-11-26T00:05:27Z

A holder on this host whose process no longer runs (``kill -9``, a crashed machine that
came back under the same name) holds a stale lock: the next ``up`` cancels it
(``pulumi cancel``) and drops the pending operations the killed update left in the
checkpoint (``stack export`` -> ``pending_operations: []`` -> ``stack import``), then runs.
Kubernetes objects whose create was pending are created again with server-side apply,
which adopts an object that did get created: nothing is duplicated. A holder on another
host, or one that still runs, is waited for (``up --lock-wait``) or retried next round
(``reconcile``).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pulumi.automation import Stack

_HOLDER = re.compile(
    r"created by (?P<user>[^@\s]+)@(?P<host>\S+) \(pid (?P<pid>\d+)\)(?: at (?P<at>\S+))?"
)


@dataclass(frozen=True)
class LockHolder:
    user: str
    host: str
    pid: int
    at: str = ""

    def describe(self) -> str:
        since = f" since {self.at}" if self.at else ""
        return f"{self.user}@{self.host} (pid {self.pid}){since}"


def holders(text: str) -> list[LockHolder]:
    """The holders named in the engine's locked-stack error."""
    return [
        LockHolder(m["user"], m["host"], int(m["pid"]), m["at"] or "")
        for m in _HOLDER.finditer(text)
    ]


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it runs, as someone else
    try:  # a killed child nobody reaped yet is a zombie: gone too
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def stale(holder: LockHolder, hostname: str | None = None) -> bool:
    """Held by a process of this host that no longer runs."""
    here = hostname or socket.gethostname()
    return holder.host == here and _process_gone(holder.pid)


def all_stale(text: str, hostname: str | None = None) -> list[LockHolder]:
    """The holders when every one is stale (the lock may be broken), else []."""
    found = holders(text)
    return found if found and all(stale(h, hostname) for h in found) else []


def clear_pending(stack: Stack) -> int:
    """Drop the pending operations of a killed update from the stack's checkpoint; how many."""
    exported = stack.export_stack()
    deployment: dict[str, Any] = exported.deployment or {}
    pending = list(deployment.get("pending_operations") or [])
    if pending:
        deployment["pending_operations"] = []
        exported.deployment = deployment
        stack.import_stack(exported)
    return len(pending)


def recover(stack: Stack) -> int:
    """Break a stale lock and clear the pending operations; how many were pending."""
    stack.cancel()
    return clear_pending(stack)
