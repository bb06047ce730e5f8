"""Recovering a stack a killed update left locked (modelplane.driver.stacklock), without the
engine: the provider IDs derived from pending creates, the `pulumi refresh` that settles them,
the message, and one lock handler for every CLI call of an operation."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from modelplane.driver import operations, stacklock
from modelplane.driver.errors import StackLocked
from modelplane.driver.results import Outcome

STACK = "urn:pulumi:gateway::modelplane-local::pulumi:pulumi:Stack::modelplane-local-gateway"


def _urn(kind: str, name: str) -> str:
    return f"urn:pulumi:gateway::modelplane-local::{kind}::{name}"


def _res(kind: str, metadata: Any = None, **extra: Any) -> dict[str, Any]:
    inputs: dict[str, Any] = dict(extra)
    if metadata is not None:
        inputs["metadata"] = metadata
    return {"urn": _urn(kind, "x"), "type": kind, "custom": True, "inputs": inputs}


SECRET = {
    "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
    "ciphertext": "v1",
}


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        (_res("kubernetes:apps/v1:Deployment", {"name": "web", "namespace": "demo"}), "demo/web"),
        (_res("kubernetes:core/v1:Namespace", {"name": "demo"}), "demo"),
        (_res("kubernetes:storage.k8s.io/v1:StorageClass", {"name": "rwx"}), "rwx"),
        (_res("kubernetes:gateway.networking.k8s.io/v1:GatewayClass", {"name": "t"}), "t"),
        (_res("kubernetes:traefik.io/v1alpha1:Middleware", {"name": "m", "namespace": "g"}), "g/m"),
        # a namespaced kind without a namespace: the provider's default namespace, unknown here
        (_res("kubernetes:core/v1:ConfigMap", {"name": "cm"}), None),
        (_res("kubernetes:core/v1:ConfigMap", {"name": "cm", "namespace": ""}), None),
        (_res("kubernetes:core/v1:ConfigMap", {"namespace": "demo"}), None),  # no name
        (_res("kubernetes:core/v1:Secret", SECRET), None),  # metadata is a secret
        (_res("kubernetes:core/v1:Secret", {"name": SECRET, "namespace": "d"}), None),
        (_res("kubernetes:core/v1:ConfigMap"), None),  # no metadata
        (_res("kubernetes:helm.sh/v3:Release", name="traefik", namespace="gw"), None),
        (_res("gcp:container/cluster:Cluster", {"name": "c", "namespace": "n"}), None),
        (_res("pulumi:providers:kubernetes", {"name": "p"}), None),
    ],
)
def test_recovery_kubernetes_id_from_pending_inputs(
    resource: dict[str, Any], expected: str | None
) -> None:
    assert stacklock.kubernetes_id(resource) == expected


def _provider(render: bool) -> dict[str, Any]:
    inputs = {"kubeconfig": "", "renderYamlToDirectory": "/fleet/rendered"} if render else {}
    return {"urn": _urn("pulumi:providers:kubernetes", "local-k8s"), "type": "pulumi:providers:kubernetes",
            "inputs": inputs}  # fmt: skip


def _op(kind: str, op: str, name: str, metadata: Any = None) -> dict[str, Any]:
    resource = _res(kind, metadata)
    resource["urn"] = _urn(kind, name)
    return {"resource": resource, "type": op}


DEPLOY = "kubernetes:apps/v1:Deployment"
CLUSTER = "gcp:container/cluster:Cluster"


def _export(render: bool, *ops: dict[str, Any]) -> dict[str, Any]:
    """A `stack export`'s deployment as a killed update leaves it (canned JSON)."""
    text = json.dumps(
        {
            "manifest": {"version": "v3.274.1"},
            "resources": [{"urn": STACK, "type": "pulumi:pulumi:Stack"}, _provider(render)],
            "pending_operations": list(ops),
        }
    )
    return dict(json.loads(text))


WEB = _op(DEPLOY, "creating", "web", {"name": "web", "namespace": "demo"})
CM = _op("kubernetes:core/v1:ConfigMap", "creating", "cm", {"name": "cm"})
GKE = _op(CLUSTER, "creating", "gke")
UPD = _op(DEPLOY, "updating", "api", {"name": "api", "namespace": "demo"})
DEL = _op(DEPLOY, "deleting", "old", {"name": "old", "namespace": "demo"})

