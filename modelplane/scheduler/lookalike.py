"""Clusters that look alike: one answer for many clusters during a fill.

Speed machinery only (scheduling.md's rules are in `placement`). Clusters with the same
profile whose pools have the same nodes, packing rule and demand sequence (`Interner.sig`)
answer a new replica the same way, as long as its pods' place in each pool's packing
order does not depend on the member; a fleet of a thousand clusters then asks `fit` a
few dozen times per deployment instead of a thousand.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

from modelplane.api.model_deployment import ModelDeployment
from modelplane.scheduler.capacity import Item, Layout, Pool
from modelplane.scheduler.eligibility import RolePools

if TYPE_CHECKING:
    from modelplane.scheduler.placement import Placement

RolePlan = list[tuple[str, Pool, Layout]]  # (role, pool, that pool's layout with the role on it)
# A group's plan: (role, pool position, layout, the numbers of the new roles on it)
Template = list[tuple[str, int, Layout, tuple[int, ...]]]
# A group of clusters: (profile id, per pool (nodes, Interner.sig of its layout))
GroupKey = tuple[int, tuple[tuple[int, int], ...]]
Asks = tuple[tuple[str, tuple[tuple[int, int], ...]], ...]  # per role, (pool, demand id)
# `fit` answers kept for one deployment's fill, by (index, profile, pools' layouts)
Alike = dict[object, tuple[bool, list[tuple[str, int, Layout]]] | None]
SPLIT = object()  # a group whose members may answer differently


def _item_order(item: Item) -> tuple[object, ...]:
    return item.order


class Group:
    """Clusters that look alike, during one deployment's fill: the members (name order)
    not yet visited, and the answer for all of them (`Lookalikes.answer`)."""

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


class Lookalikes:
    """The groups of one run's clusters while a fill is open (`start` ... `stop`), and the
    answers kept across its deployments."""

    def __init__(self, run: Placement) -> None:
        # No reference to `run` is kept (a cycle would outlive the run: the pure verbs
        # collect no cycles); the methods that ask its rules take it as an argument.
        self._cluster_names = run.cluster_names
        self._cluster_pools = run.cluster_pools
        self._profile_ids = run.eligibility.profile_ids
        self._pending = run.pending
        self._interner = run.interner
        self._state: dict[str, GroupKey] = {}  # cluster -> group key, while a fill is open
        self.groups: dict[GroupKey, list[str]] = {}  # members in name order
        # Group answers kept across deployments, by what they depend on (`answer`).
        self._answers: dict[tuple[object, ...], tuple[object, Template]] = {}
        # per RolePools (by id: they live as long as the run's eligibility), its roles'
        # demands by number, and the pool positions they may take
        self._asks: dict[int, tuple[Asks, list[int]]] = {}
        # per cluster, its pools' layouts and its group key when `start` last saw them
        # (a what-if re-plans the same state a thousand times: see scheduler.survive)
        self._keys: dict[str, tuple[tuple[Layout, ...], GroupKey]] = {}

    def start(self, group: bool, lost: frozenset[str] = frozenset()) -> None:
        """Open a fill: with `group`, put every cluster but the `lost` ones in its group."""
        if not group:
            return
        state: dict[str, GroupKey] = {}
        groups: dict[GroupKey, list[str]] = {}
        self._state, self.groups = state, groups
        keys = self._keys
        for cluster in self._cluster_names:
            if cluster in lost:
                continue
            layouts = tuple([p.layout for p in self._cluster_pools[cluster]])
            hit = keys.get(cluster)
            if hit is not None and hit[0] == layouts:  # (identity first: cheap when the same)
                key = hit[1]
            else:
                key = self._state_key(cluster)
                keys[cluster] = (layouts, key)
            state[cluster] = key
            groups.setdefault(key, []).append(cluster)

    def stop(self) -> None:
        self._state, self.groups = {}, {}

    def _state_key(self, cluster: str) -> GroupKey:
        sig = self._interner.sig
        pools = self._cluster_pools[cluster]
        return (
            self._profile_ids[cluster],
            tuple((p.nodes, sig(p.layout)) for p in pools),
        )

    def regroup(self, cluster: str, changed: Sequence[Pool]) -> None:
        """Move a cluster whose `changed` pools have new layouts to its new group."""
        old = self._state.get(cluster)
        if old is None:
            return
        members = self.groups[old]
        del members[bisect.bisect_left(members, cluster)]
        if not members:
            del self.groups[old]
        key = list(old[1])
        for pool in changed:
            key[pool.position] = (pool.nodes, self._interner.sig(pool.layout))
        new = self._state[cluster] = (old[0], tuple(key))
        bisect.insort(self.groups.setdefault(new, []), cluster)

    def fresh(
        self,
        opened: dict[int, RolePools | None],
        taken: dict[str, set[int]],
        room: dict[str, int],
    ) -> list[tuple[str, int, Group | None]]:
        """A deployment's groups (by the profile's open pools, `opened`) that may have
        room, each at its first member hosting none of it (`taken`)."""
        out: list[tuple[str, int, Group | None]] = []
        for key, members in self.groups.items():
            role_pools = opened[key[0]]
            if role_pools is None or not members or room[members[0]] < role_pools.least_room:
                continue
            group = Group(key, members[:], role_pools)
            if group.advance(taken):
                out.append((group.next, 0, group))
        return out

    def answer(
        self, run: Placement, dep_key: str, dep: ModelDeployment, cluster: str, group: Group
    ) -> bool | object | None:
        """For a group's members (index 0): None (no room), SPLIT (the answer may differ
        by member: ask each), else whether the placement takes room (`group.template`
        holds the plan, as pool positions and layouts, with the roles on each).

        A new pod's place in a pool's packing order is fixed by (priority, size, pods),
        then by deployment key, index and role; among items that tie on the first three,
        the place differs by member, which changes the packing only when the tying items
        do not all have the pod's own demand.

        The answer depends on the profile and the state of the pools the roles may take
        (nodes and signature: the group's other pools play no part), the priority, the
        roles' demands (by value), the deployment's reach and the pending shapes on those
        pools (`PendingLedger.view_id`), not on the deployment itself: it is kept across
        deployments, groups and fills under that key."""
        if group.answered:
            return group.answer
        group.answered = True
        roles = group.role_pools
        hit = self._asks.get(id(roles))
        if hit is None:
            demand_id = self._interner.demand_id
            asks: Asks = tuple(
                (role, tuple((pos, demand_id(d)) for pos, d in m)) for role, m in roles.roles
            )
            positions = sorted({pos for _, m in roles.roles for pos, _ in m})
            hit = self._asks[id(roles)] = (asks, positions)
        asks, positions = hit
        pid, pools = group.key
        pending = self._pending
        view_id = pending.view_id
        memo = (
            pid,
            tuple([pools[pos] for pos in positions]),
            dep.spec.priority,
            asks,
            pending.reach.get(dep_key),
            tuple([view_id(pid, pos) for pos in positions]),
        )
        answer = self._answers.get(memo)
        if answer is None:
            answer = self._answers[memo] = self._answer(
                run, dep_key, dep, cluster, group.role_pools
            )
        group.answer, group.template = answer
        return group.answer

    def _answer(
        self,
        run: Placement,
        dep_key: str,
        dep: ModelDeployment,
        cluster: str,
        role_pools: RolePools,
    ) -> tuple[object, Template]:
        pools = self._cluster_pools[cluster]
        prio = -dep.spec.priority
        interner = self._interner
        sig, sig_ties, demand_id = interner.sig, interner.sig_ties, interner.demand_id
        for _, matching in role_pools.roles:
            for pos, demand in matching:
                ties = sig_ties[sig(pools[pos].layout)]
                same = ties.get((prio, -demand.devices_per_pod, -demand.pods))
                if same is not None and (len(same) > 1 or demand_id(demand) not in same):
                    return SPLIT, []
        if not run.may_fit(cluster, role_pools):
            return None, []
        found = run.fit(dep_key, dep, cluster, 0, role_pools)
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

    def realize(self, dep_key: str, dep: ModelDeployment, cluster: str, group: Group) -> RolePlan:
        """A group's plan on one of its members: the member's items plus the new ones,
        with the free rows of the template (the same demand sequence)."""
        pools = self._cluster_pools[cluster]
        roles = group.role_pools.roles
        priority = dep.spec.priority
        plan: RolePlan = []
        for role, pos, layout, on in group.template:
            pool = pools[pos]
            # The member's layout has the template's rule and demand sequence, so its
            # signature too: worked out once per template, not once per member.
            sig = self._interner.sig(layout)
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

    def fit_alike(
        self,
        run: Placement,
        dep_key: str,
        dep: ModelDeployment,
        cluster: str,
        index: int,
        role_pools: RolePools,
        alike: Alike,
    ) -> tuple[bool, RolePlan] | None:
        """`Placement.fit`, answered once for clusters that look alike: same profile, same
        index, and pools with the same nodes holding the same items (a layout is a
        function of its items). `alike` lives for one deployment's fill (pending work is
        fixed)."""
        pools = self._cluster_pools[cluster]
        layout_id = self._interner.layout_id
        key = (
            index,
            self._profile_ids[cluster],
            tuple((p.nodes, layout_id(p.layout)) for p in pools),
        )
        if key in alike:
            hit = alike[key]
            if hit is None:
                return None
            # Layouts are never changed once made, so clusters may share them.
            return hit[0], [(role, pools[pos], layout) for role, pos, layout in hit[1]]
        found = run.fit(dep_key, dep, cluster, index, role_pools)
        if found is None:
            alike[key] = None
        else:
            alike[key] = (found[0], [(role, pool.position, lay) for role, pool, lay in found[1]])
        return found
