"""What a replica costs per hour where it is placed (scheduling.md, "Cheapest first").

A pool's node costs its InferenceClass's `pricePerNodeHour`. A pod takes a share of its
node: the largest of, per consumed device kind it asks for, the devices it takes over the
node's, and (where the class has an allocatable) its CPU and memory over the node's; at
most the whole node. A role costs its pods' shares times the price; a replica, its roles.
An unknown price (a class that states none) is infinite: such a pool comes after every
priced one, and a plan that uses one has no known cost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from modelplane.api.inference_class import InferenceClass
from modelplane.scheduler.capacity import Pool
from modelplane.scheduler.matching import ClassShape, PodDemand

UNKNOWN = math.inf


def pod_share(shape: ClassShape, demand: PodDemand) -> float:
    """The share of its node one pod of `demand` takes (0..1)."""
    share = 0.0
    for request in demand.requests:
        if request.kinds and shape.consumed[request.kinds[0]]:
            share = max(share, request.count / shape.counts[request.kinds[0]])
    if shape.resources and demand.resources:
        for need, has in zip(demand.resources, shape.resources, strict=True):
            if has > 0:
                share = max(share, need / has)
    return min(share, 1.0)


class PriceBook:
    """Prices per class, and what roles and replicas cost on pools."""

    def __init__(self, classes: Mapping[str, InferenceClass]) -> None:
        self.prices: dict[str, float] = {
            name: cls.spec.price_per_node_hour
            for name, cls in classes.items()
            if cls.spec.price_per_node_hour is not None
        }
        self._roles: dict[tuple[str, PodDemand], float] = {}

    @property
    def any(self) -> bool:
        """Whether some class states a price."""
        return bool(self.prices)

    def role(self, pool: Pool, demand: PodDemand) -> float:
        """What one role of a replica costs per hour on `pool` (UNKNOWN without a price)."""
        key = (pool.class_name, demand)
        hit = self._roles.get(key)
        if hit is None:
            price = self.prices.get(pool.class_name)
            hit = UNKNOWN if price is None else price * demand.pods * pod_share(pool.shape, demand)
            self._roles[key] = hit
        return hit

    def replica(self, placed: Iterable[tuple[Pool, PodDemand]]) -> float:
        """What a replica costs per hour, its roles on their pools (UNKNOWN if any is)."""
        return sum((self.role(pool, demand) for pool, demand in placed), 0.0)


def rounded(cost: float) -> float | None:
    """A cost as plans show it: cents, or None when unknown."""
    return None if math.isinf(cost) else round(cost, 2)
