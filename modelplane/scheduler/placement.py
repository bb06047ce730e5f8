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
from modelplane.scheduler.cordon import cordoned
from modelplane.scheduler.cost import PriceBook
from modelplane.scheduler.eligibility import Eligibility, RolePools
from modelplane.scheduler.explain import Explainer
from modelplane.scheduler.interning import Interner
from modelplane.scheduler.lookalike import SPLIT, Alike, Group, Lookalikes, RolePlan
from modelplane.scheduler.matching import Matcher, PodDemand
from modelplane.scheduler.pending import PendingLedger, Reach
from modelplane.scheduler.second import Trials
from modelplane.scheduler.sizes import lowest_free, pod_gpus, replica_gpus
from modelplane.scheduler.taints import EVICTS
from modelplane.scheduler.undo import RunSnapshot

# Fleets of at most this many clusters get a second fill when left short (`fill`).
SECOND_FILL_CLUSTERS = 16

ReplicaKey = tuple[str, int]  # (cluster, index) within one deployment


class Placement:
    """One scheduling run over a fleet. Call `retain`, `scale_down`, `fill` in order."""

    def __init__(self, fleet: FleetSpec) -> None:
        self.fleet = fleet
        self.deployments = dict(sorted(fleet.deployments.items()))
        self.cluster_names = sorted(fleet.clusters)
        self.matcher = Matcher(fleet.classes)
        self.prices = PriceBook(fleet.classes)  # scheduler.cost: placementPolicy Cheapest
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
        self.cordoned = cordoned(fleet)  # scheduler.cordon
        self.trials = Trials()  # second thoughts and the second fill (scheduler.second)
        # Clusters gone in a what-if (`survive`): a fill neither visits nor counts them.
        self.lost: frozenset[str] = frozenset()
        self._order: list[tuple[str, ModelDeployment]] = []  # fill_order, once
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
            # A replica draining off a cordoned cluster is never taken back.
            back = [slot for slot in draining if slot[0] not in self.cordoned]
            cheapest = cheapest_first(dep)
            while len(placed) < dep.spec.replicas and back:
                # Cheapest first takes the cheapest back, and drains the dearest first.
                slot = (
                    min(back, key=lambda s: (self.replica_cost(dep_key, dep, s, draining[s]), s))
                    if cheapest
                    else min(back)
                )
                back.remove(slot)
                placed[slot] = draining.pop(slot)
            while len(placed) > dep.spec.replicas:
                per_cluster = Counter(cluster for cluster, _ in placed)
                closed = self.cordoned
                cluster, index = max(
                    placed,
                    key=lambda k: (
                        k[0] in closed,
                        self.replica_cost(dep_key, dep, k, placed[k]) if cheapest else 0.0,
                        per_cluster[k[0]],
                        k[0],
                        k[1],
                    ),
                )
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
        self.fill_and_improve(order)
        if start is not None:
            self.trials.second_fill(self, order, start)
        # Reasons describe the final state, so re-planning the written lock, which starts
        # from that state, reports exactly the same.
        if explain:
            self.explain()

    def fill_and_improve(self, order: Sequence[tuple[str, ModelDeployment]]) -> None:
        """Fill in `order`, then second thoughts (`Trials.improve`)."""
        trials = self.trials
        trials.takers = []
        trials.new = []
        self.fill_all(order)
        trials.improve(self, order)

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
        return self.trials.want.get(dep_key, dep.spec.replicas) > len(self.placed[dep_key])

    def fill_all(
        self, order: Sequence[tuple[str, ModelDeployment]], only: str | None = None
    ) -> None:
        """Fill every deployment short of its target, in `order`. With `only`, every
        deployment not in `only_except` is offered that cluster alone (`Trials.improve`)."""
        self.trials.only = only
        self.pending.open(order, self._waiting)
        self.lookalikes.start(only is None or bool(self.trials.only_except), self.lost)
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
        if cheapest_first(dep):
            self._fill_cheapest(dep_key, dep)
            return
        trials = self.trials
        missing, hosted, taken = self._start(dep_key, dep)
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
        only = trials.only if dep_key not in trials.only_except else None
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
                    trials.takers.append((dep_key, cluster, 0))
                    if what.advance(taken):
                        seq += 1
                        heapq.heappush(deferred, (0, what.next, seq, what))
                else:
                    self.commit(dep_key, cluster, what[0], what[1], taken)
                    trials.takers.append((dep_key, cluster, what[0]))
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

    def _start(
        self, dep_key: str, dep: ModelDeployment
    ) -> tuple[int, Counter[str], dict[str, set[int]]]:
        """A deployment's fill starts from: replicas missing, its replicas per cluster, and
        the indices it uses per cluster (draining replicas' too)."""
        placed = self.placed[dep_key]
        missing = self.trials.want.get(dep_key, dep.spec.replicas) - len(placed)
        taken: dict[str, set[int]] = {}
        for cluster, index in [*placed, *self.draining[dep_key]]:
            taken.setdefault(cluster, set()).add(index)
        return missing, Counter(cluster for cluster, _ in placed), taken

    def _fill_cheapest(self, dep_key: str, dep: ModelDeployment) -> None:
        """`_fill` for `placementPolicy: Cheapest`: each new replica goes to the open cluster
        where it takes no room a pending deployment needs, then costs least per hour (its
        pools chosen cheapest first, `fit`), then hosts the fewest of this deployment, then
        whose name sorts first.

        Every open cluster is asked once; during one deployment's fill only the cluster it
        places on changes (pending work is fixed), so only that one is asked again. No
        look-alike groups: prices may differ between clusters that look alike."""
        trials = self.trials
        missing, hosted, taken = self._start(dep_key, dep)
        eligibility = self.eligibility
        opened: dict[int, RolePools | None] = {}
        only = trials.only if dep_key not in trials.only_except else None

        def ask(cluster: str) -> tuple[tuple[bool, float, int, str], int, RolePlan] | None:
            pid = eligibility.profile_ids[cluster]
            if pid not in opened:
                opened[pid] = eligibility.open_for_new(dep_key, dep, eligibility.members[pid][0])
            role_pools = opened[pid]
            if role_pools is None or not self.may_fit(cluster, role_pools):
                return None
            index = lowest_free(taken.get(cluster, ()))
            found = self.fit(dep_key, dep, cluster, index, role_pools)
            if found is None:
                return None
            harm, plan = found
            slots = {role: pool.name for role, pool, _ in plan}
            cost = self.replica_cost(dep_key, dep, (cluster, index), slots)
            return (harm, cost, hosted[cluster], cluster), index, plan

        heap = []
        for cluster in self.cluster_names:
            if cluster in self.lost or (only is not None and cluster != only):
                continue
            answer = ask(cluster)
            if answer is not None:
                heap.append(answer)
        heapq.heapify(heap)
        while missing and heap:
            (harm, _, _, cluster), index, plan = heapq.heappop(heap)
            self.commit(dep_key, cluster, index, plan, taken)
            if harm:
                trials.takers.append((dep_key, cluster, index))
            hosted[cluster] += 1
            missing -= 1
            answer = ask(cluster)
            if answer is not None:
                heapq.heappush(heap, answer)

    def replica_cost(
        self, dep_key: str, dep: ModelDeployment, slot: ReplicaKey, pools: Mapping[str, str]
    ) -> float:
        """What a replica costs per hour with its roles on `pools` of its cluster
        (scheduler.cost; UNKNOWN without prices)."""
        roles = dep.spec.roles
        placed: list[tuple[Pool, PodDemand]] = []
        for role, name in pools.items():
            pool = self.pools[(slot[0], name)]
            demand = self.matcher.fit(dep_key, role, roles[role], pool.class_name).demand  # type: ignore[index]
            assert demand is not None  # the role is placed there
            placed.append((pool, demand))
        return self.prices.replica(placed)

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
        if self.trials.workers_first:  # the second fill (`Trials.second_fill`): equal losses too
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
        self.trials.new.append((dep_key, cluster, index))
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
        takes no such room first, then (`placementPolicy: Cheapest`) the one where it costs
        least, then its best fit (least room left after it), ties by pool order; when a
        later role then finds no room, an earlier role tries its next option."""
        pools = self.cluster_pools[cluster]
        roles = role_pools.roles
        reach = self.pending.reach.get(dep_key, frozenset())
        prices = self.prices if cheapest_first(dep) else None

        def search(position: int, layouts: dict[int, Layout]) -> tuple[bool, RolePlan] | None:
            if position == len(roles):
                return False, []
            role, matching = roles[position]
            options: list[tuple[bool, float, int, int, Layout]] = []
            for pool_pos, demand in matching:
                pool = pools[pool_pos]
                layout = layouts.get(pool_pos, pool.layout)
                if not pool.may_fit(layout, demand):
                    continue
                item = Item.make(dep.spec.priority, dep_key, index, role, position, demand)
                trial = pool.with_item(layout, item)
                if trial is not None:
                    harm = self._takes_room(pool, layout, trial, demand, reach)
                    cost = prices.role(pool, demand) if prices is not None else 0.0
                    options.append((harm, cost, trial.free_total, pool_pos, trial))
            options.sort(key=lambda o: (o[0], o[1], o[2], o[3]))
            for harm, _, _, pool_pos, trial in options:
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

    # -- 6: second thoughts: scheduler.second ------------------------------------------

    # -- 7: reasons ----------------------------------------------------------------------

    def explain(self) -> None:
        """Every short deployment's reasons, on the final state."""
        for dep_key, dep in self.deployments.items():
            if dep.spec.replicas > len(self.placed[dep_key]):
                self.reasons[dep_key] = self.explainer.reasons(dep_key, dep)


def cheapest_first(dep: ModelDeployment) -> bool:
    """Whether new replicas of `dep` go where they cost least (`placementPolicy`)."""
    return dep.spec.placement_policy == "Cheapest"
