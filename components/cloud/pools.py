"""Node-pool list handling shared by the GKE and EKS cluster components."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class _Pool(Protocol):
    # Read-only: the pools are frozen dataclasses with a Literal role.
    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...


P = TypeVar("P", bound=_Pool)


def with_system_pool(kind: str, name: str, pools: Sequence[P], system: Callable[[], P]) -> list[P]:
    """The pools with the injected system pool first (unless one is given); names unique."""
    result = list(pools)
    if not any(p.role == "System" for p in result):
        result.insert(0, system())
    names = [p.name for p in result]
    if len(set(names)) != len(names):
        raise ValueError(f"{kind} {name!r}: node pool names must be unique: {names}")
    return result
