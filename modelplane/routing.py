"""ModelService routing weights (api.md "Weights"), pure integer arithmetic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from math import gcd

MAX_WEIGHT = 1_000_000


@dataclass(frozen=True)
class WeightedGroup:
    """One ModelService endpoint entry: its weight and the endpoints it selected (in order)."""

    weight: int
    endpoints: Sequence[str]


def endpoint_weights(groups: Sequence[WeightedGroup]) -> dict[str, int]:
    """Integer weight per endpoint key, in first-seen order.

    An endpoint selected by several entries belongs to the first; entries left
    with no endpoints are dropped. Each entry's `weight × scale` is split as
    evenly as possible over its endpoints (remainder to the first ones), with
    `scale` the smallest integer ≥ 1 that gives every endpoint at least 1; then
    everything is divided by the GCD and capped at 1,000,000 (each stays ≥ 1).
    """
    seen: set[str] = set()
    owned: list[tuple[int, list[str]]] = []
    for group in groups:
        mine = [e for e in group.endpoints if e not in seen]
        seen.update(mine)
        if mine:
            owned.append((group.weight, mine))
    if not owned:
        return {}
    scale = max(1, max(-(-len(eps) // w) for w, eps in owned))
    weights: dict[str, int] = {}
    for weight, eps in owned:
        share, rest = divmod(weight * scale, len(eps))
        for i, ep in enumerate(eps):
            weights[ep] = share + (1 if i < rest else 0)
    divisor = reduce(gcd, weights.values())
    weights = {k: v // divisor for k, v in weights.items()}
    top = max(weights.values())
    if top > MAX_WEIGHT:
        weights = {k: max(1, v * MAX_WEIGHT // top) for k, v in weights.items()}
    return weights
