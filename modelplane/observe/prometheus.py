"""The serving engines' metrics from a cluster's Prometheus (pure: no I/O here).

The serving stack's kube-prometheus-stack scrapes every serving pod (`engine_scrape_job`);
`reconcile` asks that Prometheus through the API server's service proxy
(`PROMETHEUS_PROXY`) for the last raw samples of the vLLM metrics of the replicas it
autoscales (`metrics_query`), and `parse_samples` turns the answer into per-pod samples.
A sample older than the staleness window (two reconcile intervals) is not returned, so a
pod whose scrapes stopped has no sample: it counts as missing, never as zero.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from modelplane.errors import EnvironmentProblem

#: The Prometheus the serving stack installs (kube-prometheus-stack, release
#: `mp-kube-prometheus-stack`, `fullnameOverride: prometheus` -> Service
#: `prometheus-prometheus`, port `http-web`) in namespace `monitoring`.
PROMETHEUS_NAMESPACE = "monitoring"
PROMETHEUS_SERVICE = "prometheus-prometheus"
PROMETHEUS_PORT_NAME = "http-web"
PROMETHEUS_PORT = 9090
PROMETHEUS_PROXY = (
    f"/api/v1/namespaces/{PROMETHEUS_NAMESPACE}/services/"
    f"{PROMETHEUS_SERVICE}:{PROMETHEUS_PORT_NAME}/proxy/api/v1/query"
)

ENGINE_JOB = "modelplane-engines"
#: Target labels the scrape job puts on every engine series.
REPLICA_TARGET_LABEL = "modelplane_ai_replica"
POD_TARGET_LABEL = "pod"
NAMESPACE_TARGET_LABEL = "namespace"

#: The vLLM metrics autoscaling reads (`modelplane.autoscale.replica_values`).
ENGINE_METRICS = (
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:gpu_cache_usage_perc",
    "vllm:request_success_total",
)


def engine_scrape_job(scrape_interval: str = "5s") -> dict[str, Any]:
    """The Prometheus scrape job for modelplane's serving pods: pods labelled
    `modelplane.ai/replica` with a serving role, their container port named `http`,
    path `/metrics`; each series gets the replica, pod and namespace as labels."""
    return {
        "job_name": ENGINE_JOB,
        "scrape_interval": scrape_interval,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_label_modelplane_ai_replica"],
                "regex": ".+",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_label_modelplane_ai_role"],
                "regex": "unified|prefill|decode",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": "http",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_label_modelplane_ai_replica"],
                "target_label": REPLICA_TARGET_LABEL,
            },
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": POD_TARGET_LABEL},
            {
                "source_labels": ["__meta_kubernetes_namespace"],
                "target_label": NAMESPACE_TARGET_LABEL,
            },
        ],
    }


def _window(stale_after: float) -> str:
    return f"{max(1, math.ceil(stale_after))}s"


def metrics_query(replicas: Iterable[str], stale_after: float) -> str:
    """PromQL: the raw samples of the engine metrics of these replicas within the last
    `stale_after` seconds (a range selector, so each sample keeps its own timestamp)."""
    names = "|".join(ENGINE_METRICS)
    wanted = "|".join(sorted({_escape(r) for r in replicas}))
    return f'{{__name__=~"{names}",{REPLICA_TARGET_LABEL}=~"{wanted}"}}[{_window(stale_after)}]'


def _escape(value: str) -> str:
    """A replica name as a literal inside a PromQL regex string."""
    return re.escape(value).replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class PodSamples:
    """One pod's newest engine samples (name -> value summed over label sets) and the time
    of the oldest of them."""

    namespace: str
    values: Mapping[str, float]
    at: float


class PrometheusAnswerError(EnvironmentProblem, ValueError):
    """The query's answer is not what an instant query with a range selector returns."""


def parse_samples(body: Any, now: float, stale_after: float) -> dict[str, dict[str, PodSamples]]:
    """The answer of `metrics_query` -> {replica: {pod: its samples}}.

    Per series the newest sample counts; samples older than `now - stale_after`, NaN
    values (Prometheus' staleness markers), negative or infinite ones, series without a
    replica or pod label, and a pod name seen in two namespaces are left out. Raises
    PrometheusAnswerError on an error status or another result type."""
    if not isinstance(body, dict):
        raise PrometheusAnswerError("the answer is not a JSON object")
    if body.get("status") != "success":
        why = body.get("error") or body.get("errorType") or "no status"
        raise PrometheusAnswerError(f"the query failed: {str(why)[:200]}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        got = data.get("resultType") if isinstance(data, dict) else None
        raise PrometheusAnswerError(f"expected a matrix result, got {got!r}")
    oldest = now - stale_after
    pods: dict[tuple[str, str], tuple[str, dict[str, float], float]] = {}
    ambiguous: set[tuple[str, str]] = set()
    for series in data.get("result") or []:
        if not isinstance(series, dict):
            continue
        labels = series.get("metric") or {}
        name = labels.get("__name__")
        replica = labels.get(REPLICA_TARGET_LABEL)
        pod = labels.get(POD_TARGET_LABEL)
        if not (name and replica and pod):
            continue
        newest = _newest(series.get("values") or [])
        if newest is None or newest[0] < oldest:
            continue
        at, value = newest
        ns = str(labels.get(NAMESPACE_TARGET_LABEL) or "")
        entry = pods.setdefault((str(replica), str(pod)), (ns, {}, at))
        if entry[0] != ns:
            ambiguous.add((str(replica), str(pod)))
            continue
        values = entry[1]
        values[str(name)] = values.get(str(name), 0.0) + value
        pods[(str(replica), str(pod))] = (ns, values, min(entry[2], at))
    out: dict[str, dict[str, PodSamples]] = {}
    for (replica, pod), (ns, values, at) in sorted(pods.items()):
        if (replica, pod) in ambiguous:
            continue  # one pod name in two namespaces: neither counts (security M9)
        out.setdefault(replica, {})[pod] = PodSamples(ns, values, at)
    return out


def _newest(values: Iterable[Any]) -> tuple[float, float] | None:
    best: tuple[float, float] | None = None
    for point in values:
        try:
            at, raw = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError):
            continue
        if not math.isfinite(raw) or raw < 0:
            continue  # a staleness marker (NaN), or no value an engine reports (security M9)
        if best is None or at > best[0]:
            best = (at, raw)
    return best


def pod_values(samples: Mapping[str, PodSamples], pods: Iterable[str]) -> list[dict[str, float]]:
    """The samples of these pods, in order (a pod without samples is left out)."""
    return [dict(samples[p].values) for p in pods if p in samples]


__all__ = [
    "ENGINE_JOB",
    "ENGINE_METRICS",
    "PROMETHEUS_NAMESPACE",
    "PROMETHEUS_PORT",
    "PROMETHEUS_PORT_NAME",
    "PROMETHEUS_PROXY",
    "PROMETHEUS_SERVICE",
    "PodSamples",
    "PrometheusAnswerError",
    "engine_scrape_job",
    "metrics_query",
    "parse_samples",
    "pod_values",
]
