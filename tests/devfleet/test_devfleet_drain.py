"""`modelplane drain` and `uncordon` on the dev fleet (issue 21, item 2), live: a cluster
hosting 2 replicas is drained under steady traffic through the ModelService with no failed
request; its replicas are re-placed elsewhere (make-before-break: each replacement Ready and
routed before the old one leaves the routes, drains and goes), the cluster is left with no
serving pod, stays out of new placements, and `uncordon` lets the scheduler use it again.
Select with `pytest -k drain`."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from modelplane.devfleet import fleet as devfleet
from modelplane.driver.fleet import Fleet
from modelplane.lock import read_lock
from tests.fixtures.devfleet import (
    DRILL_PACE,
    GPU_16GI,
    REPO,
    Deployer,
    Load,
    api_client,
    check,
    json_stream,
    model_deployment,
    model_service,
    modelplane,
    readiness,
    specs_yaml,
    wait_for,
)

pytestmark = [pytest.mark.devfleet, pytest.mark.engine]

LOAD_TIME = 3  # seconds: the stand-ins' model load, so that routing an unready replica fails
CLIENTS = 3


def models(replicas: int) -> str:
    # 4 replicas over 3 clusters: dev-1 (the name sorting first) hosts 2 of them.
    dep = model_deployment("qwen", replicas=replicas, gpu=GPU_16GI, cpu="2", memory="8Gi")
    engine = dep["spec"]["workers"]["template"]["spec"]["containers"][0]
    engine["env"] = [{"name": "MODELPLANE_STANDIN_LOAD_TIME", "value": str(LOAD_TIME)}]
    dep["spec"]["rollout"] = {"maxUnavailable": 2}  # both of dev-1's replicas move at once
    return specs_yaml(dep, model_service("chat", "qwen"))


@pytest.fixture(scope="module")
def served(deployer: Deployer, dev_fleet: devfleet.DevFleet) -> dict[str, Any]:
    fleet_dir = deployer.copy_specs(REPO / "specs" / "dev", "drain", models=models(4))
    fleet = Fleet.load(fleet_dir, env=deployer.env())
    check(fleet.up())
    services = wait_for(
        "service URLs", lambda: fleet.status().gateway.get("services") or {}, timeout=60
    )
    wait_for(
        "qwen 4/4 ready",
        lambda: readiness(fleet_dir, deployer).deployment("demo/qwen").ready == 4,
        timeout=180,
    )
    return {"dir": fleet_dir, "url": services["demo/chat"], "env": deployer.env()}


def on(fleet_dir: Path) -> Counter[str]:
    """Replicas of qwen per cluster in the committed lock."""
    lock = read_lock(fleet_dir / "modelplane.lock.yaml")
    return Counter(r.cluster for r in lock.replicas_of("demo/qwen"))


def serving_pods(dev_fleet: devfleet.DevFleet, cluster: str) -> list[str]:
    core = CoreV1Api(api_client(dev_fleet.cluster(cluster)))
    pods = core.list_namespaced_pod("demo", label_selector="modelplane.ai/deployment=qwen")
    return [p.metadata.name for p in pods.items]


def plan_json(fleet_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    done = modelplane("plan", str(fleet_dir), "-o", "json", env=env, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout)


def test_drain_moves_both_replicas_without_a_failed_request_and_uncordon_reopens(
    served: dict[str, Any], dev_fleet: devfleet.DevFleet, deployer: Deployer
) -> None:
    fleet_dir, env = served["dir"], served["env"]
    assert on(fleet_dir) == {"dev-1": 2, "dev-2": 1, "dev-3": 1}
    assert serving_pods(dev_fleet, "dev-1")

    # Without --yes and without a terminal, nothing happens.
    refused = modelplane("drain", str(fleet_dir), "dev-1", env=env, timeout=60)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert on(fleet_dir)["dev-1"] == 2

    loads = [Load(served["url"], pace=DRILL_PACE) for _ in range(CLIENTS)]
    for load in loads:
        load.__enter__()
    try:
        time.sleep(2)
        started = time.monotonic()
        drained = modelplane(
            "drain",
            str(fleet_dir),
            "dev-1",
            "--yes",
            "--interval",
            "3s",
            "--timeout",
            "20m",  # generous (143 s on a quiet machine): a loaded one is slower, not wrong
            "-o",
            "json",
            env=env,
            timeout=1260,
        )
        took = time.monotonic() - started
        time.sleep(3)  # traffic on the new replicas alone
    finally:
        for load in loads:
            load.__exit__()
    assert drained.returncode == 0, drained.stdout[-4000:] + drained.stderr[-4000:]
    out = json_stream(drained.stdout)
    assert out[-1] == {"cluster": "dev-1", "cordoned": True, "drained": True, "left": []}
    retired = [name for r in out[:-1] for name in r.get("retired", [])]
    assert len(retired) == 2, [r.get("retired") for r in out[:-1]]

    total = sum(load.count() for load in loads)
    failed = [f for load in loads for f in load.failures()]
    print(f"drain of dev-1: {took:.0f}s, {total} requests, {len(failed)} failed")
    assert total > 200
    assert failed == [], failed[:10]

    # Re-placed elsewhere; nothing serves on dev-1 any more.
    after = on(fleet_dir)
    assert after["dev-1"] == 0 and sum(after.values()) == 4
    lock = read_lock(fleet_dir / "modelplane.lock.yaml")
    assert not any(r.draining for r in lock.replicas_of("demo/qwen"))
    wait_for("no qwen pod on dev-1", lambda: serving_pods(dev_fleet, "dev-1") == [], timeout=60)
    wait_for(
        "qwen 4/4 ready elsewhere",
        lambda: readiness(fleet_dir, deployer).deployment("demo/qwen").ready == 4,
        timeout=60,
    )
    status = modelplane("status", str(fleet_dir), "-o", "json", env=env, timeout=180)
    assert status.returncode == 0, status.stderr[-2000:]
    cordons = json.loads(status.stdout)["cordoned"]
    assert list(cordons) == ["dev-1"]
    assert cordons["dev-1"]["serving"] == cordons["dev-1"]["draining"] == []

    # The cordon stays: a bigger deployment is not placed on dev-1 ...
    (fleet_dir / "models.yaml").write_text(models(6))
    cordoned = plan_json(fleet_dir, env)
    assert cordoned["cordoned"] == ["dev-1"]
    clusters = {r["cluster"] for r in cordoned["deployments"]["demo/qwen"]["replicas"]}
    assert "dev-1" not in clusters
    # ... until uncordoned (which also confirms like `up`).
    refused = modelplane("uncordon", str(fleet_dir), "dev-1", env=env, timeout=60)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    done = modelplane("uncordon", str(fleet_dir), "dev-1", "--yes", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    reopened = plan_json(fleet_dir, env)
    assert reopened["cordoned"] == []
    assert "dev-1" in {r["cluster"] for r in reopened["deployments"]["demo/qwen"]["replicas"]}
