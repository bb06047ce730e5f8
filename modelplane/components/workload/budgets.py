"""Disruption budgets of a deployment's serving pods on each cluster (issue 21, part 3).

A model replica that loses a pod is down for the model's whole load time (minutes on GPUs), and
the fleet-level guarantee -- never fewer than `replicas - maxUnavailable` replicas routable --
cannot be kept by clusters evicting pods on their own (node upgrades, `kubectl drain`, the
cluster autoscaler). So voluntary disruption of a serving pod goes through modelplane (a
rollout, `modelplane drain`), which keeps that budget across clusters, and each cluster is told
to leave serving pods alone:

- one PodDisruptionBudget per deployment and role on each cluster hosting it, `maxUnavailable:
  0` over all the role's pods -- for a LeaderWorkerSet role the leaders *and* the workers:
  evicting any pod of a group makes the LWS controller recreate the whole group
  (`RecreateGroupOnPodRestart`), so the budget must hold every one. Evictions wait; deletes and
  updates (what modelplane does) are not affected. `unhealthyPodEvictionPolicy: AlwaysAllow`:
  a pod that is not Ready serves nothing, so it never blocks a node drain (a worker has no
  probe, so it is Ready while it runs and held even while its group loads);
- the annotation `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` on every serving
  pod (`pods.py`), so the cluster autoscaler does not scale their nodes down.

Pure: manifests as dicts.
"""

from __future__ import annotations

from collections.abc import Iterable

from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.names import child_name
from modelplane.components.workload.objects import (
    DEPLOYMENT,
    ROLE,
    SAFE_TO_EVICT,
    Manifest,
    app_labels,
    labels,
    metadata,
)

__all__ = ["SAFE_TO_EVICT", "budget_name", "disruption_budgets"]

BUDGET_COMPONENT = "disruption-budget"


def budget_name(deployment: ModelDeployment, role: str) -> str:
    return child_name(deployment.metadata.name, role)


def disruption_budgets(
    deployment: ModelDeployment, roles: Iterable[str] | None = None
) -> list[Manifest]:
    """The PodDisruptionBudgets of one deployment on one cluster: one per role (``roles``:
    the roles placed there; default every role of the deployment)."""
    ns = deployment.metadata.namespace or "default"
    model = deployment.metadata.name
    spec_roles = deployment.spec.roles
    out: list[Manifest] = []
    for role_name in sorted(roles if roles is not None else spec_roles):
        # Every pod of the role: for a LeaderWorkerSet the workers too (a worker's eviction
        # restarts its whole group, leader included).
        selector = {DEPLOYMENT: model, ROLE: role_name}
        object_labels = labels(
            app_labels(model, model, BUDGET_COMPONENT), {DEPLOYMENT: model, ROLE: role_name}
        )
        out.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": metadata(budget_name(deployment, role_name), ns, object_labels),
                "spec": {
                    "maxUnavailable": 0,
                    "selector": {"matchLabels": selector},
                    "unhealthyPodEvictionPolicy": "AlwaysAllow",
                },
            }
        )
    return out
