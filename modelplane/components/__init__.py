"""Pulumi ComponentResources of modelplane (one per kind; see design/architecture.md).

Exports are resolved lazily, so importing one component does not load every cloud SDK.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "cluster_provider": "modelplane.components.providers",
    "InferenceClusterComponent": "modelplane.components.inference_cluster",
    "ServingStack": "modelplane.components.serving_stack",
    "GKECluster": "modelplane.components.cloud.gke",
    "GKEClusterArgs": "modelplane.components.cloud.gke",
    "GKENodePool": "modelplane.components.cloud.gke",
    "GKEGpu": "modelplane.components.cloud.gke",
    "GKENetworking": "modelplane.components.cloud.gke",
    "EKSCluster": "modelplane.components.cloud.eks",
    "EKSClusterArgs": "modelplane.components.cloud.eks",
    "EKSNodePool": "modelplane.components.cloud.eks",
    "EKSGpu": "modelplane.components.cloud.eks",
    "EKSCapacityBlock": "modelplane.components.cloud.eks",
    "EKSNetworking": "modelplane.components.cloud.eks",
    "CHARTS": "modelplane.components.charts",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'modelplane.components' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
