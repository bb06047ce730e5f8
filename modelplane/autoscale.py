"""Autoscaling decisions (api.md, "Autoscaling"): pure HPA math, no I/O, no clock.

    decision = decide(auto, current, placed, values, history, now)

`values` holds, per placed replica, its metric values (`None`: no metrics, with the reason
in `missing`); `history` the recommendations of earlier rounds (`(time, count)`), which
`decide` returns updated for the caller to keep.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from modelplane.api.autoscaling import Autoscaling
from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import LockedDeployment, PlacementLock
from modelplane.health.observation import Observation
from modelplane.wake import active_deployments, to_wake

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
    # per replica with metrics: where they came from ("prometheus" | "pod-proxy"), and
    # why not from Prometheus (replicas read through the pod proxy)
    sources: tuple[tuple[str, str], ...] = ()
    fallbacks: tuple[tuple[str, str], ...] = ()

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
            "metricsSource": dict(self.sources),
            "metricsFallback": dict(self.fallbacks),
        }

    def source(self) -> str:
        """The metrics' sources in one word: `prometheus`, `pod-proxy`, `mixed` or `none`."""
        found = {s for _, s in self.sources}
        return found.pop() if len(found) == 1 else ("mixed" if found else "none")

    def describe(self) -> str:
        return ", ".join(r.describe() for r in self.readings) + f"; metrics: {self.source()}"


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
    if current > 0:
        raw = max(raw, 1)  # the load never scales to zero; only the idle window does
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
    earlier = sorted((t, r) for t, r in history if t < now)
    window = [(t, r) for t, r in earlier if now - t <= keep] + [(now, raw)]
    up_rec = min(r for t, r in window if now - t <= up.stabilization_window)
    opened = now - down.stabilization_window
    down_recs = [r for t, r in window if t >= opened]
    # A recommendation holds until the next one: the one in effect when the down window
    # opened counts too, so a round that waited on a long `up` never shortens the window.
    before = [(t, r) for t, r in earlier if t < opened]
    after = [t for t, _ in window if t >= opened]
    if down.stabilization_window > 0 and before and after[0] > opened:
        down_recs.append(before[-1][1])
        window = sorted({before[-1], *window})
    down_rec = max(down_recs)
    desired = current
    if desired < up_rec:
        desired = min(up_rec, current + up.max_step)
    if desired > down_rec:
        desired = max(down_rec, current - down.max_step)
    desired = auto.clamp(desired)
    if current > 0:
        desired = max(desired, 1)
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


HTTP_REQUESTS = "http_requests_total"
HTTP_ERRORS = "http_requests_total:5xx"  # the 5xx answers among them (parse_metrics)


_SUMMED = {
    "queueDepth": "vllm:num_requests_waiting",
    "runningRequests": "vllm:num_requests_running",
    "requestSuccess": "vllm:request_success_total",
    # The serving health a rollout's analysis compares (modelplane.rollout.ServingHealth).
    "requests": HTTP_REQUESTS,
    "errors": HTTP_ERRORS,
    "ttftSum": "vllm:time_to_first_token_seconds_sum",
    "ttftCount": "vllm:time_to_first_token_seconds_count",
}
_HIGHEST = {"kvCacheUsage": "vllm:gpu_cache_usage_perc"}


