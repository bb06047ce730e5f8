"""Start phases of each replica (status.md, "Start phases"): when `reconcile` placed it and
when its endpoint joined the routes, kept in the runtime state (`phases.json`); the other
phases (pods created, scheduled, weights on the node, started, Ready) are observed from the
pods. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from modelplane.api.placement_lock import PlacementLock

ORDER = ("placed", "created", "scheduled", "weights", "started", "ready", "routed")


def remember(
    previous: Mapping[str, Mapping[str, float]],
    lock: PlacementLock,
    now: float,
    *,
    routed: float | None,
    added: Collection[str] = (),
    unready: Collection[str] = (),
    unroutable: Collection[str] = (),
) -> dict[str, dict[str, float]]:
    """The recorded phases after a round: the replicas it ``added`` placed ``now`` (the
    round's start), and, from when the round's routes are in effect (``routed``: that time,
    None: they are not), each placed one routed once it is not
    draining, not waiting for Ready and its cluster routable. A replica placed before (by
    `up`, or before this state) has no record: its phases count from its pods' creation.
    Replicas gone are dropped."""
    out: dict[str, dict[str, float]] = {}
    for dep in lock.deployments.values():
        for r in dep.replicas:
            phases = dict(previous.get(r.name) or {})
            if r.name in added:
                phases.setdefault("placed", now)
            joined = not r.draining and r.name not in unready and r.cluster not in unroutable
            if routed is not None and "placed" in phases and joined:
                phases.setdefault("routed", routed)
            if phases:
                out[r.name] = phases
    return out


def merged(observed: Mapping[str, float], recorded: Mapping[str, float] | None) -> dict[str, float]:
    """Observed and recorded phases in start order."""
    both = {**(recorded or {}), **observed}
    return {p: both[p] for p in ORDER if p in both}


def durations(phases: Mapping[str, float]) -> dict[str, float]:
    """Each phase's seconds after the first one (`placed`, else `created`)."""
    start = phases.get("placed", phases.get("created"))
    if start is None:
        return {}
    return {p: round(max(0.0, t - start), 1) for p, t in phases.items() if p in ORDER}


__all__ = ["ORDER", "durations", "merged", "remember"]
