"""Second thoughts (scheduling.md, step 6) and the second fill of a small fleet (step 5).

`Trials` holds their state, read by the fill (`Placement._fill`): the targets held
below `replicas`, the one cluster offered, the replicas placed although they took
room. It never holds the run: every method is given it, so no reference cycle ties a
finished run to its trials (the pure verbs collect no cycles).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from modelplane.api.model_deployment import ModelDeployment
from modelplane.scheduler.sizes import lowest_free, pod_gpus, replica_gpus
from modelplane.scheduler.undo import ClusterSnapshot, RunSnapshot

if TYPE_CHECKING:
    from modelplane.scheduler.placement import Placement

Order = Sequence[tuple[str, ModelDeployment]]


class Trials:
    """The state of second thoughts and the second fill, for one run."""

    def __init__(self) -> None:
        self.want: dict[str, int] = {}  # targets held below `replicas`
        self.only: str | None = None  # the one cluster offered
        # the deployments offered every cluster all the same
        self.only_except: frozenset[str] = frozenset()
        self.takers: list[tuple[str, str, int]] = []  # placed although they took room
        self.new: list[tuple[str, str, int]] = []  # placed by this fill, in order
        # The second fill of a small fleet: multi-node workers first on ties.
        self.workers_first = False

    def second_fill(self, run: Placement, order: Order, start: RunSnapshot) -> None:
        """On a small fleet left short (scheduling.md, step 5, "A second fill"): fill
        again from `start` with multi-node workers before single pods of the same replica
        size, a pod's take that costs such a worker as much room as it takes counted as
        taking room; keep it if it places more GPUs (priority by priority), else go back."""
        if not any(d.spec.replicas > len(run.placed[k]) for k, d in order):
            return
        alternate = sorted(
            order,
            key=lambda kv: (
                -kv[1].spec.priority,
                -replica_gpus(kv[1]),
                pod_gpus(kv[1]),
                kv[0],
            ),
        )
        first, score = RunSnapshot(run), self.score(run, order)
        start.restore()
        self.workers_first = True
        try:
            run.fill_and_improve(alternate)
        finally:
            self.workers_first = False
        if not self.score(run, order) > score:
            first.restore()

    def score(self, run: Placement, order: Order) -> tuple[int, ...]:
        """GPUs placed per priority, highest priority first."""
        per: dict[int, int] = {}
        for key, dep in order:
            gpus = replica_gpus(dep) * len(run.placed[key])
            per[dep.spec.priority] = per.get(dep.spec.priority, 0) + gpus
        return tuple(per[p] for p in sorted(per, reverse=True))

    def improve(self, run: Placement, order: Order) -> None:
        """Second thoughts on replicas placed although they took room (scheduling.md,
        step 6), in placement order, while some deployment is short: take the replica
        out; if a short deployment then fits on its cluster, fill again with its
        deployment held at what it has left, then fill again as usual, and keep the
        result if it places more GPUs (by priority, highest first), else undo. If that
        is undone, try once more taking out, with it, the replicas this fill placed on
        its cluster after it (they were placed on the room it left).

        Every other cluster is full for the short deployments (the state is a finished
        fill), so the refills offer them that cluster alone; only the deployments of the
        replicas taken out, which may have been complete, are offered every cluster."""
        short = [k for k, d in order if d.spec.replicas > len(run.placed[k])]
        for dep_key, cluster, index in list(self.takers):
            if not short:
                break
            if (cluster, index) not in run.placed[dep_key]:
                continue
            # Devices the replica frees, at least, per pool position it is on.
            freed: dict[int, int] = {}
            for name in set(run.placed[dep_key][(cluster, index)].values()):
                pool = run.pools[(cluster, name)]
                mine = sum(
                    i.demand.least_consumed
                    for i in pool.layout.items
                    if i.deployment == dep_key and i.index == index
                )
                freed[pool.position] = pool.capacity - pool.layout.least_used + mine
            others = [k for k in short if k != dep_key and _could_use(run, k, cluster, freed)]
            if not others:
                continue
            local = ClusterSnapshot(run, cluster)
            run.drop([(dep_key, cluster, index)])
            fits = any(_fits_now(run, k, cluster) for k in others)
            local.restore()
            if not fits:
                continue
            before = self.score(run, order)
            at = self.new.index((dep_key, cluster, index))
            later = [r for r in self.new[at + 1 :] if r[1] == cluster]
            for out in ([(dep_key, cluster, index)], [(dep_key, cluster, index), *later]):
                saved = RunSnapshot(run)
                self._refill(run, order, dep_key, cluster, out)
                if self.score(run, order) > before:
                    short = [k for k, d in order if d.spec.replicas > len(run.placed[k])]
                    break
                saved.restore()
                if len(out) == 1 and not later:
                    break

    def _refill(
        self,
        run: Placement,
        order: Order,
        dep_key: str,
        cluster: str,
        out: list[tuple[str, str, int]],
    ) -> None:
        """Take `out` out, fill `cluster` with `dep_key` held at what it has left, then
        fill as usual (the deployments of `out` may go to any cluster)."""
        run.drop(out)
        self.want = {dep_key: len(run.placed[dep_key])}
        self.only_except = frozenset()
        run.fill_all(order, only=cluster)
        self.want = {}
        self.only_except = frozenset(key for key, _, _ in out)
        run.fill_all(order, only=cluster)
        self.only_except = frozenset()
        self.only = None


def _could_use(run: Placement, dep_key: str, cluster: str, freed: dict[int, int]) -> bool:
    """Some role of `dep_key` matches a pool of `freed` with room enough (a bound)."""
    role_pools = run.eligibility.open_for_new(dep_key, run.deployments[dep_key], cluster)
    return role_pools is not None and any(
        freed.get(pos, -1) >= demand.least_consumed
        for _, matching in role_pools.roles
        for pos, demand in matching
    )


def _fits_now(run: Placement, dep_key: str, cluster: str) -> bool:
    """A new replica of `dep_key` fits on `cluster` as it is (room only)."""
    dep = run.deployments[dep_key]
    role_pools = run.eligibility.open_for_new(dep_key, dep, cluster)
    if role_pools is None or not run.may_fit(cluster, role_pools):
        return False
    taken = [i for c, i in [*run.placed[dep_key], *run.draining[dep_key]] if c == cluster]
    return run.fit(dep_key, dep, cluster, lowest_free(taken), role_pools) is not None
