"""Shared pytest configuration: the real kube-apiserver and dev-fleet fixtures live in
tests/fixtures."""

import os

import pytest

pytest_plugins = [
    "tests.fixtures.apiserver",
    "tests.fixtures.devfleet",
    "tests.fixtures.engine",
    "tests.fixtures.postgres",
]

# The dev fleet's Prometheus is an optional toolchain set (a cold build of its Go module is
# 25-45 min on 2 cores, beyond `make test`'s budget): its tests run with `make
# test-prometheus`, which builds it and sets this variable. Deselected otherwise, and said so.
PROMETHEUS_ENV = "MODELPLANE_TEST_PROMETHEUS"
_LEFT = pytest.StashKey[int]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(PROMETHEUS_ENV) == "1":
        return
    chosen = [i for i in items if i.get_closest_marker("prometheus") is None]
    left = [i for i in items if i.get_closest_marker("prometheus") is not None]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = chosen
        config.stash[_LEFT] = len(left)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    left = terminalreporter.config.stash.get(_LEFT, 0)
    if left:
        terminalreporter.write_line(
            f"{left} test(s) of the dev fleet's Prometheus deselected: "
            "`make test-prometheus` builds Prometheus and runs them"
        )
