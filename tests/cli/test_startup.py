"""Start-up cost of the pure verbs: `validate`/`plan`/`schema` load no engine, dev-cluster,
health or Pulumi module (docs/benchmarks.md, "Loading")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = [
    "pulumi",
    "cryptography",
    "aiohttp",
    "modelplane.devcluster",
    "modelplane.devfleet",
    "modelplane.cli.health",
    "modelplane.cli.engine_verbs",
    # the driver, but for the runtime state's owner: `plan` reads the cordons
    "modelplane.driver.fleet",
    "modelplane.driver.operations",
    "modelplane.driver.reconcile",
    "modelplane.driver.decide",
    "modelplane.autoscale",
]

PROBE = """
import json, sys
args, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["modelplane", *args]
from modelplane.cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in heavy if m in sys.modules)), file=sys.stderr)
"""


def loaded(*args: str, heavy: list[str] = HEAVY) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args)), json.dumps(heavy)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    return json.loads(proc.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "specs/quickstart"],
        ["plan", "specs/quickstart", "--output", "json"],
        ["validate", "--help"],
    ],
    ids=["validate", "plan", "help"],
)
def test_pure_verbs_load_no_heavy_module(args):
    assert loaded(*args) == []


def test_other_verbs_still_mount_everything():
    assert "modelplane.cli.engine_verbs" in loaded("--help")


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "specs/quickstart", "--output", "json"],
        ["plan", "specs/quickstart", "--output", "json"],
        ["plan", "no-such-fleet", "--output", "json"],
    ],
    ids=["validate", "plan", "plan with errors"],
)
def test_json_output_loads_no_rich(args):
    assert loaded(*args, heavy=["rich", "rich.console"]) == []


def test_table_output_still_uses_rich():
    assert loaded("validate", "specs/quickstart", heavy=["rich.console"]) == ["rich.console"]
