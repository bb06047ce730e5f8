"""Shared fixtures for the InferenceCluster component tests (classes, clusters, checks)."""

from __future__ import annotations

from typing import Any

from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_class import InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.placement_lock import PlacementLock
from modelplane.components.charts import CHARTS
from modelplane.components.inference_cluster import InferenceClusterComponent
from modelplane.network import plan_addresses, with_addresses
from tests.pulumi_mocks import MockRun, Registered, Secret

COMPONENT_TYPES = {
    "modelplane:cluster:InferenceCluster",
    "modelplane:cluster:ServingStack",
    "modelplane:cloud:GKECluster",
    "modelplane:cloud:EKSCluster",
}
RELEASE = "kubernetes:helm.sh/v3:Release"
NODE_POOL = "gcp:container/nodePool:NodePool"
MNG = "eks:index:ManagedNodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
K8S_PROVIDER = "pulumi:providers:kubernetes"


# --- spec builders --------------------------------------------------------------------------


def gpu_class(name: str, provisioning: dict[str, Any] | None, count: int = 8) -> InferenceClass:
    spec: dict[str, Any] = {
        "devices": [
            {
                "name": "gpu",
                "driver": "gpu.nvidia.com",
                "deviceClassName": "gpu.nvidia.com",
                "count": count,
            },
            {"name": "nic", "driver": "dra.net", "claim": "Synthetic", "count": 16},
        ]
    }
    if provisioning is not None:
        spec["provisioning"] = provisioning
    return InferenceClass.model_validate({"metadata": {"name": name}, "spec": spec})


def gke_class(name: str = "h100-gke") -> InferenceClass:
    return gpu_class(
        name,
        {
            "provider": "GKE",
            "gke": {
                "machineType": "a3-highgpu-8g",
                "diskSizeGb": 200,
                "accelerator": {"type": "nvidia-h100-80gb", "count": 8},
            },
        },
    )


def eks_class(name: str, instance_type: str, accelerator: str = "nvidia-h100") -> InferenceClass:
    return gpu_class(
        name,
        {
            "provider": "EKS",
            "eks": {
                "instanceType": instance_type,
                "diskSizeGb": 300,
                "accelerator": {"type": accelerator, "count": 8},
            },
        },
    )


def planned(cluster: InferenceCluster) -> InferenceCluster:
    """The cluster as the stack program builds it: with the ranges the fleet address plan
    gives it in a fleet of its own (its first block, 10.0.0.0/16), unless it declares some."""
    fleet = FleetSpec(clusters={cluster.metadata.name: cluster})
    entry = plan_addresses(fleet, PlacementLock()).network.clusters.get(cluster.metadata.name)
    return with_addresses(cluster, entry)


def planned_cluster(doc: dict[str, Any]) -> InferenceCluster:
    """An InferenceCluster document, validated and planned (``planned``)."""
    return planned(InferenceCluster.model_validate(doc))


def inference_cluster(
    name: str, cluster: dict[str, Any], pools: list[dict[str, Any]], **spec: Any
) -> InferenceCluster:
    return planned_cluster(
        {"metadata": {"name": name}, "spec": {"cluster": cluster, "nodePools": pools, **spec}}
    )


def gke_cluster(**spec: Any) -> InferenceCluster:
    return inference_cluster(
        "gke-central",
        {"source": "GKE", "gke": {"project": "acme-ml", "region": "us-central1"}},
        [
            {
                "name": "gpu-h100",
                "className": "h100-gke",
                "nodeCount": 1,
                "minNodeCount": 0,
                "maxNodeCount": 4,
                "zones": ["us-central1-a", "us-central1-b"],
            }
        ],
        **spec,
    )


def eks_cluster(**spec: Any) -> InferenceCluster:
    return inference_cluster(
        "eks-west",
        {"source": "EKS", "eks": {"region": "us-west-2"}},
        [
            {
                "name": "gpu-a10g",
                "className": "a10g",
                "nodeCount": 2,
                "minNodeCount": 1,
                "maxNodeCount": 6,
                "zones": ["us-west-2b"],
            },
            {
                "name": "gpu-h100",
                "className": "h100-eks",
                "nodeCount": 1,
                "maxNodeCount": 2,
                "zones": ["us-west-2c"],
                "capacityBlock": {"capacityReservationId": "cr-0123456789abcdef0"},
                "fabric": "EFA",
            },
        ],
        **spec,
    )


EKS_CLASSES = {
    "a10g": eks_class("a10g", "g5.12xlarge", "nvidia-a10g"),
    "h100-eks": eks_class("h100-eks", "p5.48xlarge"),
}


def eks_run(name: str, cluster: InferenceCluster) -> MockRun:
    """A mocked run of ``cluster`` as the InferenceClusterComponent ``name`` (EKS_CLASSES)."""
    run = MockRun.of(lambda: InferenceClusterComponent(name, cluster, EKS_CLASSES))
    return run


def existing_cluster(existing: dict[str, Any], **spec: Any) -> InferenceCluster:
    return inference_cluster(
        "on-prem",
        {"source": "Existing", "existing": existing},
        [{"name": "gpu", "className": "h100-gke", "nodeCount": 3}],
        **spec,
    )


# --- shared assertions ----------------------------------------------------------------------


def assert_children_parented(run: MockRun) -> None:
    """Everything but the top component hangs under one of modelplane's components."""
    for r in run:
        if r.type in ("modelplane:cluster:InferenceCluster",):
            continue
        assert r.parent_type in COMPONENT_TYPES, f"{r.type} {r.name} parent {r.parent_type}"


def assert_no_plaintext(run: MockRun, secret: str) -> None:
    """``secret`` appears only inside Secret-wrapped inputs."""

    def visit(value: Any, where: str) -> None:
        if isinstance(value, Secret):
            return
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                visit(v, f"{where}[{i}]")
        elif isinstance(value, str):
            assert secret not in value, f"plaintext secret at {where}"

    for r in run:
        visit(r.inputs, f"{r.type} {r.name}")


def k8s_resources_use(run: MockRun, provider: Registered) -> None:
    for r in run:
        if r.type.startswith("kubernetes:") and r.custom:
            assert run.provider_of(r) == provider, f"{r.type} {r.name} on another provider"


def release(run: MockRun, key: str) -> Registered:
    return run.one(RELEASE, name=f"{_serving(run)}-{CHARTS[key].release_name}")


def _serving(run: MockRun) -> str:
    return run.one("modelplane:cluster:ServingStack").name


# --- GKE ------------------------------------------------------------------------------------


def existing_run(**serving: Any) -> MockRun:
    cluster = existing_cluster({"secretRef": {"name": "x"}}, servingStack=serving)
    run = MockRun.of(
        lambda: InferenceClusterComponent(
            "on-prem", cluster, {"h100-gke": gke_class()}, kubeconfig="k"
        )
    )
    return run
