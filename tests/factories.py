"""Small builders of spec objects for tests (camelCase dicts through `model_validate`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_class import InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.model_cache import ModelCache
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import PlacementLock

GPU_DRIVER = "gpu.nvidia.com"


def document(kind: str, metadata: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """A modelplane.ai/v1alpha1 object of ``kind``."""
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    }


def gpu_device(
    count: int = 8,
    *,
    name: str = "gpu",
    memory: str = "80Gi",
    product: str = "NVIDIA H100",
    compute: str = "9.0.0",
    claim: str = "DRA",
    driver: str = GPU_DRIVER,
) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": name,
        "driver": driver,
        "claim": claim,
        "count": count,
        "attributes": {
            "productName": {"string": product},
            "cudaComputeCapability": {"version": compute},
        },
        "capacity": {"memory": {"value": memory}},
    }
    if claim == "DRA":
        device["deviceClassName"] = driver
    return device


def nic_device(count: int = 16, *, link: str = "efa", claim: str = "Synthetic") -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": "nic",
        "driver": "dra.net",
        "claim": claim,
        "count": count,
        "attributes": {"linkType": {"string": link}},
    }
    if claim == "DRA":
        device["deviceClassName"] = "dra.net"
    return device


def inference_class(
    name: str,
    gpus: int = 8,
    *,
    devices: list[dict[str, Any]] | None = None,
    allocatable: tuple[str, str] | None = None,
    provisioning: dict[str, Any] | None = None,
    **gpu: Any,
) -> InferenceClass:
    """A class whose node carries `devices`, by default one DRA GPU kind of `gpus` devices;
    `allocatable` is the node's (cpu, memory)."""
    spec: dict[str, Any] = {
        "devices": devices if devices is not None else [gpu_device(gpus, **gpu)]
    }
    if allocatable is not None:
        spec["allocatable"] = {"cpu": allocatable[0], "memory": allocatable[1]}
    if provisioning is not None:
        spec["provisioning"] = provisioning
    return InferenceClass.model_validate(document("InferenceClass", {"name": name}, spec))


def pool(
    name: str, class_name: str, nodes: int = 1, max_nodes: int | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "className": class_name, "nodeCount": nodes}
    if max_nodes is not None:
        spec["maxNodeCount"] = max_nodes
    return spec


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> dict[str, Any]:
    return {"key": key, "value": value, "effect": effect}


def cluster(
    name: str,
    pools: Iterable[dict[str, Any]],
    *,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[dict[str, Any]] = (),
) -> InferenceCluster:
    """An Existing cluster (rendered to a directory) with the given node pools."""
    return InferenceCluster.model_validate(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "InferenceCluster",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {
                "cluster": {"source": "Existing", "existing": {"renderTo": f"out/{name}"}},
                "nodePools": list(pools),
                "taints": list(taints),
            },
        }
    )


def request(name: str = "gpu", count: int | None = None, *cel: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "selectors": [{"cel": c} for c in cel]}
    if count is not None:
        spec["count"] = count
    return spec


def role(
    tensor: int = 1,
    *,
    pipeline: int = 1,
    data: int = 1,
    data_local: int = 1,
    workers: int = 1,
    devices: list[dict[str, Any]] | None = None,
    resources: tuple[str, str] = ("4", "16Gi"),
) -> dict[str, Any]:
    """A role: `workers` workers of the given topology, with an optional nodeSelector;
    `resources` is each pod's (cpu, memory)."""
    spec: dict[str, Any] = {
        "workers": {
            "count": workers,
            "topology": {
                "tensor": tensor,
                "pipeline": pipeline,
                "data": data,
                "dataLocal": data_local,
            },
            "resources": {"cpu": resources[0], "memory": resources[1]},
            "template": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm:1"}]}},
        }
    }
    if devices is not None:
        spec["nodeSelector"] = {"devices": devices}
    return spec


def deployment(
    name: str,
    replicas: int = 1,
    *,
    namespace: str = "ml",
    tensor: int = 1,
    pipeline: int = 1,
    data: int = 1,
    data_local: int = 1,
    workers: int = 1,
    devices: list[dict[str, Any]] | None = None,
    prefill: dict[str, Any] | None = None,
    decode: dict[str, Any] | None = None,
    selector: Mapping[str, Any] | None = None,
    tolerations: Iterable[dict[str, Any]] = (),
    priority: int = 0,
    cache: str | None = None,
    autoscaling: Mapping[str, Any] | None = None,
    resources: tuple[str, str] = ("4", "16Gi"),
) -> ModelDeployment:
    """A unified deployment, or a disaggregated one when `prefill` and `decode` are given."""
    spec: dict[str, Any] = {
        "replicas": replicas,
        "tolerations": list(tolerations),
        "priority": priority,
    }
    if autoscaling is not None:
        spec["autoscaling"] = dict(autoscaling)
    if selector is not None:
        spec["clusterSelector"] = dict(selector)
    if prefill is not None or decode is not None:
        spec["prefill"], spec["decode"] = prefill, decode
    else:
        spec.update(
            role(
                tensor,
                pipeline=pipeline,
                data=data,
                data_local=data_local,
                workers=workers,
                devices=devices,
                resources=resources,
            )
        )
    if cache is not None:
        spec["modelCacheRef"] = {"name": cache}
    return ModelDeployment.model_validate(
        document("ModelDeployment", {"name": name, "namespace": namespace}, spec)
    )


def model_cache(
    name: str, *, namespace: str = "ml", selector: Mapping[str, Any] | None = None
) -> ModelCache:
    spec: dict[str, Any] = {
        "source": "HuggingFace",
        "huggingFace": {"repo": "org/model"},
        "sizeGiB": 10,
    }
    if selector is not None:
        spec["clusterSelector"] = dict(selector)
    return ModelCache.model_validate(
        document("ModelCache", {"name": name, "namespace": namespace}, spec)
    )


def fleet(
    classes: Iterable[InferenceClass] = (),
    clusters: Iterable[InferenceCluster] = (),
    deployments: Iterable[ModelDeployment] = (),
    caches: Iterable[ModelCache] = (),
) -> FleetSpec:
    """A FleetSpec with its dicts filled in the order given (not sorted)."""
    return FleetSpec(
        classes={c.metadata.name: c for c in classes},
        clusters={c.metadata.name: c for c in clusters},
        deployments={d.key: d for d in deployments},
        caches={c.key: c for c in caches},
    )


def lock(
    deployments: Mapping[str, Iterable[tuple[str, str, int, Mapping[str, str]]]],
) -> PlacementLock:
    """A lock from {deployment key: [(name, cluster, index, pools), ...]}."""
    return PlacementLock.model_validate(
        {
            "deployments": {
                key: {
                    "replicas": [
                        {"name": n, "cluster": c, "index": i, "pools": dict(p)}
                        for n, c, i, p in reps
                    ]
                }
                for key, reps in deployments.items()
            }
        }
    )


def draining(
    lock: PlacementLock, names: Iterable[str], *, gone: Iterable[str] = ()
) -> PlacementLock:
    """``lock`` with exactly the replicas ``names`` draining (every other one not) and the
    replicas ``gone`` left out."""
    drain, out = set(names), set(gone)
    deployments = {
        key: d.model_copy(
            update={
                "replicas": [
                    r.model_copy(update={"draining": r.name in drain})
                    for r in d.replicas
                    if r.name not in out
                ]
            }
        )
        for key, d in lock.deployments.items()
    }
    return lock.model_copy(update={"deployments": deployments})
