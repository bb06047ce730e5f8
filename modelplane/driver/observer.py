"""The driver's one notification channel: hooks it calls while it runs.

The CLI's live view implements :class:`Observer`; a library user's ``on_event`` callback is
adapted into one (:class:`EventCallback`) once per operation, and :class:`Observers` fans
every hook out to each, so the driver itself only ever calls one observer.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from modelplane.driver.events import StackEvent, stack_event

if TYPE_CHECKING:
    from modelplane.driver.events import StackProgress
    from modelplane.driver.results import RunResult, StackResult
    from modelplane.stacks import StackUnit

log = logging.getLogger("modelplane.driver")

OnEvent = Callable[[StackEvent], Any] | Callable[[str, StackEvent], Any]
"""``on_event(event)`` (the event names its stack: ``event.stack``), or the two-argument
form ``on_event(stack_name, event)``."""


class Observer:
    """No-op base: override what you need. Methods are called from worker threads."""

    def message(self, text: str) -> None:
        """A line for people (engine bootstrap progress, lock written, ...)."""

    def run_started(self, operation: str, units: list[StackUnit]) -> None:
        """Before the first stack; ``units`` in tier order."""

    def stack_queued(self, unit: StackUnit) -> None:
        """A worker picked the stack up (selecting it, setting config, comparing inputs)."""

    def stack_started(self, unit: StackUnit, progress: StackProgress) -> None:
        """The engine operation on the stack begins."""

    def stack_event(self, unit: StackUnit, progress: StackProgress, event: Any) -> None:
        """The engine event ``event`` was folded into ``progress``."""

    def stack_finished(self, result: StackResult) -> None:
        """The stack ended (also for stacks skipped without running)."""

    def stack_skipped(self, result: StackResult) -> None:
        """The stack was not run: a stack it depends on did not succeed."""
        self.stack_finished(result)

    def run_finished(self, run: RunResult) -> None:
        """After the last stack."""


class Observers(Observer):
    """Every hook, to each observer in turn."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = list(observers)

    def message(self, text: str) -> None:
        for o in self.observers:
            o.message(text)

    def run_started(self, operation: str, units: list[StackUnit]) -> None:
        for o in self.observers:
            o.run_started(operation, units)

    def stack_queued(self, unit: StackUnit) -> None:
        for o in self.observers:
            o.stack_queued(unit)

    def stack_started(self, unit: StackUnit, progress: StackProgress) -> None:
        for o in self.observers:
            o.stack_started(unit, progress)

    def stack_event(self, unit: StackUnit, progress: StackProgress, event: Any) -> None:
        for o in self.observers:
            o.stack_event(unit, progress, event)

    def stack_finished(self, result: StackResult) -> None:
        for o in self.observers:
            o.stack_finished(result)

    def stack_skipped(self, result: StackResult) -> None:
        for o in self.observers:
            o.stack_skipped(result)

    def run_finished(self, run: RunResult) -> None:
        for o in self.observers:
            o.run_finished(run)


def takes_one_argument(callback: Callable[..., Any]) -> bool:
    """Whether ``callback`` is the one-argument form (exactly one required positional
    parameter and no ``*args``); anything else (or no readable signature, e.g. ``print``)
    gets the two-argument form ``(stack_name, event)``, as before."""
    try:
        parameters = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return False
    required = [p for p in parameters if p.kind in positional and p.default is p.empty]
    return len(required) == 1


class EventCallback(Observer):
    """A user's ``on_event`` callback as an observer: one :class:`StackEvent` per
    stack-level step. The callback never fails a stack: the first exception it raises is
    reported once (a warning with its traceback on the ``modelplane.driver`` logger), later
    ones are only counted (``failures``), and the run goes on."""

    def __init__(self, callback: OnEvent) -> None:
        self.callback = callback
        self.one_argument = takes_one_argument(callback)
        self.failures = 0
        self._lock = threading.Lock()

    def emit(self, event: StackEvent) -> None:
        try:
            call: Callable[..., Any] = self.callback
            if self.one_argument:
                call(event)
            else:
                call(event.stack, event)
        except Exception as exc:  # a user's callback must never fail a stack
            with self._lock:
                self.failures += 1
                first = self.failures == 1
            if first:
                text = (
                    f"on_event raised {type(exc).__name__}: {exc} (on the {event.kind} event "
                    f"of stack {event.stack}); the run goes on, later errors of the callback "
                    "are not reported"
                )
                log.warning(text, exc_info=exc)

    def stack_queued(self, unit: StackUnit) -> None:
        self.emit(StackEvent(unit.name, "queued"))

    def stack_started(self, unit: StackUnit, progress: StackProgress) -> None:
        self.emit(StackEvent(unit.name, "started"))

    def stack_event(self, unit: StackUnit, progress: StackProgress, event: Any) -> None:
        structured = stack_event(unit.name, event)
        if structured is not None:
            self.emit(structured)

    def stack_finished(self, result: StackResult) -> None:
        self.emit(StackEvent(result.stack, "finished", result=result))

    def stack_skipped(self, result: StackResult) -> None:
        self.emit(StackEvent(result.stack, "skipped", result=result))


def channel(observer: Observer | None, on_event: OnEvent | None) -> Observer:
    """The one observer an operation calls: ``observer`` and ``on_event`` together."""
    base = observer or Observer()
    if on_event is None:
        return base
    return Observers([base, EventCallback(on_event)])
