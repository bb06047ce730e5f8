"""Autoscaling metrics from the cluster's Prometheus on the dev fleet (issue 12). Select with
`pytest -k autoscal`.

One cluster (dev-1, its two L4 nodes and the gateway) started with a real Prometheus that
discovers the serving pods through the API server and scrapes them with the serving stack's
job; `reconcile` asks it through the API server's service proxy. qwen (autoscaled 1..2,
a target no load here reaches) serves a steady load: the rounds read its metrics from
Prometheus; once Prometheus is stopped they read each pod's `/metrics` through the pod proxy
and say why, and the count never moves.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.devfleet import fleet as devfleet
from modelplane.observe.prometheus import PROMETHEUS_NAMESPACE, PROMETHEUS_SERVICE
from tests.fixtures import devfleet as fx

pytestmark = [pytest.mark.devfleet, pytest.mark.engine, pytest.mark.prometheus]

QWEN = "demo/qwen"
CHAT = "demo/chat"
INTERVAL = 10.0
UP_SLACK = 900.0

MODELS = fx.specs_yaml(
    fx.model_deployment(
        "qwen",
        autoscaling=fx.autoscaling(1, 2, 50, scaleDown={"stabilizationWindow": "10m"}),
        service_time="0.5",
        concurrency="8",
    ),
    fx.model_service("chat", "qwen"),
)


def one_cluster_specs(target: Path) -> Path:
    """specs/dev cut down to dev-1 (its L4 pool) and the gateway, with MODELS."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / "Pulumi.yaml").write_text((fx.REPO / "specs" / "dev" / "Pulumi.yaml").read_text())
    kept = []
    for doc in yaml.safe_load_all((fx.REPO / "specs" / "dev" / "fleet.yaml").read_text()):
        if doc["kind"] == "InferenceCluster":
            if doc["metadata"]["name"] != "dev-1":
                continue
            doc["spec"]["nodePools"] = [p for p in doc["spec"]["nodePools"] if p["name"] == "l4"]
        kept.append(doc)
    (target / "fleet.yaml").write_text(yaml.safe_dump_all(kept, sort_keys=False))
    (target / "models.yaml").write_text(MODELS)
    return target


@pytest.fixture(scope="module")
def dev_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[devfleet.DevFleet]:
    """dev-1 alone, with its Prometheus; stopped after the module."""
    specs = one_cluster_specs(tmp_path_factory.mktemp("prometheus-specs") / "fleet")
    with fx.running_dev_fleet(tmp_path_factory, clusters=1, specs=specs, prometheus=True) as fleet:
        yield fleet


def test_autoscaling_reads_prometheus_then_falls_back_to_the_pod_proxy(
    dev_fleet: devfleet.DevFleet, deployer: fx.Deployer, tmp_path: Path
) -> None:
    cluster = dev_fleet.cluster("dev-1")
    prometheus = cluster.process("prometheus")
    assert prometheus is not None and prometheus.running()
    service = cluster.rest().get(
        f"/api/v1/namespaces/{PROMETHEUS_NAMESPACE}/services/{PROMETHEUS_SERVICE}"
    )
    assert service["spec"]["ports"][0]["name"] == "http-web"

    fleet_dir = deployer.copy_specs(one_cluster_specs(tmp_path / "specs"), "prometheus")
    fx.reconcile_once_until_ready(fleet_dir, deployer, QWEN)
    loop = fx.start_reconcile(fleet_dir, deployer.env(), tmp_path, interval=INTERVAL)
    load: fx.Load | None = None
    clients: list[fx.Load] = []
    try:
        # the loop's first round runs an `up` (a new process); it routes the Ready replica
        fx.wait_for(
            "a first round", lambda: len(fx.rounds(loop)) >= 1, timeout=UP_SLACK, interval=1.0
        )
        url = deployer.fleet(fleet_dir).status().gateway["services"][CHAT]
        load = fx.Load(url).__enter__()
        clients = [fx.Load(url).__enter__() for _ in range(3)]

        def from_prometheus(since: int) -> dict[str, Any] | None:
            for r in fx.rounds(loop)[since:]:
                auto = r["autoscale"].get(QWEN) or {}
                sources = set((auto.get("metricsSource") or {}).values())
                observed = (auto.get("metrics") or [{}])[0].get("observed")
                if sources == {"prometheus"} and observed:
                    return r
            return None

        seen = fx.wait_for(
            "a round reading qwen's load from Prometheus",
            lambda: from_prometheus(0),
            timeout=6 * INTERVAL + UP_SLACK,
            interval=1.0,
        )
        assert seen["ok"], seen
        assert seen["autoscale"][QWEN]["metricsFallback"] == {}
        assert seen["autoscale"][QWEN]["to"] == 1

        prometheus.stop(timeout=10)
        stopped_at = len(fx.rounds(loop))

        def from_pod_proxy() -> dict[str, Any] | None:
            for r in fx.rounds(loop)[stopped_at:]:
                auto = r["autoscale"].get(QWEN) or {}
                if set((auto.get("metricsSource") or {}).values()) == {"pod-proxy"}:
                    return r
            return None

        fell_back = fx.wait_for(
            "a round reading the pod proxy",
            from_pod_proxy,
            timeout=4 * INTERVAL + UP_SLACK,
            interval=1.0,
        )
        auto = fell_back["autoscale"][QWEN]
        [why] = auto["metricsFallback"].values()
        assert why.startswith("prometheus: service proxy: HTTP 5"), why
        assert auto["metrics"][0]["observed"] is not None
        assert auto["to"] == 1 and fell_back["ok"], fell_back
    finally:
        for client in clients:
            client.__exit__()
        if load is not None:
            load.__exit__()
        loop.stop()
    failures = [f for c in [*clients, *([load] if load else [])] for f in c.failures()]
    assert not failures, failures[:5]
    seen_rounds = fx.rounds(loop)
    assert all(r["ok"] for r in seen_rounds), [r for r in seen_rounds if not r["ok"]][:2]
    assert "Traceback" not in loop.err.read_text()
