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

from modelplane.api.names import MAX_NAME
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

#: The Deployment controller names each ReplicaSet `<deployment>-<pod-template-hash>`: the
#: hash is apimachinery's `rand.SafeEncodeString` of a 32-bit number's decimal digits, 1 to
#: 10 of these characters (never `-`).
POD_TEMPLATE_HASH = "[bcdfghjklmnpqrstvwxz2456789]{1,10}"
#: A LeaderWorkerSet's group index. LWS v0.8: the leader StatefulSet `<lws>` (controlled by
#: the LeaderWorkerSet) owns the leader pods `<lws>-<group>`, labelled `worker-index: "0"`;
#: each leader pod owns the worker StatefulSet `<lws>-<group>`, which owns that group's
#: worker pods `<lws>-<group>-<index>` (`worker-index: "<index>"`, from 1).
LWS_GROUP = "(?:0|[1-9][0-9]*)"
#: `child_name`'s cut: a name past 63 characters is its first 54 (trailing `-` dropped),
#: `-` and 8 hex digits of its hash (modelplane.api.names).
NAME_CUT, NAME_HASH = 54, "[0-9a-f]{8}"

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


_WORKER_INDEX = "__meta_kubernetes_pod_label_leaderworkerset_sigs_k8s_io_worker_index"
_REPLICA = "__meta_kubernetes_pod_label_modelplane_ai_replica"
_ROLE = "__meta_kubernetes_pod_label_modelplane_ai_role"
_KIND = "__meta_kubernetes_pod_controller_kind"
_CONTROLLER = "__meta_kubernetes_pod_controller_name"
#: The workload (Deployment or LeaderWorkerSet) whose controller owns the pod, from
#: `<controller kind>;<controller name>;<worker-index label>`: a ReplicaSet
#: `<deployment>-<pod-template-hash>`; a leader pod's StatefulSet `<lws>` (worker index 0);
#: a worker's StatefulSet `<lws>-<group>` (worker index 1 and up).
OWNER_WORKLOAD = (
    f"ReplicaSet;(.+)-{POD_TEMPLATE_HASH};.*"
    "|StatefulSet;(.+);0"
    f"|StatefulSet;(.+)-{LWS_GROUP};[1-9][0-9]*"
)


def engine_scrape_job(scrape_interval: str = "5s") -> dict[str, Any]:
    """The Prometheus scrape job for modelplane's serving pods: pods labelled
    `modelplane.ai/replica` with a serving role, their container port named `http`,
    path `/metrics`; each series gets the replica, pod and namespace as labels.

    Only a pod its replica's own workload owns is scraped (security M9): its controller is a
    ReplicaSet or StatefulSet of the workload modelplane names for the pod's replica and role
    (`workload_name`: `<replica>-<role>`, or past 63 characters its first 54 and a hash, whose
    8 hex digits relabeling cannot compute and takes from the controller's name). A labelled
    bare pod, a Job's, another Deployment's or StatefulSet's is not. Every namespace's pods
    are discovered: this job is the serving stack's, installed before any deployment's
    namespace exists and not re-rendered per deployment; the driver's query asks for the
    namespaces it observes (`metrics_query`)."""
    tmp_rx, tmp_expected, tmp_workload = "__tmp_replica_role", "__tmp_expected", "__tmp_workload"
    return {
        "job_name": ENGINE_JOB,
        "scrape_interval": scrape_interval,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": [
            {"source_labels": [_REPLICA], "regex": ".+", "action": "keep"},
            {"source_labels": [_ROLE], "regex": "unified|prefill|decode", "action": "keep"},
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": "http",
                "action": "keep",
            },
            # Owned by modelplane's workload of the replica (security M9).
            {"source_labels": [_KIND], "regex": "ReplicaSet|StatefulSet", "action": "keep"},
            {
                "source_labels": [_KIND, _CONTROLLER, _WORKER_INDEX],
                "regex": OWNER_WORKLOAD,
                "replacement": "${1}${2}${3}",
                "target_label": tmp_workload,
            },
            {"source_labels": [tmp_workload], "regex": ".+", "action": "keep"},
            {
                "source_labels": [_REPLICA, _ROLE],
                "separator": "-",
                "regex": "(.*)",
                "replacement": "${1}",
                "target_label": tmp_rx,
            },
            {
                "source_labels": [tmp_rx],
                "regex": f"(.{{1,{MAX_NAME}}})",
                "replacement": "${1}",
                "target_label": tmp_expected,
            },
            {
                "source_labels": [tmp_rx, tmp_workload],
                "regex": f"([^;]{{{NAME_CUT}}})[^;]{{{MAX_NAME + 1 - NAME_CUT},}};.*(-{NAME_HASH})",
                "replacement": "${1};${2}",
                "target_label": tmp_expected,
            },
            {
                "source_labels": [tmp_expected],
                "regex": "(.*?)-*;(.*)",
                "replacement": "${1}${2}",
                "target_label": tmp_expected,
            },
            {"source_labels": [tmp_workload], "target_label": tmp_expected, "action": "keepequal"},
            {"source_labels": [_REPLICA], "target_label": REPLICA_TARGET_LABEL},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": POD_TARGET_LABEL},
            {
                "source_labels": ["__meta_kubernetes_namespace"],
                "target_label": NAMESPACE_TARGET_LABEL,
            },
        ],
    }


def _window(stale_after: float) -> str:
    return f"{max(1, math.ceil(stale_after))}s"


def metrics_query(
    replicas: Iterable[str], stale_after: float, namespaces: Iterable[str] | None = None
) -> str:
    """PromQL: the raw samples of the engine metrics of these replicas within the last
    `stale_after` seconds (a range selector, so each sample keeps its own timestamp);
    `namespaces`: of pods in these namespaces only."""
    names = "|".join(ENGINE_METRICS)
    wanted = "|".join(sorted({_escape(r) for r in replicas}))
    where = ""
    if namespaces is not None:
        where = f',{NAMESPACE_TARGET_LABEL}=~"{"|".join(sorted({_escape(n) for n in namespaces}))}"'
    return (
        f'{{__name__=~"{names}",{REPLICA_TARGET_LABEL}=~"{wanted}"{where}}}[{_window(stale_after)}]'
    )


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
    "LWS_GROUP",
    "OWNER_WORKLOAD",
    "POD_TEMPLATE_HASH",
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
