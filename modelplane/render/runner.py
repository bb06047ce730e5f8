"""Run the stack program under mocks, one stack at a time, and write what it registered."""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import re
import shutil
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import set_mocks
from pulumi.runtime.config import set_all_config
from pulumi.runtime.rpc import _special_secret_sig, _special_sig_key
from pulumi.runtime.settings import get_root_resource
from pulumi.runtime.stack import run_pulumi_func

from modelplane.api.errors import FleetInvalid
from modelplane.engine.plugins import missing_sdk_message, sdk_of_module
from modelplane.errors import ModelplaneError
from modelplane.lock import dump_lock
from modelplane.planning import plan_fleet
from modelplane.render.mocks import RecordingMocks, RecordingMonitor, Registration, StackOutputs
from modelplane.stacks import StackUnit, stack_units

REDACTED = "[secret]"
PROGRAM_MODULE = "modelplane.program"
PROJECT = "modelplane"
NOT_MANIFESTS = ("kubernetes:helm.sh/", "kubernetes:yaml/", "kubernetes:kustomize/")


class RenderError(ModelplaneError):
    """A stack's program failed under mocks; names the stack."""

    def __init__(self, stack: str, cause: BaseException) -> None:
        self.stack = stack
        self.cause = cause
        super().__init__(f"stack {stack}: {cause}")


@dataclass
class StackRun:
    registrations: list[Registration]
    outputs: StackOutputs


@dataclass
class StackRender:
    name: str
    kind: str
    resources: int
    manifests: list[Path] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)  # redacted


@dataclass
class RenderResult:
    fleet_dir: Path
    out_dir: Path
    lock_path: Path
    stacks: list[StackRender] = field(default_factory=list)

    @property
    def manifest_count(self) -> int:
        return sum(len(s.manifests) for s in self.stacks)


# --- values -----------------------------------------------------------------------------


def is_secret_value(value: Any) -> bool:
    return isinstance(value, dict) and value.get(_special_sig_key) == _special_secret_sig


