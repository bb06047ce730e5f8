"""Autoscaling metrics from the cluster's Prometheus (issue 12): the PromQL answer's
parsing and staleness, and the choice between Prometheus and the pod proxy per replica."""

from __future__ import annotations

import json
from typing import Any

import pytest

from modelplane.observe.cluster import ClusterReader
from modelplane.observe.kube import KubeError
from modelplane.observe.prometheus import (
    PROMETHEUS_PROXY,
    PodSamples,
    PrometheusAnswerError,
    metrics_query,
    parse_samples,
)

NOW = 1_000.0


def series(name: str, replica: str | None, pod: str | None, *points: tuple[float, str]) -> dict:
    metric = {"__name__": name, "namespace": "demo"}
    if replica:
        metric["modelplane_ai_replica"] = replica
    if pod:
        metric["pod"] = pod
    return {"metric": metric, "values": [[t, v] for t, v in points]}


def answer(*result: dict) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": list(result)}}


RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


@pytest.mark.parametrize(
    ("name", "body", "expected"),
    [
        (
            "newest sample per series",
            answer(series(RUNNING, "r1", "p1", (990, "1"), (995, "3"))),
            {"r1": {"p1": {RUNNING: 3.0}}},
        ),
        (
            "points out of order",
            answer(series(RUNNING, "r1", "p1", (995, "3"), (990, "1"))),
            {"r1": {"p1": {RUNNING: 3.0}}},
        ),
        (
            "label sets of one name are summed",
            answer(
                series(RUNNING, "r1", "p1", (995, "2")), series(RUNNING, "r1", "p1", (996, "1"))
            ),
            {"r1": {"p1": {RUNNING: 3.0}}},
        ),
        ("stale: older than the window", answer(series(RUNNING, "r1", "p1", (979, "5"))), {}),
        (
            "at the window's edge",
            answer(series(RUNNING, "r1", "p1", (980, "5"))),
            {"r1": {"p1": {RUNNING: 5.0}}},
        ),
        (
            "one stale name of a fresh pod",
            answer(
                series(RUNNING, "r1", "p1", (995, "2")), series(WAITING, "r1", "p1", (970, "9"))
            ),
            {"r1": {"p1": {RUNNING: 2.0}}},
        ),
        (
            "NaN (staleness marker) skipped",
            answer(series(RUNNING, "r1", "p1", (990, "1"), (995, "NaN"))),
            {"r1": {"p1": {RUNNING: 1.0}}},
        ),
        ("only NaN: no sample", answer(series(RUNNING, "r1", "p1", (995, "NaN"))), {}),
        ("no replica label", answer(series(RUNNING, None, "p1", (995, "1"))), {}),
        ("no pod label", answer(series(RUNNING, "r1", None, (995, "1"))), {}),
        ("malformed points skipped", answer(series(RUNNING, "r1", "p1", (995, "x"))) | {}, {}),
        (
            "pods and replicas apart",
            answer(
                series(RUNNING, "r1", "p1", (995, "1")),
                series(RUNNING, "r1", "p2", (995, "2")),
                series(RUNNING, "r2", "p3", (995, "4")),
            ),
            {"r1": {"p1": {RUNNING: 1.0}, "p2": {RUNNING: 2.0}}, "r2": {"p3": {RUNNING: 4.0}}},
        ),
        ("empty result", answer(), {}),
    ],
)
def test_autoscale_prometheus_samples_table(name: str, body: dict, expected: dict) -> None:
    got = parse_samples(body, NOW, 20.0)
    assert {
        r: {p: dict(s.values) for p, s in pods.items()} for r, pods in got.items()
    } == expected, name


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"status": "error", "errorType": "bad_data", "error": "parse error"},
            "the query failed: parse error",
        ),
        (
            {"status": "success", "data": {"resultType": "vector", "result": []}},
            "expected a matrix result, got 'vector'",
        ),
        ([], "not a JSON object"),
        ({"status": "success"}, "expected a matrix result, got None"),
    ],
)
def test_autoscale_prometheus_bad_answers_say_why(body: Any, message: str) -> None:
    with pytest.raises(PrometheusAnswerError, match=message):
        parse_samples(body, NOW, 20.0)


def test_autoscale_prometheus_query_selects_the_replicas_within_the_window() -> None:
    query = metrics_query(["qwen-dev-1-0", "qwen-dev-2-1", "qwen-dev-1-0"], 19.2)
    assert query == (
        '{__name__=~"vllm:num_requests_waiting|vllm:num_requests_running|'
        'vllm:gpu_cache_usage_perc|vllm:request_success_total",'
        'modelplane_ai_replica=~"qwen\\\\-dev\\\\-1\\\\-0|qwen\\\\-dev\\\\-2\\\\-1"}[20s]'
    )


