"""A loaded fleet: every validated spec object, indexed by kind and key."""

from __future__ import annotations

from dataclasses import dataclass, field

from modelplane.api.inference_class import InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.model_cache import ModelCache
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.model_service import ModelEndpoint, ModelService


@dataclass
class FleetSpec:
    """Every object of a fleet. Cluster-scoped kinds by name, namespaced by `ns/name`.

    Dicts are sorted by key so everything derived from them is independent of
    the order files were read in.
    """

    classes: dict[str, InferenceClass] = field(default_factory=dict)
    clusters: dict[str, InferenceCluster] = field(default_factory=dict)
    gateway: InferenceGateway | None = None
    deployments: dict[str, ModelDeployment] = field(default_factory=dict)
    services: dict[str, ModelService] = field(default_factory=dict)
    endpoints: dict[str, ModelEndpoint] = field(default_factory=dict)
    caches: dict[str, ModelCache] = field(default_factory=dict)
    # Which file each object came from: (kind, key) -> (path, document index)
    sources: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    # Objects that exist in the files but failed validation: references to them are not
    # reported again (their own errors already are).
    invalid: set[tuple[str, str]] = field(default_factory=set)

    @property
    def empty(self) -> bool:
        """No object at all, valid or not."""
        objects = (self.classes, self.clusters, self.deployments, self.services, self.endpoints)
        return not any(objects) and not self.caches and self.gateway is None and not self.invalid

    def declared(self, kind: str, key: str) -> bool:
        return (kind, key) in self.sources or (kind, key) in self.invalid

    def sort(self) -> None:
        for name in ("classes", "clusters", "deployments", "services", "endpoints", "caches"):
            setattr(self, name, dict(sorted(getattr(self, name).items())))
