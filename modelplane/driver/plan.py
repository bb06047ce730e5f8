"""A plan: the previous placement, the new one and why deployments are short (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelplane.api.placement_lock import PlacementLock
from modelplane.scheduler import DeploymentReport, ScheduleResult


@dataclass(frozen=True)
class Plan:
    previous: PlacementLock
    result: ScheduleResult

    @property
    def lock(self) -> PlacementLock:
        return self.result.lock

    @property
    def report(self) -> dict[str, DeploymentReport]:
        return self.result.report

    @property
    def short(self) -> bool:
        return self.result.short

    @property
    def changed(self) -> bool:
        return self.previous.model_dump() != self.lock.model_dump()

    def as_json(self) -> dict[str, Any]:
        return {
            "deployments": {k: r.as_dict() for k, r in self.report.items()},
            "changed": self.changed,
        }
