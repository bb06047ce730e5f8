"""Retain, scale down, fill: the greedy placement rules of scheduling.md.

Placement state: every placed replica as deployment key -> (cluster, index) ->
{role: pool}, and per pool its node layout (`capacity.Pool`).
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Mapping, Sequence

from modelplane.api.fleet import FleetSpec
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import LockedReplica, PlacementLock
from modelplane.scheduler import reasons, reserved
from modelplane.scheduler.capacity import Item, Layout, Pool
from modelplane.scheduler.eligibility import Eligibility, RolePools
from modelplane.scheduler.matching import Matcher, PodDemand, Request
from modelplane.scheduler.taints import BLOCKS_NEW, EVICTS

ReplicaKey = tuple[str, int]  # (cluster, index) within one deployment
RolePlan = list[tuple[str, Pool, Layout]]  # (role, pool, that pool's layout with the role on it)
# A group's plan: (role, pool position, layout, the numbers of the new roles on it)
Template = list[tuple[str, int, Layout, tuple[int, ...]]]
Reach = frozenset[int]  # the cluster profiles open to a deployment's new replicas


# A group of clusters: (profile id, per pool (nodes, Placement._sig of its layout))
GroupKey = tuple[int, tuple[tuple[int, int], ...]]
Asks = tuple[tuple[str, tuple[tuple[int, int], ...]], ...]  # per role, (pool, demand id)
Slots = dict[tuple[str, int], dict[str, str]]  # (deployment, index) -> {role: pool}
# What second thoughts may undo: one cluster's pools, replicas and room; or the whole run's.
_ClusterState = tuple[list[Layout], Slots, Slots, int]
_RunState = tuple[
    dict[tuple[str, str], Layout], dict[str, dict[ReplicaKey, dict[str, str]]], dict[str, int]
]
_SPLIT = object()  # a group whose members may answer differently


def _item_order(item: Item) -> tuple[object, ...]:
    return item.order


class _Group:
    """Clusters that look alike, during one deployment's fill: the members (name order)
    not yet visited, and the answer for all of them (`Placement._group_answer`)."""

    __slots__ = ("key", "members", "role_pools", "at", "next", "answered", "answer", "template")

    def __init__(self, key: GroupKey, members: list[str], role_pools: RolePools):
        self.key = key
        self.members = members
        self.role_pools = role_pools
        self.at = 0
        self.next = ""
        self.answered = False
        self.answer: bool | object | None = None
        self.template: Template = []

    def advance(self, taken: dict[str, set[int]]) -> bool:
        """Move `next` to the next member hosting none of the deployment; False at the end."""
        members = self.members
        while self.at < len(members):
            cluster = members[self.at]
            self.at += 1
            if cluster not in taken:
                self.next = cluster
                return True
        return False

    def rest(self, taken: dict[str, set[int]]) -> list[str]:
        """`next` and every later member hosting none of the deployment."""
        out = [self.next]
        while self.advance(taken):
            out.append(self.next)
        return out


def replica_gpus(dep: ModelDeployment) -> int:
    """GPUs one replica asks for, over all its roles and pods."""
    return sum(
        role.workers.count * role.workers.topology.shape.gpus_per_worker
        for role in dep.spec.roles.values()
    )


def lowest_free(taken: set[int] | Sequence[int]) -> int:
    """The lowest non-negative integer not in `taken`."""
    used = set(taken)
    return next(i for i in range(len(used) + 1) if i not in used)


class Placement:
    """One scheduling run over a fleet. Call `retain`, `scale_down`, `fill` in order."""

    def __init__(self, fleet: FleetSpec) -> None:
        self.fleet = fleet
        self.deployments = dict(sorted(fleet.deployments.items()))
        self.cluster_names = sorted(fleet.clusters)
        self.matcher = Matcher(fleet.classes)
        self.eligibility = Eligibility(fleet, self.matcher)
        self.pools: dict[tuple[str, str], Pool] = {}
        self.cluster_pools: dict[str, list[Pool]] = {}
        row_memos: dict[str, dict[tuple[int, tuple[int, ...]], int]] = {}  # per class
        for name in self.cluster_names:
            pools = []
            for position, spec in enumerate(fleet.clusters[name].spec.node_pools):
                shape = self.matcher.shape(spec.class_name)
                pool = Pool(
                    name,
                    spec.name,
                    position,
                    spec.class_name,
                    shape,
                    spec.capacity_nodes,
                    row_memos.setdefault(spec.class_name, {}),
                )
                pools.append(pool)
                self.pools[(name, spec.name)] = pool
            self.cluster_pools[name] = pools
        # Per cluster, the free devices of its roomiest pool (an upper bound, see Pool.may_fit).
        self.cluster_room: dict[str, int] = {}
        for name in self.cluster_names:
            self._refresh_room(name)
        self.placed: dict[str, dict[ReplicaKey, dict[str, str]]] = {
            key: {} for key in self.deployments
        }
        # Autoscaled replicas being drained (scheduling.md, "Autoscaling"): charged, kept
        # where they are, counted toward nothing.
        self.draining: dict[str, dict[ReplicaKey, dict[str, str]]] = {
            key: {} for key in self.deployments
        }
        self.reasons: dict[str, list[str]] = {key: [] for key in self.deployments}
        self._layout_ids: dict[tuple[object, ...], int] = {}
        self._want: dict[str, int] = {}  # targets held below `replicas` (second thoughts)
        self._only: str | None = None  # the one cluster offered (second thoughts)
        self._only_except = ""  # the deployment offered every cluster all the same
        self._takers: list[tuple[str, str, int]] = []  # placed although they took room
        self._demand_ids: dict[int, int] = {}
        self._demand_values: dict[PodDemand, int] = {}
        self._demand_list: list[PodDemand] = []  # by demand id
        self._demand_held: list[PodDemand] = []
        self._dep_demands: dict[str, list[tuple[int, int, int]]] = {}
        # per RolePools (by id: they live as long as the run's eligibility), its roles'
        # demands by number
        self._asks: dict[int, tuple[Asks, list[int]]] = {}
        self._sig_ids: dict[tuple[object, ...], int] = {}
        self._sig_ties: list[dict[tuple[int, int, int], set[int]]] = []
        self._state: dict[str, GroupKey] = {}  # cluster -> group key, during fill
        self._groups: dict[GroupKey, list[str]] = {}

    def _refresh_room(self, cluster: str) -> None:
        pools = self.cluster_pools[cluster]
        self.cluster_room[cluster] = (
            max([p.capacity - p.layout.least_used for p in pools]) if pools else 0
        )

    # -- 2 + 3: retain -------------------------------------------------------------------

    def retain(
        self,
        previous: PlacementLock | None,
        reserved: Mapping[tuple[str, str], list[Item]] | None = None,
    ) -> None:
        """Keep what the lock placed where it still may be and still fits; charge it, and
        the `reserved` items per pool (capacity that removed deployments hold, see
        `reserved`: they sort after every kept replica and are never dropped for one)."""
        items: dict[tuple[str, str], list[Item]] = {
            key: list(held) for key, held in (reserved or {}).items()
        }
        previous = previous or PlacementLock()
        for dep_key in sorted(set(previous.deployments) | set(previous.removed)):
            dep = self.deployments.get(dep_key)
            if dep is None:
                continue
            locked = previous.deployments.get(dep_key) or previous.removed[dep_key]
            # The whole entry is the sort key, so duplicates resolve the same in any order.
            replicas = sorted(
                locked.replicas,
                key=lambda r: (r.cluster, r.index, r.name, sorted(r.pools.items())),
            )
            for replica in replicas:
                slot = (replica.cluster, replica.index)
                if slot in self.placed[dep_key] or slot in self.draining[dep_key]:
                    continue  # a duplicate entry: the first one counts
                kept = self._keepable(dep_key, dep, replica)
                if kept is None:
                    continue
                into = self.draining if replica.draining else self.placed
                into[dep_key][slot] = dict(replica.pools)
                for pool, item in kept:
                    items.setdefault((pool.cluster, pool.name), []).append(item)
        failed: list[tuple[str, str, int]] = []
        for key in sorted(items):
            pool = self.pools[key]
            layout, misfits = pool.pack(items[key])
            pool.set_layout(layout)
            failed += [
                (i.deployment, pool.cluster, i.index)
                for i in misfits
                if i.deployment in self.deployments
            ]
        for cluster in sorted({cluster for cluster, _ in items}):
            self._refresh_room(cluster)
        self._drop(failed)

    def _keepable(
        self, dep_key: str, dep: ModelDeployment, replica: LockedReplica
    ) -> list[tuple[Pool, Item]] | None:
        """The items a locked replica keeps on its pools, or None if it may not stay."""
        cluster = replica.cluster
        if cluster not in self.fleet.clusters:
            return None
        if not self.eligibility.selected(dep_key, dep, cluster):
            return None
        if self.eligibility.blocked(dep_key, dep, cluster, EVICTS) is not None:
            return None
        if set(replica.pools) != set(dep.spec.roles):
            return None
        kept: list[tuple[Pool, Item]] = []
        for position, (role_name, role) in enumerate(dep.spec.roles.items()):
            pool = self.pools.get((cluster, replica.pools[role_name]))  # type: ignore[index]
            if pool is None:
                return None
            demand = self.matcher.fit(dep_key, role_name, role, pool.class_name).demand
            if demand is None:
                return None
            item = Item.make(dep.spec.priority, dep_key, replica.index, role_name, position, demand)
            kept.append((pool, item))
        return kept

    def _drop(self, replicas: Sequence[tuple[str, str, int]]) -> None:
        """Drop replicas (deployment, cluster, index), freeing their capacity.

        Repacking a pool without them could, in rare packing anomalies, leave
        another item without room; that replica is dropped too.
        """
        queue = sorted(set(replicas))
        while queue:
            dep_key, cluster, index = queue.pop(0)
            if dep_key not in self.placed:
                continue  # a removed deployment's held capacity that no longer fits
            pools = self.placed[dep_key].pop((cluster, index), None)
            if pools is None:
                pools = self.draining[dep_key].pop((cluster, index), None)
            if pools is None:
                continue
            for pool_name in sorted(set(pools.values())):
                misfits = self.pools[(cluster, pool_name)].without(dep_key, index)
                queue += sorted((i.deployment, cluster, i.index) for i in misfits)
            self._refresh_room(cluster)

    # -- 4: scale down -------------------------------------------------------------------

    def scale_down(self) -> None:
        """Drop surplus replicas from the cluster hosting most of them (ties: the name
        sorting last), highest index first. An autoscaled deployment drains them instead
        (kept and charged, out of the routes), and takes draining replicas back before
        anything new is placed."""
        for dep_key, dep in self.deployments.items():
            placed = self.placed[dep_key]
            draining = self.draining[dep_key]
            while len(placed) < dep.spec.replicas and draining:
                slot = min(draining)
                placed[slot] = draining.pop(slot)
            while len(placed) > dep.spec.replicas:
                per_cluster = Counter(cluster for cluster, _ in placed)
                cluster, index = max(placed, key=lambda k: (per_cluster[k[0]], k[0], k[1]))
                if dep.spec.autoscaling is not None:
                    draining[(cluster, index)] = placed.pop((cluster, index))
                else:
                    self._drop([(dep_key, cluster, index)])

    # -- 5: fill -------------------------------------------------------------------------

    def fill(self) -> None:
        """Place missing replicas: highest priority first, larger replicas first within a
        priority (first-fit decreasing); spread where no pending pod that is larger, or
        that fewer clusters can host, loses room. Then second thoughts (`_improve`)."""
        order = self.fill_order()
        self._reach = {key: self._reach_of(key, dep) for key, dep in order}
        self._takers = []
        self._fill_all(order)
        self._improve(order)
        # Reasons describe the final state, so re-planning the written lock, which starts
        # from that state, reports exactly the same.
        self.explain()

    def _target(self, dep_key: str, dep: ModelDeployment) -> int:
        return self._want.get(dep_key, dep.spec.replicas)

    def _fill_all(
        self, order: Sequence[tuple[str, ModelDeployment]], only: str | None = None
    ) -> None:
        """Fill every deployment short of its target, in `order`. With `only`, every
        deployment but `_only_except` is offered that cluster alone (see `_improve`)."""
        self._only = only
        self._pending = self._pending_demands(order)
        self._pending_view = {}
        self._pending_version = {}
        self._answers = {}
        if only is None or self._only_except:
            self._group_clusters()
        for dep_key, dep in order:
            self._forget_pending(dep_key, dep)
            if self._target(dep_key, dep) > len(self.placed[dep_key]):
                self._fill(dep_key, dep)
        self._state, self._groups, self._answers = {}, {}, {}

    def _score(self, order: Sequence[tuple[str, ModelDeployment]]) -> tuple[int, ...]:
        """GPUs placed per priority, highest priority first."""
        per: dict[int, int] = {}
        for key, dep in order:
            gpus = replica_gpus(dep) * len(self.placed[key])
            per[dep.spec.priority] = per.get(dep.spec.priority, 0) + gpus
        return tuple(per[p] for p in sorted(per, reverse=True))

    def _improve(self, order: Sequence[tuple[str, ModelDeployment]]) -> None:
        """Second thoughts on replicas placed although they took room (scheduling.md,
        step 6), in placement order, while some deployment is short: take the replica
        out; if a short deployment then fits on its cluster, fill again with its
        deployment held at what it has left, then fill again as usual, and keep the
        result if it places more GPUs (by priority, highest first), else undo.

        Every other cluster is full for the short deployments (the state is a finished
        fill), so the refills offer them that cluster alone; only the replica's own
        deployment, which may have been complete, is offered every cluster."""
        short = [k for k, d in order if d.spec.replicas > len(self.placed[k])]
        for dep_key, cluster, index in list(self._takers):
            if not short:
                break
            if (cluster, index) not in self.placed[dep_key]:
                continue
            # Devices the replica frees, at least, per pool position it is on.
            freed: dict[int, int] = {}
            for name in set(self.placed[dep_key][(cluster, index)].values()):
                pool = self.pools[(cluster, name)]
                mine = sum(
                    i.demand.least_consumed
                    for i in pool.layout.items
                    if i.deployment == dep_key and i.index == index
                )
                freed[pool.position] = pool.capacity - pool.layout.least_used + mine
            others = [k for k in short if k != dep_key and self._could_use(k, cluster, freed)]
            if not others:
                continue
            local = self._save_cluster(cluster)
            self._drop([(dep_key, cluster, index)])
            fits = any(self._fits_now(k, cluster) for k in others)
            self._restore_cluster(cluster, local)
            if not fits:
                continue
            before = self._score(order)
            saved = self._save()
            self._drop([(dep_key, cluster, index)])
            self._want = {dep_key: len(self.placed[dep_key])}
            self._only_except = ""
            self._fill_all(order, only=cluster)
            self._want = {}
            self._only_except = dep_key
            self._fill_all(order, only=cluster)
            self._only_except = ""
            self._only = None
            if self._score(order) <= before:
                self._restore(saved)
            else:
                short = [k for k, d in order if d.spec.replicas > len(self.placed[k])]

    def _save_cluster(self, cluster: str) -> _ClusterState:
        pools = self.cluster_pools[cluster]
        # (capacity held by removed deployments is on the pools too, in no deployment)
        slots = {
            (i.deployment, i.index)
            for pool in pools
            for i in pool.layout.items
            if i.deployment in self.placed
        }
        placed = {
            (k, i): self.placed[k][(cluster, i)] for k, i in slots if (cluster, i) in self.placed[k]
        }
        draining = {
            (k, i): self.draining[k][(cluster, i)]
            for k, i in slots
            if (cluster, i) in self.draining[k]
        }
        return [p.layout for p in pools], placed, draining, self.cluster_room[cluster]

    def _restore_cluster(self, cluster: str, saved: _ClusterState) -> None:
        layouts, placed, draining, room = saved
        for pool, layout in zip(self.cluster_pools[cluster], layouts, strict=True):
            if pool.layout is not layout:
                pool.set_layout(layout)
        for (k, i), pools in placed.items():
            self.placed[k][(cluster, i)] = pools
        for (k, i), pools in draining.items():
            self.draining[k][(cluster, i)] = pools
        self.cluster_room[cluster] = room

    def _could_use(self, dep_key: str, cluster: str, freed: dict[int, int]) -> bool:
        """Some role of `dep_key` matches a pool of `freed` with room enough (a bound)."""
        role_pools = self.eligibility.open_for_new(dep_key, self.deployments[dep_key], cluster)
        return role_pools is not None and any(
            freed.get(pos, -1) >= demand.least_consumed
            for _, matching in role_pools.roles
            for pos, demand in matching
        )

    def _fits_now(self, dep_key: str, cluster: str) -> bool:
        """A new replica of `dep_key` fits on `cluster` as it is (room only)."""
        dep = self.deployments[dep_key]
        role_pools = self.eligibility.open_for_new(dep_key, dep, cluster)
        if role_pools is None or not self._may_fit(cluster, role_pools):
            return False
        taken = [i for c, i in [*self.placed[dep_key], *self.draining[dep_key]] if c == cluster]
        return self._fit(dep_key, dep, cluster, lowest_free(taken), role_pools) is not None

    def _save(self) -> _RunState:
        return (
            {key: pool.layout for key, pool in self.pools.items()},
            {key: dict(placed) for key, placed in self.placed.items()},
            dict(self.cluster_room),
        )

    def _restore(self, saved: _RunState) -> None:
        layouts, placed, room = saved
        for key, pool in self.pools.items():
            if pool.layout is not layouts[key]:
                pool.set_layout(layouts[key])
        self.placed = placed
        self.cluster_room = room

    def explain(self) -> None:
        for dep_key, dep in self.deployments.items():
            if dep.spec.replicas > len(self.placed[dep_key]):
                self.reasons[dep_key] = self._explain(dep_key, dep)

    def fill_order(self) -> list[tuple[str, ModelDeployment]]:
        """Priority (high first), GPUs per replica (large first), then key."""
        return sorted(
            self.deployments.items(),
            key=lambda kv: (-kv[1].spec.priority, -replica_gpus(kv[1]), kv[0]),
        )

    # Pending demands: per (profile id, pool position), how many deployments still to be
    # filled may put a pod of each demand there, by their reach (profiles open to them).
    _pending: dict[tuple[int, int], Counter[tuple[int, Reach]]]  # (demand id, reach)
    _reach: dict[str, Reach]

    def _reach_of(self, dep_key: str, dep: ModelDeployment) -> Reach:
        """The cluster profiles open to new replicas of `dep` (before capacity)."""
        eligibility = self.eligibility
        return frozenset(
            pid
            for pid, members in eligibility.members.items()
            if eligibility.open_for_new(dep_key, dep, members[0]) is not None
        )

    def _pending_demands(
        self, order: Sequence[tuple[str, ModelDeployment]]
    ) -> dict[tuple[int, int], Counter[tuple[int, Reach]]]:
        pending: dict[tuple[int, int], Counter[tuple[int, Reach]]] = {}
        for dep_key, dep in order:
            if self._target(dep_key, dep) <= len(self.placed[dep_key]):
                continue
            reach = self._reach[dep_key]
            for pid, pos, demand in self._demands(dep_key, dep):
                counter = pending.get((pid, pos))
                if counter is None:
                    counter = pending[(pid, pos)] = Counter()
                counter[(demand, reach)] = counter.get((demand, reach), 0) + 1
        return pending

    def _demands(self, dep_key: str, dep: ModelDeployment) -> list[tuple[int, int, int]]:
        """(profile id, pool position, demand id) for every pool open to `dep`'s roles."""
        out = self._dep_demands.get(dep_key)
        if out is None:
            out = self._dep_demands[dep_key] = []
            for pid, members in self.eligibility.members.items():
                pools = self.eligibility.open_for_new(dep_key, dep, members[0])
                if pools is None:
                    continue
                for _, matching in pools.roles:
                    out += [(pid, pos, self._demand_id(demand)) for pos, demand in matching]
        return out

    def _forget_pending(self, dep_key: str, dep: ModelDeployment) -> None:
        if self._target(dep_key, dep) <= len(self.placed[dep_key]):
            return
        reach = self._reach[dep_key]
        for pid, pos, demand in self._demands(dep_key, dep):
            counter = self._pending[(pid, pos)]
            counter[(demand, reach)] -= 1
            if counter[(demand, reach)] <= 0:
                del counter[(demand, reach)]
                # The pool's pending shapes may change: a new view, a new version.
                self._pending_view.pop((pid, pos), None)
                self._pending_version[(pid, pos)] = self._pending_version.get((pid, pos), 0) + 1

    def _takes_room(
        self, pool: Pool, before: Layout, after: Layout, demand: PodDemand, reach: Reach
    ) -> bool:
        """True when, from `before` to `after`, a pending deployment loses room for more
        devices than the placement takes (whole workers, each worker's pods on distinct
        nodes), or loses any room while this deployment (open to `reach`) could go to a
        cluster that it cannot."""
        pending = getattr(self, "_pending", None)
        if not pending:
            return False
        others = self._pending_shapes(self.eligibility.profile_ids[pool.cluster], pool.position)
        if not others:
            return False
        takes = before.free_total - after.free_total
        for requests, k, size, reaches in others:
            narrower = False
            for other in reaches:
                if not reach <= other:
                    narrower = True
                    break
            room = pool.room_for(before, requests, k, size)
            if room <= takes and not narrower:
                continue  # cannot lose more than it has
            lost = room - pool.room_for(after, requests, k, size, base=before)
            if lost > takes or (lost > 0 and narrower):
                return True
        return False

    _pending_view: dict[tuple[int, int], list[tuple[tuple[Request, ...], int, int, list[Reach]]]]
    _pending_version: dict[tuple[int, int], int]  # bumped when the pool's view may change
    # Group answers (`_group_answer`) kept across deployments, by what they depend on.
    _answers: dict[tuple[object, ...], tuple[object, Template]]

    def _pending_shapes(
        self, pid: int, pos: int
    ) -> list[tuple[tuple[Request, ...], int, int, list[Reach]]]:
        """The pending demands of a pool, as (requests, pods per worker, devices per pod,
        the distinct reaches of their deployments): each shape once."""
        key = (pid, pos)
        view = self._pending_view.get(key)
        if view is None:
            reaches: dict[tuple[tuple[Request, ...], int, int], list[Reach]] = {}
            demands = self._demand_list
            for demand_id, reach in self._pending.get(key, ()):
                demand = demands[demand_id]
                shape = (demand.requests, demand.pods_per_worker, demand.devices_per_pod)
                seen = reaches.setdefault(shape, [])
                if reach not in seen:
                    seen.append(reach)
            view = self._pending_view[key] = [(*shape, r) for shape, r in reaches.items()]
        return view

    def _fill(self, dep_key: str, dep: ModelDeployment) -> None:
        """Add replicas one by one on the open cluster with room that takes no room a
        pending deployment needs (`_takes_room`), hosting the fewest of them (ties: the
        name sorting first); when every such cluster would take room, the same order
        among those that do.

        A cluster without room is not asked again: during one deployment's fill, clusters
        only fill up. A cluster that would take room is not asked again until no other is
        left: it only changes when this deployment places there.

        Clusters hosting none of this deployment are visited by group (`_groups`: same
        profile, pools with the same nodes, packing rule and demand sequence): one
        answer serves every member, in name order, as long as the new pods' place in
        each pool's packing order does not depend on the member (`_group_answer`)."""
        placed = self.placed[dep_key]
        missing = self._target(dep_key, dep) - len(placed)
        hosted = Counter(cluster for cluster, _ in placed)
        taken: dict[str, set[int]] = {}
        for cluster, index in [*placed, *self.draining[dep_key]]:
            taken.setdefault(cluster, set()).add(index)
        eligibility = self.eligibility
        opened: dict[int, RolePools | None] = {
            pid: eligibility.open_for_new(dep_key, dep, members[0])
            for pid, members in eligibility.members.items()
        }
        profile_ids = eligibility.profile_ids

        def open_pools(cluster: str) -> RolePools | None:
            return opened[profile_ids[cluster]]

        # Clusters already hosting some are in a heap by (count, name). The others host 0
        # and come first, in name order: `fresh` holds, by name, single clusters (those
        # with only draining replicas of this deployment) and groups (by their next member).
        only = self._only if self._only_except != dep_key else None
        heap = [
            (count, c)
            for c, count in hosted.items()
            if open_pools(c) is not None and (only is None or c == only)
        ]
        heapq.heapify(heap)
        fresh: list[tuple[str, int, _Group | None]] = [
            (c, 0, None)
            for c in taken
            if c not in hosted and open_pools(c) is not None and (only is None or c == only)
        ]
        if only is not None and only not in taken and open_pools(only) is not None:
            fresh.append((only, 0, None))
        room = self.cluster_room
        for key, members in self._groups.items() if only is None else ():
            role_pools = opened[key[0]]
            if role_pools is None or not members or room[members[0]] < role_pools.least_room:
                continue
            new_group = _Group(key, members[:], role_pools)
            if new_group.advance(taken):
                fresh.append((new_group.next, 0, new_group))
        heapq.heapify(fresh)
        seq = 0
        # would take room: (count, name, seq, (index, plan) or a group)
        deferred: list[tuple[int, str, int, tuple[int, RolePlan] | _Group]] = []
        alike: dict[object, tuple[bool, list[tuple[str, int, Layout]]] | None] = {}
        while missing:
            group: _Group | None = None
            if fresh:
                cluster, _, group = heapq.heappop(fresh)
                count = 0
            elif heap:
                count, cluster = heapq.heappop(heap)
            elif deferred:
                count, cluster, _, what = heapq.heappop(deferred)
                if isinstance(what, _Group):
                    plan = self._realize(dep_key, dep, cluster, what)
                    self._commit(dep_key, cluster, 0, plan, taken)
                    self._takers.append((dep_key, cluster, 0))
                    if what.advance(taken):
                        seq += 1
                        heapq.heappush(deferred, (0, what.next, seq, what))
                else:
                    self._commit(dep_key, cluster, what[0], what[1], taken)
                    self._takers.append((dep_key, cluster, what[0]))
                missing -= 1
                heapq.heappush(heap, (count + 1, cluster))
                continue
            else:
                break
            if group is not None:
                answer = self._group_answer(dep_key, dep, cluster, group)
                if answer is None:
                    continue
                if answer is _SPLIT:
                    fresh += [(c, 0, None) for c in group.rest(taken)]
                    heapq.heapify(fresh)
                    continue
                if answer:
                    seq += 1
                    heapq.heappush(deferred, (0, cluster, seq, group))
                    continue
                plan = self._realize(dep_key, dep, cluster, group)
                self._commit(dep_key, cluster, 0, plan, taken)
                missing -= 1
                heapq.heappush(heap, (1, cluster))
                if group.advance(taken):
                    heapq.heappush(fresh, (group.next, 0, group))
                continue
            role_pools = open_pools(cluster)
            assert role_pools is not None
            if not self._may_fit(cluster, role_pools):
                continue
            index = lowest_free(taken.get(cluster, ()))
            found = self._fit_alike(dep_key, dep, cluster, index, role_pools, alike)
            if found is None:
                continue
            harm, plan = found
            if harm:
                seq += 1
                heapq.heappush(deferred, (count, cluster, seq, (index, plan)))
                continue
            self._commit(dep_key, cluster, index, plan, taken)
            missing -= 1
            heapq.heappush(heap, (count + 1, cluster))

    # -- groups of clusters that look alike ----------------------------------------------

    def _demand_id(self, demand: PodDemand) -> int:
        """A small number per distinct demand value (equal demands, equal numbers)."""
        hit = self._demand_ids.get(id(demand))  # demands live as long as the run's matcher
        if hit is None:
            hit = self._demand_values.get(demand)
            if hit is None:
                hit = self._demand_values[demand] = len(self._demand_list)
                self._demand_list.append(demand)
            self._demand_ids[id(demand)] = hit
            self._demand_held.append(demand)  # so that its id is never reused in the run
        return hit

    def _sig(self, layout: Layout) -> int:
        """A small number per (packing rule, demand sequence) of a layout: packing is a
        function of these, so layouts with the same number have the same free rows."""
        if layout.sig < 0:
            demand_id = self._demand_id
            seq = tuple((*i.order[:3], demand_id(i.demand)) for i in layout.items)
            key = (layout.rule, seq)
            sig = self._sig_ids.get(key)
            if sig is None:
                sig = self._sig_ids[key] = len(self._sig_ids)
                ties: dict[tuple[int, int, int], set[int]] = {}
                for o0, o1, o2, d in seq:
                    ties.setdefault((o0, o1, o2), set()).add(d)
                self._sig_ties.append(ties)
            layout.sig = sig
        return layout.sig

    def _state_key(self, cluster: str) -> GroupKey:
        sig = self._sig
        pools = self.cluster_pools[cluster]
        return (
            self.eligibility.profile_ids[cluster],
            tuple((p.nodes, sig(p.layout)) for p in pools),
        )

    def _group_clusters(self) -> None:
        """Put every cluster in its group (same state key), members in name order."""
        self._state = {}
        self._groups = {}
        for cluster in self.cluster_names:
            key = self._state[cluster] = self._state_key(cluster)
            self._groups.setdefault(key, []).append(cluster)

    def _regroup(self, cluster: str, changed: Sequence[Pool]) -> None:
        """Move a cluster whose `changed` pools have new layouts to its new group."""
        old = self._state.get(cluster)
        if old is None:
            return
        members = self._groups[old]
        del members[bisect.bisect_left(members, cluster)]
        if not members:
            del self._groups[old]
        key = list(old[1])
        for pool in changed:
            key[pool.position] = (pool.nodes, self._sig(pool.layout))
        new = self._state[cluster] = (old[0], tuple(key))
        bisect.insort(self._groups.setdefault(new, []), cluster)

    def _group_answer(
        self, dep_key: str, dep: ModelDeployment, cluster: str, group: _Group
    ) -> bool | object | None:
        """For a group's members (index 0): None (no room), _SPLIT (the answer may differ
        by member: ask each), else whether the placement takes room (`group.template`
        holds the plan, as pool positions and layouts, with the roles on each).

        A new pod's place in a pool's packing order is fixed by (priority, size, pods),
        then by deployment key, index and role; among items that tie on the first three,
        the place differs by member, which changes the packing only when the tying items
        do not all have the pod's own demand.

        The answer depends on the profile and the state of the pools the roles may take
        (nodes and signature: the group's other pools play no part), the priority, the
        roles' demands (by value), the deployment's reach and the pending shapes on those
        pools (their version), not on the deployment itself: it is kept across deployments
        and groups under that key."""
        if group.answered:
            return group.answer
        group.answered = True
        roles = group.role_pools
        hit = self._asks.get(id(roles))
        if hit is None:
            demand_id = self._demand_id
            asks: Asks = tuple(
                (role, tuple((pos, demand_id(d)) for pos, d in m)) for role, m in roles.roles
            )
            positions = sorted({pos for _, m in roles.roles for pos, _ in m})
            hit = self._asks[id(roles)] = (asks, positions)
        asks, positions = hit
        pid, pools = group.key
        versions = self._pending_version
        memo = (
            pid,
            tuple([pools[pos] for pos in positions]),
            dep.spec.priority,
            asks,
            self._reach.get(dep_key),
            tuple([versions.get((pid, pos), 0) for pos in positions]),
        )
        answer = self._answers.get(memo)
        if answer is None:
            answer = self._answers[memo] = self._answer(dep_key, dep, cluster, group.role_pools)
        group.answer, group.template = answer
        return group.answer

    def _answer(
        self, dep_key: str, dep: ModelDeployment, cluster: str, role_pools: RolePools
    ) -> tuple[object, Template]:
        pools = self.cluster_pools[cluster]
        prio = -dep.spec.priority
        for _, matching in role_pools.roles:
            for pos, demand in matching:
                ties = self._sig_ties[self._sig(pools[pos].layout)]
                same = ties.get((prio, -demand.devices_per_pod, -demand.pods))
                if same is not None and (len(same) > 1 or self._demand_id(demand) not in same):
                    return _SPLIT, []
        if not self._may_fit(cluster, role_pools):
            return None, []
        found = self._fit(dep_key, dep, cluster, 0, role_pools)
        if found is None:
            return None, []
        # The plan is in role order; entry n's layout holds the new items of the roles
        # up to n that are on its pool.
        at = [pool.position for _, pool, _ in found[1]]
        template: Template = [
            (role, pool.position, layout, tuple(m for m in range(n + 1) if at[m] == at[n]))
            for n, (role, pool, layout) in enumerate(found[1])
        ]
        return found[0], template

    def _realize(self, dep_key: str, dep: ModelDeployment, cluster: str, group: _Group) -> RolePlan:
        """A group's plan on one of its members: the member's items plus the new ones,
        with the free rows of the template (the same demand sequence)."""
        pools = self.cluster_pools[cluster]
        roles = group.role_pools.roles
        priority = dep.spec.priority
        plan: RolePlan = []
        for role, pos, layout, on in group.template:
            pool = pools[pos]
            # The member's layout has the template's rule and demand sequence, so its
            # signature too: worked out once per template, not once per member.
            sig = self._sig(layout)
            items = list(pool.layout.items)
            for n in on:
                name, matching = roles[n]
                demand = next(d for p, d in matching if p == pos)
                item = Item.make(priority, dep_key, 0, name, n, demand)
                bisect.insort(items, item, key=_item_order)
            found = Layout(
                items,
                layout.free,
                layout.node_free,
                layout.free_total,
                layout.least_used,
                layout.rule,
                sig=sig,
                nodes=layout.nodes,
                full=layout.full,
            )
            plan.append((role, pool, found))
        return plan

    def _fit_alike(
        self,
        dep_key: str,
        dep: ModelDeployment,
        cluster: str,
        index: int,
        role_pools: RolePools,
        alike: dict[object, tuple[bool, list[tuple[str, int, Layout]]] | None],
    ) -> tuple[bool, RolePlan] | None:
        """`_fit`, answered once for clusters that look alike: same profile, same index,
        and pools with the same nodes holding the same items (a layout is a function of
        its items). `alike` lives for one deployment's fill (pending work is fixed)."""
        pools = self.cluster_pools[cluster]
        key = (
            index,
            self.eligibility.profile_ids[cluster],
            tuple((p.nodes, self._layout_id(p.layout)) for p in pools),
        )
        if key in alike:
            hit = alike[key]
            if hit is None:
                return None
            # Layouts are never changed once made, so clusters may share them.
            return hit[0], [(role, pools[pos], layout) for role, pos, layout in hit[1]]
        found = self._fit(dep_key, dep, cluster, index, role_pools)
        if found is None:
            alike[key] = None
        else:
            alike[key] = (found[0], [(role, pool.position, lay) for role, pool, lay in found[1]])
        return found

    def _layout_id(self, layout: Layout) -> int:
        """A small number per distinct item list (the same for equal layouts)."""
        if layout.key < 0:
            items = tuple((i.order, i.role, id(i.demand)) for i in layout.items)
            layout.key = self._layout_ids.setdefault(items, len(self._layout_ids))
        return layout.key

    def _commit(
        self, dep_key: str, cluster: str, index: int, plan: RolePlan, taken: dict[str, set[int]]
    ) -> None:
        for _, pool, layout in plan:
            pool.set_layout(layout)
        self._refresh_room(cluster)
        self._regroup(cluster, [pool for _, pool, _ in plan])
        slots: dict[str, str] = {}
        for role, pool, _ in plan:
            slots[role] = pool.name
        self.placed[dep_key][(cluster, index)] = slots
        taken.setdefault(cluster, set()).add(index)

    def _open_clusters(self, dep_key: str, dep: ModelDeployment) -> dict[str, RolePools]:
        """The clusters open to new replicas of `dep` (selector, cache, NoSchedule and
        NoExecute taints, a matching pool per role) that may have room, in name order."""
        eligibility = self.eligibility
        room = self.cluster_room
        out: list[tuple[str, RolePools]] = []
        for members in eligibility.members.values():
            pools = eligibility.open_for_new(dep_key, dep, members[0])
            if pools is not None:
                least = pools.least_room
                out += [(c, pools) for c in members if room[c] >= least]
        out.sort()
        return dict(out)

    def _may_fit(self, cluster: str, role_pools: RolePools) -> bool:
        """False when some role surely has no room on the cluster (cheap bounds)."""
        if self.cluster_room[cluster] < role_pools.least_room:
            return False
        pools = self.cluster_pools[cluster]
        return all(
            any(pools[pos].may_fit(pools[pos].layout, demand) for pos, demand in matching)
            for _, matching in role_pools.roles
        )

    def _fit(
        self, dep_key: str, dep: ModelDeployment, cluster: str, index: int, role_pools: RolePools
    ) -> tuple[bool, RolePlan] | None:
        """Pools for every role of a new replica, and whether they take room from a larger
        pending pod, or None. Each role takes, given the roles before it, a pool where it
        takes no such room first, then its best fit (least room left after it), ties by
        pool order; when a later role then finds no room, an earlier role tries its next
        option."""
        pools = self.cluster_pools[cluster]
        roles = role_pools.roles
        reach = getattr(self, "_reach", {}).get(dep_key, frozenset())

        def search(position: int, layouts: dict[int, Layout]) -> tuple[bool, RolePlan] | None:
            if position == len(roles):
                return False, []
            role, matching = roles[position]
            options: list[tuple[bool, int, int, Layout]] = []
            for pool_pos, demand in matching:
                pool = pools[pool_pos]
                layout = layouts.get(pool_pos, pool.layout)
                if not pool.may_fit(layout, demand):
                    continue
                item = Item.make(dep.spec.priority, dep_key, index, role, position, demand)
                trial = pool.with_item(layout, item)
                if trial is not None:
                    harm = self._takes_room(pool, layout, trial, demand, reach)
                    options.append((harm, trial.free_total, pool_pos, trial))
            options.sort(key=lambda o: (o[0], o[1], o[2]))
            for harm, _, pool_pos, trial in options:
                rest = search(position + 1, {**layouts, pool_pos: trial})
                if rest is not None:
                    return harm or rest[0], [(role, pools[pool_pos], trial), *rest[1]]
            return None

        try:
            return search(0, {})
        finally:
            # `search` refers to itself through its closure cell: drop that cycle, so that
            # the trial layouts it made are freed now (the pure verbs collect no cycles).
            search = None  # type: ignore[assignment]

    # -- 6: reasons ----------------------------------------------------------------------

    def _explain(self, dep_key: str, dep: ModelDeployment) -> list[str]:
        """Why no cluster takes another replica of `dep`: one reason per cluster considered
        (those matching its clusterSelector), or one reason when none is."""
        if not self.cluster_names:
            return [reasons.NO_CLUSTERS]
        considered = [c for c in self.cluster_names if self.eligibility.selected(dep_key, dep, c)]
        if not considered:
            return [reasons.NO_SELECTOR_MATCH]
        out = []
        for cluster in considered:
            why = self.eligibility.blocked(dep_key, dep, cluster, BLOCKS_NEW)
            if why is None:
                pools = self.eligibility.role_pools(dep_key, dep, cluster)
                why = pools if isinstance(pools, str) else self._why_full(cluster, pools)
            out.append(reasons.at(cluster, why))
        return out

    def _why_full(self, cluster: str, role_pools: RolePools) -> str:
        """The first role short of nodes, with the pool that comes closest to hosting it.

        A "free node" is a node with room for one more pod of the role; the role needs
        one per pod (workers x nodes per worker)."""
        pools = self.cluster_pools[cluster]
        for role, matching in role_pools.roles:
            free, _, pool_pos, demand = max(
                (pools[pos].free_nodes(d), -pos, pos, d) for pos, d in matching
            )
            if free < demand.pods:
                pool = pools[pool_pos]
                short = pool.device_nodes(demand) - free
                why = reasons.pool_short(pool.name, free, role, demand.pods, max(0, short))
                return why + self._held_note([pools[pos] for pos, _ in matching])
        if len(role_pools.roles) > 1:
            return reasons.roles_together([role for role, _ in role_pools.roles])
        role, matching = role_pools.roles[0]
        free, _, pool_pos, _ = max((pools[pos].free_nodes(d), -pos, pos, d) for pos, d in matching)
        why = reasons.pool_fragmented(pools[pool_pos].name, role)
        return why + self._held_note([pools[pos] for pos, _ in matching])

    def _held_note(self, pools: Sequence[Pool]) -> str:
        """What removed deployments hold on `pools`, as a reason's suffix (or "")."""
        held: list[tuple[str, str, int]] = []
        for pool in pools:
            for key, n in sorted(reserved.held(pool, self.deployments).items()):
                if n:
                    held.append((key, pool.name, n))
        return reasons.held_by_removed(held)
