"""Engine events → per-stack progress, change counts and resource changes (pure).

Works on ``pulumi.automation.events.EngineEvent`` objects (duck-typed, so nothing here
imports Pulumi) and converts them to and from the engine's JSON form, so that a real
preview can be recorded and replayed in tests.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from modelplane.driver.results import PropertyChange, ResourceChange

# Steps that are part of a `replace` (reported once, as the replace itself).
_REPLACE_PARTS = {"create-replacement", "delete-replaced", "discard-replaced"}
# `read` is left out: stack references and data sources are read on every run.
_CHANGE_OPS = {"create", "update", "replace", "delete", "import", "discard"}
# The stack itself and the engine's built-in provider (used by stack references).
_NOT_SHOWN = {"pulumi:pulumi:Stack", "pulumi:providers:pulumi"}
_COUNTED = ("create", "update", "replace", "delete", "same")


def _noise(message: str) -> bool:
    """Engine chatter that says nothing about the fleet (the engine's plugins are ambient)."""
    return " from $PATH at " in message


def urn_type_and_name(urn: str) -> tuple[str, str]:
    """``urn:pulumi:stack::project::a:b:C$kubernetes:apps/v1:Deployment::name`` → type, name."""
    parts = urn.split("::")
    if len(parts) < 4:
        return "", urn
    qualified = parts[2]
    name = "::".join(parts[3:])
    return qualified.rsplit("$", 1)[-1], name


def _value(x: Any) -> str:
    return getattr(x, "value", x)


SECRET = "[secret]"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # Pulumi's secret signature in property maps
_PATH_PART = re.compile(r'([^.\[\]]+)|\[(\d+)\]|\["([^"]*)"\]')


def _masked(value: Any) -> Any:
    """A value for people: secret values (however they are marked) as ``[secret]``."""
    if isinstance(value, dict):
        if value.get("4dabf18193072939515e22adb298388d") == _SECRET_SIG:
            return SECRET
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def value_at(state: Any, path: str) -> Any:
    """The input at a detailed-diff path (``spec.template.spec.containers[0].image``)."""
    value: Any = getattr(state, "inputs", None) if state is not None else None
    for match in _PATH_PART.finditer(path):
        key, index, quoted = match.groups()
        if isinstance(value, dict):
            value = value.get(quoted if quoted is not None else key)
        elif isinstance(value, list) and index is not None and int(index) < len(value):
            value = value[int(index)]
        else:
            return None
        if value is None:
            return None
    return _masked(value)


def resource_change(metadata: Any) -> ResourceChange:
    """A :class:`ResourceChange` from a ``StepEventMetadata`` (old → new values where the
    engine reports the states; secret values masked)."""
    rtype, name = urn_type_and_name(metadata.urn)
    props: list[PropertyChange] = []
    detailed = metadata.detailed_diff or {}
    old, new = getattr(metadata, "old", None), getattr(metadata, "new", None)
    if detailed:
        props = [
            PropertyChange(path, _value(diff.diff_kind), value_at(old, path), value_at(new, path))
            for path, diff in sorted(detailed.items())
        ]
    elif metadata.diffs:
        replace_keys = set(metadata.keys or [])
        props = [
            PropertyChange(
                key,
                "update-replace" if key in replace_keys else "update",
                value_at(old, key),
                value_at(new, key),
            )
            for key in sorted(metadata.diffs)
        ]
    return ResourceChange(_value(metadata.op), metadata.urn, metadata.type or rtype, name, props)


def policy_message(event: Any) -> str:
    """One policy violation as a line: pack, policy, level, the resource, the message."""
    where = ""
    if event.resource_urn:
        kind, name = urn_type_and_name(event.resource_urn)
        where = f" on {kind} {name}"
    message = " ".join((event.message or "").split())
    return (
        f"policy {event.policy_pack_name}/{event.policy_name} ({event.enforcement_level})"
        f"{where}: {message}"
    )


@dataclass
class StackProgress:
    """Live state of one stack's operation, fed by engine events (thread-safe)."""

    stack: str
    in_flight: dict[str, str] = field(default_factory=dict)  # urn -> op
    done: list[tuple[str, str]] = field(default_factory=list)  # (op, urn) finished
    counts: dict[str, int] = field(default_factory=dict)
    summary: dict[str, int] | None = None
    steps: list[ResourceChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failed_resources: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def feed(self, event: Any) -> None:
        with self._lock:
            self._feed(event)

    def _feed(self, event: Any) -> None:
        pre = getattr(event, "resource_pre_event", None)
        if pre is not None:
            md = pre.metadata
            op = _value(md.op)
            if op != "same" and md.type not in _NOT_SHOWN:
                self.in_flight[md.urn] = op
            if op in _CHANGE_OPS and md.type not in _NOT_SHOWN:
                self.steps.append(resource_change(md))
            return
        out = getattr(event, "res_outputs_event", None)
        if out is not None:
            md = out.metadata
            op = _value(md.op)
            self.in_flight.pop(md.urn, None)
            if op not in _REPLACE_PARTS and md.type != "pulumi:pulumi:Stack":
                self.counts[op] = self.counts.get(op, 0) + 1
                if op != "same":
                    self.done.append((op, md.urn))
            return
        failed = getattr(event, "res_op_failed_event", None)
        if failed is not None:
            self.in_flight.pop(failed.metadata.urn, None)
            self.failed_resources.append(failed.metadata.urn)
            return
        diag = getattr(event, "diagnostic_event", None)
        if diag is not None and diag.severity in ("error", "warning"):
            message = (diag.message or "").strip()
            target = self.errors if diag.severity == "error" else self.warnings
            if message and message not in target and not _noise(message):
                target.append(message)
            return
        policy = getattr(event, "policy_event", None)
        if policy is not None:
            # A policy pack's verdict: a mandatory one stops the update (an error of the
            # stack), an advisory one is said (a warning).
            text = policy_message(policy)
            target = self.errors if policy.enforcement_level == "mandatory" else self.warnings
            if text not in target:
                target.append(text)
            return
        summary = getattr(event, "summary_event", None)
        if summary is not None:
            self.summary = {_value(k): int(v) for k, v in (summary.resource_changes or {}).items()}

    def change_counts(self) -> dict[str, int]:
        """create/update/replace/delete/same, from the summary when the engine sent one."""
        with self._lock:
            source = self.summary if self.summary is not None else self.counts
            return {k: int(source.get(k, 0)) for k in _COUNTED}

    def changes(self) -> list[ResourceChange]:
        """The resource steps other than `same`, in event order, one per resource."""
        with self._lock:
            seen: dict[str, ResourceChange] = {}
            for step in self.steps:
                if step.op in _REPLACE_PARTS:
                    continue
                seen[step.urn] = step
            return list(seen.values())

    def snapshot(self) -> tuple[dict[str, str], list[tuple[str, str]]]:
        with self._lock:
            return dict(self.in_flight), list(self.done)


# --- JSON form (the engine's own field names), for recording and replaying events ---


def _state_json(state: Any) -> dict[str, Any] | None:
    if state is None:
        return None
    return {
        "type": state.type,
        "urn": state.urn,
        "custom": state.custom,
        "delete": state.delete,
        "id": state.id,
        "parent": state.parent,
        "protect": state.protect,
        "inputs": state.inputs,
        "outputs": state.outputs,
        "provider": state.provider,
        "initErrors": state.init_errors,
    }


def _metadata_json(md: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "op": _value(md.op),
        "urn": md.urn,
        "type": md.type,
        "provider": md.provider,
        "old": _state_json(md.old),
        "new": _state_json(md.new),
    }
    if md.keys is not None:
        data["keys"] = md.keys
    if md.diffs is not None:
        data["diffs"] = md.diffs
    if md.detailed_diff:
        data["detailedDiff"] = {
            k: {"diffKind": _value(v.diff_kind), "inputDiff": v.input_diff}
            for k, v in md.detailed_diff.items()
        }
    if md.logical is not None:
        data["logical"] = md.logical
    return {k: v for k, v in data.items() if v is not None}


def event_to_json(event: Any) -> dict[str, Any]:
    """The inverse of ``EngineEvent.from_json`` for the event kinds the driver uses."""
    data: dict[str, Any] = {"sequence": event.sequence, "timestamp": event.timestamp}
    if event.cancel_event is not None:
        data["cancelEvent"] = {}
    if event.stdout_event is not None:
        data["stdoutEvent"] = {"message": event.stdout_event.message, "color": "never"}
    if event.diagnostic_event is not None:
        d = event.diagnostic_event
        data["diagnosticEvent"] = {
            k: v
            for k, v in {
                "message": d.message,
                "color": "never",
                "severity": d.severity,
                "streamID": d.stream_id,
                "ephemeral": d.ephemeral,
                "urn": d.urn,
                "prefix": d.prefix,
            }.items()
            if v is not None
        }
    if event.prelude_event is not None:
        data["preludeEvent"] = {"config": dict(event.prelude_event.config)}
    if event.summary_event is not None:
        s = event.summary_event
        data["summaryEvent"] = {
            "maybeCorrupt": s.maybe_corrupt,
            "durationSeconds": s.duration_seconds,
            "resourceChanges": {_value(k): v for k, v in (s.resource_changes or {}).items()},
            "PolicyPacks": dict(s.policy_packs or {}),
        }
    for attr, key in (
        ("resource_pre_event", "resourcePreEvent"),
        ("res_outputs_event", "resOutputsEvent"),
    ):
        ev = getattr(event, attr)
        if ev is not None:
            data[key] = {"metadata": _metadata_json(ev.metadata), "planning": ev.planning}
    if event.res_op_failed_event is not None:
        f = event.res_op_failed_event
        data["resOpFailedEvent"] = {
            "metadata": _metadata_json(f.metadata),
            "status": f.status,
            "steps": f.steps,
        }
    return data


def events_from_json(items: list[dict[str, Any]]) -> list[Any]:
    """Rebuild ``EngineEvent`` objects (imports the Automation API)."""
    from pulumi.automation.events import EngineEvent

    return [EngineEvent.from_json(item) for item in items]


# --- structured stack-level events (``Fleet.*(on_event=...)``) ------------------------------

#: ``StackEvent.kind`` values, in the order a stack goes through them.
EVENT_KINDS = (
    "queued",  # a worker picked the stack up (selects it, compares inputs, checks plugins)
    "started",  # the engine operation on the stack begins
    "resource",  # a resource step: planned or applied (``change``), or failed
    "diagnostic",  # a warning, error or info message of the engine or the program
    "summary",  # the engine's closing summary (change counts)
    "engine",  # any other engine event (prelude, policy, cancel)
    "finished",  # the stack ended (``result`` holds its StackResult)
    "skipped",  # not run: a stack it depends on did not succeed (``result`` says which)
)


@dataclass(frozen=True)
class StackEvent:
    """One stack-level event, as ``on_event(stack_name, event)`` receives it.

    ``engine_event`` is the ``pulumi.automation.events.EngineEvent`` behind ``resource``,
    ``diagnostic``, ``summary`` and ``engine`` events (None for the others). Engine debug
    output, raw program stdout and the engine's notes about ambient plugins are not passed on.
    """

    stack: str
    kind: str
    change: ResourceChange | None = None  # resource: the step (op, urn, type, properties)
    failed: bool = False  # resource: the step failed
    severity: str | None = None  # diagnostic: error | warning | info
    message: str | None = None  # diagnostic text
    result: Any = None  # finished / skipped: the StackResult
    engine_event: Any = None


def stack_event(stack: str, event: Any) -> StackEvent | None:
    """The structured form of an engine event, or None for noise (debug, stdout)."""
    pre = getattr(event, "resource_pre_event", None)
    if pre is not None:
        return StackEvent(
            stack, "resource", change=resource_change(pre.metadata), engine_event=event
        )
    out = getattr(event, "res_outputs_event", None)
    if out is not None:
        return StackEvent(
            stack, "resource", change=resource_change(out.metadata), engine_event=event
        )
    failed = getattr(event, "res_op_failed_event", None)
    if failed is not None:
        change = resource_change(failed.metadata)
        return StackEvent(stack, "resource", change=change, failed=True, engine_event=event)
    diag = getattr(event, "diagnostic_event", None)
    if diag is not None:
        message = (diag.message or "").strip()
        if diag.severity not in ("error", "warning", "info") or not message or _noise(message):
            return None
        return StackEvent(
            stack, "diagnostic", severity=diag.severity, message=message, engine_event=event
        )
    if getattr(event, "stdout_event", None) is not None:
        return None
    if getattr(event, "summary_event", None) is not None:
        return StackEvent(stack, "summary", engine_event=event)
    return StackEvent(stack, "engine", engine_event=event)
