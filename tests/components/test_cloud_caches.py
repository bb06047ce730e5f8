"""ModelCache volumes per cloud (issue 36, N7): on GKE each cache is one Filestore instance of
its tier, sized for its bytes and its throughput hint; on EKS an access point on the cluster's
elastic-throughput EFS file system; elsewhere the platform's class at `sizeGiB`. Pulumi's
mocks; `pytest -k "gke or eks or cloud"`."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi_kubernetes as k8s
import pytest

from modelplane.api.model_cache import ModelCache
from modelplane.components.model_cache import ModelCacheComponent
from tests.components.cluster_helpers import eks_cluster, eks_run
from tests.components.workload_helpers import CACHE, target
from tests.pulumi_mocks import MockRun

PVC = "kubernetes:core/v1:PersistentVolumeClaim"


def _cache(**spec: Any) -> ModelCache:
    doc = CACHE.model_dump(by_alias=True, exclude_none=True)
    doc["spec"].update(spec)
    return ModelCache.model_validate(doc)


def _pvc(cache: ModelCache, cloud: str | None) -> dict[str, Any]:
    def program() -> ModelCacheComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        where = dataclasses.replace(target(provider), cloud=cloud)
        return ModelCacheComponent("coder", cache, {"west": where})

    run = MockRun.of(program)
    pvc = run.one(PVC)
    return {
        "class": pvc.get("spec.storageClassName"),
        "storage": pvc.get("spec.resources.requests.storage"),
    }


@pytest.mark.parametrize(
    ("spec", "cloud", "pvc"),
    [
        # GKE: at least the Zonal tier's 1 TiB; sized up for the throughput hint (1,000 MiB/s
        # at 260 MiB/s per TiB: 4 TiB); Regional on its own class.
        ({"sizeGiB": 300}, "GKE", {"class": "modelplane-rwx", "storage": "1024Gi"}),
        (
            {"sizeGiB": 300, "throughputMiBps": 1000},
            "GKE",
            {"class": "modelplane-rwx", "storage": "4096Gi"},
        ),
        (
            {"sizeGiB": 1100, "filestore": {"tier": "Regional"}},
            "GKE",
            {"class": "modelplane-rwx-regional", "storage": "1280Gi"},
        ),
        # EKS and Existing: the cluster's class at sizeGiB (EFS is elastic, not sized).
        ({"sizeGiB": 300, "throughputMiBps": 1000}, "EKS", {"class": "rwx", "storage": "300Gi"}),
        ({"sizeGiB": 300, "throughputMiBps": 1000}, None, {"class": "rwx", "storage": "300Gi"}),
    ],
    ids=["gke-minimum", "gke-throughput", "gke-regional", "eks", "existing"],
)
def test_cloud_cache_volume_per_cloud(
    spec: dict[str, Any], cloud: str | None, pvc: dict[str, str]
) -> None:
    assert _pvc(_cache(**spec), cloud) == pvc


def test_eks_cache_file_system_has_elastic_throughput() -> None:
    run = eks_run("eks-west", eks_cluster())
    efs = run.one("aws:efs/fileSystem:FileSystem")
    # Elastic: throughput follows the load (up to 1,500 MiB/s per client), no size to tune.
    assert efs.inputs["throughputMode"] == "elastic"
    assert efs.inputs["performanceMode"] == "generalPurpose"
