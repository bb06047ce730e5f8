"""The real engine: a stack left the way a killed update leaves it (a stale lock of a dead
process of this host, a pending create in the checkpoint) is recovered by the next `up` the
Pulumi way -- `pulumi cancel`, then `pulumi refresh --clear-pending-creates` (the local fleet
renders manifests: nothing to import or read) -- with no checkpoint import."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.driver.engine_calls import LOG_ENV, read_log
from modelplane.driver.fleet import Fleet
from modelplane.driver.results import Outcome
from tests.fixtures.engine import LOCAL, check, copy_fleet, engine_env

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
STACK = "deploy-demo-qwen"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _pulumi(engine_root: Path, env: dict[str, str], work_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [str(engine_root / "bin" / "pulumi"), *args, "--stack", STACK, "--non-interactive"],
        cwd=work_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_recovery_stale_lock_and_pending_create_without_checkpoint_import(
    tmp_path: Path, engine_root: Path
) -> None:
    env = engine_env(tmp_path, PYTHONPATH=str(REPO), MODELPLANE_FLEET_ID="local")
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    check(Fleet.load(fleet_dir, env=env).up())
    state = fleet_dir / ".modelplane" / "state"
    work_dir = fleet_dir / ".modelplane" / "workspaces" / STACK
    project = yaml.safe_load((work_dir / "Pulumi.yaml").read_text())["name"]
    cli_env = {**env, "PULUMI_BACKEND_URL": state.as_uri()}

    # What a kill in the middle of creating the PodDisruptionBudget leaves: its create
    # pending (not among the resources), its manifest not written, the update's lock held by
    # a process that is gone.
    # (`pulumi stack import` drops pending operations: the checkpoint file is written the
    # way the engine wrote it when it was killed.)
    checkpoint = state / ".pulumi" / "stacks" / project / f"{STACK}.json"
    saved: dict[str, Any] = json.loads(checkpoint.read_text())
    deployment = saved["checkpoint"]["latest"]
    (pdb,) = [r for r in deployment["resources"] if r["type"] == PDB]
    deployment["resources"].remove(pdb)
    deployment["pending_operations"] = [{"resource": pdb, "type": "creating"}]
    checkpoint.write_text(json.dumps(saved))
    before = json.loads(_pulumi(engine_root, cli_env, work_dir, "stack", "export"))
    assert before["deployment"]["pending_operations"][0]["resource"]["urn"] == pdb["urn"]
    (manifest,) = (fleet_dir / "rendered").rglob("policy_v1-poddisruptionbudget-*.yaml")
    manifest.unlink()
    locks = state / ".pulumi" / "locks" / "organization" / project / STACK
    locks.mkdir(parents=True, exist_ok=True)
    (locks / f"{uuid.uuid4()}.json").write_text(
        json.dumps(
            {
                "pid": _dead_pid(),
                "username": "root",
                "hostname": socket.gethostname(),
                "timestamp": "2026-11-26T00:05:27Z",
            }
        )
    )

    log = tmp_path / "calls.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "modelplane", "up", "--yes", "--all", "--lock-wait", "0"]
        + [str(fleet_dir)],
        env={**env, LOG_ENV: str(log)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "was killed; its lock is released" in done.stderr, done.stderr[-3000:]
    assert "1 pending create(s) cleared (renderTo" in done.stderr, done.stderr[-3000:]
    calls = [(c.verb, c.stack) for c in read_log(log)]
    assert not [c for c in calls if c[0] in ("stack import", "import")], calls
    assert ("cancel", STACK) in calls and ("refresh", STACK) in calls, calls
    assert not list(locks.iterdir())
    after = json.loads(_pulumi(engine_root, cli_env, work_dir, "stack", "export"))["deployment"]
    assert not after.get("pending_operations")
    assert [r["urn"] for r in after["resources"] if r["type"] == PDB] == [pdb["urn"]]
    assert manifest.is_file()  # created (rendered) again

    again = check(Fleet.load(fleet_dir, env=env).up())
    assert {r.outcome for r in again.results} == {Outcome.UNCHANGED}, again.as_json()
    forced = check(Fleet.load(fleet_dir, env=env).up(all_stacks=True))
    moved = {
        r.stack: {k: n for k, n in r.changes.items() if k != "same" and n} for r in forced.results
    }
    assert moved == {r.stack: {} for r in forced.results}, forced.as_json()
