"""Expected driver failures: each carries a message for people, never a traceback."""

from __future__ import annotations

from modelplane.api.errors import FleetInvalid

__all__ = [
    "BackendError",
    "DriverError",
    "EngineUnavailable",
    "FleetInvalid",
    "PassphraseMissing",
]


class DriverError(Exception):
    """A failure the user can act on; the CLI prints the message and exits non-zero."""


class PassphraseMissing(DriverError):
    """The backend needs the passphrase secrets provider and no passphrase is configured."""


class EngineUnavailable(DriverError):
    """The Pulumi CLI or its plugins cannot be found or do not start."""


class BackendError(DriverError):
    """The state backend URL is unusable."""
