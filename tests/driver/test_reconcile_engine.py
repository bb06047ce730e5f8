"""`modelplane reconcile` rounds with the real engine on specs/local (rendered clusters:
not observed, so healthy): up, nothing changed, a stack locked by another update, SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modelplane.driver.reconcile import Reconciler
from tests.fixtures.engine import CANARY, LOCAL, REPO, copy_fleet
from tests.spec_docs import as_yaml, gpu_class

pytestmark = pytest.mark.engine


def hold_stack_lock(fleet_dir: Path, stack: str) -> Path:
    """Hold a stack's lock the way a running update does (file backend lock file)."""
    locks = fleet_dir / ".modelplane" / "state" / ".pulumi" / "locks" / "organization"
    lock_dir = locks / "modelplane-local" / stack  # the fleet's project (specs/local's name)
    lock_dir.mkdir(parents=True, exist_ok=True)
    (lock_dir / "held-by-ci.json").write_text(
        json.dumps(
            {"pid": 1, "username": "ci", "hostname": "ci", "timestamp": "2026-01-01T00:00:00Z"}
        )
    )
    return lock_dir


def test_reconcile_rounds_up_then_skip_then_locked_then_retry(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    reconciler = Reconciler(fleet_dir, env=env)

    first = reconciler.round()
    assert first.ok and first.error is None, first.as_json()
    assert first.run is not None and first.run.lock_written
    assert first.added and not first.moved
    assert (fleet_dir / "modelplane.lock.yaml").is_file()

    quiet = reconciler.round()
    assert quiet.ok and quiet.skipped_up and quiet.run is None

    qwen = fleet_dir / "qwen.yaml"
    qwen.write_text(qwen.read_text().replace("replicas: 1", "replicas: 2"))
    lock_dir = hold_stack_lock(fleet_dir, "deploy-demo-qwen")
    try:
        locked = reconciler.round()
    finally:
        shutil.rmtree(lock_dir)
    assert locked.locked == ["deploy-demo-qwen"]
    assert not locked.ok
    assert locked.run is not None and locked.run.lock_written  # the plan is recorded

    retry = reconciler.round()
    assert retry.ok and not retry.skipped_up, retry.as_json()
    assert retry.run is not None
    assert retry.run.result("deploy-demo-qwen").outcome.value == "succeeded"
    assert reconciler.round().skipped_up


def test_reconcile_cli_stops_cleanly_on_sigterm(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "modelplane", "reconcile", str(fleet_dir), "--interval", "1s"],
            cwd=REPO,
            env={**env, "COLUMNS": "200"},
            stdout=stdout,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 300
        while "nothing changed" not in out.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, err.read_text()
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0
    finally:
        if process.poll() is None:
            process.kill()
    text = out.read_text()
    assert "round 1: up ok" in text and "lock written" in text
    assert "round 2: nothing changed" in text
    assert "reconcile: stopped" in err.read_text()
    assert "Traceback" not in err.read_text()


GKE = (
    as_yaml(gpu_class("l4-gke", provider="GKE", product=None))
    + """---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata: {name: g1}
spec:
  cluster: {source: GKE, gke: {project: p, region: europe-west4}}
  nodePools:
  - {name: gpu, className: l4-gke, nodeCount: 1, zones: [europe-west4-a]}
"""
)


def test_reconcile_reads_a_cloud_clusters_kubeconfig_from_its_stack_output(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
) -> None:
    """GKE/EKS kubeconfigs exist only as the cluster stack's secret output: the driver reads
    it for the observation; it is never printed."""
    import pulumi

    from modelplane.driver.fleet import Fleet
    from modelplane.observe import observe_fleet

    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    (fleet_dir / "g1.yaml").write_text(GKE)
    # The front door's cluster reaches g1's internal gateway over the platform's network.
    specs = fleet_dir / "fleet.yaml"
    text = specs.read_text().replace(
        "      renderTo: rendered\n",
        "      renderTo: rendered\n      network: {connectedTo: [g1]}\n",
    )
    specs.write_text(text)
    f = Fleet.load(fleet_dir, env=env)
    assert f.cluster_kubeconfigs() == {}  # its stack has not run

    kubeconfig = "apiVersion: v1\nclusters: [{name: g, cluster: {server: 'https://127.0.0.1:9'}}]\n"
    kubeconfig += "contexts: [{name: g, context: {cluster: g, user: g}}]\ncurrent-context: g\n"
    kubeconfig += f"users: [{{name: g, user: {{token: {CANARY}}}}}]\n"

    def program() -> None:
        pulumi.export("kubeconfig", pulumi.Output.secret(kubeconfig))

    with f.session() as session:
        session.set_program_inputs(f.path, f.lock_path)
        session.stack("cluster-g1").up(program=program, color="never")
    assert f.cluster_kubeconfigs() == {"g1": kubeconfig}
    seen = observe_fleet(f.spec, f.path, env=env, kubeconfigs=f.cluster_kubeconfigs(), timeout=1)
    assert seen.clusters["g1"].observed and not seen.clusters["g1"].reachable
    assert "cannot reach https://127.0.0.1:9" in (seen.clusters["g1"].error or "")
    assert CANARY not in json.dumps(seen.as_json())
