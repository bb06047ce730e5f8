"""Autoscaling decisions (api.md, "Autoscaling"): pure HPA math, no I/O, no clock.

    decision = decide(auto, current, placed, values, history, now)

`values` holds, per placed replica, its metric values (`None`: no metrics, with the reason
in `missing`); `history` the recommendations of earlier rounds (`(time, count)`), which
`decide` returns updated for the caller to keep.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from modelplane.api.autoscaling import Autoscaling

History = tuple[tuple[float, int], ...]


@dataclass(frozen=True)
class MetricReading:
    """One metric over a deployment: the mean per replica and what it recommends."""

    type: str
    target: float
    observed: float | None  # mean per placed replica (None: no replica reported it)
    recommendation: int | None  # None: no value at all

    def as_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "target": self.target,
            "observed": None if self.observed is None else round(self.observed, 3),
            "recommendation": self.recommendation,
        }

    def describe(self) -> str:
        seen = "-" if self.observed is None else f"{self.observed:.3g}"
        return f"{self.type} {seen}/{self.target:g}"


@dataclass(frozen=True)
class Decision:
    current: int
    recommendation: int  # this round's, before the stabilization windows and steps
    desired: int
    readings: tuple[MetricReading, ...] = ()
    notes: tuple[str, ...] = ()  # why a scale-in was held, missing metrics, ...
    history: History = field(default=(), compare=False)

    @property
    def changed(self) -> bool:
        return self.desired != self.current

    def as_json(self) -> dict[str, Any]:
        return {
            "from": self.current,
            "to": self.desired,
            "recommendation": self.recommendation,
            "metrics": [r.as_json() for r in self.readings],
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        return ", ".join(r.describe() for r in self.readings)


def counter_rate(
    previous: tuple[float, float] | None, now: float, value: float | None
) -> float | None:
    """Per-second increase of a counter since `previous` (time, value); None when unknown
    (no previous sample, no time passed, or the counter went back: a restart)."""
    if previous is None or value is None:
        return None
    then, before = previous
    if now <= then or value < before:
        return None
    return (value - before) / (now - then)


def _metric(
    auto: Autoscaling,
    kind: str,
    target: float,
    current: int,
    placed: Sequence[str],
    values: Mapping[str, Mapping[str, float] | None],
) -> tuple[MetricReading, bool]:
    """The reading and whether some placed replica had no value for it."""
    got = [(values.get(r) or {}).get(kind) for r in placed]
    known = [v for v in got if v is not None]
    if not placed or not known:
        return MetricReading(kind, target, None, None), bool(placed)
    missing = len(known) < len(placed)
    observed = sum(known) / len(placed)  # missing counts 0 (scale-up only, see decide)
    ratio = observed / target
    if abs(ratio - 1.0) <= auto.tolerance:
        recommendation = current
    else:
        recommendation = math.ceil(len(placed) * ratio - 1e-9)
    return MetricReading(kind, target, observed, recommendation), missing


def decide(
    auto: Autoscaling,
    current: int,
    placed: Sequence[str],
    values: Mapping[str, Mapping[str, float] | None],
    history: Sequence[tuple[float, int]],
    now: float,
    missing: Mapping[str, str] | None = None,
) -> Decision:
    """The new count of an autoscaled deployment.

    current: its count (the lock's, clamped); placed: its replicas that serve (not
    draining); values: metric values per replica (`queueDepth`, `runningRequests`,
    `kvCacheUsage`, `requestRate`); missing: why a replica has none."""
    missing = dict(missing or {})
    current = auto.clamp(current)
    notes: list[str] = []
    readings: list[MetricReading] = []
    recommendations: list[int] = []
    incomplete = sorted(r for r in placed if values.get(r) is None)
    for metric in auto.metrics:
        reading, _ = _metric(auto, metric.type, metric.target, current, placed, values)
        readings.append(reading)
        if reading.recommendation is not None:
            recommendations.append(reading.recommendation)
    if not placed:
        notes.append("no replica serves yet: holding the count")
        raw = current
    elif not recommendations:
        notes.append("no metrics from any replica: holding the count")
        raw = current
    else:
        raw = max(recommendations)
    raw = auto.clamp(raw)
    if raw < current and incomplete:
        why = "; ".join(f"{r}: {missing.get(r, 'no metrics')}" for r in incomplete)
        notes.append(f"no scale-in: missing metrics ({why})")
        raw = current
    elif incomplete:
        notes.append(
            "missing metrics (counted 0): "
            + "; ".join(f"{r}: {missing.get(r, 'no metrics')}" for r in incomplete)
        )
    up, down = auto.scale_up, auto.scale_down
    keep = max(up.stabilization_window, down.stabilization_window)
    kept = [(t, r) for t, r in history if 0 <= now - t <= keep and t < now]
    window = [*kept, (now, raw)]
    up_rec = min(r for t, r in window if now - t <= up.stabilization_window)
    down_rec = max(r for t, r in window if now - t <= down.stabilization_window)
    desired = current
    if desired < up_rec:
        desired = min(up_rec, current + up.max_step)
    if desired > down_rec:
        desired = max(down_rec, current - down.max_step)
    desired = auto.clamp(desired)
    if raw < current and desired == current:
        notes.append(
            f"scale-in to {raw} held by the {down.stabilization_window:g}s stabilization window"
        )
    if raw > current and desired == current:
        notes.append(
            f"scale-out to {raw} held by the {up.stabilization_window:g}s stabilization window"
        )
    return Decision(
        current=current,
        recommendation=raw,
        desired=desired,
        readings=tuple(readings),
        notes=tuple(notes),
        history=tuple(window),
    )


def replica_values(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """A replica's metric values from its serving pods' vLLM samples (`parse_metrics`):
    sums, except `kvCacheUsage` (the highest); `requestSuccess` is the counter (summed)."""
    out: dict[str, float] = {}
    sums = {
        "queueDepth": "vllm:num_requests_waiting",
        "runningRequests": "vllm:num_requests_running",
        "requestSuccess": "vllm:request_success_total",
    }
    for kind, name in sums.items():
        found = [s[name] for s in samples if name in s]
        if found:
            out[kind] = float(sum(found))
    usage = [s["vllm:gpu_cache_usage_perc"] for s in samples if "vllm:gpu_cache_usage_perc" in s]
    if usage:
        out["kvCacheUsage"] = float(max(usage))
    return out


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {metric name: value summed over its label sets}.

    Only the names vLLM exports matter; comments, timestamps and malformed lines are
    skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            _, _, rest = rest.rpartition("}")
        else:
            name, _, rest = line.partition(" ")
        parts = rest.split()
        if not name or not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[name.strip()] = out.get(name.strip(), 0.0) + value
    return out


__all__ = [
    "Decision",
    "History",
    "MetricReading",
    "counter_rate",
    "decide",
    "parse_metrics",
    "replica_values",
]
