"""Which clusters a stack acts on, and whether all of them only render manifests (pure).

An Existing cluster with ``renderTo`` has no API server: its provider writes manifests to a
directory. ``pulumi refresh`` of a stack that only acts on such clusters has nothing live to
read (the provider cannot reach a cluster), so ``modelplane refresh`` skips it and says why.
"""

from __future__ import annotations

from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import PlacementLock
from modelplane.stacks import StackUnit, cache_clusters


def stack_clusters(fleet: FleetSpec, lock: PlacementLock, unit: StackUnit) -> list[str]:
    """The InferenceClusters whose Kubernetes API the stack's resources live on."""
    if unit.kind == "InferenceCluster":
        return [unit.key]
    if unit.kind == "ModelCache":
        return cache_clusters(fleet, unit.key) if unit.key in fleet.caches else []
    if unit.kind == "ModelDeployment":
        return sorted({r.cluster for r in lock.replicas_of(unit.key)})
    if unit.kind == "InferenceGateway" and fleet.gateway is not None:
        # The front door's cluster (`default`: a kubeconfig of its own, so a live cluster).
        return [unit.key] if unit.key in fleet.clusters else []
    return []


def render_to(fleet: FleetSpec, cluster: str) -> str | None:
    spec = fleet.clusters.get(cluster)
    existing = spec.spec.cluster.existing if spec is not None else None
    return existing.render_to if existing is not None and existing.render_to else None


def refresh_skip_reason(fleet: FleetSpec, lock: PlacementLock, unit: StackUnit) -> str | None:
    """Why ``refresh`` skips the stack (every cluster it acts on renders), else None."""
    clusters = stack_clusters(fleet, lock, unit)
    targets = [render_to(fleet, c) for c in clusters]
    if not clusters or not all(targets):
        return None
    where = ", ".join(sorted({str(t) for t in targets}))
    return f"renders manifests to {where} (renderTo): no live cluster to read, nothing to refresh"
