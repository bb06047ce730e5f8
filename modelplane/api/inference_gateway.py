"""InferenceGateway: the fleet's front door, where ModelService routes live."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from modelplane.api.base import API_VERSION, DNSLabel, ObjectMeta, Strict
from modelplane.api.inference_cluster import KubeconfigSecretRef


class ExistingGatewayCluster(Strict):
    secret_ref: KubeconfigSecretRef
    """Where the gateway cluster's kubeconfig comes from."""


class GatewayCluster(Strict):
    inference_cluster_ref: DNSLabel | None = None
    """The InferenceCluster the gateway runs on."""
    existing: ExistingGatewayCluster | None = None
    """A cluster outside the fleet, reached with its kubeconfig."""

    @model_validator(mode="after")
    def _exactly_one(self) -> GatewayCluster:
        if (self.inference_cluster_ref is None) == (self.existing is None):
            raise ValueError("set exactly one of inferenceClusterRef or existing")
        return self


class InferenceGatewaySpec(Strict):
    backend: Literal["Traefik", "EnvoyGateway"] = "Traefik"
    """The gateway implementation: Traefik (default) or EnvoyGateway."""
    cluster: GatewayCluster
    """The cluster the gateway runs on (exactly one of inferenceClusterRef or existing)."""
    version: str | None = Field(default=None, description="chart version override")


class InferenceGateway(Strict):
    api_version: Literal["modelplane.ai/v1alpha1"] = API_VERSION
    kind: Literal["InferenceGateway"] = "InferenceGateway"
    metadata: ObjectMeta
    spec: InferenceGatewaySpec
