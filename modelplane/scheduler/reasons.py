"""The text of shortfall reasons: one per cluster considered, `<cluster>: <why>`.

The helpers below return the `<why>`; `at` prefixes the cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

from modelplane.api.inference_cluster import Taint
from modelplane.scheduler.taints import CORDON_KEY

NO_CLUSTERS = "the fleet has no InferenceCluster"
NO_SELECTOR_MATCH = "no InferenceCluster matches clusterSelector"


def at(cluster: str, why: str) -> str:
    return f"{cluster}: {why}"


def not_covered(cache: str) -> str:
    return f"not covered by ModelCache {cache}"


def taints_not_tolerated(taints: Sequence[Taint]) -> str:
    if any(t.key == CORDON_KEY for t in taints):
        return f"cordoned (taint {CORDON_KEY}:NoSchedule): no new replicas until uncordoned"
    if len(taints) == 1:
        return f"taint {taints[0].describe()} not tolerated"
    return f"taints {', '.join(t.describe() for t in taints)} not tolerated"


def no_pool_matches(role: str, requests: Sequence[str]) -> str:
    if len(requests) == 1:
        return f"no pool matches {role} device {requests[0]}"
    return f"no pool matches {role} devices {', '.join(requests)}"


def no_pool_offers(role: str, resources: str) -> str:
    return f"no pool of the cluster offers {role}'s {resources} per pod"


def pool_short(pool: str, free_nodes: int, role: str, needs: int, device_nodes: int = 0) -> str:
    """`device_nodes`: nodes with the devices but not the CPU or memory for one more pod."""
    nodes = "node" if free_nodes == 1 else "nodes"
    text = f"pool {pool} has {free_nodes} free {nodes}, {role} needs {needs}"
    if device_nodes:
        more = "node has" if device_nodes == 1 else "nodes have"
        text += f" (cpu/memory: {device_nodes} more {more} the devices)"
    return text


def pool_fragmented(pool: str, role: str) -> str:
    return f"pool {pool} has no room for {role} next to the replicas already there"


def roles_together(roles: Sequence[str]) -> str:
    return f"no room for {' and '.join(roles)} together"


def held_by_removed(held: Sequence[tuple[str, str, int]]) -> str:
    """A reason's suffix naming what removed deployments hold: (deployment, pool, devices)."""
    if not held:
        return ""
    parts = [f"removed {key} holds {n} devices on {pool}" for key, pool, n in held]
    return f" ({'; '.join(parts)} until up --prune)"