class Reader:
    """An API server as ClusterReader sees it: Prometheus' answer (or HTTP status) at the
    service proxy, each pod's /metrics at the pod proxy. Records what was asked."""

    def __init__(self, prometheus: dict | int, pods: dict[str, str]) -> None:
        self.prometheus = prometheus
        self.pods = pods
        self.asked: list[str] = []

    def get(self, path: str, **query: str) -> dict[str, Any]:
        self.asked.append(path)
        assert path == PROMETHEUS_PROXY and set(query) == {"query", "time"}
        if isinstance(self.prometheus, int):
            raise KubeError(self.prometheus, f"{path}: HTTP {self.prometheus}")
        return json.loads(json.dumps(self.prometheus))

    def get_text(self, path: str) -> str:
        self.asked.append(path)
        pod = path.split("/pods/")[1].split(":")[0]
        if pod not in self.pods:
            raise KubeError(503, "connection refused")
        return self.pods[pod]


def pod(name: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {
            "containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": 8000}]}]
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


FRESH = {
    "p1": PodSamples("demo", {RUNNING: 3.0, WAITING: 1.0}, 995.0),
    "p2": PodSamples("demo", {RUNNING: 1.0}, 995.0),
}
PROXY_TEXT = "vllm:num_requests_running 7\nvllm:num_requests_waiting 0\n"


@pytest.mark.parametrize(
    ("name", "scraped", "unscraped", "pods", "values", "source", "fallback", "proxied"),
    [
        (
            "all pods in prometheus",
            FRESH,
            "",
            [pod("p1"), pod("p2")],
            {"runningRequests": 4.0, "queueDepth": 1.0},
            "prometheus",
            None,
            0,
        ),
        (
            "a pod without a fresh sample: the pod proxy",
            {"p1": FRESH["p1"]},
            "",
            [pod("p1"), pod("p2")],
            {"runningRequests": 14.0, "queueDepth": 0.0},
            "pod-proxy",
            "prometheus: no fresh sample of p2",
            2,
        ),
        (
            "prometheus absent",
            None,
            "prometheus: no Service monitoring/prometheus-prometheus",
            [pod("p1")],
            {"runningRequests": 7.0, "queueDepth": 0.0},
            "pod-proxy",
            "prometheus: no Service monitoring/prometheus-prometheus",
            1,
        ),
        (
            "prometheus has no vLLM names",
            {"p1": PodSamples("demo", {"up": 1.0}, 995.0)},
            "",
            [pod("p1")],
            {"runningRequests": 7.0, "queueDepth": 0.0},
            "pod-proxy",
            "prometheus: no vLLM metrics",
            1,
        ),
        (
            "a pod not Ready: missing, from neither",
            FRESH,
            "",
            [pod("p1"), pod("p2", ready=False)],
            None,
            None,
            None,
            0,
        ),
        ("no pods", FRESH, "", [], None, None, None, 0),
    ],
)
def test_autoscale_replica_metrics_prometheus_first_else_pod_proxy(
    name, scraped, unscraped, pods, values, source, fallback, proxied
) -> None:
    reader = Reader(answer(), {"p1": PROXY_TEXT, "p2": PROXY_TEXT})
    got, _why, src, fb = ClusterReader(reader).replica_metrics(pods, scraped, unscraped)  # type: ignore[arg-type]
    assert (got, src, fb) == (values, source, fallback), name
    assert len([p for p in reader.asked if "/pods/" in p]) == proxied, name


@pytest.mark.parametrize(
    ("name", "prometheus", "source", "fallback"),
    [
        (
            "prometheus answers",
            answer(series(RUNNING, "r1", "p1", (NOW - 3, "2"))),
            "prometheus",
            None,
        ),
        (
            "prometheus sample stale",
            answer(series(RUNNING, "r1", "p1", (NOW - 60, "2"))),
            "pod-proxy",
            "prometheus: no fresh sample of p1",
        ),
        ("no Service", 404, "pod-proxy", "prometheus: no Service monitoring/prometheus-prometheus"),
        (
            "Prometheus down behind its Service",
            503,
            "pod-proxy",
            "prometheus: service proxy: HTTP 503",
        ),
        (
            "a query error",
            {"status": "error", "error": "boom"},
            "pod-proxy",
            "prometheus: the query failed: boom",
        ),
    ],
)
def test_autoscale_replicas_ask_prometheus_once_per_cluster(
    name, prometheus, source, fallback
) -> None:
    labelled = pod("p1") | {
        "metadata": {
            "name": "p1",
            "namespace": "demo",
            "labels": {"modelplane.ai/replica": "r1", "modelplane.ai/role": "unified"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "r1-unified-5d4b8c9f7",
                    "controller": True,
                }
            ],
        }
    }

    class Cluster(Reader):
        def items(self, path: str, **query: str) -> list[dict[str, Any]]:
            return [labelled] if path.endswith("/pods") else []

    reader = Cluster(prometheus, {"p1": PROXY_TEXT})
    cluster = ClusterReader(reader)  # type: ignore[arg-type]
    cluster._resource_api = "resource.k8s.io/v1"
    got = cluster.replicas(["demo"], ["r1"], now=NOW, stale_after=20.0)["r1"]
    assert (got.metrics_source, got.metrics_fallback) == (source, fallback), name
    assert got.metrics is not None and got.metrics["runningRequests"] == (
        2.0 if source == "prometheus" else 7.0
    )
    assert reader.asked.count(PROMETHEUS_PROXY) == 1
