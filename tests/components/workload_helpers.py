"""Shared fixtures for the workload component tests (classes, deployments, targets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from modelplane.api.inference_class import InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.model_cache import ModelCache
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.names import replica_name
from modelplane.api.placement_lock import LockedReplica
from modelplane.components.model_deployment import ModelDeploymentComponent
from modelplane.components.workload.targets import ClusterTarget
from tests.pulumi_mocks import MockRun

ROOT = Path(__file__).resolve().parents[2]
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
RCT = "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"
ROUTE = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"
SERVICE = "kubernetes:core/v1:Service"
SLICE = "kubernetes:discovery.k8s.io/v1:EndpointSlice"
POOL = "kubernetes:inference.networking.k8s.io/v1:InferencePool"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"


def load(kind: type, text: str) -> Any:
    return kind.model_validate(yaml.safe_load(text))


H200 = load(
    InferenceClass,
    """
metadata: {name: h200}
spec:
  devices:
  - name: gpu
    driver: gpu.nvidia.com
    deviceClassName: gpu.nvidia.com
    count: 8
    attributes: {productName: {string: NVIDIA H200}, cudaComputeCapability: {version: "9.0.0"}}
    capacity: {memory: {value: 141Gi}}
  - name: nic
    driver: dra.net
    claim: Synthetic
    count: 16
    attributes: {linkType: {string: efa}}
""",
)

# Two DRA device kinds: only the second has the memory the selector asks for.
MIXED = load(
    InferenceClass,
    """
metadata: {name: mixed}
spec:
  devices:
  - name: small
    driver: gpu.nvidia.com
    deviceClassName: gpu.nvidia.com
    count: 8
    capacity: {memory: {value: 24Gi}}
  - name: big
    driver: gpu.nvidia.com
    deviceClassName: big-gpu.nvidia.com
    count: 8
    capacity: {memory: {value: 80Gi}}
""",
)

SYNTHETIC = load(
    InferenceClass,
    """
metadata: {name: synthetic}
spec:
  devices:
  - {name: gpu, driver: gpu.nvidia.com, claim: Synthetic, count: 4}
""",
)

CLASSES = {c.metadata.name: c for c in (H200, MIXED, SYNTHETIC)}

CLUSTER = load(
    InferenceCluster,
    """
metadata: {name: west, labels: {modelplane.ai/region: us-west}}
spec:
  cluster: {source: Existing, existing: {secretRef: {name: west-kubeconfig}}}
  nodePools:
  - {name: h200, className: h200, nodeCount: 8}
  - {name: mixed, className: mixed, nodeCount: 2}
  - {name: synthetic, className: synthetic, nodeCount: 2}
""",
)

CODER = """
metadata: {name: coder, namespace: ml-team}
spec:
  replicas: 1
  modelCacheRef: {name: coder}
  nodeSelector:
    devices:
    - name: gpu
      selectors:
      - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("140Gi")) >= 0
    - name: nic
      count: 16
      selectors:
      - cel: device.attributes["dra.net"].linkType == "efa"
  workers:
    count: 3
    topology: {tensor: 8, pipeline: 2}
    resources: {cpu: "96", memory: 1500Gi}
    template:
      metadata: {labels: {team: coder}, annotations: {note: hi}}
      spec:
        shmSize: 64Gi
        imagePullSecrets: [{name: nvcr}]
        containers:
        - name: engine
          image: vllm/vllm-openai:v0.11.0
          args: ["--model=/mnt/models", "--tensor-parallel-size=8", "--pipeline-parallel-size=2"]
          env:
          - name: HF_TOKEN
            valueFrom: {secretKeyRef: {name: hf-token, key: token}}
"""

SMALL = """
metadata: {name: small, namespace: ml-team}
spec:
  replicas: 1
  nodeSelector:
    devices:
    - name: gpu
      selectors:
      - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0
  workers:
    topology: {tensor: 2}
    resources: {cpu: "8", memory: 64Gi}
    template:
      spec:
        shmSize: 8Gi
        containers:
        - {name: engine, image: vllm/vllm-openai:v0.11.0, args: ["--tensor-parallel-size=2"]}
"""

PD = """
metadata: {name: kimi, namespace: ml-team}
spec:
  replicas: 1
  prefill:
    nodeSelector: {devices: [{name: gpu}]}
    workers:
      count: 2
      topology: {tensor: 8}
      resources: {cpu: "96", memory: 1500Gi}
      template:
        spec:
          containers: [{name: engine, image: vllm/vllm-openai:v0.11.0, args: ["--block-size=32"]}]
  decode:
    nodeSelector: {devices: [{name: gpu}]}
    workers:
      topology: {tensor: 8, data: 2}
      resources: {cpu: "96", memory: 1500Gi}
      template:
        spec:
          containers: [{name: engine, image: vllm/vllm-openai:v0.11.0, args: ["--block-size=32"]}]
"""

CACHE = load(
    ModelCache,
    """
metadata: {name: coder, namespace: ml-team}
spec:
  source: HuggingFace
  huggingFace:
    repo: Qwen/Qwen3-Coder-480B-A35B-Instruct
    revision: v1
    authSecret: {name: hf, key: HF_TOKEN}
  sizeGiB: 1100
""",
)


def deployment(text: str) -> ModelDeployment:
    return load(ModelDeployment, text)


def replica(dep: ModelDeployment, pools: dict[str, str], index: int = 0) -> LockedReplica:
    return LockedReplica(
        name=replica_name(dep.metadata.name, "west", index),
        cluster="west",
        index=index,
        pools=pools,  # type: ignore[arg-type]
    )


FRONT_DOOR_KEY = "front-door-key-for-tests"


def target(
    provider: pulumi.ProviderResource, address: str = "gw.west.example.com"
) -> ClusterTarget:
    return ClusterTarget.from_spec(
        CLUSTER,
        CLASSES,
        provider,
        gateway_address=address,
        storage_class_name="rwx",
        front_door_key=FRONT_DOOR_KEY,
    )


def deploy(
    text: str, pools: dict[str, str], *, cache: ModelCache | None = None, replicas: int = 1
) -> tuple[MockRun, ModelDeploymentComponent]:
    run = MockRun()
    dep = deployment(text)
    locked = [replica(dep, pools, i) for i in range(replicas)]

    def program() -> ModelDeploymentComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        return ModelDeploymentComponent(
            dep.metadata.name, dep, locked, {"west": target(provider)}, cache=cache
        )

    return run, run.run(program)


def engine(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == "engine")


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# --- ModelDeployment: LWS, DRA, pods ---------------------------------------------------------


def pod_templates(run: MockRun) -> list[dict[str, Any]]:
    found = [d.get("spec.template") for d in run.of_type(DEPLOYMENT)]
    for lws in run.of_type(LWS):
        found.append(lws.get("spec.leaderWorkerTemplate.leaderTemplate"))
        found.append(lws.get("spec.leaderWorkerTemplate.workerTemplate"))
    return [t for t in found if t]
