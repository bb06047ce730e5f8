"""Shared pytest configuration: the real kube-apiserver and dev-fleet fixtures live in
tests/fixtures."""

import os
import tempfile
from pathlib import Path

import pytest

from modelplane.driver.engine_calls import LOG_ENV, read_log

pytest_plugins = [
    "tests.fixtures.apiserver",
    "tests.fixtures.devfleet",
    "tests.fixtures.engine",
    "tests.fixtures.lanes",
    "tests.fixtures.postgres",
]

# The dev fleet's Prometheus is an optional toolchain set (a cold build of its Go module is
# 25-45 min on 2 cores, beyond `make test`'s budget): its tests run with `make
# test-prometheus`, which builds it and sets this variable. Deselected otherwise, and said so.
PROMETHEUS_ENV = "MODELPLANE_TEST_PROMETHEUS"
_LEFT = pytest.StashKey[int]()
_CALLS = pytest.StashKey[Path]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(PROMETHEUS_ENV) == "1":
        return
    chosen = [i for i in items if i.get_closest_marker("prometheus") is None]
    left = [i for i in items if i.get_closest_marker("prometheus") is not None]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = chosen
        config.stash[_LEFT] = len(left)


@pytest.fixture(autouse=True)
def _fresh_consoles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets the CLI's consoles made anew, under its own environment: a console is
    made once per process and keeps the width and terminal-ness it found, so otherwise what
    one test prints would depend on which tests ran before it in that worker."""
    from modelplane.cli import output

    monkeypatch.setattr(output, "_log_consoles", {})
    for name in ("console", "err_console"):
        if name in vars(output):
            monkeypatch.delitem(vars(output), name)


def pytest_configure(config: pytest.Config) -> None:
    # Every Pulumi CLI process the driver starts during the run (in this process and in the
    # `modelplane` processes tests start, which inherit the variable) is appended to one file,
    # so the summary can say how many engine runs the suite took (issue 32).
    if LOG_ENV not in os.environ:
        fd, path = tempfile.mkstemp(prefix="mp-cli-calls-", suffix=".jsonl")
        os.close(fd)
        os.environ[LOG_ENV] = path
        config.stash[_CALLS] = Path(path)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    path = terminalreporter.config.stash.get(_CALLS, None)
    if path is not None:
        calls = read_log(path)
        runs = [c for c in calls if c.engine_run]
        verbs: dict[str, int] = {}
        for call in runs:
            verbs[call.verb] = verbs.get(call.verb, 0) + 1
        per_verb = ", ".join(f"{v} {n}" for v, n in sorted(verbs.items())) or "none"
        terminalreporter.write_line(
            f"engine runs: {len(runs)} ({per_verb}; {sum(c.seconds for c in runs):.0f} s), "
            f"other Pulumi CLI calls: {len(calls) - len(runs)} "
            f"({sum(c.seconds for c in calls if not c.engine_run):.0f} s)"
        )
        path.unlink(missing_ok=True)
    left = terminalreporter.config.stash.get(_LEFT, 0)
    # Under xdist the workers collect (and deselect); the controller only knows it happened.
    workers = terminalreporter.config.getoption("numprocesses", None)
    if left or (workers and os.environ.get(PROMETHEUS_ENV) != "1"):
        terminalreporter.write_line(
            f"{left or 'The'} test(s) of the dev fleet's Prometheus deselected: "
            "`make test-prometheus` builds Prometheus and runs them"
        )
