"""Retain, scale down, fill, second thoughts, reasons: the placement rules of scheduling.md.

Placement state: every placed replica as deployment key -> (cluster, index) ->
{role: pool}, and per pool its node layout (`capacity.Pool`). The speed machinery the
rules ride on has its own owners: `interning` (small numbers for demands and layouts),
`lookalike` (clusters that answer alike), `pending` (the pending ledger) and `explain`
(the evidence behind a shortfall's reasons).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence

from modelplane.api.fleet import FleetSpec
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import LockedReplica, PlacementLock
from modelplane.scheduler.capacity import Item, Layout, Pool
from modelplane.scheduler.eligibility import Eligibility, RolePools
from modelplane.scheduler.explain import Explainer
from modelplane.scheduler.interning import Interner
from modelplane.scheduler.lookalike import SPLIT, Alike, Group, Lookalikes, RolePlan
from modelplane.scheduler.matching import Matcher, PodDemand
from modelplane.scheduler.pending import PendingLedger, Reach
from modelplane.scheduler.taints import EVICTS
from modelplane.scheduler.undo import ClusterSnapshot, RunSnapshot

# Fleets of at most this many clusters get a second fill when left short (`fill`).
SECOND_FILL_CLUSTERS = 16

ReplicaKey = tuple[str, int]  # (cluster, index) within one deployment


def replica_gpus(dep: ModelDeployment) -> int:
    """GPUs one replica asks for, over all its roles and pods."""
    return sum(
        role.workers.count * role.workers.topology.shape.gpus_per_worker
        for role in dep.spec.roles.values()
    )


def pod_gpus(dep: ModelDeployment) -> int:
    """GPUs of the largest pod of one replica."""
    return max(role.workers.topology.shape.gpus_per_node for role in dep.spec.roles.values())


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
        self._want: dict[str, int] = {}  # targets held below `replicas` (second thoughts)
        self._only: str | None = None  # the one cluster offered (second thoughts)
        # the deployments offered every cluster all the same (second thoughts)
        self._only_except: frozenset[str] = frozenset()
        self._takers: list[tuple[str, str, int]] = []  # placed although they took room
        self._new: list[tuple[str, str, int]] = []  # placed by this fill, in order
        # Clusters gone in a what-if (`survive`): a fill neither visits nor counts them.
        self.lost: frozenset[str] = frozenset()
        self._order: list[tuple[str, ModelDeployment]] = []  # fill_order, once
        # The second fill of a small fleet (`fill`): multi-node workers first on ties.
        self._workers_first = False
        self.interner = Interner()
        self.pending = PendingLedger(self.eligibility, self.interner)
        self.lookalikes = Lookalikes(self)
        self.explainer = Explainer(
            self.cluster_names, self.cluster_pools, self.eligibility, self.deployments
        )

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
        self.drop(failed)

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

    def drop(self, replicas: Sequence[tuple[str, str, int]]) -> None:
        """Drop replicas (deployment, cluster, index), freeing their capacity (also a
        what-if's lost clusters, see scheduler.survive).

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
                    self.drop([(dep_key, cluster, index)])

    # -- 5: fill -------------------------------------------------------------------------

    def fill(self, explain: bool = True) -> None:
        """Place missing replicas: highest priority first, larger replicas first within a
        priority (first-fit decreasing); spread where no pending pod that is larger, or
        that fewer clusters can host, loses room. Then second thoughts (`_improve`)."""
        order = self.fill_order()
        self.pending.set_reach(order, self.lost)
        start = RunSnapshot(self) if len(self.cluster_names) <= SECOND_FILL_CLUSTERS else None
        self._fill_and_improve(order)
        if start is not None:
            self._second_fill(order, start)
        # Reasons describe the final state, so re-planning the written lock, which starts
        # from that state, reports exactly the same.
        if explain:
            self.explain()

    def _fill_and_improve(self, order: Sequence[tuple[str, ModelDeployment]]) -> None:
        self._takers = []
        self._new = []
        self._fill_all(order)
        self._improve(order)

    def _second_fill(
        self, order: Sequence[tuple[str, ModelDeployment]], start: RunSnapshot
    ) -> None:
        """On a small fleet left short (scheduling.md, step 5, "A second fill"): fill
        again from `start` with multi-node workers before single pods of the same replica
        size, a pod's take that costs such a worker as much room as it takes counted as
        taking room; keep it if it places more GPUs (priority by priority), else go back."""
        if not any(d.spec.replicas > len(self.placed[k]) for k, d in order):
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
        first, score = RunSnapshot(self), self._score(order)
        start.restore()
        self._workers_first = True
        try:
            self._fill_and_improve(alternate)
        finally:
            self._workers_first = False
        if not self._score(order) > score:
            first.restore()

    def fill_order(self) -> list[tuple[str, ModelDeployment]]:
        """Priority (high first), GPUs per replica (large first), GPUs per pod (large
        first: an 8-GPU pod before a 4+4-GPU worker of the same size), then key."""
        if not self._order:
            self._order = sorted(
                self.deployments.items(),
                key=lambda kv: (
                    -kv[1].spec.priority,
                    -replica_gpus(kv[1]),
                    -pod_gpus(kv[1]),
                    kv[0],
                ),
            )
        return list(self._order)

    def _waiting(self, dep_key: str, dep: ModelDeployment) -> bool:
        """The deployment has fewer replicas than its target (held by second thoughts)."""
        return self._want.get(dep_key, dep.spec.replicas) > len(self.placed[dep_key])

    def _fill_all(
        self, order: Sequence[tuple[str, ModelDeployment]], only: str | None = None
    ) -> None:
        """Fill every deployment short of its target, in `order`. With `only`, every
        deployment not in `_only_except` is offered that cluster alone (see `_improve`)."""
        self._only = only
        self.pending.open(order, self._waiting)
        self.lookalikes.start(only is None or bool(self._only_except), self.lost)
        for dep_key, dep in order:
            if self._waiting(dep_key, dep):
                self.pending.forget(dep_key, dep)
                self._fill(dep_key, dep)
        self.lookalikes.stop()

    def _fill(self, dep_key: str, dep: ModelDeployment) -> None:
        """Add replicas one by one on the open cluster with room that takes no room a
        pending deployment needs (`_takes_room`), hosting the fewest of them (ties: the
        name sorting first); when every such cluster would take room, the same order
        among those that do.

        A cluster without room is not asked again: during one deployment's fill, clusters
        only fill up. A cluster that would take room is not asked again until no other is
        left: it only changes when this deployment places there.

        Clusters hosting none of this deployment are visited by group (`lookalikes`: same
        profile, pools with the same nodes, packing rule and demand sequence): one
        answer serves every member, in name order, as long as the new pods' place in
        each pool's packing order does not depend on the member (`Lookalikes.answer`)."""
        placed = self.placed[dep_key]
        missing = self._want.get(dep_key, dep.spec.replicas) - len(placed)
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
        only = self._only if dep_key not in self._only_except else None
        heap = [
            (count, c)
            for c, count in hosted.items()
            if open_pools(c) is not None and (only is None or c == only)
        ]
        heapq.heapify(heap)
        fresh: list[tuple[str, int, Group | None]] = [
            (c, 0, None)
            for c in taken
            if c not in hosted and open_pools(c) is not None and (only is None or c == only)
        ]
        if only is not None and only not in taken and open_pools(only) is not None:
            fresh.append((only, 0, None))
        lookalikes = self.lookalikes
        if only is None:
            fresh += lookalikes.fresh(opened, taken, self.cluster_room)
        heapq.heapify(fresh)
        seq = 0
        # would take room: (count, name, seq, (index, plan) or a group)
        deferred: list[tuple[int, str, int, tuple[int, RolePlan] | Group]] = []
        alike: Alike = {}
        while missing:
            group: Group | None = None
            if fresh:
                cluster, _, group = heapq.heappop(fresh)
                count = 0
            elif heap:
                count, cluster = heapq.heappop(heap)
            elif deferred:
                count, cluster, _, what = heapq.heappop(deferred)
                if isinstance(what, Group):
                    plan = lookalikes.realize(dep_key, dep, cluster, what)
                    self.commit(dep_key, cluster, 0, plan, taken)
                    self._takers.append((dep_key, cluster, 0))
                    if what.advance(taken):
                        seq += 1
                        heapq.heappush(deferred, (0, what.next, seq, what))
                else:
                    self.commit(dep_key, cluster, what[0], what[1], taken)
                    self._takers.append((dep_key, cluster, what[0]))
                missing -= 1
                heapq.heappush(heap, (count + 1, cluster))
                continue
            else:
                break
            if group is not None:
                answer = lookalikes.answer(self, dep_key, dep, cluster, group)
                if answer is None:
                    continue
                if answer is SPLIT:
                    fresh += [(c, 0, None) for c in group.rest(taken)]
                    heapq.heapify(fresh)
                    continue
                if answer:
                    seq += 1
                    heapq.heappush(deferred, (0, cluster, seq, group))
                    continue
                plan = lookalikes.realize(dep_key, dep, cluster, group)
                self.commit(dep_key, cluster, 0, plan, taken)
                missing -= 1
                heapq.heappush(heap, (1, cluster))
                if group.advance(taken):
                    heapq.heappush(fresh, (group.next, 0, group))
                continue
            role_pools = open_pools(cluster)
            assert role_pools is not None
            if not self.may_fit(cluster, role_pools):
                continue
            index = lowest_free(taken.get(cluster, ()))
            found = lookalikes.fit_alike(self, dep_key, dep, cluster, index, role_pools, alike)
            if found is None:
                continue
            harm, plan = found
            if harm:
                seq += 1
                heapq.heappush(deferred, (count, cluster, seq, (index, plan)))
                continue
            self.commit(dep_key, cluster, index, plan, taken)
            missing -= 1
            heapq.heappush(heap, (count + 1, cluster))

    def _takes_room(
        self, pool: Pool, before: Layout, after: Layout, demand: PodDemand, reach: Reach
    ) -> bool:
        """True when, from `before` to `after`, a pending deployment loses room for more
        devices than the placement takes (whole workers, each worker's pods on distinct
        nodes), or loses any room while this deployment (open to `reach`) could go to a
        cluster that it cannot."""
        others = self.pending.shapes(self.eligibility.profile_ids[pool.cluster], pool.position)
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
        if self._workers_first:  # the second fill (`_second_fill`): equal losses too
            for requests, k, size, _ in others:
                if k > 1 and takes > 0:
                    room = pool.room_for(before, requests, k, size)
                    if (
                        room >= takes
                        and room - pool.room_for(after, requests, k, size, base=before) == takes
                    ):
                        return True
        return False

    def commit(
        self, dep_key: str, cluster: str, index: int, plan: RolePlan, taken: dict[str, set[int]]
    ) -> None:
        """Place replica `index` of `dep_key` on `cluster` by `plan` (its pools' new layouts);
        `taken`: the deployment's indices per cluster, updated."""
        for _, pool, layout in plan:
            pool.set_layout(layout)
        self._refresh_room(cluster)
        self.lookalikes.regroup(cluster, [pool for _, pool, _ in plan])
        slots: dict[str, str] = {}
        for role, pool, _ in plan:
            slots[role] = pool.name
        self.placed[dep_key][(cluster, index)] = slots
        self._new.append((dep_key, cluster, index))
        taken.setdefault(cluster, set()).add(index)

    def open_clusters(self, dep_key: str, dep: ModelDeployment) -> dict[str, RolePools]:
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

    def may_fit(self, cluster: str, role_pools: RolePools) -> bool:
        """False when some role surely has no room on the cluster (cheap bounds)."""
        if self.cluster_room[cluster] < role_pools.least_room:
            return False
        pools = self.cluster_pools[cluster]
        return all(
            any(pools[pos].may_fit(pools[pos].layout, demand) for pos, demand in matching)
            for _, matching in role_pools.roles
        )

    def fit(
        self, dep_key: str, dep: ModelDeployment, cluster: str, index: int, role_pools: RolePools
    ) -> tuple[bool, RolePlan] | None:
        """Pools for every role of a new replica, and whether they take room from a larger
        pending pod, or None. Each role takes, given the roles before it, a pool where it
        takes no such room first, then its best fit (least room left after it), ties by
        pool order; when a later role then finds no room, an earlier role tries its next
        option."""
        pools = self.cluster_pools[cluster]
        roles = role_pools.roles
        reach = self.pending.reach.get(dep_key, frozenset())

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

    # -- 6: second thoughts --------------------------------------------------------------

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
        result if it places more GPUs (by priority, highest first), else undo. If that
        is undone, try once more taking out, with it, the replicas this fill placed on
        its cluster after it (they were placed on the room it left).

        Every other cluster is full for the short deployments (the state is a finished
        fill), so the refills offer them that cluster alone; only the deployments of the
        replicas taken out, which may have been complete, are offered every cluster."""
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
            local = ClusterSnapshot(self, cluster)
            self.drop([(dep_key, cluster, index)])
            fits = any(self._fits_now(k, cluster) for k in others)
            local.restore()
            if not fits:
                continue
            before = self._score(order)
            at = self._new.index((dep_key, cluster, index))
            later = [r for r in self._new[at + 1 :] if r[1] == cluster]
            for out in ([(dep_key, cluster, index)], [(dep_key, cluster, index), *later]):
                saved = RunSnapshot(self)
                self._refill(order, dep_key, cluster, out)
                if self._score(order) > before:
                    short = [k for k, d in order if d.spec.replicas > len(self.placed[k])]
                    break
                saved.restore()
                if len(out) == 1 and not later:
                    break

    def _refill(
        self,
        order: Sequence[tuple[str, ModelDeployment]],
        dep_key: str,
        cluster: str,
        out: list[tuple[str, str, int]],
    ) -> None:
        """Take `out` out, fill `cluster` with `dep_key` held at what it has left, then
        fill as usual (the deployments of `out` may go to any cluster)."""
        self.drop(out)
        self._want = {dep_key: len(self.placed[dep_key])}
        self._only_except = frozenset()
        self._fill_all(order, only=cluster)
        self._want = {}
        self._only_except = frozenset(key for key, _, _ in out)
        self._fill_all(order, only=cluster)
        self._only_except = frozenset()
        self._only = None

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
        if role_pools is None or not self.may_fit(cluster, role_pools):
            return False
        taken = [i for c, i in [*self.placed[dep_key], *self.draining[dep_key]] if c == cluster]
        return self.fit(dep_key, dep, cluster, lowest_free(taken), role_pools) is not None

    # -- 7: reasons ----------------------------------------------------------------------

    def explain(self) -> None:
        """Every short deployment's reasons, on the final state."""
        for dep_key, dep in self.deployments.items():
            if dep.spec.replicas > len(self.placed[dep_key]):
                self.reasons[dep_key] = self.explainer.reasons(dep_key, dep)