def redact(value: Any) -> Any:
    """Secrets as `[secret]`, integral floats (protobuf numbers) as ints, dict keys sorted."""
    if is_secret_value(value):
        inner = value.get("value")
        # Keep the shape (a Secret's stringData stays a map), never the values.
        if isinstance(inner, dict):
            return {str(k): REDACTED for k in sorted(inner, key=str)}
        if isinstance(inner, list):
            return [REDACTED for _ in inner]
        return REDACTED
    if isinstance(value, dict):
        return {str(k): redact(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _plain(value: Any) -> Any:
    """A value for a stack reference: secrets unwrapped (their secretness is tracked per output)."""
    if is_secret_value(value):
        return _plain(value.get("value"))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


async def _resolve_exports(exports: Mapping[str, Any]) -> StackOutputs:
    values: dict[str, Any] = {}
    secret: set[str] = set()
    for name, raw in exports.items():
        out = pulumi.Output.from_input(raw)
        values[name] = await out.future()
        if await out.is_secret():
            secret.add(name)
    return StackOutputs(values, frozenset(secret))


# --- running one stack --------------------------------------------------------------------


def render_stack(
    stack: str,
    *,
    fleet_dir: Path,
    lock_path: Path,
    upstream: Callable[[str], StackOutputs | None],
    module: str = PROGRAM_MODULE,
    config: Mapping[str, str] | None = None,
) -> StackRun:
    """Run the program for one stack in a fresh context and event loop, under fresh mocks."""
    program = importlib.import_module(module)

    def run() -> StackRun:
        mocks = RecordingMocks(upstream)
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        holder: dict[str, StackOutputs] = {}
        try:
            set_all_config(
                {
                    f"{PROJECT}:specs": str(fleet_dir),
                    f"{PROJECT}:lock": str(lock_path),
                    f"{PROJECT}:allowMissingSecrets": "true",
                    **(config or {}),
                },
                [],
            )
            set_mocks(
                mocks,
                project=PROJECT,
                stack=stack,
                preview=False,
                monitor=RecordingMonitor(mocks),
            )
            root = get_root_resource()
            assert root is not None

            async def body() -> None:
                await program.main()
                holder["outputs"] = await _resolve_exports(getattr(root, "outputs", {}))

            loop.run_until_complete(run_pulumi_func(body))
        except ModuleNotFoundError as exc:
            sdk = sdk_of_module(exc.name)
            if sdk is None:
                raise RenderError(stack, exc) from exc
            # The cloud SDKs are extras: say which to install, not where the import was.
            raise RenderError(stack, ModelplaneError(missing_sdk_message(stack, [sdk]))) from exc
        except Exception as exc:  # noqa: BLE001 - reported with the stack's name
            raise RenderError(stack, exc) from exc
        finally:
            loop.close()
            asyncio.set_event_loop(None)
        return StackRun(list(mocks.registrations), holder.get("outputs", StackOutputs({})))

    # A thread of its own, so that the caller's event loop (if any) is left as it was.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="modelplane-render") as pool:
        return pool.submit(contextvars.Context().run, run).result()


# --- writing ------------------------------------------------------------------------------


def _provider_name(provider_ref: str) -> str:
    # `urn:pulumi:<stack>::<project>::<type>::<name>::<id>`
    parts = provider_ref.split("::")
    return parts[3] if len(parts) > 3 else ""


def _file_part(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-") or "none"


def manifest_of(reg: Registration) -> dict[str, Any] | None:
    if not reg.type.startswith("kubernetes:") or reg.type.startswith(NOT_MANIFESTS):
        return None
    if not {"apiVersion", "kind", "metadata"} <= set(reg.inputs):
        return None
    body = redact(reg.inputs)
    ordered = {k: body[k] for k in ("apiVersion", "kind", "metadata")}
    ordered.update({k: v for k, v in body.items() if k not in ordered})
    return ordered


def write_stack(out: Path, unit: StackUnit, run: StackRun) -> StackRender:
    stack_dir = out / unit.name
    if stack_dir.exists():
        shutil.rmtree(stack_dir)
    manifests_dir = stack_dir / "manifests"
    manifests_dir.mkdir(parents=True)
    resources = [
        {
            "type": r.type,
            "name": r.name,
            "parent": r.parent_type,
            "inputs": redact(r.inputs),
        }
        for r in run.registrations
    ]
    (stack_dir / "resources.yaml").write_text(
        yaml.safe_dump(resources, sort_keys=False, width=100), encoding="utf-8"
    )
    outputs = {
        k: (REDACTED if k in run.outputs.secret else redact(v))
        for k, v in sorted(run.outputs.values.items())
    }
    (stack_dir / "outputs.yaml").write_text(
        yaml.safe_dump(outputs, sort_keys=False, width=100), encoding="utf-8"
    )
    written: list[Path] = []
    seen: set[str] = set()
    for reg in run.registrations:
        manifest = manifest_of(reg)
        if manifest is None:
            continue
        meta = manifest["metadata"]
        stem = "_".join(
            _file_part(p)
            for p in (
                _provider_name(reg.provider) or "default",
                manifest["kind"],
                meta.get("namespace") or "cluster",
                meta.get("name") or reg.name,
            )
        )
        name, n = stem, 1
        while name in seen:
            n += 1
            name = f"{stem}-{n}"
        seen.add(name)
        path = manifests_dir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(manifest, sort_keys=False, width=100), encoding="utf-8")
        written.append(path)
    return StackRender(unit.name, unit.kind, len(resources), sorted(written), outputs)


def _review_outputs(unit: StackUnit, outputs: StackOutputs) -> StackOutputs:
    """Fill values only a live cluster knows, so downstream stacks can be reviewed."""
    if unit.kind != "InferenceCluster":
        return outputs
    values = dict(outputs.values)
    secret = set(outputs.secret)
    if not values.get("gatewayAddress") and not values.get("renderTo"):
        # (a renderTo cluster has no workload gateway at all: nothing to stand in for)
        values["gatewayAddress"] = f"gateway.{unit.key}.render.invalid"
    if not values.get("kubeconfig") and not values.get("renderTo"):
        # A provisioned cluster's kubeconfig exists only once the cloud has made it.
        values["kubeconfig"] = f"# placeholder kubeconfig of {unit.key} (render)"
        secret.add("kubeconfig")
    return StackOutputs(values, frozenset(secret))


def render_fleet(
    fleet_dir: str | Path,
    out_dir: str | Path,
    *,
    module: str = PROGRAM_MODULE,
    stacks: list[str] | None = None,
) -> RenderResult:
    """Render every stack of the fleet (or the named ones and what they read) into out_dir."""
    fleet_dir = Path(fleet_dir).resolve()
    out = Path(out_dir).resolve()
    outcome = plan_fleet(fleet_dir)
    if outcome.errors or outcome.result is None:
        raise FleetInvalid(outcome.errors)
    lock = outcome.result.lock
    out.mkdir(parents=True, exist_ok=True)
    lock_path = out / "modelplane.lock.yaml"
    lock_path.write_text(dump_lock(lock), encoding="utf-8")
    units = stack_units(outcome.fleet, lock)
    if stacks:
        wanted = set(stacks)
        by_name = {u.name: u for u in units}
        unknown = sorted(wanted - set(by_name))
        if unknown:
            raise ValueError(f"unknown stack(s) {', '.join(unknown)}; valid: {', '.join(by_name)}")
        todo = list(wanted)
        while todo:
            for dep in by_name[todo.pop()].upstream:
                if dep not in wanted and dep in by_name:
                    wanted.add(dep)
                    todo.append(dep)
        units = [u for u in units if u.name in wanted]
    produced: dict[str, StackOutputs] = {}
    result = RenderResult(fleet_dir, out, lock_path)
    for unit in units:
        run = render_stack(
            unit.name,
            fleet_dir=fleet_dir,
            lock_path=lock_path,
            upstream=produced.get,
            module=module,
        )
        produced[unit.name] = _review_outputs(unit, run.outputs)
        result.stacks.append(write_stack(out, unit, run))
    return result
