"""The node ledger: which devices of which node of a pool each placed role uses.

A pool's layout is a pure function of the set of role instances ("items") on
it: they are packed in one canonical order (`Item.order`: priority first,
then larger pods, then more pods, then deployment key, replica index and
role), each pod on the node it fits most tightly (fewest consumed devices
left on that node afterwards, ties to the lowest node), the pods of one
worker on distinct nodes. When that leaves an item out and some item is a
multi-node worker, two more rules are tried: the pods of multi-node workers on
the roomiest nodes instead, then every pod on the roomiest node (worst fit,
which keeps room on as many nodes as possible for the workers that need
distinct nodes); the first rule that seats the most is used. Because the
layout never depends on the order replicas were placed in, a lock produced by
one run is re-charged identically by the next one, so what fitted still fits.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import NamedTuple

from modelplane.scheduler.matching import ClassShape, PodDemand, Request, take_from_node, take_pod

ItemOrder = tuple[int, int, int, str, int, int]
RULES = 3  # packing rules, see Pool.pack


class Item(NamedTuple):
    """One role of one replica, placed on one pool."""

    order: ItemOrder
    deployment: str
    index: int
    role: str
    demand: PodDemand

    @staticmethod
    def make(
        priority: int, deployment: str, index: int, role: str, role_pos: int, demand: PodDemand
    ) -> Item:
        order = (-priority, -demand.devices_per_pod, -demand.pods, deployment, index, role_pos)
        return Item(order, deployment, index, role, demand)


def _order(item: Item) -> ItemOrder:
    return item.order


@dataclass
class Layout:
    """Items on a pool (in canonical order) and the devices left on each node.

    Only the nodes packing has touched have rows: nodes `len(free)` .. `nodes - 1` are
    untouched (empty), so a layout's size, and the work of packing onto it, follow what
    is placed, not the pool's node count. Packing takes the lowest untouched node first
    (every tie goes to the lowest node), which keeps the untouched nodes a suffix."""

    items: list[Item]
    free: list[list[int]]  # per touched node, per device kind (Synthetic kinds stay at full
    # count), then cpu and memory when the class has an allocatable (ClassShape.row)
    node_free: list[int]  # per touched node, consumed (DRA) devices left
    free_total: int  # consumed (DRA) devices left in the pool: the pool's "room"
    least_used: int = 0  # what the items consume at least, however they are packed
    rule: int = 0  # the packing rule it was packed by (see Pool.pack)
    key: int = -1  # a number for its items, set by the scheduler (Interner.layout_id)
    sig: int = -1  # a number for its rule and demand sequence (Interner.sig): layouts
    # with the same one have the same free rows, whichever deployments hold the items
    nodes: int = 0  # the pool's nodes, touched or not
    full: int = 0  # the leading nodes with no consumed device left (skipped by packing)

    @property
    def untouched(self) -> int:
        return self.nodes - len(self.free)

    def copy(self) -> Layout:
        return Layout(
            list(self.items),
            [row[:] for row in self.free],
            self.node_free[:],
            self.free_total,
            self.least_used,
            self.rule,
            nodes=self.nodes,
            full=self.full,
        )


def _whole(per_node: list[int], k: int, more: int = 0, each: int = 0) -> int:
    """Workers of `k` pods on distinct nodes that nodes seating `per_node` pods, and `more`
    nodes seating `each`, hold."""
    workers = (sum(per_node) + more * each) // k
    if k > 1:
        while (
            workers
            and sum(min(n, workers) for n in per_node) + more * min(each, workers) < k * workers
        ):
            workers -= 1
    return workers


class Pool:
    """One node pool of one cluster: its node shape and its current layout."""

    def __init__(
        self,
        cluster: str,
        name: str,
        position: int,
        class_name: str,
        shape: ClassShape | None,
        nodes: int,
        row_memo: dict[tuple[int, tuple[int, ...]], int] | None = None,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.position = position  # order in the cluster's nodePools
        self.class_name = class_name
        self.shape = shape or ClassShape((), ())
        self.nodes = nodes if shape is not None else 0
        self.capacity = self.shape.consumed_per_node * self.nodes
        self._fresh = self.shape.row()  # an untouched node's row (never mutated)
        self._fresh_take: dict[PodDemand, tuple[dict[int, int] | None, int]] = {}
        self.layout = self.empty()
        # Pools whose layout changed, when someone keeps count (scheduler.survive's undo).
        self.journal: list[Pool] | None = None
        # Exact memos for the current layout: (demand, insertion position) that do not
        # fit, and free nodes per demand. Packing depends only on the demands in order.
        self._misfits: set[tuple[PodDemand, int]] = set()
        self._free_nodes: dict[PodDemand, int] = {}
        # Pods of a request list that fit on a node with a given free row (layout-free).
        # Keys use id(requests): every request tuple is held by the run's Matcher. The
        # count depends on the node shape only: pools of one class may share `row_memo`.
        self._pods_per_row: dict[tuple[int, tuple[int, ...]], int] = (
            {} if row_memo is None else row_memo
        )
        self._room: dict[tuple[int, int], int] = {}  # whole workers, current layout
        self._rows: dict[int, list[int]] = {}  # pods per node, current layout

    def set_layout(self, layout: Layout) -> None:
        if self.journal is not None:
            self.journal.append(self)
        self.layout = layout
        self._misfits.clear()
        self._free_nodes.clear()
        self._room.clear()
        self._rows.clear()

    def empty(self) -> Layout:
        return Layout(
            items=[],
            free=[],
            node_free=[],
            free_total=self.shape.consumed_per_node * self.nodes,
            nodes=self.nodes,
        )

    def pack(self, items: list[Item]) -> tuple[Layout, list[Item]]:
        """Pack `items` in canonical order from empty; returns the layout and what did not fit.

        Rule 0: every pod on the node it fits most tightly. When that leaves something
        out and some item is a multi-node worker, rule 1 (the pods of such a worker on the
        roomiest nodes) and rule 2 (every pod on the roomiest node) are tried too; the
        first rule that seats the most is kept. The layout returned is always what `pack`
        gives for the items it holds."""
        layout, failed = self._best(items)
        if failed and layout.rule:
            layout, _ = self._best(layout.items)
        return layout, failed

    def _best(self, items: list[Item]) -> tuple[Layout, list[Item]]:
        layout, failed = self._pack(items, rule=0)
        if failed and any(i.demand.pods_per_worker > 1 for i in items):
            for rule in range(1, RULES):
                other, failed_other = self._pack(items, rule=rule)
                if len(failed_other) < len(failed):
                    layout, failed = other, failed_other
                    if not failed:
                        break
        return layout, failed

    def _pack(self, items: list[Item], rule: int) -> tuple[Layout, list[Item]]:
        layout = self.empty()
        layout.rule = rule
        failed: list[Item] = []
        for item in sorted(items, key=_order):
            if self._place(layout, item):
                layout.items.append(item)
                layout.least_used += item.demand.least_consumed
            else:
                failed.append(item)
        return layout, failed

    def may_fit(self, layout: Layout, demand: PodDemand) -> bool:
        """False when `layout` surely has no room for `demand` (a cheap bound)."""
        return self.capacity - layout.least_used >= demand.least_consumed

    def with_item(self, layout: Layout, item: Item) -> Layout | None:
        """`layout` plus `item`, packed canonically, or None if anything would not fit."""
        if not self.may_fit(layout, item.demand):
            return None
        position = bisect_left(layout.items, item.order, key=_order)
        memo = (item.demand, position)
        current = layout is self.layout
        if current and memo in self._misfits:
            return None
        trial: Layout | None = None
        if position == len(layout.items):
            # Sorts last: packing on top, by the layout's own rule, is canonical.
            trial = layout.copy()
            if self._place(trial, item):
                trial.items.append(item)
                trial.least_used += item.demand.least_consumed
            else:
                trial = None
        if trial is None and (
            position < len(layout.items)
            or (
                layout.rule < RULES - 1
                and (
                    item.demand.pods_per_worker > 1
                    or any(i.demand.pods_per_worker > 1 for i in layout.items)
                )
            )
        ):
            trial, failed = self.pack([*layout.items, item])
            trial = None if failed else trial
        if trial is None and current:
            self._misfits.add(memo)
        return trial

    def without(self, deployment: str, index: int) -> list[Item]:
        """Remove a replica's items and repack; returns items that no longer fit (rare)."""
        remaining = [
            i for i in self.layout.items if not (i.deployment == deployment and i.index == index)
        ]
        if len(remaining) == len(self.layout.items):
            return []
        layout, failed = self.pack(remaining)
        self.set_layout(layout)
        return failed

    def free_nodes(self, demand: PodDemand) -> int:
        """Nodes of the current layout with room for one more pod of `demand`."""
        hit = self._free_nodes.get(demand)
        if hit is None:
            hit = self._nodes_fitting(self.layout, demand)
            self._free_nodes[demand] = hit
        return hit

    def device_nodes(self, demand: PodDemand) -> int:
        """Nodes of the current layout with the devices for one more pod of `demand`,
        whatever their CPU and memory."""
        layout = self.layout
        fresh = take_from_node(demand.requests, self._fresh) is not None
        return sum(1 for row in layout.free if take_from_node(demand.requests, row) is not None) + (
            layout.untouched if fresh else 0
        )

    def nodes_with_room(self, layout: Layout, demand: PodDemand) -> int:
        """Nodes of `layout` with room for one more pod of `demand`."""
        if layout is self.layout:
            return self.free_nodes(demand)
        return self._nodes_fitting(layout, demand)

    def _nodes_fitting(self, layout: Layout, demand: PodDemand) -> int:
        touched = sum(1 for row in layout.free if take_pod(demand, row) is not None)
        return touched + (layout.untouched if self._take_fresh(demand)[0] is not None else 0)

    def _take_fresh(self, demand: PodDemand) -> tuple[dict[int, int] | None, int]:
        """What one pod of `demand` takes of an untouched node, and the consumed devices."""
        hit = self._fresh_take.get(demand)
        if hit is None:
            take = take_pod(demand, self._fresh)
            consumed, kinds = self.shape.consumed, len(self.shape.consumed)
            used = sum(n for k, n in take.items() if k < kinds and consumed[k]) if take else 0
            hit = self._fresh_take[demand] = (take, used)
        return hit

    def room_for(
        self,
        layout: Layout,
        requests: tuple[Request, ...],
        k: int,
        size: int,
        base: Layout | None = None,
    ) -> int:
        """Devices that more workers of `k` pods of `requests` (`size` devices each) could
        take on `layout`: as many whole workers as the nodes seat, each worker's pods on
        distinct nodes. `base`, the current layout, lends the counts of nodes that
        `layout` did not change."""
        each = self._pods_on_row(requests, self._fresh)
        if layout is self.layout:
            key = (id(requests), k)  # requests live as long as the run's matcher
            hit = self._room.get(key)
            if hit is None:
                hit = _whole(self._per_node(requests), k, layout.untouched, each)
                self._room[key] = hit
            return hit * k * size
        if base is self.layout:
            known = len(base.free)
            per_node = self._per_node(requests)[: len(layout.free)]
            for node, row in enumerate(layout.free):
                if node >= known:
                    per_node.append(self._pods_on_row(requests, row))
                elif layout.node_free[node] != base.node_free[node] or row != base.free[node]:
                    per_node[node] = self._pods_on_row(requests, row)
        else:
            per_node = [self._pods_on_row(requests, row) for row in layout.free]
        return _whole(per_node, k, layout.untouched, each) * k * size

    def _per_node(self, requests: tuple[Request, ...]) -> list[int]:
        """Per node of the current layout, how many more pods of `requests` it seats."""
        hit = self._rows.get(id(requests))
        if hit is None:
            hit = self._rows[id(requests)] = [
                self._pods_on_row(requests, row) for row in self.layout.free
            ]
        return hit

    def pods_with_room(self, layout: Layout, demand: PodDemand) -> int:
        """How many more single pods of `demand` the nodes of `layout` have room for."""
        touched = sum(self._pods_on_row(demand.requests, row) for row in layout.free)
        return touched + layout.untouched * self._pods_on_row(demand.requests, self._fresh)

    def _pods_on_row(self, requests: tuple[Request, ...], row: list[int]) -> int:
        memo = self._pods_per_row
        key = (id(requests), tuple(row))
        hit = memo.get(key)
        if hit is None:
            hit = 0
            left = row[:]
            consumed = self.shape.consumed
            while (take := take_from_node(requests, left)) is not None:
                hit += 1
                used = [(k, n) for k, n in take.items() if consumed[k]]
                if not used:
                    break  # only matched devices: one pod stands for any number
                for k, n in used:
                    left[k] -= n
            memo[key] = hit
        return hit

    def _place(self, layout: Layout, item: Item) -> bool:
        """Place every pod of `item` on `layout` (mutated); on failure leave it unchanged."""
        demand = item.demand
        consumed = self.shape.consumed
        kinds = len(consumed)
        free, node_free = layout.free, layout.node_free
        undo: list[tuple[int, dict[int, int], int]] = []
        roomiest = layout.rule == 2 or (layout.rule == 1 and demand.pods_per_worker > 1)
        fresh_take, fresh_used = self._take_fresh(demand)
        fresh_left = self.shape.consumed_per_node - fresh_used
        # A node with fewer consumed devices left than a pod surely takes is skipped unseen.
        least = demand.least_consumed // demand.pods if demand.pods else 0
        for _ in range(demand.workers):
            used_nodes: set[int] = set()
            for _ in range(demand.pods_per_worker):
                best = -1
                best_left = 0
                best_take: dict[int, int] = {}
                best_used = 0
                for node in range(layout.full if least else 0, len(free)):
                    if node_free[node] < least or node in used_nodes:
                        continue
                    row = free[node]
                    take = take_pod(demand, row)
                    if take is None:
                        continue
                    used = 0
                    for k, n in take.items():
                        if k < kinds and consumed[k]:
                            used += n
                    left = node_free[node] - used
                    if best < 0 or (left > best_left if roomiest else left < best_left):
                        best, best_left, best_take, best_used = node, left, take, used
                        if not left and not roomiest:
                            break  # an exact fit: no later node is tighter
                # The lowest untouched node stands for all of them (they are alike, and a
                # tie goes to the lowest node): touched only when it is the best.
                exact = best >= 0 and not best_left and not roomiest
                if fresh_take is not None and len(free) < layout.nodes and not exact:
                    left = fresh_left
                    if best < 0 or (left > best_left if roomiest else left < best_left):
                        best, best_left, best_take, best_used = (
                            len(free),
                            left,
                            fresh_take,
                            fresh_used,
                        )
                        free.append(self._fresh[:])
                        node_free.append(self.shape.consumed_per_node)
                if best < 0:
                    for node, take, used in reversed(undo):
                        self._apply(layout, node, take, used, sign=+1)
                    return False
                self._apply(layout, best, best_take, best_used, sign=-1)
                undo.append((best, best_take, best_used))
                used_nodes.add(best)
        return True

    def _apply(self, layout: Layout, node: int, take: dict[int, int], used: int, sign: int) -> None:
        """Take (sign -1) or give back (sign +1) one pod's devices, cpu and memory on `node`."""
        consumed = self.shape.consumed
        kinds = len(consumed)
        row = layout.free[node]
        for kind, n in take.items():
            if kind >= kinds or consumed[kind]:
                row[kind] += sign * n
        node_free = layout.node_free
        node_free[node] += sign * used
        layout.free_total += sign * used
        if sign > 0:
            layout.full = min(layout.full, node)
        else:
            full = layout.full
            while full < len(node_free) and not node_free[full]:
                full += 1
            layout.full = full
