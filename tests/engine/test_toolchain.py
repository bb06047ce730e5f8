"""The toolchain CLI's set choice, and `make test`'s handling of the optional Prometheus set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_unknown_set_is_refused_with_the_choices() -> None:
    result = run(["-m", "modelplane.toolchain", "install", "gcc"])
    assert result.returncode == 2
    choices = "engine, kube, devfleet, prometheus, actionlint"
    assert f"unknown set(s) gcc; choose from {choices}" in result.stderr


@pytest.mark.parametrize(
    ("opt_in", "selected", "said"),
    [
        ({}, 0, "test(s) of the dev fleet's Prometheus deselected: `make test-prometheus`"),
        ({"MODELPLANE_TEST_PROMETHEUS": "1"}, 1, None),
    ],
    ids=["make-test", "make-test-prometheus"],
)
def test_prometheus_tests_run_only_when_asked(
    opt_in: dict[str, str], selected: int, said: str | None
) -> None:
    env = {"MODELPLANE_TEST_PROMETHEUS": "", **opt_in}
    result = run(
        [
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/devfleet/test_devfleet_autoscale_prometheus.py",
        ],
        env,
    )
    tests = [line for line in result.stdout.splitlines() if "::" in line]
    assert len(tests) == selected, result.stdout
    if said:
        assert said in result.stdout