IMPORT_WEB = [
    "--import-pending-creates",
    _urn(DEPLOY, "web"),
    "--import-pending-creates",
    "demo/web",
]
BASE = ["refresh", "--yes", "--skip-preview", "--color", "never", "--suppress-progress"]


@pytest.mark.parametrize(
    ("deployment", "rendered", "args", "words"),
    [
        # nothing pending: no refresh at all
        (_export(False), False, None, ["nothing was pending"]),
        (_export(True), True, None, ["nothing was pending"]),
        # a known ID: imported and refreshed (the whole stack)
        (_export(False, WEB), False, BASE + IMPORT_WEB, ["1 pending create(s) imported"]),
        # no ID: cleared and named, next to the import
        (
            _export(False, WEB, CM, GKE),
            False,
            [*BASE, *IMPORT_WEB, "--clear-pending-creates"],
            [
                "1 pending create(s) imported",
                "2 pending create(s) cleared",
                "may have leaked",
                "kubernetes:core/v1:ConfigMap::cm",
                f"{CLUSTER}::gke",
            ],
        ),  # fmt: skip
        # renderTo (said by the export's provider, or by the caller): cleared, nothing read
        (
            _export(True, WEB, CM),
            False,
            [*BASE, "--clear-pending-creates", "--exclude", "**"],
            ["2 pending create(s) cleared (renderTo"],
        ),
        (
            _export(False, WEB),
            True,
            [*BASE, "--clear-pending-creates", "--exclude", "**"],
            ["1 pending create(s) cleared (renderTo"],
        ),
        # updates and deletes: left to the engine (the next update drops them with a warning)
        (
            _export(False, UPD, DEL),
            False,
            None,
            ["2 other pending operation(s) (deleting, updating)"],
        ),
        (
            _export(False, UPD, WEB),
            False,
            BASE + IMPORT_WEB,
            ["1 pending create(s) imported", "1 other pending operation(s) (updating)"],
        ),
    ],
)
def test_recovery_plan_refresh_and_message(
    deployment: dict[str, Any], rendered: bool, args: list[str] | None, words: list[str]
) -> None:
    recovery = stacklock.plan(deployment, rendered=rendered)
    assert recovery.refresh_args() == args
    assert recovery.refreshes == (args is not None)
    text = recovery.describe()
    for word in words:
        assert word in text, text


class FakeStack:
    """A Stack whose CLI calls are recorded (no engine)."""

    def __init__(self, deployment: dict[str, Any]) -> None:
        self.deployment = deployment
        self.calls: list[Any] = []

    def cancel(self) -> None:
        self.calls.append("cancel")

    def export_stack(self) -> Any:
        self.calls.append("export")
        return SimpleNamespace(deployment=self.deployment)

    def import_stack(self, _state: Any) -> None:  # pragma: no cover - must never be called
        raise AssertionError("an edited checkpoint must never be imported")

    def _run_pulumi_cmd_sync(self, args: list[str]) -> Any:
        self.calls.append(list(args))
        return SimpleNamespace(stdout="", stderr="", code=0)


def test_recovery_cancels_reads_and_refreshes_only_when_pending() -> None:
    idle = FakeStack(_export(False))
    assert not stacklock.recover(idle).refreshes  # type: ignore[arg-type]
    assert idle.calls == ["cancel", "export"]
    killed = FakeStack(_export(False, WEB, GKE))
    recovery = stacklock.recover(killed)  # type: ignore[arg-type]
    assert [op.id for op in recovery.imported] == ["demo/web"]
    assert killed.calls[:2] == ["cancel", "export"]
    assert killed.calls[2][:1] == ["refresh"] and "--clear-pending-creates" in killed.calls[2]
    assert killed.calls[2][-2:] == ["--exec-kind", "auto.local"]


def _locked_error(pid: int, host: str | None = None, conflict: bool = True) -> Exception:
    from pulumi.automation._cmd import CommandResult
    from pulumi.automation.errors import CommandError, create_command_error

    holder = f"created by root@{host or socket.gethostname()} (pid {pid}) at 2026-11-26T00:05:27Z"
    head = "error: the stack is currently locked by 1 lock(s)." if conflict else "error: boom"
    result = CommandResult(stdout="", stderr=f"{head}\n  .../locks/x.json: {holder}", code=255)
    return create_command_error(result) if conflict else CommandError(result)


