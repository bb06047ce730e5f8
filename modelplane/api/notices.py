"""Warnings: specs that are valid but almost surely not what was meant (api.md).

A ModelService entry whose selector can match nothing in the fleet: no hand-written
ModelEndpoint of its namespace and no composed endpoint any ModelDeployment of its
namespace could have. Composed endpoints carry `modelplane.ai/deployment`, the
deployment's template labels, `modelplane.ai/cluster` (any cluster of the fleet) and
`modelplane.ai/replica-index` (any index below `replicas`, or autoscaling's
`maxReplicas` when larger), so the last two are matched
as "some value of the fleet", not as one fixed value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from modelplane.api.base import LabelSelector
from modelplane.api.errors import SpecError
from modelplane.api.fleet import FleetSpec
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.model_service import ModelService
from modelplane.api.names import DEPLOYMENT_LABEL

CLUSTER_LABEL = "modelplane.ai/cluster"
INDEX_LABEL = "modelplane.ai/replica-index"


def _value_fits(selector: LabelSelector, key: str, candidates: Iterable[str]) -> bool:
    """Whether some candidate value of `key` (always present) satisfies every
    requirement of the selector on `key`."""
    wanted = selector.match_labels.get(key)
    reqs = [r for r in selector.match_expressions if r.key == key]
    if wanted is None and not reqs:
        return True
    for value in candidates:
        if wanted is not None and value != wanted:
            continue
        if all(
            (r.operator == "In" and value in r.values)
            or (r.operator == "NotIn" and value not in r.values)
            or r.operator == "Exists"
            for r in reqs
        ):
            return True
    return False


def _fixed_part(selector: LabelSelector, free: tuple[str, ...]) -> LabelSelector:
    return LabelSelector.model_construct(
        match_labels={k: v for k, v in selector.match_labels.items() if k not in free},
        match_expressions=[r for r in selector.match_expressions if r.key not in free],
    )


def can_match_deployment(
    selector: LabelSelector, labels: dict[str, str], clusters: list[str], replicas: int
) -> bool:
    """Whether a composed endpoint of a deployment (fixed `labels`) could be selected."""
    free = (CLUSTER_LABEL, INDEX_LABEL)
    if not _fixed_part(selector, free).matches(labels):
        return False
    indexes = (str(i) for i in range(max(replicas, 1)))
    return _value_fits(selector, CLUSTER_LABEL, clusters) and _value_fits(
        selector, INDEX_LABEL, indexes
    )


def serves(service: ModelService, dep: ModelDeployment, clusters: list[str]) -> bool:
    """Some entry of the service can select a replica of the deployment (same namespace)."""
    if (service.metadata.namespace or "default") != (dep.metadata.namespace or "default"):
        return False
    labels = {**dep.template_labels(), DEPLOYMENT_LABEL: dep.metadata.name}
    auto = dep.spec.autoscaling
    count = max(dep.spec.replicas, auto.max_replicas if auto is not None else 0)
    return any(
        can_match_deployment(entry.selector, labels, clusters, count)
        for entry in service.spec.endpoints
    )


def scalable_to_zero(dep: ModelDeployment) -> bool:
    """`autoscaling.minReplicas: 0` (api.md, "Scale to zero")."""
    return dep.spec.autoscaling is not None and dep.spec.autoscaling.min_replicas == 0


def _service_warnings(fleet: FleetSpec) -> Iterator[SpecError]:
    if not fleet.services:
        return
    clusters = list(fleet.clusters)
    invalid_ns = {
        key.split("/", 1)[0]
        for kind, key in fleet.invalid
        if kind in ("ModelDeployment", "ModelEndpoint") and "/" in key
    }
    for key, svc in fleet.services.items():
        ns = svc.metadata.namespace or "default"
        if ns in invalid_ns:
            continue  # an object it may select is invalid: its own errors say why
        endpoints = [
            dict(ep.metadata.labels)
            for ep in fleet.endpoints.values()
            if (ep.metadata.namespace or "default") == ns
        ]
        deployments = [
            (
                {**dep.template_labels(), DEPLOYMENT_LABEL: dep.metadata.name},
                max(dep.spec.replicas, dep.spec.autoscaling.max_replicas)
                if dep.spec.autoscaling is not None
                else dep.spec.replicas,
            )
            for dep in fleet.deployments.values()
            if (dep.metadata.namespace or "default") == ns
        ]
        for i, entry in enumerate(svc.spec.endpoints):
            sel = entry.selector
            if any(sel.matches(labels) for labels in endpoints):
                continue
            if any(
                can_match_deployment(sel, labels, clusters, replicas)
                for labels, replicas in deployments
            ):
                continue
            file, doc = fleet.sources.get(("ModelService", key), ("", 0))
            yield SpecError(
                file,
                doc,
                f"ModelService {key}",
                f"spec.endpoints[{i}].selector",
                f"selects nothing in the fleet: no ModelDeployment or ModelEndpoint in "
                f"namespace {ns!r} can carry the labels {sel.describe()}",
            )


def fleet_warnings(fleet: FleetSpec) -> list[SpecError]:
    return sorted(_service_warnings(fleet))
