"""The driver's one event channel: `on_event` in both shapes, a raising callback, observers.

The stacks here run through the driver's real tier runner (`Fleet._run`) with a stand-in
per-stack operation instead of the engine; tests/driver/test_engine_local.py runs the same
callbacks through the real engine.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modelplane.driver.events import StackEvent
from modelplane.driver.fleet import Fleet
from modelplane.driver.observer import (
    EventCallback,
    Observer,
    channel,
    takes_one_argument,
)
from modelplane.driver.results import Outcome, StackResult
from modelplane.stacks import StackUnit, Tier

TWO_CLUSTERS = Path(__file__).parents[1] / "data" / "driver" / "two-clusters"


class Engine:
    """Duck-typed engine events (what `stack_event` reads)."""

    class Diagnostic:
        def __init__(self, message: str) -> None:
            self.diagnostic_event = type("D", (), {"severity": "warning", "message": message})()


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    shutil.copytree(TWO_CLUSTERS, tmp_path / "fleet")
    return Fleet.load(tmp_path / "fleet", env={})


def _operation(
    observer: Observer, fail: set[str] = frozenset()
) -> Callable[[StackUnit], StackResult]:
    """A per-stack operation as the engine verbs run it: started, one engine event, done."""

    def run(unit: StackUnit) -> StackResult:
        observer.stack_started(unit, None)  # type: ignore[arg-type]
        observer.stack_event(unit, None, Engine.Diagnostic(f"hello from {unit.name}"))  # type: ignore[arg-type]
        outcome = Outcome.FAILED if unit.name in fail else Outcome.SUCCEEDED
        return StackResult(unit.name, unit.tier, outcome)

    return run


def _run(fleet: Fleet, observer: Observer, fail: set[str] = frozenset()) -> Any:
    units = fleet.stacks(fleet.plan())
    return fleet._run("up", units, _operation(observer, fail), 2, observer)


def kinds(events: list[StackEvent], stack: str) -> list[str]:
    return [e.kind for e in events if e.stack == stack]


def test_one_argument_callback_gets_events_naming_their_stack(fleet: Fleet) -> None:
    events: list[StackEvent] = []
    run = _run(fleet, channel(None, lambda e: events.append(e)))
    assert run.ok, [(r.stack, r.error) for r in run.results]
    for r in run.results:
        assert kinds(events, r.stack) == ["queued", "started", "diagnostic", "finished"]
    assert {e.stack for e in events} == {r.stack for r in run.results}
    finished = [e for e in events if e.kind == "finished"]
    assert all(e.result.stack == e.stack for e in finished)


def test_two_argument_callback_keeps_working(fleet: Fleet) -> None:
    seen: list[tuple[str, StackEvent]] = []
    run = _run(fleet, channel(None, lambda stack, e: seen.append((stack, e))))
    assert run.ok
    assert seen and all(stack == e.stack for stack, e in seen)
    assert kinds([e for _, e in seen], "gateway") == ["queued", "started", "diagnostic", "finished"]


def test_skipped_stacks_are_one_skipped_event(fleet: Fleet) -> None:
    events: list[StackEvent] = []
    run = _run(fleet, channel(None, events.append), fail={"cluster-b"})
    assert run.result("gateway").outcome is Outcome.SKIPPED
    assert kinds(events, "gateway") == ["skipped"]
    assert kinds(events, "cluster-b")[-1] == "finished"


def test_a_raising_callback_never_fails_a_stack_and_is_reported_once(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def broken(event: StackEvent) -> None:
        calls.append(event.kind)
        raise RuntimeError("user bug")

    with caplog.at_level(logging.WARNING, logger="modelplane.driver"):
        run = _run(fleet, channel(None, broken))
    assert run.ok and {r.outcome for r in run.results} == {Outcome.SUCCEEDED}
    assert len(calls) == 4 * len(run.results)  # every event still reached the callback
    reports = [r for r in caplog.records if "on_event raised RuntimeError" in r.getMessage()]
    assert len(reports) == 1, [r.getMessage() for r in caplog.records]
    assert "user bug" in reports[0].getMessage() and reports[0].exc_info


def test_observer_and_callback_hear_the_same_run(fleet: Fleet) -> None:
    class Count(Observer):
        def __init__(self) -> None:
            self.finished: list[str] = []
            self.messages: list[str] = []

        def stack_finished(self, result: StackResult) -> None:
            self.finished.append(result.stack)

    count, events = Count(), []
    run = _run(fleet, channel(count, events.append))
    assert sorted(count.finished) == sorted(r.stack for r in run.results)
    assert sorted(e.stack for e in events if e.kind == "finished") == sorted(count.finished)


def test_without_a_callback_the_observer_is_the_channel() -> None:
    observer = Observer()
    assert channel(observer, None) is observer


def _one(e):  # noqa: ANN001, ANN202
    return e


def _two(stack, e):  # noqa: ANN001, ANN202
    return stack, e


@pytest.mark.parametrize(
    "callback, one",
    [
        (lambda e: e, True),
        (_one, True),
        (lambda e, extra=None: e, True),
        (lambda stack, e: e, False),
        (_two, False),
        (lambda *args: args, False),
        (print, False),  # no readable signature: the two-argument form, as before
        (EventCallback(lambda e: e).emit, True),  # a bound method
    ],
)
def test_the_callback_shape_is_read_from_its_signature(callback: Any, one: bool) -> None:
    assert takes_one_argument(callback) is one


def test_a_unit_without_an_engine_event_is_not_reported() -> None:
    events: list[StackEvent] = []
    callback = EventCallback(events.append)
    unit = StackUnit("gateway", Tier.GATEWAY, "InferenceGateway", "default")
    callback.stack_event(unit, None, type("Debug", (), {"stdout_event": object()})())  # type: ignore[arg-type]
    assert events == []
