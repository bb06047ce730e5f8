"""What a new plan changes in the placement lock: replicas added, removed, moved (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from modelplane.api.placement_lock import LockedReplica, PlacementLock
from modelplane.scheduler import DeploymentReport


@dataclass
class DeploymentDiff:
    key: str
    desired: int | None
    kept: list[LockedReplica] = field(default_factory=list)
    added: list[LockedReplica] = field(default_factory=list)
    removed: list[LockedReplica] = field(default_factory=list)
    moved: list[tuple[LockedReplica, LockedReplica]] = field(default_factory=list)  # (from, to)
    repooled: list[tuple[LockedReplica, LockedReplica]] = field(default_factory=list)
    unplaced: int = 0
    reasons: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.moved or self.repooled)

    @property
    def interesting(self) -> bool:
        return self.changed or self.unplaced > 0


def pools_text(replica: LockedReplica) -> str:
    return ", ".join(f"{role}={pool}" for role, pool in replica.pools.items())


def _key(r: LockedReplica) -> tuple[str, int]:
    return (r.cluster, r.index)


def diff_deployment(
    key: str,
    before: list[LockedReplica],
    after: list[LockedReplica],
    report: DeploymentReport | None,
) -> DeploymentDiff:
    old = {r.name: r for r in before}
    new = {r.name: r for r in after}
    out = DeploymentDiff(
        key,
        report.desired if report else None,
        unplaced=report.unplaced if report else 0,
        reasons=list(report.reasons) if report else [],
    )
    removed = sorted((old[n] for n in old.keys() - new.keys()), key=_key)
    added = sorted((new[n] for n in new.keys() - old.keys()), key=_key)
    for name in sorted(old.keys() & new.keys()):
        if dict(old[name].pools) != dict(new[name].pools):
            out.repooled.append((old[name], new[name]))
        else:
            out.kept.append(new[name])
    # A replica that left one cluster while another appeared on a different cluster moved.
    while removed and added:
        src = removed[0]
        dst = next((a for a in added if a.cluster != src.cluster), None)
        if dst is None:
            break
        out.moved.append((src, dst))
        removed.pop(0)
        added.remove(dst)
    out.removed, out.added = removed, added
    return out


def placement_diff(
    previous: PlacementLock, new: PlacementLock, report: dict[str, DeploymentReport]
) -> list[DeploymentDiff]:
    """One entry per deployment in either lock or the report, sorted by key."""
    keys = sorted(set(previous.deployments) | set(new.deployments) | set(report))
    return [
        diff_deployment(key, previous.replicas_of(key), new.replicas_of(key), report.get(key))
        for key in keys
    ]
