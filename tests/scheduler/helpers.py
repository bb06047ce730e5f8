"""Shared helpers of the scheduler tests (fleets of h100 clusters, where replicas went)."""

from __future__ import annotations

from typing import Any

from modelplane.scheduler import ScheduleResult
from tests.factories import cluster, inference_class, pool

MEM = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{}")) >= 0'
EFA = 'device.attributes["dra.net"].linkType == "efa"'
H100 = inference_class("h100", 8)


def where(result: ScheduleResult, key: str) -> list[tuple[str, int]]:
    """(cluster, index) of every replica of a deployment, in lock order."""
    return [(r.cluster, r.index) for r in result.lock.deployments[key].replicas]


def pools_of(result: ScheduleResult, key: str) -> list[dict[str, str]]:
    return [dict(r.pools) for r in result.lock.deployments[key].replicas]


def gpu_clusters(*specs: tuple[str, int]) -> list[Any]:
    """Clusters with one h100 pool `p` of the given node count each."""
    return [cluster(name, [pool("p", "h100", nodes)]) for name, nodes in specs]
