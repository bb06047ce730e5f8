"""ModelDeployment `spec.rollout`: how a change of the pod template reaches the replicas."""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from modelplane.api.autoscaling import Duration
from modelplane.api.base import DNSLabel, LabelSelector, Strict

_PERCENT = re.compile(r"^(\d{1,3})%$")


def _count_or_percent(value: int | str) -> int | str:
    if isinstance(value, str):
        match = _PERCENT.match(value)
        if match is None or int(match.group(1)) > 100:
            raise ValueError(f"{value!r} is neither a count nor a percentage like 25%")
    elif value < 0 or value > 1000:
        raise ValueError(f"{value} is outside 0..1000")
    return value


def _no_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("a count (e.g. 1) or a percentage (e.g. 25%), not a boolean")
    return value


CountOrPercent = Annotated[int | str, BeforeValidator(_no_bool), AfterValidator(_count_or_percent)]


def resolve(value: int | str, total: int, *, round_up: bool) -> int:
    """A count, or a percentage of ``total`` (Kubernetes rounding: down for maxUnavailable,
    up for maxSurge)."""
    if isinstance(value, int):
        return value
    share = total * int(value.rstrip("%")) / 100
    return math.ceil(share) if round_up else math.floor(share)


class RolloutWave(Strict):
    """One wave: the clusters whose replicas change together, before the next wave's."""

    clusters: list[DNSLabel] = Field(default_factory=list, max_length=256)
    """InferenceClusters by name."""
    cluster_selector: LabelSelector | None = None
    """InferenceClusters by their labels."""

    @model_validator(mode="after")
    def _one_way(self) -> RolloutWave:
        if bool(self.clusters) == (self.cluster_selector is not None):
            raise ValueError("set either clusters or clusterSelector")
        return self


class RolloutAnalysis(Strict):
    """The gate after each step: the new revision's serving health against the old one's."""

    max_error_ratio_increase: float = Field(default=0.05, ge=0, le=1)
    """Halt and roll back when the new replicas' error ratio (5xx / requests) exceeds the old
    replicas' by more than this (default 0.05, i.e. 5 points)."""
    max_ttft_ratio: float = Field(default=1.5, ge=1, le=100)
    """Halt and roll back when the new replicas' mean time to first token exceeds this many times
    the old replicas' (default 1.5; differences under 50 ms are noise)."""
    min_requests: int = Field(default=20, ge=0, le=1_000_000)
    """Requests the new replicas must have answered before a verdict (default 20)."""
    window: Duration = 30.0
    """How long each step's new replicas are watched before the next step (default 30s)."""


class Rollout(Strict):
    strategy: Literal["Rolling", "AllAtOnce"] = "Rolling"
    """Rolling (default): replica by replica within the budget below; AllAtOnce: every replica
    in the same `up` (a replica's pods are replaced while it serves: requests fail)."""
    max_unavailable: CountOrPercent = 1
    """Replicas out of the routes at once: a count or a percentage of replicas, rounded down
    (default 1)."""
    max_surge: CountOrPercent = 0
    """Extra replicas placed on spare fleet capacity for the rollout's duration: a count or a
    percentage of replicas, rounded up (default 0)."""
    waves: list[RolloutWave] = Field(default_factory=list, max_length=64)
    """Optional order: the clusters of each wave change before the next wave's; replicas on
    clusters no wave names form a last wave."""
    analysis: RolloutAnalysis | None = None
    """The analysis gate (absent: no gate, a step only waits for Readiness)."""
    prefill_decode_compatible: bool = False
    """Prefill/decode: let a replica whose prefill and decode pods run different revisions
    serve (default false: it is out of the routes until both roles run the same one)."""

    @model_validator(mode="after")
    def _progress(self) -> Rollout:
        if self.max_unavailable in (0, "0%") and self.max_surge in (0, "0%"):
            raise ValueError("maxUnavailable and maxSurge cannot both be 0 (no step could start)")
        return self

    def budget(self, replicas: int) -> tuple[int, int]:
        """(maxUnavailable, maxSurge) as counts for ``replicas``; like Kubernetes, at least
        one of them is 1 or more."""
        unavailable = resolve(self.max_unavailable, replicas, round_up=False)
        surge = resolve(self.max_surge, replicas, round_up=True)
        if unavailable == 0 and surge == 0:
            unavailable = 1
        return unavailable, surge


__all__ = ["CountOrPercent", "Rollout", "RolloutAnalysis", "RolloutWave", "resolve"]
