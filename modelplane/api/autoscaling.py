"""ModelDeployment `spec.autoscaling`: the bounds, metrics and behaviour of the replica count."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator

from modelplane.api.base import Strict, no_repeats

MetricType = Literal["queueDepth", "runningRequests", "kvCacheUsage", "requestRate"]
METRIC_TYPES: tuple[MetricType, ...] = (
    "queueDepth",
    "runningRequests",
    "kvCacheUsage",
    "requestRate",
)
MAX_DURATION = 3600.0

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(value: object) -> float:
    """`30s`, `5m`, `1h`, `1m30s`, `250ms` or a number of seconds, 0..1h."""
    if isinstance(value, bool):
        raise ValueError("a duration is a string like 30s, 5m, 1m30s or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        raw = value.strip()
        try:
            seconds = float(raw)
        except ValueError:
            parts = _PART.findall(raw)
            if not parts or "".join(n + u for n, u in parts) != raw:
                raise ValueError(
                    f"{value!r} is not a duration (e.g. 30s, 5m, 1m30s, or seconds)"
                ) from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise ValueError("a duration is a string like 30s, 5m, 1m30s or a number of seconds")
    if not 0 <= seconds <= MAX_DURATION:
        raise ValueError(f"{value!r} is outside 0s..1h")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


class AutoscalingMetric(Strict):
    type: MetricType
    """queueDepth, runningRequests, kvCacheUsage or requestRate (per replica)."""
    target: float = Field(gt=0, le=1e6)
    """The per-replica value to hold (> 0; kvCacheUsage at most 1)."""


class ScalingBehavior(Strict):
    stabilization_window: Duration
    """How far back recommendations are considered (30s, 5m, ...; at most 1h)."""
    max_step: int = Field(ge=1, le=1000)
    """At most this many replicas per step."""


class UpBehavior(ScalingBehavior):
    stabilization_window: Duration = 0.0
    """Scaling up takes the lowest recommendation of this window (default 0s)."""
    max_step: int = Field(default=4, ge=1, le=1000)
    """At most this many replicas added per step (default 4)."""


class DownBehavior(ScalingBehavior):
    stabilization_window: Duration = 300.0
    """Scaling down takes the highest recommendation of this window (default 5m)."""
    max_step: int = Field(default=1, ge=1, le=1000)
    """At most this many replicas removed per step (default 1)."""


class Autoscaling(Strict):
    min_replicas: int = Field(ge=0, le=1000)
    """The lowest replica count (0: scale to zero after `idleWindow` without a request, and
    wake on a request by model name)."""
    max_replicas: int = Field(ge=1, le=1000)
    """The highest replica count (<= 1000)."""
    metrics: list[AutoscalingMetric] = Field(min_length=1, max_length=4)
    """What to scale on (1..4, each type at most once); the highest recommendation wins."""
    tolerance: float = Field(default=0.1, ge=0, lt=1)
    """|observed/target - 1| within this holds the count (default 0.1)."""
    scale_up: UpBehavior = Field(default_factory=UpBehavior)
    """How fast to scale up."""
    scale_down: DownBehavior = Field(default_factory=DownBehavior)
    """How fast to scale down."""
    drain_timeout: Duration = 60.0
    """Longest wait for in-flight requests on scale-in (default 60s)."""
    idle_window: Duration = 600.0
    """With `minReplicas: 0`: no request for this long scales the deployment to zero
    (default 10m, at least 10s)."""

    @field_validator("metrics")
    @classmethod
    def _unique_types(cls, metrics: list[AutoscalingMetric]) -> list[AutoscalingMetric]:
        no_repeats((m.type for m in metrics), "each metric type at most once")
        return metrics

    def clamp(self, count: int) -> int:
        return max(self.min_replicas, min(self.max_replicas, count))


def autoscaling_problems(auto: Autoscaling, replicas: int) -> list[tuple[str, str]]:
    """Cross-field rules (relative to `spec`), every one at once."""
    problems: list[tuple[str, str]] = []
    if auto.min_replicas > auto.max_replicas:
        problems.append(
            (
                "autoscaling.minReplicas",
                f"minReplicas ({auto.min_replicas}) is greater than maxReplicas "
                f"({auto.max_replicas})",
            )
        )
    if not auto.min_replicas <= replicas <= auto.max_replicas:
        problems.append(
            (
                "replicas",
                f"replicas ({replicas}) must be within autoscaling "
                f"[minReplicas {auto.min_replicas}, maxReplicas {auto.max_replicas}]",
            )
        )
    if auto.idle_window < 10:
        problems.append(
            (
                "autoscaling.idleWindow",
                f"idleWindow must be at least 10s, got {auto.idle_window:g}s",
            )
        )
    for i, metric in enumerate(auto.metrics):
        if metric.type == "kvCacheUsage" and metric.target > 1:
            problems.append(
                (
                    f"autoscaling.metrics[{i}].target",
                    f"kvCacheUsage is a fraction: target must be <= 1, got {metric.target}",
                )
            )
    return problems


__all__ = [
    "METRIC_TYPES",
    "Autoscaling",
    "AutoscalingMetric",
    "DownBehavior",
    "MetricType",
    "UpBehavior",
    "parse_duration",
]
