"""Node pools as the GKE and EKS cluster components share them: the common shape of a pool and
the list handling (the injected system pool, unique names)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Literal, Protocol, TypeVar

G = TypeVar("G")


@dataclass(frozen=True, kw_only=True)
class NodePoolShape(Generic[G]):
    """What every cloud's node pool has: a name, a role, disks, node counts (each cloud sets
    its own ``min_node_count`` default), the GPU (``G``, the cloud's) and zones. A GPU pool
    needs a GPU and zones."""

    cloud: ClassVar[str]
    name: str
    role: Literal["System", "GPU"]
    disk_size_gb: int = 100
    node_count: int = 1
    min_node_count: int
    max_node_count: int = 8
    gpu: G | None = None
    zones: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.role == "GPU" and (self.gpu is None or not self.zones):
            raise ValueError(
                f"{self.cloud} node pool {self.name!r}: a GPU pool needs gpu and zones"
            )


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
