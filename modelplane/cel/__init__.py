"""The Kubernetes DRA device-selector CEL dialect, on cel-python.

``compile_selector(expr).matches(device)``; build devices with
``Device.from_class_device``. celpy is imported only when a selector is first
needed, so ``parse_quantity`` stays cheap to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelplane.cel.device import AttributeValue, Device, split_name
from modelplane.cel.quantity import Quantity, is_quantity, parse_quantity
from modelplane.cel.semver import Semver, is_semver, parse_semver

if TYPE_CHECKING:
    from modelplane.cel.selector import (
        MAX_EXPRESSION_LENGTH,
        CelCompileError,
        DeviceSelector,
        compile_selector,
    )

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "AttributeValue",
    "CelCompileError",
    "Device",
    "DeviceSelector",
    "Quantity",
    "Semver",
    "compile_selector",
    "is_quantity",
    "is_semver",
    "parse_quantity",
    "parse_semver",
    "split_name",
]

_LAZY = frozenset(
    {"MAX_EXPRESSION_LENGTH", "CelCompileError", "DeviceSelector", "compile_selector"}
)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from modelplane.cel import selector

        return getattr(selector, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
