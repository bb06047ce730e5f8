"""modelplane: serve large language models across a fleet of Kubernetes clusters, on Pulumi.

``from modelplane import Fleet`` is resolved lazily, so ``import modelplane`` stays cheap
and pure (no Pulumi import until the driver is used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelplane.driver.fleet import Fleet

__all__ = ["Fleet"]


def __getattr__(name: str) -> Any:
    if name == "Fleet":
        from modelplane.driver.fleet import Fleet

        return Fleet
    raise AttributeError(f"module 'modelplane' has no attribute {name!r}")
