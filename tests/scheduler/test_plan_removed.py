"""`plan` names deployments removed from the fleet whose replicas still run until pruned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from modelplane.api.names import replica_name
from modelplane.api.placement_lock import LockedDeployment, LockedReplica, PlacementLock
from modelplane.lock import write_lock
from modelplane.planning import plan_fleet
from tests.spec_docs import base_fleet, write_fleet


def _lock_with(path: Path, *keys: str) -> None:
    deployments = {}
    for key in keys:
        name = key.split("/", 1)[1]
        replicas = [
            LockedReplica(
                name=replica_name(name, "c1", i), cluster="c1", index=i, pools={"unified": "gpu"}
            )
            for i in range(2)
        ]
        deployments[key] = LockedDeployment(replicas=replicas)
    write_lock(path, PlacementLock(deployments=deployments))


def test_removed_deployments_are_reported(tmp_path: Path) -> None:
    fleet = write_fleet(tmp_path / "fleet", base_fleet())
    lock = tmp_path / "lock.yaml"
    _lock_with(lock, "team/m", "team/gone")
    outcome = plan_fleet(fleet, lock)
    assert {key: r.replicas for key, r in outcome.removed.items()} == {"team/gone": 2}
    removed = outcome.as_json()["removed"]
    assert list(removed) == ["team/gone"] and removed["team/gone"]["replicas"] == 2
    # This lock records no footprints (an older lock): nothing is charged, and it says so.
    assert removed["team/gone"]["holds"] == {} and removed["team/gone"]["unknown"] == 2
    assert "up --prune" in removed["team/gone"]["note"]
    assert "not counted in this plan" in removed["team/gone"]["note"]
    # The table output says so too.
    table = subprocess.run(
        [sys.executable, "-m", "modelplane", "plan", str(fleet), "--lock", str(lock)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "removed team/gone" in table.stdout and "up --prune" in table.stdout


def test_nothing_removed_no_key(tmp_path: Path) -> None:
    fleet = write_fleet(tmp_path / "fleet", base_fleet())
    lock = tmp_path / "lock.yaml"
    _lock_with(lock, "team/m")
    outcome = plan_fleet(fleet, lock)
    assert outcome.removed == {}
    assert "removed" not in json.loads(json.dumps(outcome.as_json()))