@pytest.fixture
def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_recovery_lock_errors_and_their_class(dead_pid: int) -> None:
    from pulumi.automation._cmd import CommandResult
    from pulumi.automation.errors import CommandError

    locked = _locked_error(dead_pid)
    named = _locked_error(dead_pid, conflict=False)  # a plain CommandError naming a holder
    other = CommandError(CommandResult(stdout="", stderr="error: program failed", code=1))
    assert stacklock.is_lock_error(locked) and stacklock.is_lock_error(named)
    assert not stacklock.is_lock_error(other)
    backend = "file:///fleet/.modelplane/state"
    assert isinstance(operations.classify(named, "gateway", None, backend), StackLocked)
    assert not isinstance(operations.classify(other, "gateway", None, backend), StackLocked)


class _Op(operations.EngineOp):
    verb = "refresh"

    def __init__(self, ctx: Any, fail: dict[str, list[Exception]]) -> None:
        super().__init__(ctx, SimpleNamespace(name="gateway", tier=0))  # type: ignore[arg-type]
        self.fail = fail

    def _maybe(self, where: str) -> None:
        if self.fail.get(where):
            raise self.fail[where].pop(0)

    def skip(self, stack: Any) -> Any:
        self._maybe("skip")
        return None

    def invoke(self, stack: Any, on_event: Any, **options: Any) -> Any:
        self._maybe("invoke")
        return "done"

    def done(self, stack: Any, outcome: Any, result: Any) -> None:
        self._maybe("done")

    def renders(self) -> bool:
        return False


def _ctx(fail_select: list[Exception], said: list[str], lock_wait: float = 0.0) -> Any:
    from modelplane.driver.events import StackProgress

    stacks: list[Any] = []

    def select(name: str, **_kw: Any) -> Any:
        if fail_select:
            raise fail_select.pop(0)
        stacks.append(FakeStack(_export(False)))
        return stacks[-1]

    session = SimpleNamespace(
        stack=select,
        backend="file:///f/.modelplane/state",
        project="modelplane-f",
        workspace=lambda *_a: None,
        qualified=lambda name: name,  # no organization: the engine's names are the stacks'
    )
    return SimpleNamespace(
        session=session,
        problem=lambda *_a: None,
        progress=lambda unit: StackProgress(unit.name),
        listener=lambda *_a: lambda _e: None,
        exists=lambda _n: False,
        lock_wait=lock_wait,
        say=said.append,
        cache=None,
        stacks=stacks,
    )


@pytest.mark.parametrize("where", ["select", "skip", "invoke", "done"])
def test_recovery_one_lock_handler_for_every_cli_call(
    where: str, dead_pid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale lock met by any CLI call of the operation is recovered once, and the call runs
    again; a live one (lock_wait 0) is reported as locked."""
    recovered: list[Any] = []

    def recover(stack: Any, *, rendered: bool = False) -> stacklock.Recovery:
        recovered.append(stack)
        return stacklock.Recovery()

    monkeypatch.setattr(stacklock, "recover", recover)
    monkeypatch.setattr(operations, "existing_stack", lambda name, _ws: FakeStack({}))
    said: list[str] = []
    select = [_locked_error(dead_pid)] if where == "select" else []
    ctx = _ctx(select, said)
    op = _Op(ctx, {where: [_locked_error(dead_pid, conflict=where != "done")]})
    result = op.run()
    assert result.outcome is Outcome.SUCCEEDED, result.error
    assert len(recovered) == 1 and "was killed; its lock is released" in said[0]
    # A live holder (this process): not broken, reported as locked when not waited for.
    import os

    said.clear()
    live = _locked_error(os.getpid())
    select = [live] if where == "select" else []
    op = _Op(_ctx(select, said), {where: [_locked_error(os.getpid())]})
    result = op.run()
    assert result.outcome is Outcome.LOCKED and len(recovered) == 1


def test_recovery_front_door_key_meets_a_lock_without_a_traceback(
    tmp_path: Any, dead_pid: int
) -> None:
    from modelplane.driver import front_door

    set_calls: list[str] = []

    def stack(name: str, **_kw: Any) -> None:
        if name == "gateway":
            raise _locked_error(dead_pid)

    session = SimpleNamespace(
        config_dir=tmp_path,
        program_env={},
        stack=stack,
        set_secret_config=lambda name, key, value: set_calls.append(name),
    )
    front_door.ensure_front_door_key(session, ["gateway", "deploy-a", "cluster-x"], {})  # type: ignore[arg-type]
    assert set_calls == ["deploy-a"]
    assert session.program_env[front_door.ENV]  # this run's program still gets the key
