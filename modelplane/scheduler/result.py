"""What the scheduler returns: the new placement lock and a report per deployment."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from modelplane.api.placement_lock import LockedReplica, PlacementLock
from modelplane.scheduler.reserved import RemovedReport


def replica_json(r: LockedReplica) -> dict[str, Any]:
    """A locked replica as plan JSON shows it (`draining` only when true)."""
    out: dict[str, Any] = {
        "name": r.name,
        "cluster": r.cluster,
        "index": r.index,
        "pools": dict(r.pools),
    }
    if r.draining:
        out["draining"] = True
    return out


@dataclass(frozen=True)
class DeploymentReport:
    desired: int
    replicas: list[LockedReplica] = field(default_factory=list)  # sorted by (cluster, index)
    unplaced: int = 0
    reasons: list[str] = field(default_factory=list)  # empty unless unplaced > 0
    autoscaling: tuple[int, int] | None = None  # (minReplicas, maxReplicas) when autoscaled
    # What its replicas (draining ones too) cost per hour (scheduler.cost), when some class
    # of the fleet states a price; None: no price, or a replica on a pool without one.
    cost_per_hour: float | None = None
    policy: str = "Spread"  # placementPolicy

    @property
    def draining(self) -> list[str]:
        return [r.name for r in self.replicas if r.draining]

    @property
    def serving(self) -> list[LockedReplica]:
        return [r for r in self.replicas if not r.draining]

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of one entry of `modelplane plan --output json`."""
        out: dict[str, Any] = {"desired": self.desired}
        if self.autoscaling is not None:
            out["autoscaling"] = {
                "replicas": self.desired,
                "minReplicas": self.autoscaling[0],
                "maxReplicas": self.autoscaling[1],
            }
        out["replicas"] = [replica_json(r) for r in self.replicas]
        if self.autoscaling is not None:
            out["draining"] = self.draining
        out["unplaced"] = self.unplaced
        out["reasons"] = list(self.reasons)
        if self.policy != "Spread":
            out["placementPolicy"] = self.policy
        if self.cost_per_hour is not None:
            out["costPerHour"] = self.cost_per_hour
        return out


@dataclass(frozen=True)
class OptimizeReport:
    """How an `--optimize` solve went. `optimal` is False when the time budget ran out (or
    the solver stopped early) and the best solution found was used."""

    optimal: bool
    status: str  # the solver's model status
    seconds: float
    objective_gpus: int  # GPUs the solver's solution places (kept + new)
    placed_gpus: int  # GPUs the final plan places (kept + new)

    def as_dict(self) -> dict[str, Any]:
        return {
            "optimal": self.optimal,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "objectiveGpus": self.objective_gpus,
            "placedGpus": self.placed_gpus,
        }


@dataclass(frozen=True)
class ScheduleResult:
    lock: PlacementLock  # deployments sorted by key, replicas by (cluster, index)
    report: dict[str, DeploymentReport]  # every deployment of the fleet, sorted by key
    optimize: OptimizeReport | None = field(default=None, compare=False)  # with --optimize
    # Deployments removed from the fleet whose stacks still run, by key (scheduler.reserved)
    removed: dict[str, RemovedReport] = field(default_factory=dict)

    @property
    def short(self) -> bool:
        """True when some deployment has fewer replicas than it asks for."""
        return any(r.unplaced for r in self.report.values())
