"""What a driver operation reports: one result per stack, plus the run as a whole (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from modelplane.driver.settings import redact_url
from modelplane.stacks import StackUnit, Tier

CHANGE_KINDS = ("create", "update", "replace", "delete")


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"  # the operation ran and finished
    UNCHANGED = "unchanged"  # not run: inputs identical to the last successful update
    FAILED = "failed"  # the operation ran and failed
    LOCKED = "locked"  # another update holds the stack's lock
    SKIPPED = "skipped"  # not run because a stack it depends on failed
    NEW = "new"  # preview: not in the backend yet; its resources from the offline render
    RENDERED = "rendered"  # preview: the engine cannot preview it yet; offline render shown

    @property
    def ok(self) -> bool:
        return self in (Outcome.SUCCEEDED, Outcome.UNCHANGED, Outcome.NEW, Outcome.RENDERED)


@dataclass
class PropertyChange:
    """One changed property of a resource: a dotted/indexed path and how it changed."""

    path: str
    kind: str  # add | update | delete | add-replace | update-replace | delete-replace
    old: Any = None  # the value before (None: absent or not reported); secrets "[secret]"
    new: Any = None  # the value after

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "old": self.old, "new": self.new}


@dataclass
class ResourceChange:
    """One planned or applied step on one resource."""

    op: str  # create | update | replace | delete | read | import | ...
    urn: str
    type: str
    name: str
    properties: list[PropertyChange] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "properties": [p.as_json() for p in self.properties],
        }


@dataclass
class StackResult:
    stack: str
    tier: Tier
    outcome: Outcome
    changes: dict[str, int] = field(default_factory=dict)  # create/update/replace/delete/same
    duration: float = 0.0
    error: str | None = None
    outputs: dict[str, Any] = field(default_factory=dict)  # secrets masked
    resources: list[ResourceChange] = field(default_factory=list)
    note: str | None = None  # why it was skipped / unchanged / what else happened
    warnings: list[str] = field(default_factory=list)  # the engine's warning diagnostics

    @classmethod
    def failed(cls, unit: StackUnit, error: str, duration: float) -> StackResult:
        """``unit`` failed with ``error`` after ``duration`` seconds."""
        return cls(unit.name, unit.tier, Outcome.FAILED, duration=duration, error=error)

    @property
    def ok(self) -> bool:
        return self.outcome.ok

    def count(self, kind: str) -> int:
        return self.changes.get(kind, 0)

    @property
    def changed(self) -> bool:
        return any(self.count(k) for k in CHANGE_KINDS)

    def as_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "tier": self.tier.name.lower(),
            "result": self.outcome.value,
            "changes": {k: self.count(k) for k in (*CHANGE_KINDS, "same")},
            "duration": round(self.duration, 2),
            "error": self.error,
            "note": self.note,
            "warnings": self.warnings,
            "outputs": self.outputs,
            "resources": [r.as_json() for r in self.resources],
        }


@dataclass
class RunResult:
    """The result of preview/up/destroy/refresh over a fleet's stacks."""

    operation: str
    backend: str  # as shown to people: its password masked (settings.redact_url)
    results: list[StackResult] = field(default_factory=list)
    lock_path: str | None = None
    lock_written: bool = False
    duration: float = 0.0
    orphans: list[str] = field(default_factory=list)  # in the backend, no longer derived
    rollouts: list[dict[str, Any]] = field(default_factory=list)  # `up`: rollouts it stepped

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def result(self, stack: str) -> StackResult:
        for r in self.results:
            if r.stack == stack:
                return r
        raise KeyError(stack)

    def by_outcome(self, outcome: Outcome) -> list[str]:
        return [r.stack for r in self.results if r.outcome is outcome]

    def absorb(self, pruned: RunResult) -> None:
        """Add a prune run to this ``up`` (``up --prune``): its stacks' results, the lock it
        wrote; the orphans it handled are no longer reported as such."""
        self.results.extend(pruned.results)
        self.lock_written = self.lock_written or pruned.lock_written
        self.orphans = [o for o in self.orphans if o not in {r.stack for r in pruned.results}]
        self.duration += pruned.duration

    def as_json(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "backend": redact_url(self.backend),
            "ok": self.ok,
            "lock": self.lock_path,
            "lockWritten": self.lock_written,
            "duration": round(self.duration, 2),
            "stacks": [r.as_json() for r in self.results],
            "orphans": self.orphans,
            "rollouts": self.rollouts,
        }
