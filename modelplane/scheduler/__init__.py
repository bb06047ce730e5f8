"""The fleet scheduler: pure and deterministic (no I/O, no clock, no randomness, no Pulumi).

`schedule(fleet, previous)` applies the rules of design/scheduling.md: charge and
retain what the previous lock placed, scale down, fill in priority order, and
explain every shortfall.
"""

from __future__ import annotations

from modelplane.api.fleet import FleetSpec
from modelplane.api.names import replica_name
from modelplane.api.placement_lock import LockedDeployment, LockedReplica, PlacementLock
from modelplane.scheduler.placement import Placement
from modelplane.scheduler.result import DeploymentReport, OptimizeReport, ScheduleResult

__all__ = ["DEFAULT_TIME_LIMIT", "DeploymentReport", "OptimizeReport", "ScheduleResult", "schedule"]

DEFAULT_TIME_LIMIT = 10.0  # seconds, for `optimize=True`


def schedule(
    fleet: FleetSpec,
    previous: PlacementLock | None = None,
    *,
    optimize: bool = False,
    time_limit: float = DEFAULT_TIME_LIMIT,
) -> ScheduleResult:
    """Place every ModelDeployment's replicas; the same inputs give the same result.

    With `optimize`, new replicas are placed by a MILP (HiGHS) within `time_limit`
    seconds, then topped up by the greedy fill (scheduling.md, "Optimising")."""
    run = Placement(fleet)
    run.retain(previous)
    run.scale_down()
    solved: OptimizeReport | None = None
    if optimize:
        from modelplane.scheduler.optimize import optimize as solve

        solved = solve(run, time_limit)
    else:
        run.fill()
    deployments: dict[str, LockedDeployment] = {}
    report: dict[str, DeploymentReport] = {}
    for key, dep in run.deployments.items():
        replicas = [
            LockedReplica.model_construct(  # valid by construction: skip re-validation
                name=replica_name(dep.metadata.name, cluster, index),
                cluster=cluster,
                index=index,
                pools=dict(pools),
            )
            for (cluster, index), pools in sorted(run.placed[key].items())
        ]
        deployments[key] = LockedDeployment(replicas=replicas)
        report[key] = DeploymentReport(
            desired=dep.spec.replicas,
            replicas=replicas,
            unplaced=max(0, dep.spec.replicas - len(replicas)),
            reasons=run.reasons[key],
        )
    return ScheduleResult(
        lock=PlacementLock(deployments=deployments), report=report, optimize=solved
    )
