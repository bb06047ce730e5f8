"""`--optimize`: the MILP fill (scheduling.md, "Optimising")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from modelplane.scheduler import ScheduleResult, schedule
from tests.factories import cluster, deployment, fleet, inference_class, lock, pool
from tests.spec_docs import base_fleet, write_fleet

L1 = inference_class("l1", 1)
H8 = inference_class("h8", 8)
ROOT = Path(__file__).resolve().parents[2]


def where(result: ScheduleResult, key: str) -> list[tuple[str, int]]:
    return [(r.cluster, r.index) for r in result.lock.deployments[key].replicas]


def issue_fleet(p0: int = 0, p1: int = 0, small: int = 3):
    return fleet(
        [L1, H8],
        [cluster("c0", [pool("p", "l1", 2)]), cluster("c1", [pool("p", "h8", 1)])],
        [
            deployment("m0", small, tensor=1, priority=p0),
            deployment("m1", 5, tensor=8, priority=p1),
        ],
    )


@pytest.mark.parametrize(
    ("priorities", "expected", "gpus"),
    [
        # the issue's example: one m1 on c1, two m0 on c0: 10 GPUs
        ((0, 0), {"ml/m0": [("c0", 0), ("c0", 1)], "ml/m1": [("c1", 0)]}, 10),
        # a higher priority's GPUs come first, whatever the total
        ((1, 0), {"ml/m0": [("c0", 0), ("c0", 1), ("c1", 0)], "ml/m1": []}, 3),
    ],
)
def test_optimize_places_the_most_gpus_by_priority(
    priorities: tuple[int, int], expected: dict[str, list[tuple[str, int]]], gpus: int
) -> None:
    f = issue_fleet(*priorities)
    result = schedule(f, None, optimize=True)
    assert {k: where(result, k) for k in expected} == expected
    assert result.optimize is not None
    assert result.optimize.optimal
    assert (result.optimize.objective_gpus, result.optimize.placed_gpus) == (gpus, gpus)


def test_optimize_keeps_kept_replicas_where_they_are() -> None:
    """m0's locked replica on c1 strands the 8-GPU node; it still does not move."""
    f = issue_fleet()
    kept = lock({"ml/m0": [("m0-x", "c1", 0, {"unified": "p"})]})
    result = schedule(f, kept, optimize=True)
    assert ("c1", 0) in where(result, "ml/m0")
    assert where(result, "ml/m1") == []
    assert result.optimize is not None and result.optimize.placed_gpus == 3


@pytest.mark.parametrize("optimize", [False, True])
def test_optimized_plans_are_sticky_and_deterministic(optimize: bool) -> None:
    f = fleet(
        [L1, H8],
        [
            cluster("a", [pool("p", "h8", 2), pool("q", "l1", 3)]),
            cluster("b", [pool("p", "h8", 1)]),
        ],
        [
            deployment("x", 4, tensor=4),
            deployment("y", 5, tensor=1),
            deployment("z", 3, tensor=8, priority=1),
        ],
    )
    first = schedule(f, None, optimize=True)
    again = schedule(f, first.lock, optimize=optimize)
    assert again.lock == first.lock
    assert schedule(f, None, optimize=True).lock == first.lock


def test_spread_is_secondary() -> None:
    f = fleet(
        [H8],
        [cluster("a", [pool("p", "h8", 2)]), cluster("b", [pool("p", "h8", 2)])],
        [deployment("m", 2, tensor=8)],
    )
    assert where(schedule(f, None, optimize=True), "ml/m") == [("a", 0), ("b", 0)]


def test_plan_optimize_cli_reports_the_solve(tmp_path: Path) -> None:
    write_fleet(tmp_path, base_fleet())
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelplane",
            "plan",
            str(tmp_path),
            "--optimize",
            "--time-limit",
            "5",
            "-o",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["optimize"]["optimal"] is True
    assert body["errors"] == []
    plain = subprocess.run(
        [sys.executable, "-m", "modelplane", "plan", str(tmp_path), "-o", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "optimize" not in json.loads(plain.stdout)
    assert json.loads(plain.stdout)["deployments"] == body["deployments"]


def test_optimize_models_distinct_nodes_for_multi_node_workers() -> None:
    """Two 8-GPU nodes: one 8-GPU pod plus a 4+4-GPU worker look like 16 GPUs to a per-pool
    bound (and spread better), but the worker then has one node left; two 4+4 workers fit."""
    f = fleet(
        [H8],
        [cluster("a", [pool("p", "h8", 2)])],
        [deployment("one", 1, tensor=8), deployment("two", 2, tensor=4, pipeline=2)],
    )
    result = schedule(f, None, optimize=True)
    assert result.optimize is not None and result.optimize.optimal
    assert (result.optimize.objective_gpus, result.optimize.placed_gpus) == (16, 16)
    assert where(result, "ml/two") == [("a", 0), ("a", 1)]
    assert schedule(f, result.lock, optimize=True) == result
