"""Snapshots that second thoughts (scheduling.md, step 6) take and may go back to.

Layouts are never changed once made, so a snapshot holds them by reference: taking one
costs a few dicts, not a copy of the pools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelplane.scheduler.placement import Placement


class ClusterSnapshot:
    """One cluster's pool layouts, the replicas on them (placed and draining), its room."""

    def __init__(self, run: Placement, cluster: str) -> None:
        self._run = run
        self._cluster = cluster
        pools = run.cluster_pools[cluster]
        # (capacity held by removed deployments is on the pools too, in no deployment)
        slots = {
            (i.deployment, i.index)
            for pool in pools
            for i in pool.layout.items
            if i.deployment in run.placed
        }
        self._layouts = [p.layout for p in pools]
        self._placed = {
            (k, i): run.placed[k][(cluster, i)] for k, i in slots if (cluster, i) in run.placed[k]
        }
        self._draining = {
            (k, i): run.draining[k][(cluster, i)]
            for k, i in slots
            if (cluster, i) in run.draining[k]
        }
        self._room = run.cluster_room[cluster]

    def restore(self) -> None:
        run, cluster = self._run, self._cluster
        for pool, layout in zip(run.cluster_pools[cluster], self._layouts, strict=True):
            if pool.layout is not layout:
                pool.set_layout(layout)
        for (k, i), pools in self._placed.items():
            run.placed[k][(cluster, i)] = pools
        for (k, i), pools in self._draining.items():
            run.draining[k][(cluster, i)] = pools
        run.cluster_room[cluster] = self._room


class RunSnapshot:
    """Every pool's layout, every placed replica and every cluster's room."""

    def __init__(self, run: Placement) -> None:
        self._run = run
        self._layouts = {key: pool.layout for key, pool in run.pools.items()}
        self._placed = {key: dict(placed) for key, placed in run.placed.items()}
        self._room = dict(run.cluster_room)

    def restore(self) -> None:
        run = self._run
        for key, pool in run.pools.items():
            if pool.layout is not self._layouts[key]:
                pool.set_layout(self._layouts[key])
        run.placed = self._placed
        run.cluster_room = self._room
