"""The one root of modelplane's expected failures (pure: no I/O, no imports).

Every exception modelplane raises on purpose derives from :class:`ModelplaneError` and
says, by its family, what the command line does with it (``modelplane.cli`` catches the
root once, prints the message, never a traceback, and exits with ``exit_code``):

- :class:`UserError` (exit 2): the input is wrong (a spec, a flag, a secret reference);
  fixing the input fixes it.
- :class:`EnvironmentProblem` (exit 1): the machine or what it reaches is not as needed
  (no engine, no Go, no passphrase, a cluster that does not answer).
- :class:`Retryable` (exit 1): the same call may succeed later (``delay`` seconds is a
  hint), e.g. a stack locked by another update; ``reconcile`` retries these next round.

Anything else that escapes is a bug and keeps its traceback. A class may also derive from
the built-in it replaces (``ValueError``, ``LookupError``, ...) so that existing
``except`` clauses keep working.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["EnvironmentProblem", "ModelplaneError", "Retryable", "UserError", "exit_code"]


class ModelplaneError(Exception):
    """An expected failure with a message for people."""

    exit_code: ClassVar[int] = 1


class UserError(ModelplaneError):
    """The input is wrong; the message says which file, object and field."""

    exit_code: ClassVar[int] = 2


class EnvironmentProblem(ModelplaneError):
    """The machine (or a server it talks to) is not as needed."""

    exit_code: ClassVar[int] = 1


class Retryable(ModelplaneError):
    """May succeed when tried again later."""

    exit_code: ClassVar[int] = 1

    def __init__(self, *args: object, delay: float = 0.0) -> None:
        super().__init__(*args)
        self.delay = delay


def exit_code(exc: BaseException) -> int:
    """The command line's exit code for ``exc`` (1 for anything not ours)."""
    return exc.exit_code if isinstance(exc, ModelplaneError) else 1
