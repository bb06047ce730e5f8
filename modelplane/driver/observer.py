"""Hooks the driver calls while it runs (the CLI's live view implements them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelplane.driver.events import StackProgress
    from modelplane.driver.results import RunResult, StackResult
    from modelplane.stacks import StackUnit


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

    def stack_event(self, unit: StackUnit, progress: StackProgress) -> None:
        """An engine event was folded into ``progress``."""

    def stack_finished(self, result: StackResult) -> None:
        """The stack ended (also for stacks skipped without running)."""

    def run_finished(self, run: RunResult) -> None:
        """After the last stack."""
