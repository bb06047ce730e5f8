"""Spill past stockouts (scheduling.md, "Health-aware scheduling", rule 7): pure.

A replica whose pods the cluster's scheduler cannot place (PodScheduled False, reason
Unschedulable: no node fits, or the cloud's scale-up failed or never came) for `after`
seconds is *stuck*: reconcile drops it from the lock (a new replica is placed elsewhere)
and puts each pool it was on in a cool-down. While a pool cools down the scheduler sees it
as a fixed pool of its Ready nodes (its `maxNodeCount` is not believed), so nothing new
goes there unless a Ready node has room. A cool-down ends at `until`, or earlier when the
pool has more Ready nodes than when it began (capacity appeared).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelplane.api.placement_lock import PlacementLock
from modelplane.health.observation import Observation

DEFAULT_SPILL_AFTER = 600.0  # a cloud scale-up usually takes minutes: longer than that
DEFAULT_COOLDOWN = 1800.0


@dataclass(frozen=True)
class Cooldown:
    """A full pool (`cluster/pool`): since when, until when, what was seen."""

    since: float
    until: float
    ready: int  # its Ready nodes when it began
    replica: str  # the stuck replica that found it full
    reason: str  # the cluster scheduler's message

    def as_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "until": self.until,
            "readyNodes": self.ready,
            "replica": self.replica,
            "reason": self.reason,
        }

    @staticmethod
    def from_json(data: Any) -> Cooldown:
        return Cooldown(
            float(data["since"]),
            float(data["until"]),
            int(data.get("readyNodes", 0)),
            str(data.get("replica", "")),
            str(data.get("reason", "")),
        )


@dataclass(frozen=True)
class Stuck:
    cluster: str
    pools: tuple[str, ...]
    since: float
    reason: str


def stuck(
    lock: PlacementLock, observation: Observation, now: float, after: float
) -> dict[str, Stuck]:
    """Replicas (not draining) with a pod Unschedulable for at least ``after`` seconds."""
    out: dict[str, Stuck] = {}
    for dep in lock.deployments.values():
        for r in dep.replicas:
            seen = observation.cluster(r.cluster)
            if r.draining or seen is None or not seen.reachable:
                continue
            got = seen.replicas.get(r.name)
            if got is None or got.unschedulable_since is None:
                continue
            if now - got.unschedulable_since >= after:
                pools = tuple(sorted(set(r.pools.values())))
                out[r.name] = Stuck(r.cluster, pools, got.unschedulable_since, got.unschedulable)
    return out


def ready_nodes(observation: Observation, cluster: str, pool: str) -> int | None:
    seen = observation.cluster(cluster)
    if seen is None or not seen.observed or not seen.reachable:
        return None
    got = seen.pools.get(pool)
    return got.ready_nodes if got is not None else 0


def cooldowns(
    previous: Mapping[str, Cooldown],
    found: Mapping[str, Stuck],
    observation: Observation,
    now: float,
    length: float,
) -> dict[str, Cooldown]:
    """The pools cooling down after this round: the previous ones still on (before `until`
    and no more Ready nodes than when they began), and the pools of the replicas ``found``
    stuck now."""
    out: dict[str, Cooldown] = {}
    for key, cool in previous.items():
        cluster, _, pool = key.partition("/")
        ready = ready_nodes(observation, cluster, pool)
        if now < cool.until and (ready is None or ready <= cool.ready):
            out[key] = cool
    for name, s in sorted(found.items()):
        for pool in s.pools:
            key = f"{s.cluster}/{pool}"
            if key in out:
                continue
            ready = ready_nodes(observation, s.cluster, pool) or 0
            out[key] = Cooldown(now, now + length, ready, name, s.reason)
    return dict(sorted(out.items()))


def describe(key: str, cool: Cooldown, stamp: Any) -> str:
    """`waiting for capacity on dev-2/l4 since 05:01:02 (...): no new replicas until 05:31:02`
    (``stamp``: epoch seconds -> text)."""
    why = f" ({cool.reason})" if cool.reason else ""
    return (
        f"no capacity on {key} since {stamp(cool.since)}{why}: "
        f"no new replicas there until {stamp(cool.until)} or a node more is Ready"
    )


__all__ = [
    "DEFAULT_COOLDOWN",
    "DEFAULT_SPILL_AFTER",
    "Cooldown",
    "Stuck",
    "cooldowns",
    "describe",
    "stuck",
]
