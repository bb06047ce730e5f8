"""Small valid spec documents for the loader/validation tests, as plain dicts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

API = "modelplane.ai/v1alpha1"


def gpu_class(
    name: str = "l4",
    count: int = 1,
    provider: str | None = None,
    *,
    product: str | None = "NVIDIA L4",
    memory: str = "24Gi",
) -> dict[str, Any]:
    """An InferenceClass of ``count`` NVIDIA GPUs (``product``: their productName attribute,
    None for none; ``memory`` each); ``provider="GKE"``: provisioned as g2-standard-8."""
    gpu: dict[str, Any] = {
        "name": "gpu",
        "driver": "gpu.nvidia.com",
        "deviceClassName": "gpu.nvidia.com",
        "count": count,
    }
    if product is not None:
        gpu["attributes"] = {"productName": {"string": product}}
    gpu["capacity"] = {"memory": {"value": memory}}
    doc: dict[str, Any] = {
        "apiVersion": API,
        "kind": "InferenceClass",
        "metadata": {"name": name},
        "spec": {"devices": [gpu]},
    }
    if provider == "GKE":
        doc["spec"]["provisioning"] = {
            "provider": "GKE",
            "gke": {
                "machineType": "g2-standard-8",
                "accelerator": {"type": "nvidia-l4", "count": count},
            },
        }
    return doc


def existing_cluster(name: str = "c1", class_name: str = "l4", nodes: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": name, "labels": {"modelplane.ai/region": "r1"}},
        "spec": {
            "cluster": {"source": "Existing", "existing": {"renderTo": "out"}},
            "nodePools": [{"name": "gpu", "className": class_name, "nodeCount": nodes}],
        },
    }


def deployment(name: str = "m", ns: str = "team", tensor: int = 1, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicas": 1,
        "workers": {
            "topology": {"tensor": tensor},
            "resources": {"cpu": "1", "memory": "1Gi"},
            "template": {
                "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}]}
            },
        },
    }
    body.update(spec)
    return {
        "apiVersion": API,
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": body,
    }


def gateway(cluster: str = "c1") -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceGateway",
        "metadata": {"name": "default"},
        "spec": {"backend": "Traefik", "cluster": {"inferenceClusterRef": cluster}},
    }


def base_fleet() -> list[dict[str, Any]]:
    return [gpu_class(), existing_cluster(), deployment(), gateway()]


def write_fleet(root: Path, docs: list[dict[str, Any]], name: str = "fleet.yaml") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(yaml.safe_dump_all(copy.deepcopy(docs), sort_keys=False))
    return root


def as_yaml(*docs: dict[str, Any]) -> str:
    """The documents as one YAML stream (ending in a newline)."""
    return yaml.safe_dump_all(docs, sort_keys=False)


def error_paths(root: Path, docs: list[dict[str, Any]]) -> set[str]:
    """The field paths of every error loading ``docs`` (written to ``root``) reports."""
    from modelplane.api.loader import load_fleet

    write_fleet(root, docs)
    return {e.path for e in load_fleet(root).errors}
