"""Expected driver failures: each carries a message for people, never a traceback."""

from __future__ import annotations

from modelplane.api.errors import FleetInvalid
from modelplane.errors import EnvironmentProblem, ModelplaneError, Retryable

__all__ = [
    "BackendError",
    "DriverError",
    "EngineFailed",
    "EngineUnavailable",
    "FleetIdTaken",
    "FleetInvalid",
    "PassphraseMissing",
    "StackLocked",
]


class DriverError(ModelplaneError):
    """A failure the user can act on; the CLI prints the message and exits 1."""


class PassphraseMissing(DriverError, EnvironmentProblem):
    """The backend needs the passphrase secrets provider and no passphrase is configured."""


class EngineUnavailable(DriverError, EnvironmentProblem):
    """The Pulumi CLI or its plugins cannot be found or do not start."""


class BackendError(DriverError, EnvironmentProblem):
    """The state backend URL is unusable."""


class FleetIdTaken(BackendError):
    """A shared runtime store holds the fleet's id for another fleet (another fleet uid):
    refused before anything is read or written (docs/architecture.md, "Where runtime state
    lives")."""


class StackLocked(DriverError, Retryable):
    """Another update holds the stack's lock (``reconcile`` retries next round)."""


class EngineFailed(DriverError):
    """The engine ran the stack and it failed (a program, provider or engine error)."""
