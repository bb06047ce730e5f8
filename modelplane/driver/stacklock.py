"""A Pulumi stack lock held by someone else: who holds it, whether the holder is gone, and
recovering a stack that a killed update left behind (docs/architecture.md, "Crash safety").

The DIY backends (``file://``, ``postgres://``, ``s3://``...) write one lock per running
update and name its holder in the engine's ``ConcurrentUpdateError``::

    .../.pulumi/locks/organization/<project>/<stack>/<uuid>.json...: created by
    root@host (pid 17317) at 2026-11-26T00:05:27Z

A holder on this host whose process no longer runs (``kill -9``, a crashed machine that
came back under the same name) holds a stale lock. :func:`recover` releases it the Pulumi
way and never imports an edited checkpoint:

1. ``pulumi cancel`` releases the lock;
2. ``pulumi stack export`` is read (only read) for the killed update's pending operations;
3. pending *creates* go through ``pulumi refresh``: a Kubernetes object whose provider ID is
   known from its inputs (``<namespace>/<name>``, or ``<name>`` for a cluster-scoped kind) is
   imported by that ID (``--import-pending-creates <urn> <id>``) and refreshed, which adopts
   the object when the killed update did create it and drops it (not found) when it did not,
   so the next update creates it; any other pending create is cleared
   (``--clear-pending-creates``) and named, since it may have leaked a cloud resource. A
   stack whose provider renders manifests (``renderTo``: no API server to read) has nothing
   to import or refresh: its pending creates are cleared by a refresh that reads nothing
   (``--exclude '**'``), and the update writes the manifests again;
4. pending updates and deletes are left to the engine: the next update drops them with a
   warning and applies the program to the resources' last recorded state.

When nothing is pending, nothing is refreshed. A holder on another host, or one that still
runs, is waited for (``up --lock-wait``) or retried next round (``reconcile``).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pulumi.automation import Stack

_HOLDER = re.compile(
    r"created by (?P<user>[^@\s]+)@(?P<host>\S+) \(pid (?P<pid>\d+)\)(?: at (?P<at>\S+))?"
)
# The engine's words for a stack another update holds (DIY backends, Pulumi Cloud).
_LOCKED_TEXT = ("the stack is currently locked by", "Another update is currently in progress")


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


def is_lock_error(exc: BaseException) -> bool:
    """A CLI call failed because another update holds the stack's lock: Pulumi's
    ``ConcurrentUpdateError``, or any error whose text names a lock holder."""
    from pulumi.automation.errors import ConcurrentUpdateError

    text = str(exc)
    return (
        isinstance(exc, ConcurrentUpdateError)
        or bool(holders(text))
        or any(t in text for t in _LOCKED_TEXT)
    )


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


# -- the pending operations of a killed update ---------------------------------------------

CREATING = "creating"
STACK_TYPE = "pulumi:pulumi:Stack"
K8S_PROVIDER = "pulumi:providers:kubernetes"
_SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's secret signature key

#: Kubernetes kinds that live outside any namespace (their provider ID is the bare name).
#: A kind not listed whose object names no namespace gets no derived ID: it may be a
#: namespaced kind placed in the provider's default namespace.
CLUSTER_SCOPED = frozenset(
    {
        "APIService",
        "CSIDriver",
        "CSINode",
        "CertificateSigningRequest",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterTrustBundle",
        "CustomResourceDefinition",
        "DeviceClass",
        "FlowSchema",
        "GatewayClass",
        "IPAddress",
        "IngressClass",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "ResourceSlice",
        "RuntimeClass",
        "ServiceCIDR",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
        "VolumeAttributesClass",
    }
)


def _plain_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def kubernetes_id(resource: Mapping[str, Any]) -> str | None:
    """The provider ID of a pulumi-kubernetes object (a resource of a ``kubernetes:*`` type)
    from its inputs: ``<namespace>/<name>``, ``<name>`` for a cluster-scoped kind; None when
    it cannot be known (another provider, a secret or missing name, a namespaced kind without
    a namespace, a Helm release)."""
    kind_token = str(resource.get("type") or "")
    if not kind_token.startswith("kubernetes:") or kind_token.startswith("kubernetes:helm.sh/"):
        return None
    inputs = resource.get("inputs")
    metadata = inputs.get("metadata") if isinstance(inputs, Mapping) else None
    if not isinstance(metadata, Mapping) or _SECRET_SIG in metadata:
        return None
    name = _plain_str(metadata.get("name"))
    if name is None:
        return None
    namespace = metadata.get("namespace")
    if namespace is not None:
        namespace = _plain_str(namespace)
        return f"{namespace}/{name}" if namespace else None
    kind = kind_token.rsplit(":", 1)[-1]
    return name if kind in CLUSTER_SCOPED else None


@dataclass(frozen=True)
class PendingOp:
    """One pending operation of the checkpoint (``deployment.pending_operations``)."""

    urn: str
    kind: str  # creating, updating, deleting, reading, importing
    type: str
    id: str | None = None  # the provider ID of a pending create, when known

    @property
    def create(self) -> bool:
        return self.kind == CREATING


def pending_operations(deployment: Mapping[str, Any]) -> list[PendingOp]:
    """The pending operations of an exported deployment, pending creates with their ID."""
    found: list[PendingOp] = []
    for op in deployment.get("pending_operations") or []:
        resource = op.get("resource") if isinstance(op, Mapping) else None
        if not isinstance(resource, Mapping):
            continue
        kind = str(op.get("type") or "")
        found.append(
            PendingOp(
                urn=str(resource.get("urn") or ""),
                kind=kind,
                type=str(resource.get("type") or ""),
                id=kubernetes_id(resource) if kind == CREATING else None,
            )
        )
    return found


def renders(deployment: Mapping[str, Any]) -> bool:
    """A Kubernetes provider of the stack renders manifests (``renderTo``): no API server to
    read, so a refresh of its objects cannot run."""
    resources = list(deployment.get("resources") or [])
    resources += [
        op.get("resource")
        for op in deployment.get("pending_operations") or []
        if isinstance(op, Mapping)
    ]
    for res in resources:
        if isinstance(res, Mapping) and res.get("type") == K8S_PROVIDER:
            inputs = res.get("inputs")
            if isinstance(inputs, Mapping) and inputs.get("renderYamlToDirectory"):
                return True
    return False


def _short_urn(urn: str) -> str:
    """``<type>::<name>`` of a URN (its stack and project are the stack's own)."""
    parts = urn.split("::")
    return "::".join(parts[-2:]) if len(parts) >= 2 else urn


@dataclass
class Recovery:
    """What recovering a stack does about its pending operations (:func:`plan`)."""

    imported: list[PendingOp] = field(default_factory=list)  # creates imported by ID
    cleared: list[PendingOp] = field(default_factory=list)  # creates cleared: no ID known
    others: list[PendingOp] = field(default_factory=list)  # updates, deletes: the engine's
    rendered: bool = False  # the stack renders manifests: creates cleared, nothing read

    @property
    def refreshes(self) -> bool:
        return bool(self.imported or self.cleared)

    def refresh_args(self) -> list[str] | None:
        """The ``pulumi refresh`` that settles the pending creates (None: nothing to do)."""
        if not self.refreshes:
            return None
        args = ["refresh", "--yes", "--skip-preview", "--color", "never", "--suppress-progress"]
        for op in self.imported:
            assert op.id is not None
            args += ["--import-pending-creates", op.urn, "--import-pending-creates", op.id]
        if self.cleared:
            args.append("--clear-pending-creates")
        if self.rendered:
            args += ["--exclude", "**"]  # nothing live to read: clear only
        return args

    def describe(self) -> str:
        """What was done, for the message after a stale lock was broken."""
        parts: list[str] = []
        if self.imported:
            parts.append(
                f"{len(self.imported)} pending create(s) imported by their Kubernetes ID and "
                "refreshed (adopted where the killed update made them, else created again)"
            )
        if self.cleared:
            urns = ", ".join(_short_urn(op.urn) for op in self.cleared)
            if self.rendered:
                parts.append(
                    f"{len(self.cleared)} pending create(s) cleared (renderTo: the manifests "
                    f"are written again): {urns}"
                )
            else:
                parts.append(
                    f"{len(self.cleared)} pending create(s) cleared with no ID to import them "
                    f"by; they may have leaked a resource, check: {urns}"
                )
        if self.others:
            kinds = ", ".join(sorted({op.kind for op in self.others}))
            parts.append(
                f"{len(self.others)} other pending operation(s) ({kinds}) left to the update, "
                "which drops them with a warning and applies the program again"
            )
        return "; ".join(parts) or "nothing was pending"


def plan(deployment: Mapping[str, Any], *, rendered: bool = False) -> Recovery:
    """How to settle the pending operations of ``deployment`` (a ``stack export``);
    ``rendered``: the caller knows the stack renders manifests (the export may not say)."""
    rendered = rendered or renders(deployment)
    recovery = Recovery(rendered=rendered)
    for op in pending_operations(deployment):
        if not op.create:
            recovery.others.append(op)
        elif op.id is not None and not rendered:
            recovery.imported.append(op)
        else:
            recovery.cleared.append(op)
    return recovery


def recover(stack: Stack, *, rendered: bool = False) -> Recovery:
    """Break a stale lock (``pulumi cancel``) and settle the killed update's pending creates
    through ``pulumi refresh`` (:class:`Recovery`); raises the CLI's CommandError."""
    stack.cancel()
    exported = stack.export_stack()  # read only
    recovery = plan(exported.deployment or {}, rendered=rendered)
    args = recovery.refresh_args()
    if args is not None:
        run_cli(stack, args)
    return recovery


def run_cli(stack: Stack, args: Sequence[str]) -> Any:
    """A CLI call on ``stack`` as the Automation API makes it (``--stack`` added, the
    workspace's environment, logged by the session's engine command)."""
    from pulumi.automation._stack import ExecKind

    return stack._run_pulumi_cmd_sync([*args, "--exec-kind", ExecKind.LOCAL.value])