def replica_values(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """A replica's metric values from its serving pods' vLLM samples (`parse_metrics`):
    sums, except `kvCacheUsage` (the highest); `requestSuccess` is the counter (summed)."""
    out: dict[str, float] = {}
    for kinds, combine in ((_SUMMED, sum), (_HIGHEST, max)):
        for kind, name in kinds.items():
            found = [s[name] for s in samples if name in s]
            if found:
                out[kind] = float(combine(found))
    return out


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {metric name: value summed over its label sets}.

    Only the names vLLM exports matter; comments, timestamps, malformed lines and values
    that are negative or not finite are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels = ""
        if "{" in line:
            name, _, rest = line.partition("{")
            labels, _, rest = rest.rpartition("}")
        else:
            name, _, rest = line.partition(" ")
        parts = rest.split()
        if not name or not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if not math.isfinite(value) or value < 0:
            continue  # NaN, +Inf, a negative gauge: no engine reports them (security M9)
        out[name.strip()] = out.get(name.strip(), 0.0) + value
        if name.strip() == HTTP_REQUESTS and 'status="5' in labels:
            out[HTTP_ERRORS] = out.get(HTTP_ERRORS, 0.0) + value
    return out


DRAIN_SETTLE = 2.0  # seconds after the routes changed before an idle replica counts drained


@dataclass
class AutoscaleState:
    """What `reconcile` remembers between rounds (`.modelplane/autoscale.json`)."""

    history: dict[str, History] = field(default_factory=dict)  # deployment -> recommendations
    counters: dict[str, tuple[float, float]] = field(default_factory=dict)  # replica -> sample
    routes_gone: dict[str, float] = field(default_factory=dict)  # draining replica -> since
    # deployment (minReplicas 0) -> when a request was last seen for it (the idle clock)
    active: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "history": {k: [list(h) for h in v] for k, v in sorted(self.history.items())},
            "counters": {k: list(v) for k, v in sorted(self.counters.items())},
            "routesGone": dict(sorted(self.routes_gone.items())),
            "active": dict(sorted(self.active.items())),
        }

    @staticmethod
    def from_json(data: Any) -> AutoscaleState:
        state = AutoscaleState()
        if not isinstance(data, dict):
            return state
        try:
            state.history = {
                str(k): tuple((float(t), int(r)) for t, r in v)
                for k, v in (data.get("history") or {}).items()
            }
            state.counters = {
                str(k): (float(v[0]), float(v[1])) for k, v in (data.get("counters") or {}).items()
            }
            state.routes_gone = {
                str(k): float(v) for k, v in (data.get("routesGone") or {}).items()
            }
            state.active = {str(k): float(v) for k, v in (data.get("active") or {}).items()}
        except (TypeError, ValueError, IndexError):
            return AutoscaleState()
        return state


@dataclass
class FleetAutoscale:
    """One round's autoscaling: the lock to schedule from and what was decided."""

    lock: PlacementLock  # the previous lock with new counts, finished drains removed
    decisions: dict[str, Decision] = field(default_factory=dict)
    drained: dict[str, str] = field(default_factory=dict)  # replica -> why its drain ended
    state: AutoscaleState = field(default_factory=AutoscaleState)
    woken: dict[str, str] = field(default_factory=dict)  # deployment -> the model that woke it


def busy(sample: Mapping[str, float] | None) -> bool:
    """A replica's metrics show a request: finished since the last round, running or queued."""
    return sample is not None and any(
        sample.get(kind, 0) > 0 for kind in ("requestRate", "runningRequests", "queueDepth")
    )


def idle_for(
    auto: Autoscaling,
    current: int,
    serving: Sequence[str],
    values: Mapping[str, Mapping[str, float] | None],
    active: float,
    now: float,
) -> float | None:
    """Seconds the deployment has been idle when that is long enough to scale it to zero
    (`idleWindow`), else None. Every serving replica must report metrics: missing metrics
    are never idle."""
    if auto.min_replicas != 0 or current == 0 or not serving:
        return None
    if any(values.get(r) is None for r in serving):
        return None
    idle = now - active
    return idle if idle >= auto.idle_window else None


