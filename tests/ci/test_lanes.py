"""`make test`'s lanes (tests/fixtures/lanes.py): which module runs where, and the rule that
keeps one dev fleet at a time -- every test that asks for the dev fleet lives in
tests/devfleet/, the dev-fleet lane."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fixtures.lanes import DEV_FLEET_LANE, ENGINE_LANE, lane_of

TESTS = Path(__file__).resolve().parents[1]
DEV_FLEET_FIXTURES = {"dev_fleet", "deployer", "shared_dev_fleet"}


@pytest.mark.parametrize(
    ("module", "lane"),
    [
        ("tests/devfleet/test_devfleet_rollout.py", DEV_FLEET_LANE),
        ("tests/devfleet/test_devfleet_unit.py", DEV_FLEET_LANE),  # no fleet, same worker
        ("tests/driver/test_engine_local.py", ENGINE_LANE),  # pytestmark engine
        ("tests/driver/test_leader_lease.py", ENGINE_LANE),  # apiserver tests
        ("tests/driver/test_driver_unit.py", "tests/driver/test_driver_unit.py"),
        ("tests/api/test_hardening.py", "tests/api/test_hardening.py"),
    ],
)
def test_lane_of_a_module(module: str, lane: str) -> None:
    assert lane_of(module) == lane


def _asks_for_the_dev_fleet(path: Path) -> list[str]:
    """Functions of a module with a parameter named like a dev-fleet fixture."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = {a.arg for a in node.args.args + node.args.kwonlyargs}
            if names & DEV_FLEET_FIXTURES:
                found.append(f"{path.relative_to(TESTS.parent)}::{node.name}")
    return found


def test_only_the_dev_fleet_lane_asks_for_a_dev_fleet() -> None:
    """A module elsewhere would start a second dev fleet beside the lane's."""
    outside = [
        where
        for path in sorted(TESTS.rglob("test_*.py"))
        if not path.is_relative_to(TESTS / "devfleet")
        for where in _asks_for_the_dev_fleet(path)
    ]
    assert outside == []
    inside = [w for p in (TESTS / "devfleet").glob("test_*.py") for w in _asks_for_the_dev_fleet(p)]
    assert inside  # the check sees the fixtures where they are used
