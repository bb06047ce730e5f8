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

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.devfleet import fleet as devfleet
from modelplane.driver.fleet import Fleet
from modelplane.observe.prometheus import PROMETHEUS_NAMESPACE, PROMETHEUS_SERVICE
from tests.fixtures.devfleet import REPO, Deployer, prerequisites, wait_for
from tests.test_devfleet_reconcile import Load, json_stream, modelplane, readiness

pytestmark = [pytest.mark.devfleet, pytest.mark.engine, pytest.mark.prometheus]

QWEN = "demo/qwen"
CHAT = "demo/chat"
INTERVAL = 10.0
UP_SLACK = 900.0

MODELS = """\
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata: {name: qwen, namespace: demo}
spec:
  replicas: 1
  autoscaling:
    minReplicas: 1
    maxReplicas: 2
    metrics:
    - {type: runningRequests, target: 50}
    scaleDown: {stabilizationWindow: 10m}
  nodeSelector:
    devices:
    - name: gpu
      selectors:
      - cel: device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"
  workers:
    topology: {tensor: 1}
    resources: {cpu: "4", memory: 16Gi}
    template:
      spec:
        containers:
        - name: engine
          image: vllm/vllm-openai:v0.11.0
          args: ["--model=Qwen/Qwen2.5-0.5B-Instruct", "--port=8000"]
          env:
          - {name: MODELPLANE_STANDIN_SERVICE_TIME, value: "0.5"}
          - {name: MODELPLANE_STANDIN_CONCURRENCY, value: "8"}
---
apiVersion: modelplane.ai/v1alpha1
kind: ModelService
metadata: {name: chat, namespace: demo}
spec:
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: qwen}}
"""


def one_cluster_specs(target: Path) -> Path:
    """specs/dev cut down to dev-1 (its L4 pool) and the gateway, with MODELS."""
    if target.exists():
        import shutil

        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / "Pulumi.yaml").write_text((REPO / "specs" / "dev" / "Pulumi.yaml").read_text())
    kept = []
    for doc in yaml.safe_load_all((REPO / "specs" / "dev" / "fleet.yaml").read_text()):
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
    import os

    prerequisites()
    specs = one_cluster_specs(tmp_path_factory.mktemp("prometheus-specs") / "fleet")
    state = tmp_path_factory.mktemp("dev-fleet-state")
    previous = os.environ.get(devfleet.STATE_ENV)
    os.environ[devfleet.STATE_ENV] = str(state)
    try:
        yield devfleet.up(state, clusters=1, specs=specs, prometheus=True)
    except devfleet.DevFleetError as exc:
        pytest.fail(f"dev-fleet up failed: {exc}", pytrace=False)
    finally:
        devfleet.down(state)
        if previous is None:
            os.environ.pop(devfleet.STATE_ENV, None)
        else:
            os.environ[devfleet.STATE_ENV] = previous


@pytest.fixture(scope="module")
def deployer(dev_fleet: devfleet.DevFleet, tmp_path_factory: pytest.TempPathFactory) -> Deployer:
    return Deployer(dev_fleet.root, tmp_path_factory.mktemp("dev-fleet-work"))


def rounds(out: Path) -> list[dict[str, Any]]:
    """The rounds' JSON (without the probe's `{"probe": ...}` lines between them)."""
    text = out.read_text()
    try:
        found = json_stream(text)
    except ValueError:  # a round being written
        found = json_stream(text[: text.rfind("\n}\n") + 3])
    return [r for r in found if "probe" not in r]


def test_autoscaling_reads_prometheus_then_falls_back_to_the_pod_proxy(
    dev_fleet: devfleet.DevFleet, deployer: Deployer, tmp_path: Path
) -> None:
    cluster = dev_fleet.cluster("dev-1")
    prometheus = cluster.process("prometheus")
    assert prometheus is not None and prometheus.running()
    service = cluster.rest().get(
        f"/api/v1/namespaces/{PROMETHEUS_NAMESPACE}/services/{PROMETHEUS_SERVICE}"
    )
    assert service["spec"]["ports"][0]["name"] == "http-web"

    fleet_dir = deployer.copy_specs(one_cluster_specs(tmp_path / "specs"), "prometheus")
    first = modelplane("reconcile", str(fleet_dir), "--once", "-o", "json", env=deployer.env())
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    wait_for(
        "qwen 1/1 ready",
        lambda: readiness(fleet_dir, deployer).deployment(QWEN).ready == 1,
        timeout=180,
    )
    out, err = tmp_path / "reconcile.out", tmp_path / "reconcile.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "modelplane",
                "reconcile",
                str(fleet_dir),
                "--interval",
                f"{INTERVAL:.0f}s",
                "--timeout",
                "2s",
                "-o",
                "json",
            ],
            cwd=REPO,
            env=deployer.env(),
            stdout=stdout,
            stderr=stderr,
        )
    load: Load | None = None
    clients: list[Load] = []
    try:
        # the loop's first round runs an `up` (a new process); it routes the Ready replica
        wait_for("a first round", lambda: len(rounds(out)) >= 1, timeout=UP_SLACK, interval=1.0)
        url = Fleet.load(fleet_dir, env=deployer.env()).status().gateway["services"][CHAT]
        load = Load(url).__enter__()
        clients = [Load(url).__enter__() for _ in range(3)]

        def from_prometheus(since: int) -> dict[str, Any] | None:
            for r in rounds(out)[since:]:
                auto = r["autoscale"].get(QWEN) or {}
                sources = set((auto.get("metricsSource") or {}).values())
                observed = (auto.get("metrics") or [{}])[0].get("observed")
                if sources == {"prometheus"} and observed:
                    return r
            return None

        seen = wait_for(
            "a round reading qwen's load from Prometheus",
            lambda: from_prometheus(0),
            timeout=6 * INTERVAL,
            interval=1.0,
        )
        assert seen["ok"], seen
        assert seen["autoscale"][QWEN]["metricsFallback"] == {}
        assert seen["autoscale"][QWEN]["to"] == 1

        prometheus.stop(timeout=10)
        stopped_at = len(rounds(out))

        def from_pod_proxy() -> dict[str, Any] | None:
            for r in rounds(out)[stopped_at:]:
                auto = r["autoscale"].get(QWEN) or {}
                if set((auto.get("metricsSource") or {}).values()) == {"pod-proxy"}:
                    return r
            return None

        fell_back = wait_for(
            "a round reading the pod proxy", from_pod_proxy, timeout=4 * INTERVAL, interval=1.0
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
        process.terminate()
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
    failures = [f for c in [*clients, *([load] if load else [])] for f in c.failures()]
    assert not failures, failures[:5]
    seen_rounds = rounds(out)
    assert all(r["ok"] for r in seen_rounds), [r for r in seen_rounds if not r["ok"]][:2]
    assert "Traceback" not in err.read_text()
