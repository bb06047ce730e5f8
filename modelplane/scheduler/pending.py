"""The pending ledger: which deployments still to be filled may put pods on a pool.

Step 5.1 of scheduling.md asks, for every trial placement, whether some pending
deployment loses room. The ledger keeps that question cheap: per cluster profile and
pool position, a count of the pending demands there (by demand number and reach), and a
view of their distinct shapes, rebuilt only when a count drops to zero, and a number
per distinct view (`view_id`), so memos keyed on it stay exact across fills.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from modelplane.api.model_deployment import ModelDeployment
from modelplane.scheduler.eligibility import Eligibility
from modelplane.scheduler.interning import Interner
from modelplane.scheduler.matching import Request

Reach = frozenset[int]  # the cluster profiles open to a deployment's new replicas
PoolKey = tuple[int, int]  # (profile id, pool position)
# A pending shape on a pool: (requests, pods per worker, devices per pod, distinct reaches)
Shape = tuple[tuple[Request, ...], int, int, list[Reach]]


class PendingLedger:
    """Pending demands per pool, for one fill at a time (`open`, then `forget` each
    deployment as its turn comes)."""

    def __init__(self, eligibility: Eligibility, interner: Interner) -> None:
        self._eligibility = eligibility
        self._interner = interner
        self.reach: dict[str, Reach] = {}  # per deployment, set by `set_reach`
        self._counts: dict[PoolKey, Counter[tuple[int, Reach]]] = {}  # (demand id, reach)
        self._view: dict[PoolKey, list[Shape]] = {}
        self._view_ids: dict[PoolKey, int] = {}  # dropped with the view
        self._contents: dict[tuple[object, ...], int] = {}  # a view's content -> its number
        self._dep_demands: dict[str, list[tuple[int, int, int]]] = {}
        # the last `set_reach`'s live profiles and deployments, for the next one
        self._reach_memo: tuple[object, ...] = ()

    def set_reach(
        self, order: Sequence[tuple[str, ModelDeployment]], lost: frozenset[str] = frozenset()
    ) -> None:
        """Every deployment's reach: the cluster profiles open to its new replicas
        (before capacity), among those with a cluster not `lost`."""
        eligibility = self._eligibility
        live = [
            (pid, members[0])
            for pid, members in eligibility.members.items()
            if not lost or any(m not in lost for m in members)
        ]
        memo = (tuple([pid for pid, _ in live]), tuple([key for key, _ in order]))
        if memo == self._reach_memo:
            return
        self._reach_memo = memo
        self.reach = {
            key: frozenset(
                pid for pid, first in live if eligibility.open_for_new(key, dep, first) is not None
            )
            for key, dep in order
        }

    def open(
        self,
        order: Sequence[tuple[str, ModelDeployment]],
        waiting: Callable[[str, ModelDeployment], bool],
    ) -> None:
        """Start a fill: every deployment of `order` that is `waiting` is pending."""
        counts: dict[PoolKey, Counter[tuple[int, Reach]]] = {}
        for dep_key, dep in order:
            if not waiting(dep_key, dep):
                continue
            reach = self.reach[dep_key]
            for pid, pos, demand in self._demands(dep_key, dep):
                counter = counts.get((pid, pos))
                if counter is None:
                    counter = counts[(pid, pos)] = Counter()
                counter[(demand, reach)] = counter.get((demand, reach), 0) + 1
        self._counts = counts
        self._view = {}
        self._view_ids = {}

    def forget(self, dep_key: str, dep: ModelDeployment) -> None:
        """The deployment's turn has come: it is no longer pending."""
        reach = self.reach[dep_key]
        for pid, pos, demand in self._demands(dep_key, dep):
            counter = self._counts[(pid, pos)]
            counter[(demand, reach)] -= 1
            if counter[(demand, reach)] <= 0:
                del counter[(demand, reach)]
                # The pool's pending shapes may change: a new view, a new number.
                self._view.pop((pid, pos), None)
                self._view_ids.pop((pid, pos), None)

    def view_id(self, pid: int, pos: int) -> int:
        """A number for the pool's pending shapes (`shapes`): equal views, equal numbers,
        for the life of the run."""
        key = (pid, pos)
        hit = self._view_ids.get(key)
        if hit is None:
            content = tuple([(*s[:3], tuple(s[3])) for s in self.shapes(pid, pos)])
            hit = self._view_ids[key] = self._contents.setdefault(content, len(self._contents))
        return hit

    def shapes(self, pid: int, pos: int) -> list[Shape]:
        """The pending demands of a pool, as (requests, pods per worker, devices per pod,
        the distinct reaches of their deployments): each shape once."""
        if not self._counts:
            return []  # no fill open
        key = (pid, pos)
        view = self._view.get(key)
        if view is None:
            reaches: dict[tuple[tuple[Request, ...], int, int], list[Reach]] = {}
            demands = self._interner.demands
            for demand_id, reach in self._counts.get(key, ()):
                demand = demands[demand_id]
                shape = (demand.requests, demand.pods_per_worker, demand.devices_per_pod)
                seen = reaches.setdefault(shape, [])
                if reach not in seen:
                    seen.append(reach)
            view = self._view[key] = [(*shape, r) for shape, r in reaches.items()]
        return view

    def _demands(self, dep_key: str, dep: ModelDeployment) -> list[tuple[int, int, int]]:
        """(profile id, pool position, demand id) for every pool open to `dep`'s roles."""
        out = self._dep_demands.get(dep_key)
        if out is None:
            out = self._dep_demands[dep_key] = []
            demand_id = self._interner.demand_id
            for pid, members in self._eligibility.members.items():
                pools = self._eligibility.open_for_new(dep_key, dep, members[0])
                if pools is None:
                    continue
                for _, matching in pools.roles:
                    out += [(pid, pos, demand_id(demand)) for pos, demand in matching]
        return out