def autoscale_fleet(
    fleet: FleetSpec,
    lock: PlacementLock,
    observation: Observation,
    state: AutoscaleState,
    now: float,
    held: Mapping[str, int] | None = None,
) -> FleetAutoscale:
    """Decide every autoscaled deployment's count from the observed metrics, and end the
    drains that are over (no request in flight, or `drainTimeout` after the routes).
    ``held``: per model name, the requests the OpenAI router holds (wake on request)."""
    new_state = AutoscaleState(routes_gone=dict(state.routes_gone))
    deployments = dict(lock.deployments)
    out = FleetAutoscale(lock=lock)
    held = dict(held or {})
    waking = to_wake(fleet, lock, held)
    waited_for = active_deployments(fleet, held)
    seen_replicas: set[str] = set()
    for key, dep in fleet.deployments.items():
        auto = dep.spec.autoscaling
        locked = lock.deployments.get(key)
        if auto is None:
            continue
        replicas = list(locked.replicas) if locked else []
        values: dict[str, dict[str, float] | None] = {}
        missing: dict[str, str] = {}
        sources: dict[str, tuple[str, str]] = {}
        fallbacks: dict[str, tuple[str, str]] = {}
        for r in replicas:
            seen_replicas.add(r.name)
            cluster = observation.cluster(r.cluster)
            got = cluster.replicas.get(r.name) if cluster and cluster.reachable else None
            if cluster is None or not cluster.observed or not cluster.reachable:
                missing[r.name] = f"cluster {r.cluster} not observed"
                values[r.name] = None
                continue
            if got is None or got.metrics is None:
                missing[r.name] = (got.metrics_error if got else None) or "no pods"
                values[r.name] = None
                continue
            if got.metrics_source:
                sources[r.name] = (r.name, got.metrics_source)
            if got.metrics_fallback and got.metrics_source != "prometheus":
                fallbacks[r.name] = (r.name, got.metrics_fallback)
            sample = dict(got.metrics)
            success = sample.pop("requestSuccess", None)
            if success is not None:
                rate = counter_rate(state.counters.get(r.name), now, success)
                new_state.counters[r.name] = (now, success)
                if rate is not None:
                    sample["requestRate"] = rate
            values[r.name] = sample
        # Drains: over when the replica reports nothing in flight a little after its routes
        # went, or drainTimeout after them.
        kept = []
        for r in replicas:
            if not r.draining:
                kept.append(r)
                continue
            since = state.routes_gone.get(r.name)
            seen = values.get(r.name)
            idle = (
                seen is not None
                and not seen.get("runningRequests", 0)
                and not seen.get("queueDepth", 0)
            )
            if since is not None and now - since >= auto.drain_timeout:
                out.drained[r.name] = f"drain timeout ({auto.drain_timeout:g}s)"
            elif since is not None and idle and now - since >= DRAIN_SETTLE:
                out.drained[r.name] = "no requests in flight"
            else:
                kept.append(r)
        for name in out.drained:
            new_state.routes_gone.pop(name, None)
        serving = [r.name for r in replicas if not r.draining]
        current = auto.clamp(
            dep.spec.replicas
            if locked is None or locked.autoscaled_replicas is None
            else locked.autoscaled_replicas
        )
        decision = decide(
            auto,
            current,
            serving,
            {n: values.get(n) for n in serving},
            state.history.get(key, ()),
            now,
            {n: missing[n] for n in serving if n in missing},
        )
        decision = replace(
            decision,
            sources=tuple(sorted(src for n in serving if (src := sources.get(n)))),
            fallbacks=tuple(sorted(why for n in serving if (why := fallbacks.get(n)))),
        )
        if auto.min_replicas == 0:
            decision = _zero_rules(
                auto, key, decision, serving, values, state, new_state, now, waking, waited_for
            )
            if key in waking and decision.desired > 0:
                out.woken[key] = waking[key]
        out.decisions[key] = decision
        new_state.history[key] = decision.history
        if locked is None:
            locked_dep = LockedDeployment(autoscaled_replicas=decision.desired)
        else:
            locked_dep = locked.model_copy(
                update={"autoscaled_replicas": decision.desired, "replicas": kept}
            )
        deployments[key] = locked_dep
    new_state.routes_gone = {k: v for k, v in new_state.routes_gone.items() if k in seen_replicas}
    out.lock = lock.model_copy(update={"deployments": deployments})
    out.state = new_state
    return out


def _zero_rules(
    auto: Autoscaling,
    key: str,
    decision: Decision,
    serving: Sequence[str],
    values: Mapping[str, Mapping[str, float] | None],
    state: AutoscaleState,
    new_state: AutoscaleState,
    now: float,
    waking: Mapping[str, str],
    waited_for: set[str],
) -> Decision:
    """Scale to zero after `idleWindow` without a request; wake on a held request."""
    current = decision.current
    if key in waking:
        new_state.active[key] = now
        return replace(
            decision,
            desired=max(decision.desired, 1),
            notes=(*decision.notes, f"woken: requests held for model {waking[key]!r}"),
        )
    if current == 0:
        new_state.active[key] = now
        return replace(decision, notes=("scaled to zero: a request by model name wakes it",))
    active = state.active.get(key, now)
    if key in waited_for or any(busy(values.get(r)) for r in serving):
        active = now
    new_state.active[key] = active
    idle = idle_for(auto, current, serving, values, active, now)
    if idle is None or decision.desired > current:
        return decision
    return replace(
        decision,
        desired=0,
        notes=(
            *decision.notes,
            f"idle for {idle:.0f}s (idleWindow {auto.idle_window:g}s): scaling to zero",
        ),
    )


__all__ = [
    "AutoscaleState",
    "FleetAutoscale",
    "autoscale_fleet",
    "Decision",
    "History",
    "MetricReading",
    "counter_rate",
    "decide",
    "parse_metrics",
    "replica_values",
]
