"""Replica and pod sizes in GPUs, and the lowest free replica index."""

from __future__ import annotations

from collections.abc import Sequence

from modelplane.api.model_deployment import ModelDeployment


def replica_gpus(dep: ModelDeployment) -> int:
    """GPUs one replica asks for, over all its roles and pods."""
    return sum(
        role.workers.count * role.workers.topology.shape.gpus_per_worker
        for role in dep.spec.roles.values()
    )


def pod_gpus(dep: ModelDeployment) -> int:
    """GPUs of the largest pod of one replica."""
    return max(role.workers.topology.shape.gpus_per_node for role in dep.spec.roles.values())


def lowest_free(taken: set[int] | Sequence[int]) -> int:
    """The lowest non-negative integer not in `taken`."""
    used = set(taken)
    return next(i for i in range(len(used) + 1) if i not in used)
