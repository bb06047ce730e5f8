"""The spec kinds modelplane reads, and whether each is namespaced."""

from __future__ import annotations

from pydantic import BaseModel

from modelplane.api.inference_class import InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.model_cache import ModelCache
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.model_service import ModelEndpoint, ModelService

KINDS: dict[str, type[BaseModel]] = {
    "InferenceClass": InferenceClass,
    "InferenceCluster": InferenceCluster,
    "InferenceGateway": InferenceGateway,
    "ModelDeployment": ModelDeployment,
    "ModelService": ModelService,
    "ModelEndpoint": ModelEndpoint,
    "ModelCache": ModelCache,
}

NAMESPACED = frozenset({"ModelDeployment", "ModelService", "ModelEndpoint", "ModelCache"})
