"""`plan --survive 1` against the dev fleet (issue 23): the shortfall it predicts for its worst
scenario is the one `reconcile` leaves when that cluster really goes.

qwen x6 over the L4 pools only (2 + 2 + 3 one-GPU nodes on dev-1..3): any loss leaves it
short. Select with `pytest -k survive`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from modelplane.devfleet import fleet as devfleet
from tests.fixtures import devfleet as fx

pytestmark = [pytest.mark.devfleet, pytest.mark.engine, pytest.mark.dev_fleet_last]

QWEN = "demo/qwen"
REPLICAS = 6  # of 7 L4 GPUs: every single loss leaves qwen short


def placed(fleet_dir: Path) -> dict[str, int]:
    """The lock's replicas of qwen per cluster."""
    lock = yaml.safe_load((fleet_dir / "modelplane.lock.yaml").read_text())
    out: dict[str, int] = {}
    for r in lock["deployments"][QWEN]["replicas"]:
        out[r["cluster"]] = out.get(r["cluster"], 0) + 1
    return out


def test_survive_worst_loss_on_the_dev_fleet_leaves_the_predicted_shortfall(
    deployer: fx.Deployer, dev_fleet: devfleet.DevFleet
) -> None:
    models = fx.specs_yaml(
        fx.model_deployment("qwen", replicas=REPLICAS, gpu=fx.L4, cpu="1", memory="4Gi")
    )
    fleet_dir = deployer.dev_specs("survive", models=models)
    first = deployer.run("reconcile", str(fleet_dir), "--once", "-o", "json")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    before = placed(fleet_dir)
    assert sum(before.values()) == REPLICAS, before

    what_if = deployer.run("plan", str(fleet_dir), "--survive", "1", "-o", "json")
    assert what_if.returncode == 1, what_if.stderr[-3000:]  # some loss leaves qwen short
    report = json.loads(what_if.stdout)["survive"]
    assert not report["survives"] and report["scenarios"] == 3
    worst = report["worst"]
    (lost,) = worst["lost"]
    predicted = worst["short"][QWEN]["replicas"]
    assert predicted > 0 and worst["short"][QWEN]["devices"] == {"l4": predicted}, worst

    outage = fx.Outage(dev_fleet, dev_fleet.cluster(lost))
    outage.start()
    try:
        after = deployer.run(
            "reconcile", str(fleet_dir), "--once", "--grace", "0s", "--timeout", "2s", "-o", "json"
        )
    finally:
        outage.end()  # the dev fleet is shared with the next modules
    (round_,) = fx.json_stream(after.stdout)
    assert round_["evicting"] == [lost], round_
    assert after.returncode == 0 and round_["ok"], after.stdout[-3000:] + after.stderr[-3000:]
    now = placed(fleet_dir)
    assert lost not in now, now
    # the survivors stay where they were (sticky), and exactly the predicted replicas are short
    assert all(now[c] >= n for c, n in before.items() if c != lost), (before, now)
    assert REPLICAS - sum(now.values()) == predicted, (before, now, worst)
