"""Spill past a stockout on the dev fleet (issue 38; scheduling.md "Health-aware
scheduling", rule 7). Select with `pytest -k "spill or stockout"`.

A copy of specs/dev whose dev-1 L4 pool says it may grow to 6 nodes (`maxNodeCount: 6`)
while the dev fleet has 2 of them and nothing adds more: a cloud pool stuck behind a
stockout. `demo/qwen` wants 7 one-GPU replicas; spreading puts 3 on dev-1, and the third
stays Pending (kube-scheduler: no node with a free L4). `reconcile --spill-after 10s`
moves it to a cluster with room, and dev-1's pool cools down: it takes nothing new. A
client calls the service throughout; no request fails.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.devfleet import fleet as devfleet
from tests.fixtures import devfleet as fx

pytestmark = [pytest.mark.devfleet, pytest.mark.engine]

QWEN = "demo/qwen"
CHAT = "demo/chat"
SPILL_AFTER = 10.0
DEV1_L4 = "  - {name: l4, className: l4, nodeCount: 2}\n"
RESULTS = Path(os.environ.get("MODELPLANE_SPILL_RESULTS", "/tmp/modelplane-spill.json"))
UP_SLACK = 900.0


def placed(fleet_dir: Path) -> list[dict[str, Any]]:
    lock = yaml.safe_load((fleet_dir / "modelplane.lock.yaml").read_text())
    return list(((lock.get("deployments") or {}).get(QWEN) or {}).get("replicas") or [])


def on(fleet_dir: Path, cluster: str) -> list[str]:
    return sorted(r["name"] for r in placed(fleet_dir) if r["cluster"] == cluster)


@pytest.fixture(scope="module")
def fleet_dir(deployer: fx.Deployer, dev_fleet: devfleet.DevFleet) -> Iterator[Path]:
    target = deployer.dev_specs(
        "spill",
        models=fx.specs_yaml(
            fx.model_deployment("qwen", replicas=7, gpu=fx.L4),
            fx.model_service("chat", "qwen"),
        ),
    )
    fleet = target / "fleet.yaml"
    text = fleet.read_text()
    assert text.count(DEV1_L4) == 2  # dev-1's, then dev-2's
    fleet.write_text(text.replace(DEV1_L4, DEV1_L4.replace("}\n", ", maxNodeCount: 6}\n"), 1))
    up = deployer.run("up", str(target), "--yes", timeout=UP_SLACK)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    yield target


def test_spill_a_replica_stuck_behind_a_stockout_moves_and_the_pool_cools_down(
    fleet_dir: Path, deployer: fx.Deployer, tmp_path: Path
) -> None:
    stuck_on_dev1 = on(fleet_dir, "dev-1")
    assert len(stuck_on_dev1) == 3, placed(fleet_dir)  # the pool that says it can grow

    def waiting() -> list[str]:
        view = fx.readiness(fleet_dir, deployer)
        return [
            r.name
            for r in view.deployment(QWEN).replicas
            if r.reason.startswith("waiting for capacity on dev-1/l4")
        ]

    try:
        fx.wait_for("a replica waiting for capacity on dev-1", lambda: len(waiting()) == 1, 300)
    except BaseException:
        replicas = fx.readiness(fleet_dir, deployer).deployment(QWEN).replicas
        raise AssertionError([(r.name, r.cluster, r.phase, r.reason) for r in replicas]) from None
    (stuck,) = waiting()
    url = deployer.fleet(fleet_dir).status().gateway["services"][CHAT]
    load = fx.Load(url, pace=fx.DRILL_PACE).__enter__()
    loop = fx.start_reconcile(
        fleet_dir,
        deployer.env(),
        tmp_path,
        interval=5.0,
        probe=1.0,
        extra=["--spill-after", f"{SPILL_AFTER:g}s", "--capacity-cooldown", "30m"],
    )
    started = time.monotonic()
    try:

        def spilled() -> list[dict[str, Any]]:
            return [r for r in fx.rounds(loop) if stuck in (r.get("spilled") or {})]

        fx.wait_for("the stuck replica spilled", lambda: bool(spilled()), UP_SLACK)
        moved = time.monotonic() - started
        assert spilled()[0]["spilled"][stuck].startswith("dev-1/l4: unschedulable since")
        fx.wait_for(
            "7 of 7 Ready",
            lambda: fx.readiness(fleet_dir, deployer).deployment(QWEN).ready == 7,
            UP_SLACK,
            interval=2.0,
        )
        ready = time.monotonic() - started
        time.sleep(6)  # a round more: the cool-down holds, nothing goes back to dev-1
    finally:
        loop.stop()
        load.__exit__()
    assert stuck not in {r["name"] for r in placed(fleet_dir)}
    assert len(on(fleet_dir, "dev-1")) == 2, placed(fleet_dir)
    assert len(placed(fleet_dir)) == 7
    status = fx.modelplane("status", str(fleet_dir), "-o", "json", env=deployer.env(), timeout=180)
    assert status.returncode == 0, status.stderr[-2000:]
    capacity = json.loads(status.stdout)["capacity"]
    assert list(capacity) == ["dev-1/l4"] and capacity["dev-1/l4"]["replica"] == stuck
    assert capacity["dev-1/l4"]["readyNodes"] == 2
    assert load.count() > 20 and not load.failures(), load.failures()[:5]
    RESULTS.write_text(
        json.dumps(
            {
                "spillAfterSeconds": SPILL_AFTER,
                "reconcileStart_to_spilledSeconds": round(moved, 1),
                "reconcileStart_to_allReadySeconds": round(ready, 1),
                "requests": load.count(),
                "failed": len(load.failures()),
            },
            indent=1,
        )
    )
