"""Taints and tolerations, with Kubernetes semantics."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from modelplane.api.inference_cluster import Taint
from modelplane.api.model_deployment import Toleration

# Effects that keep new replicas off a cluster, and those that also evict kept ones.
BLOCKS_NEW = ("NoSchedule", "NoExecute")
EVICTS = ("NoExecute",)
# The taint health-aware scheduling puts on an unhealthy cluster (health.rules).
UNHEALTHY_KEY = "modelplane.ai/unhealthy"
# The taint a cordon puts on a cluster (`modelplane drain`, scheduler.cordon): NoSchedule,
# and no toleration tolerates it (a drain must move even a tolerate-everything deployment).
CORDON_KEY = "modelplane.ai/cordoned"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes `Toleration.ToleratesTaint`; a cordon's taint is never tolerated.

    An empty effect matches every effect; an empty key (only valid with
    `Exists`) matches every key; `Exists` ignores the value; `Equal` needs it equal.
    """
    if taint.key == CORDON_KEY:
        return False
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.value == taint.value


def untolerated(
    taints: Iterable[Taint], tolerations: Sequence[Toleration], effects: Sequence[str]
) -> list[Taint]:
    """The taints with one of `effects` that no toleration tolerates, in cluster order."""
    return [
        taint
        for taint in taints
        if taint.effect in effects and not any(tolerates(t, taint) for t in tolerations)
    ]
