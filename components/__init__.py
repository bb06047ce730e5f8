"""Pulumi ComponentResources of modelplane (one per kind; see design/architecture.md).

Exports are resolved lazily, so importing one component does not load every cloud SDK.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "cluster_provider": "components.providers",
    "InferenceClusterComponent": "components.inference_cluster",
    "ServingStack": "components.serving_stack",
    "GKECluster": "components.cloud.gke",
    "GKEClusterArgs": "components.cloud.gke",
    "GKENodePool": "components.cloud.gke",
    "GKEGpu": "components.cloud.gke",
    "GKENetworking": "components.cloud.gke",
    "EKSCluster": "components.cloud.eks",
    "EKSClusterArgs": "components.cloud.eks",
    "EKSNodePool": "components.cloud.eks",
    "EKSGpu": "components.cloud.eks",
    "EKSCapacityBlock": "components.cloud.eks",
    "EKSNetworking": "components.cloud.eks",
    "CHARTS": "components.charts",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'components' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
