"""modelplane: serve large language models across a fleet of Kubernetes clusters, on Pulumi.

The library face::

    from modelplane import Fleet, FleetInvalid, DriverError, RunResult, StackResult

Every expected failure is a ``ModelplaneError`` (``modelplane.errors``).

``Fleet`` and the result types are resolved lazily, so ``import modelplane`` stays cheap and
pure (no Pulumi import until the driver is used).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelplane.api.errors import FleetInvalid
    from modelplane.driver.errors import DriverError
    from modelplane.driver.events import StackEvent
    from modelplane.driver.fleet import Fleet, FleetStatus
    from modelplane.driver.results import Outcome, RunResult, StackResult
    from modelplane.errors import ModelplaneError

__all__ = [
    "DriverError",
    "Fleet",
    "FleetInvalid",
    "FleetStatus",
    "ModelplaneError",
    "Outcome",
    "RunResult",
    "StackEvent",
    "StackResult",
    "__version__",
]

_LAZY = {
    "Fleet": "modelplane.driver.fleet",
    "FleetStatus": "modelplane.driver.fleet",
    "FleetInvalid": "modelplane.api.errors",
    "DriverError": "modelplane.driver.errors",
    "ModelplaneError": "modelplane.errors",
    "Outcome": "modelplane.driver.results",
    "RunResult": "modelplane.driver.results",
    "StackResult": "modelplane.driver.results",
    "StackEvent": "modelplane.driver.events",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("modelplane")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def __getattr__(name: str) -> Any:
    if name == "__version__":  # importlib.metadata is slow to import: only when asked
        return _version()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'modelplane' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
