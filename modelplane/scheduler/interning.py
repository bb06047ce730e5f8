"""Small numbers for the values the scheduler's memos compare often.

Speed machinery only: no rule of scheduling.md depends on these numbers. Equal values
get equal numbers for the life of one scheduling run, so memo keys stay small tuples of
ints instead of demands and item lists.
"""

from __future__ import annotations

from modelplane.scheduler.capacity import Layout
from modelplane.scheduler.matching import PodDemand

Ties = dict[tuple[int, int, int], set[int]]  # (priority, size, pods) -> demand ids


class Interner:
    """Numbers for demands (by value), layouts (by items) and layout signatures."""

    def __init__(self) -> None:
        self._demand_ids: dict[int, int] = {}  # id(demand) -> number
        self._demand_values: dict[PodDemand, int] = {}
        self.demands: list[PodDemand] = []  # by number
        self._held: list[PodDemand] = []  # so that an interned id is never reused in the run
        self._layout_ids: dict[tuple[object, ...], int] = {}
        self._sig_ids: dict[tuple[object, ...], int] = {}
        self.sig_ties: list[Ties] = []  # by signature

    def demand_id(self, demand: PodDemand) -> int:
        """A small number per distinct demand value (equal demands, equal numbers)."""
        hit = self._demand_ids.get(id(demand))  # demands live as long as the run's matcher
        if hit is None:
            hit = self._demand_values.get(demand)
            if hit is None:
                hit = self._demand_values[demand] = len(self.demands)
                self.demands.append(demand)
            self._demand_ids[id(demand)] = hit
            self._held.append(demand)
        return hit

    def layout_id(self, layout: Layout) -> int:
        """A small number per distinct item list (the same for equal layouts)."""
        if layout.key < 0:
            items = tuple((i.order, i.role, id(i.demand)) for i in layout.items)
            layout.key = self._layout_ids.setdefault(items, len(self._layout_ids))
        return layout.key

    def sig(self, layout: Layout) -> int:
        """A small number per (packing rule, demand sequence) of a layout: packing is a
        function of these, so layouts with the same number have the same free rows.
        `sig_ties[n]` holds, per (priority, size, pods) of its items, their demand ids."""
        if layout.sig < 0:
            demand_id = self.demand_id
            seq = tuple((*i.order[:3], demand_id(i.demand)) for i in layout.items)
            key = (layout.rule, seq)
            sig = self._sig_ids.get(key)
            if sig is None:
                sig = self._sig_ids[key] = len(self._sig_ids)
                ties: Ties = {}
                for o0, o1, o2, d in seq:
                    ties.setdefault((o0, o1, o2), set()).add(d)
                self.sig_ties.append(ties)
            layout.sig = sig
        return layout.sig
