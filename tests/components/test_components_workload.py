"""Mock tests of the workload, cache, gateway and service components (and their render)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from components.gateway import InferenceGatewayComponent
from components.model_cache import ModelCacheComponent
from components.model_deployment import ModelDeploymentComponent, replica_manifests
from components.model_service import (
    EndpointInfo,
    ModelEndpointComponent,
    ModelServiceComponent,
    endpoint_manifests,
)
from components.workload.targets import ClusterTarget
from modelplane.api.inference_class import InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.model_cache import ModelCache
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.model_service import ModelService
from modelplane.api.names import replica_name
from modelplane.api.placement_lock import LockedReplica
from tests.pulumi_mocks import MockRun, Registered, contains_secret

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


def target(
    provider: pulumi.ProviderResource, address: str = "gw.west.example.com"
) -> ClusterTarget:
    return ClusterTarget.from_spec(
        CLUSTER, CLASSES, provider, gateway_address=address, storage_class_name="rwx"
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


def test_multi_node_worker_is_a_leader_worker_set_with_claims() -> None:
    run, comp = deploy(CODER, {"unified": "h200"}, cache=CACHE)
    lws = run.one(LWS)
    assert lws.parent_type == "modelplane:deployment:ModelReplica"
    assert lws.get("spec.replicas") == 3
    assert lws.get("spec.leaderWorkerTemplate.size") == 2
    rct = run.one(RCT)
    requests = rct.get("spec.spec.devices.requests")
    # The nic request lands on a Synthetic device: matched, never claimed.
    assert requests == [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "count": 8,
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.capacity["gpu.nvidia.com"].memory'
                            '.compareTo(quantity("140Gi")) >= 0'
                        }
                    }
                ],
            },
        }
    ]
    assert lws.depends_on(rct)
    for template in ("leaderTemplate", "workerTemplate"):
        pod = lws.get(f"spec.leaderWorkerTemplate.{template}.spec")
        assert pod["resourceClaims"] == [
            {"name": "devices", "resourceClaimTemplateName": rct.get("metadata.name")}
        ]
        eng = engine(pod)
        assert eng["resources"]["claims"] == [{"name": "devices"}]
        assert eng["resources"]["requests"] == {"cpu": "96", "memory": "1500Gi"}
        assert "limits" not in eng["resources"]
        for c in pod["containers"]:
            assert "nvidia.com/gpu" not in yaml.safe_dump(c.get("resources", {}))
        assert pod["nodeSelector"] == {"modelplane.ai/pool": "h200"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
        assert volumes["model-cache"]["persistentVolumeClaim"] == {
            "claimName": "modelcache-coder",
            "readOnly": True,
        }
        mounts = {m["mountPath"]: m for m in eng["volumeMounts"]}
        assert mounts["/mnt/models"]["readOnly"] is True
        assert mounts["/dev/shm"]["name"] == "dshm"
        assert pod["imagePullSecrets"] == [{"name": "nvcr"}]
        env = env_of(eng)
        assert env["MODELPLANE_LEADER_ADDRESS"] == "$(LWS_LEADER_ADDRESS)"
        assert env["MODELPLANE_RANK"] == {
            "fieldRef": {"fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"}
        }
        assert (env["MODELPLANE_NODES"], env["MODELPLANE_TENSOR"], env["MODELPLANE_PIPELINE"]) == (
            "2",
            "8",
            "2",
        )
        assert (env["MODELPLANE_DATA"], env["MODELPLANE_DATA_LOCAL"]) == ("1", "1")
        assert env["MODELPLANE_REPLICA"] == replica_name("coder", "west", 0)
        assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
        labels = lws.get(f"spec.leaderWorkerTemplate.{template}.metadata.labels")
        assert labels["team"] == "coder"
        assert labels["modelplane.ai/role"] == "unified"
        assert labels["modelplane.ai/deployment"] == "coder"
    leader = engine(lws.get("spec.leaderWorkerTemplate.leaderTemplate.spec"))
    worker = engine(lws.get("spec.leaderWorkerTemplate.workerTemplate.spec"))
    assert leader["ports"][0]["containerPort"] == 8000
    assert leader["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert "readinessProbe" not in worker and "ports" not in worker


def test_device_class_comes_from_the_class_device_the_selector_matches() -> None:
    run, _ = deploy(SMALL, {"unified": "mixed"})
    requests = run.one(RCT).get("spec.spec.devices.requests")
    assert len(requests) == 1
    assert requests[0]["exactly"]["deviceClassName"] == "big-gpu.nvidia.com"
    assert requests[0]["exactly"]["count"] == 2  # GPUs per node by default


def test_synthetic_only_requests_make_no_claim() -> None:
    text = SMALL.replace(
        """    - name: gpu
      selectors:
      - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0
""",
        "    - name: gpu\n",
    )
    run, _ = deploy(text, {"unified": "synthetic"})
    assert run.of_type(RCT) == []
    pod = run.one(DEPLOYMENT).get("spec.template.spec")
    assert "resourceClaims" not in pod
    assert "claims" not in engine(pod)["resources"]


def test_single_node_worker_is_a_deployment_with_service_and_route() -> None:
    run, comp = deploy(SMALL, {"unified": "mixed"})
    dep = run.one(DEPLOYMENT)
    assert dep.get("spec.replicas") == 1
    pod = dep.get("spec.template.spec")
    env = env_of(engine(pod))
    assert env["MODELPLANE_RANK"] == "0"
    assert env["MODELPLANE_LEADER_ADDRESS"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert run.of_type(LWS) == []
    name = replica_name("small", "west", 0)
    route = run.one(ROUTE)
    assert route.get("metadata.namespace") == "ml-team"
    assert route.get("spec.parentRefs") == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "inference-gateway",
            "namespace": "modelplane-system",
        }
    ]
    rule = route.get("spec.rules.0")
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": f"/ml-team/{name}/"}}]
    assert rule["filters"] == [
        {
            "type": "URLRewrite",
            "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
        }
    ]
    svc = run.one(SERVICE)
    assert rule["backendRefs"][0]["name"] == svc.get("metadata.name")
    assert svc.get("spec.selector") == {
        "modelplane.ai/replica": name,
        "modelplane.ai/role": "unified",
    }
    for r in run.resources:
        if r.type.startswith("kubernetes:") and r.type != "pulumi:providers:kubernetes":
            labels = r.get("metadata.labels") or {}
            if r.get("kind") != "Namespace":
                assert labels["modelplane.ai/deployment"] == "small"
            if r.type != PDB and r.get("kind") != "Namespace":  # a budget spans the replicas
                assert labels["modelplane.ai/replica"] == name
    [namespace] = run.of_type("kubernetes:core/v1:NamespacePatch")
    assert namespace.get("metadata.name") == "ml-team"
    assert dep.depends_on(namespace) or run.by_urn(dep.parent).depends_on(namespace)
    [endpoint] = run.value(comp.endpoints)
    assert endpoint["url"] == f"http://gw.west.example.com/ml-team/{name}/"
    assert endpoint["rewritePath"] == f"/ml-team/{name}/"
    assert endpoint["cluster"] == "west"
    assert endpoint["labels"] == {
        "modelplane.ai/deployment": "small",
        "modelplane.ai/cluster": "west",
        "modelplane.ai/replica-index": "0",
    }


def test_names_fit_63_characters() -> None:
    long_name = "a-very-long-model-deployment-name-that-goes-on-and-on-x"
    text = SMALL.replace("name: small", f"name: {long_name}")
    run, _ = deploy(text, {"unified": "mixed"}, replicas=3)
    names = [r.get("metadata.name") for r in run.resources if r.get("metadata.name")]
    assert names and all(len(n) <= 63 for n in names)
    assert len(run.of_type(DEPLOYMENT)) == 3


def test_prefill_decode_routes_to_decode_which_reaches_prefill() -> None:
    run, _ = deploy(PD, {"prefill": "h200", "decode": "h200"})
    name = replica_name("kimi", "west", 0)
    prefill = run.one(DEPLOYMENT, f"west/ml-team/{name}-prefill")
    decode = run.one(LWS)
    assert prefill.get("spec.replicas") == 2
    assert decode.get("spec.leaderWorkerTemplate.size") == 2
    p_labels = prefill.get("spec.template.metadata.labels")
    d_leader = decode.get("spec.leaderWorkerTemplate.leaderTemplate")
    d_worker = decode.get("spec.leaderWorkerTemplate.workerTemplate")
    assert p_labels["modelplane.ai/role"] == "prefill" and p_labels["llm-d.ai/role"] == "prefill"
    assert d_leader["metadata"]["labels"]["modelplane.ai/role"] == "decode"
    assert d_leader["metadata"]["labels"]["llm-d.ai/role"] == "decode"
    # LWS worker pods do not serve: they stay out of the pool.
    assert "llm-d.ai/inference-serving" not in d_worker["metadata"]["labels"]
    assert d_worker["metadata"]["labels"]["modelplane.ai/role"] == "decode"
    # The decode leader's routing sidecar owns the pool port; the engine moves to 8001.
    containers = {c["name"]: c for c in d_leader["spec"]["containers"]}
    assert containers["pd-sidecar"]["ports"][0]["containerPort"] == 8000
    # one port named `http` (the engine's: what Prometheus scrapes), the sidecar's has its own
    names = [p["name"] for c in containers.values() for p in c.get("ports", [])]
    assert (
        sorted(names) == ["http", "pd-proxy"] and containers["engine"]["ports"][0]["name"] == "http"
    )
    assert "--vllm-port=8001" in containers["pd-sidecar"]["args"]
    assert containers["engine"]["args"][-1] == "--port=8001"
    assert "VLLM_NIXL_SIDE_CHANNEL_HOST" in env_of(containers["engine"])
    assert [c["name"] for c in prefill.get("spec.template.spec.containers")] == ["engine"]
    pool = run.one(POOL)
    assert pool.get("spec.selector.matchLabels") == {
        "modelplane.ai/replica": name,
        "llm-d.ai/inference-serving": "true",
    }
    assert pool.get("spec.targetPorts") == [{"number": 8000}]
    epp_name = pool.get("spec.endpointPickerRef.name")
    epp = run.one(DEPLOYMENT, f"west/ml-team/{epp_name}")
    args = epp.get("spec.template.spec.containers.0.args")
    assert f"--pool-name={pool.get('metadata.name')}" in args
    config = yaml.safe_load(run.one("kubernetes:core/v1:ConfigMap").get("data")["epp-config.yaml"])
    assert {p["name"] for p in config["schedulingProfiles"]} == {"prefill", "decode"}
    producer = next(p for p in config["plugins"] if p["type"] == "approx-prefix-cache-producer")
    assert producer["parameters"]["blockSizeTokens"] == 32
    route = run.one(ROUTE)
    assert route.get("spec.rules.0.backendRefs") == [
        {
            "group": "inference.networking.k8s.io",
            "kind": "InferencePool",
            "name": pool.get("metadata.name"),
        }
    ]
    assert len(run.of_type(RCT)) == 2


# --- ModelCache ---------------------------------------------------------------------------


def test_cache_pvc_job_and_secret() -> None:
    run = MockRun()

    def program() -> ModelCacheComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        return ModelCacheComponent(
            "coder", CACHE, {"west": target(provider)}, token=pulumi.Output.secret("hf_s3cret")
        )

    run.run(program)
    pvc = run.one("kubernetes:core/v1:PersistentVolumeClaim")
    assert pvc.get("spec") == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "rwx",
        "resources": {"requests": {"storage": "1100Gi"}},
    }
    assert pvc.parent_type == "modelplane:cache:ModelCache"
    secret = run.one("kubernetes:core/v1:Secret")
    assert contains_secret(secret.inputs["stringData"])
    assert secret.get("stringData") == {"HF_TOKEN": "hf_s3cret"}
    job = run.one("kubernetes:batch/v1:Job")
    container = job.get("spec.template.spec.containers.0")
    script = container["command"][-1]
    assert ".modelplane-hydrated" in script and "hf download" in script
    env = env_of(container)
    assert env["MODELPLANE_REPO"] == "Qwen/Qwen3-Coder-480B-A35B-Instruct"
    assert env["MODELPLANE_REVISION"] == "v1"
    assert env["HF_TOKEN"] == {
        "secretKeyRef": {"name": secret.get("metadata.name"), "key": "HF_TOKEN"}
    }
    assert job.get("spec.template.spec.volumes.0.persistentVolumeClaim.claimName") == pvc.get(
        "metadata.name"
    )
    assert job.depends_on(pvc) and job.depends_on(secret)


# --- ModelService / ModelEndpoint / InferenceGateway -------------------------------------------

SERVICE_SPEC = load(
    ModelService,
    """
metadata: {name: coder, namespace: ml-team}
spec:
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: coder}}
    weight: 80
  - selector: {matchLabels: {provider: together}}
    weight: 20
""",
)

ENDPOINTS = [
    EndpointInfo(
        "coder-a",
        "ml-team",
        "http://10.0.0.1/ml-team/coder-a/",
        "/ml-team/coder-a/",
        {"modelplane.ai/deployment": "coder"},
    ),
    EndpointInfo(
        "coder-b",
        "ml-team",
        "http://[2001:db8::1]/ml-team/coder-b/",
        "/ml-team/coder-b/",
        {"modelplane.ai/deployment": "coder"},
    ),
    EndpointInfo(
        "coder-c",
        "ml-team",
        "http://gw.east.example.com/ml-team/coder-c/",
        "/ml-team/coder-c/",
        {"modelplane.ai/deployment": "coder"},
    ),
    EndpointInfo("together", "ml-team", "https://api.together.xyz/", "/", {"provider": "together"}),
    # Another namespace: never selected by a ml-team service.
    EndpointInfo(
        "coder-x", "other", "http://10.9.9.9/", "/", {"modelplane.ai/deployment": "coder"}
    ),
]


# The same endpoints, coder-* as composed replicas (records of a deployment stack).
REPLICA_ENDPOINTS = [
    dataclasses.replace(ep, replica=ep.name.startswith("coder")) for ep in ENDPOINTS
]


def route_for(
    backend: str, endpoints: list[EndpointInfo] = ENDPOINTS
) -> tuple[MockRun, Registered, ModelServiceComponent]:
    run = MockRun()

    def program() -> ModelServiceComponent:
        provider = k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests")
        opts = pulumi.ResourceOptions(providers=[provider])
        for ep in endpoints:
            ModelEndpointComponent(ep.key, ep, backend=backend, opts=opts)  # type: ignore[arg-type]
        return ModelServiceComponent(
            SERVICE_SPEC.key,
            SERVICE_SPEC,
            endpoints,
            backend=backend,  # type: ignore[arg-type]
            gateway_address="front.example.com",
            gateway=("modelplane", "modelplane-system"),
            opts=opts,
        )

    comp = run.run(program)
    return run, run.one(ROUTE), comp


def test_traefik_route_weights_and_per_backend_rewrites() -> None:
    run, route, comp = route_for("Traefik")
    assert route.parent_type == "modelplane:gateway:ModelService"
    [rule] = route.get("spec.rules")
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/ml-team/coder/"}}]
    refs = rule["backendRefs"]
    assert [r["weight"] for r in refs] == [27, 27, 26, 20]
    assert [r["name"] for r in refs] == ["ep-coder-a", "ep-coder-b", "ep-coder-c", "ep-together"]
    rewrites = [r["filters"][0]["urlRewrite"] for r in refs]
    assert [w["path"]["replacePrefixMatch"] for w in rewrites] == [
        "/ml-team/coder-a/",
        "/ml-team/coder-b/",
        "/ml-team/coder-c/",
        "/",
    ]
    assert rewrites[3]["hostname"] == "api.together.xyz"
    assert "hostname" not in rewrites[0]
    assert refs[3]["port"] == 443
    assert run.value(comp.address) == "http://front.example.com/ml-team/coder/"
    assert run.value(comp.weights) == {
        "ml-team/coder-a": 27,
        "ml-team/coder-b": 27,
        "ml-team/coder-c": 26,
        "ml-team/together": 20,
    }


MIDDLEWARE = "kubernetes:traefik.io/v1alpha1:Middleware"
TRAFFIC_POLICY = "kubernetes:gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy"


def test_retry_traefik_route_runs_the_retry_middleware_before_its_backends() -> None:
    """api.md "Retries and ejection": a refused/reset connection and 502/503/429 before the
    first byte are retried on the next endpoint, POST included, a bounded number of times."""
    from tests import k8s_schemas

    run, route, _ = route_for("Traefik")
    [rule] = route.get("spec.rules")
    middleware = run.one(MIDDLEWARE)
    assert rule["filters"] == [
        {
            "type": "ExtensionRef",
            "extensionRef": {
                "group": "traefik.io",
                "kind": "Middleware",
                "name": middleware.get("metadata.name"),
            },
        }
    ]
    assert middleware.get("metadata.namespace") == route.get("metadata.namespace") == "ml-team"
    assert middleware.get("spec.retry") == {
        "attempts": 4,
        "status": ["502", "503", "429"],
        "retryNonIdempotentMethod": True,
        "maxRequestBodyBytes": 2 * 1024 * 1024,
    }
    # The route waits for its middleware (a route naming a missing one answers 404).
    assert route.depends_on(middleware)
    assert not run.of_type(TRAFFIC_POLICY)
    manifest = {
        "apiVersion": "traefik.io/v1alpha1",
        "kind": "Middleware",
        "metadata": middleware.get("metadata"),
        "spec": middleware.get("spec"),
    }
    assert k8s_schemas.errors(manifest) == []


def test_retry_envoy_gateway_policy_retries_and_ejects() -> None:
    run, route, _ = route_for("EnvoyGateway", REPLICA_ENDPOINTS)
    policy = run.one(TRAFFIC_POLICY)
    assert "filters" not in route.get("spec.rules")[0] or all(
        f["type"] != "ExtensionRef" for f in route.get("spec.rules")[0]["filters"]
    )
    assert policy.get("spec.targetRefs") == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "name": route.get("metadata.name"),
        }
    ]
    assert policy.get("metadata.namespace") == route.get("metadata.namespace")
    retry = policy.get("spec.retry")
    assert retry["numRetries"] == 3
    assert set(retry["retryOn"]["triggers"]) == {
        "connect-failure",
        "refused-stream",
        "reset",
        "retriable-status-codes",
    }
    assert retry["retryOn"]["httpStatusCodes"] == [502, 503, 429]
    passive = policy.get("spec.healthCheck.passive")
    # 5xx and gateway errors (connection failures count as such) eject; a 429 does not.
    assert passive["consecutive5XxErrors"] == passive["consecutiveGatewayErrors"] == 3
    assert passive["maxEjectionPercent"] == 50
    assert not run.of_type(MIDDLEWARE)


def test_endpoint_slices_by_address_type() -> None:
    run, _, _ = route_for("Traefik")
    slices = {s.get("metadata.labels")["kubernetes.io/service-name"]: s for s in run.of_type(SLICE)}
    assert slices["ep-coder-a"].get("addressType") == "IPv4"
    assert slices["ep-coder-b"].get("addressType") == "IPv6"
    assert slices["ep-coder-b"].get("endpoints.0.addresses") == ["2001:db8::1"]
    assert slices["ep-coder-c"].get("addressType") == "FQDN"
    assert slices["ep-together"].get("ports") == [{"name": "http", "port": 443, "protocol": "TCP"}]
    services = {s.get("metadata.name"): s for s in run.of_type(SERVICE)}
    assert "selector" not in services["ep-coder-a"].get("spec")
    assert services["ep-together"].get("spec.ports.0.appProtocol") == "https"
    for s in run.of_type(SLICE):
        assert s.parent_type == "modelplane:gateway:ModelEndpoint"


def test_envoy_gateway_one_weighted_rule_replicas_by_header() -> None:
    """Weights hold on Envoy Gateway: one rule (rewrite to '/'), replicas named by header."""
    run, route, comp = route_for("EnvoyGateway", REPLICA_ENDPOINTS)
    [rule] = route.get("spec.rules")
    assert rule["filters"] == [
        {
            "type": "URLRewrite",
            "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
        }
    ]
    refs = rule["backendRefs"]
    assert [r["weight"] for r in refs] == [27, 27, 26, 20]
    headers = [
        f["requestHeaderModifier"]["set"]
        for r in refs
        for f in r.get("filters", [])
        if f["type"] == "RequestHeaderModifier"
    ]
    assert headers == [
        [{"name": "x-modelplane-endpoint", "value": f"ml-team/coder-{x}"}] for x in "abc"
    ]
    hosts = {
        r["name"]: f["urlRewrite"]
        for r in refs
        for f in r.get("filters", [])
        if f["type"] == "URLRewrite"
    }
    # Host rewrites only (Envoy Gateway drops path rewrites on a backendRef).
    assert hosts == {
        "ep-coder-c": {"hostname": "gw.east.example.com"},
        "ep-together": {"hostname": "api.together.xyz"},
    }
    assert run.value(comp.weights)["ml-team/together"] == 20
    backends = {
        b.get("metadata.name"): b
        for b in run.of_type("kubernetes:gateway.envoyproxy.io/v1alpha1:Backend")
    }
    assert backends["ep-together"].get("spec.endpoints") == [
        {"fqdn": {"hostname": "api.together.xyz", "port": 443}}
    ]
    assert backends["ep-together"].get("spec.tls.sni") == "api.together.xyz"
    assert set(backends) == {"ep-coder-c", "ep-together"}  # IP endpoints stay Service + slice


def test_endpoint_manifests_are_plain_and_named_apart_from_workloads() -> None:
    ep = ENDPOINTS[0]
    kinds = [m["kind"] for m in endpoint_manifests(ep, "Traefik")]
    assert kinds == ["Service", "EndpointSlice"]


@pytest.mark.parametrize(
    ("backend", "release", "controller", "port"),
    [
        ("Traefik", "mp-traefik", "traefik.io/gateway-controller", 8000),
        ("EnvoyGateway", "mp-envoy-gateway", "gateway.envoyproxy.io/gatewayclass-controller", 80),
    ],
)
def test_inference_gateway(backend: str, release: str, controller: str, port: int) -> None:
    gw = load(
        InferenceGateway,
        "metadata: {name: default}\n"
        f"spec: {{backend: {backend}, cluster: {{inferenceClusterRef: west}}}}",
    )
    run = MockRun()
    run.run(
        lambda: InferenceGatewayComponent(
            "default", gw, k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests")
        )
    )
    rel = run.one("kubernetes:helm.sh/v3:Release")
    assert rel.get("name") == release
    assert rel.parent_type == "modelplane:gateway:InferenceGateway"
    if backend == "Traefik":
        assert rel.get("values.providers.kubernetesGateway.enabled") is True
        assert rel.get("repositoryOpts.repo") == "https://traefik.github.io/charts"
    else:
        assert rel.get("values.config.envoyGateway.extensionApis.enableBackend") is True
    cls = run.one("kubernetes:gateway.networking.k8s.io/v1:GatewayClass")
    assert cls.get("spec.controllerName") == controller
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert gateway.get("spec.listeners.0.port") == port
    assert gateway.get("spec.listeners.0.allowedRoutes.namespaces.from") == "All"
    assert gateway.depends_on(rel)


def test_render_only_gateway_skips_the_helm_release() -> None:
    gw = load(
        InferenceGateway,
        "metadata: {name: default}\nspec: {backend: Traefik, cluster: {inferenceClusterRef: west}}",
    )
    run = MockRun()
    run.run(
        lambda: InferenceGatewayComponent(
            "default",
            gw,
            k8s.Provider("gw-k8s", render_yaml_to_directory="/tmp/x"),
            install_controller=False,
        )
    )
    assert run.of_type("kubernetes:helm.sh/v3:Release") == []
    assert len(run.of_type("kubernetes:gateway.networking.k8s.io/v1:Gateway")) == 1


def test_replica_manifests_are_pure_dicts() -> None:
    dep = deployment(SMALL)
    manifests = replica_manifests(
        dep, replica(dep, {"unified": "mixed"}), ClusterTarget.from_spec(CLUSTER, CLASSES, None)
    )  # type: ignore[arg-type]
    assert [m["kind"] for m in manifests] == [
        "ResourceClaimTemplate",
        "Deployment",
        "Service",
        "HTTPRoute",
    ]


# --- the stack program and render ---------------------------------------------------------

SECRETS_FLEET = ROOT / "tests" / "fleets" / "secrets"
FAKE = {
    "MODELPLANE_SECRET_ONPREM_KUBECONFIG_KUBECONFIG": "kind: Config\n# fake-kube-7f3a9c",
    "MODELPLANE_SECRET_GATEWAY_KUBECONFIG_KUBECONFIG": "fake-gateway-kube-51d2e8",
    "MODELPLANE_SECRET_HF_TOKEN_HF_TOKEN": "hf_fakeToken0c4b1d",
}


def test_no_secret_in_plaintext_in_the_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelplane.render import render_fleet

    for key, value in FAKE.items():
        monkeypatch.setenv(key, value)
    result = render_fleet(SECRETS_FLEET, tmp_path)
    assert [s.name for s in result.stacks] == [
        "cluster-onprem",
        "cache-lab-mistral",
        "deploy-lab-mistral",
        "gateway",
    ]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 10
    for path in files:
        text = path.read_text()
        for marker in ("fake-kube-7f3a9c", "fake-gateway-kube-51d2e8", "hf_fakeToken0c4b1d"):
            assert marker not in text, f"{marker} leaked into {path}"
    # ... and the secrets were there, redacted.
    cluster = yaml.safe_load((tmp_path / "cluster-onprem" / "outputs.yaml").read_text())
    assert cluster["kubeconfig"] == "[secret]"
    secret = next((tmp_path / "cache-lab-mistral" / "manifests").glob("*_secret_*.yaml"))
    assert yaml.safe_load(secret.read_text())["stringData"] == {"HF_TOKEN": "[secret]"}
    resources = (tmp_path / "gateway" / "resources.yaml").read_text()
    assert "kubeconfig: '[secret]'" in resources
    route = yaml.safe_load(
        next((tmp_path / "gateway" / "manifests").glob("*_httproute_*.yaml")).read_text()
    )
    # EnvoyGateway: one weighted rule (a rule per rewritePath let the first take 100 %);
    # replicas are named by header; the IPv6 endpoint is a Service + slice.
    [rule] = route["spec"]["rules"]
    assert len(rule["backendRefs"]) > 1 and all(r["weight"] >= 1 for r in rule["backendRefs"])
    slice_ = next((tmp_path / "gateway" / "manifests").glob("*_endpointslice_*.yaml"))
    assert yaml.safe_load(slice_.read_text())["addressType"] == "IPv6"


def test_unknown_stack_lists_valid_names(tmp_path: Path) -> None:
    from modelplane.render import RenderError, render_stack

    with pytest.raises(RenderError) as exc:
        render_stack(
            "cluster-nope",
            fleet_dir=ROOT / "specs" / "local",
            lock_path=tmp_path / "none.lock.yaml",
            upstream=lambda _: None,
        )
    message = str(exc.value)
    assert "matches nothing" in message
    assert "cluster-local" in message and "deploy-demo-qwen" in message and "gateway" in message


def test_missing_upstream_output_names_the_stack_to_run_first(tmp_path: Path) -> None:
    from modelplane.render import RenderError, render_fleet, render_stack

    render_fleet(ROOT / "specs" / "local", tmp_path, stacks=["cluster-local"])
    with pytest.raises(RenderError) as exc:
        render_stack(
            "deploy-demo-qwen",
            fleet_dir=ROOT / "specs" / "local",
            lock_path=tmp_path / "modelplane.lock.yaml",
            upstream=lambda _: None,
        )
    assert "cluster-local" in str(exc.value) and "first" in str(exc.value)


def test_render_layout(tmp_path: Path) -> None:
    from modelplane.render import render_fleet

    result = render_fleet(ROOT / "specs" / "local", tmp_path)
    assert (tmp_path / "modelplane.lock.yaml").exists()
    for stack in result.stacks:
        resources = yaml.safe_load((tmp_path / stack.name / "resources.yaml").read_text())
        assert all({"type", "name", "parent", "inputs"} <= set(r) for r in resources)
    deploy = yaml.safe_load((tmp_path / "deploy-demo-qwen" / "resources.yaml").read_text())
    replica = next(r for r in deploy if r["type"] == "kubernetes:apps/v1:Deployment")
    assert replica["parent"] == "modelplane:deployment:ModelReplica"
    component = next(r for r in deploy if r["type"] == "modelplane:deployment:ModelReplica")
    assert component["parent"] == "modelplane:deployment:ModelDeployment"
    for path in (tmp_path / "deploy-demo-qwen" / "manifests").glob("*.yaml"):
        manifest = yaml.safe_load(path.read_text())
        assert list(manifest)[:3] == ["apiVersion", "kind", "metadata"]
    outputs = yaml.safe_load((tmp_path / "gateway" / "outputs.yaml").read_text())
    assert outputs["services"]["demo/qwen"].endswith("/demo/qwen/")
    # The renderTo cluster has no workload gateway; the inference gateway is on the same
    # cluster, so the ModelService routes straight to the replica's Service.
    route = yaml.safe_load(
        next((tmp_path / "gateway" / "manifests").glob("*_httproute_demo_qwen.yaml")).read_text()
    )
    [ref] = route["spec"]["rules"][0]["backendRefs"]
    replica = yaml.safe_load((tmp_path / "modelplane.lock.yaml").read_text())["deployments"][
        "demo/qwen"
    ]["replicas"][0]["name"]
    assert (ref["kind"], ref["name"], ref["port"]) == ("Service", replica, 8000)
    assert ref["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] == "/"


# --- the serving stack's Prometheus scrapes exactly the serving engines ------------------------


def _sanitize(name: str) -> str:
    """Prometheus' label-name sanitizing of a pod label (kubernetes_sd)."""
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


def scrape_targets(job: dict[str, Any], pod: dict[str, Any], pod_name: str) -> list[dict[str, str]]:
    """kubernetes_sd (role pod: one target per container port) and the job's relabeling,
    evaluated on a rendered pod template: the targets' labels."""
    out = []
    labels = (pod.get("metadata") or {}).get("labels") or {}
    for container in pod["spec"]["containers"]:
        for port in container.get("ports") or []:
            meta = {f"__meta_kubernetes_pod_label_{_sanitize(k)}": v for k, v in labels.items()}
            meta |= {
                "__meta_kubernetes_pod_name": pod_name,
                "__meta_kubernetes_namespace": "ml-team",
                "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                "__meta_kubernetes_pod_container_name": container["name"],
                "__address__": f"10.0.0.1:{port['containerPort']}",
            }
            kept = True
            for rule in job["relabel_configs"]:
                value = ";".join(meta.get(s, "") for s in rule["source_labels"])
                if rule.get("action") == "keep":
                    kept = kept and re.fullmatch(rule["regex"], value) is not None
                elif kept:
                    meta[rule["target_label"]] = value
            if kept:
                out.append(
                    {k: v for k, v in meta.items() if not k.startswith("__meta")}
                    | {"container": container["name"]}
                )
    return out


def pod_templates(run: MockRun) -> list[dict[str, Any]]:
    found = [d.get("spec.template") for d in run.of_type(DEPLOYMENT)]
    for lws in run.of_type(LWS):
        found.append(lws.get("spec.leaderWorkerTemplate.leaderTemplate"))
        found.append(lws.get("spec.leaderWorkerTemplate.workerTemplate"))
    return [t for t in found if t]


@pytest.mark.parametrize(
    ("text", "pools", "expected"),
    [
        # one unified engine pod: its `http` port (8000), /metrics
        (SMALL, {"unified": "mixed"}, [("small", "unified", "engine", "8000")]),
        # prefill pods and the decode leader's engine (moved to 8001; its routing sidecar's
        # port is `pd-proxy`, it exports no vLLM names); LWS decode workers expose no
        # serving port, the EPP has no role
        (
            PD,
            {"prefill": "h200", "decode": "h200"},
            [
                ("kimi", "decode", "engine", "8001"),
                ("kimi", "prefill", "engine", "8000"),
            ],
        ),
    ],
)
def test_serving_stack_prometheus_scrapes_each_serving_engine(
    text: str, pools: dict[str, str], expected: list[tuple[str, str, str, str]]
) -> None:
    from components.serving_stack import chart_values
    from modelplane.observe.prometheus import ENGINE_JOB, REPLICA_TARGET_LABEL

    jobs = chart_values("prometheus")["prometheus"]["prometheusSpec"]["additionalScrapeConfigs"]
    [job] = [j for j in jobs if j["job_name"] == ENGINE_JOB]
    assert job["metrics_path"] == "/metrics"
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    run, _ = deploy(text, pools)
    got = []
    for template in pod_templates(run):
        role = template["metadata"]["labels"].get("modelplane.ai/role", "none")
        for target in scrape_targets(job, template, f"{role}-pod"):
            container = target["container"]
            replica = target[REPLICA_TARGET_LABEL]
            assert replica == template["metadata"]["labels"]["modelplane.ai/replica"]
            assert (target["pod"], target["namespace"]) == (f"{role}-pod", "ml-team")
            got.append(
                (replica.split("-")[0], role, container, target["__address__"].split(":")[1])
            )
    assert sorted(got) == sorted(expected), sorted(got)


# --- disruption budgets (issue 21, part 3) ----------------------------------------------------

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"

BUDGETS = [
    # (name, spec, pools, replicas, expected {pdb name: selector})
    (
        "one-node-unified",
        "SMALL",
        {"unified": "mixed"},
        1,
        {"small-unified": {"modelplane.ai/deployment": "small", "modelplane.ai/role": "unified"}},
    ),
    (
        "one-budget-for-all-replicas-on-the-cluster",
        "SMALL",
        {"unified": "mixed"},
        3,
        {"small-unified": {"modelplane.ai/deployment": "small", "modelplane.ai/role": "unified"}},
    ),
    (
        "multi-node-on-the-group-leaders",
        "CODER",
        {"unified": "h200"},
        1,
        {
            "coder-unified": {
                "modelplane.ai/deployment": "coder",
                "modelplane.ai/role": "unified",
                "leaderworkerset.sigs.k8s.io/worker-index": "0",
            }
        },
    ),
    (
        "prefill-decode-one-per-role",
        "PD",
        {"prefill": "h200", "decode": "h200"},
        1,
        {
            "kimi-prefill": {"modelplane.ai/deployment": "kimi", "modelplane.ai/role": "prefill"},
            "kimi-decode": {
                "modelplane.ai/deployment": "kimi",
                "modelplane.ai/role": "decode",
                "leaderworkerset.sigs.k8s.io/worker-index": "0",
            },
        },
    ),
]


@pytest.mark.parametrize(
    ("spec", "pools", "replicas", "expected"),
    [b[1:] for b in BUDGETS],
    ids=[b[0] for b in BUDGETS],
)
def test_disruption_budget_per_deployment_and_role_on_each_cluster(
    spec: str, pools: dict[str, str], replicas: int, expected: dict[str, dict[str, str]]
) -> None:
    run, _ = deploy(globals()[spec], pools, replicas=replicas)
    budgets = run.of_type(PDB)
    assert {b.get("metadata.name"): b.get("spec.selector.matchLabels") for b in budgets} == expected
    for budget in budgets:
        assert budget.get("metadata.namespace") == "ml-team"
        assert budget.get("spec.maxUnavailable") == 0
        assert "minAvailable" not in budget.get("spec")
        assert budget.get("spec.unhealthyPodEvictionPolicy") == "AlwaysAllow"
        assert budget.parent_type == "modelplane:deployment:ModelDeployment"
        assert budget.get("metadata.labels")["app.kubernetes.io/managed-by"] == "modelplane"
    # every budget selects serving pods the deployment renders (LWS adds the worker index)
    templates = pod_templates(run)
    for budget in budgets:
        selector = budget.get("spec.selector.matchLabels")
        plain = {k: v for k, v in selector.items() if not k.startswith("leaderworkerset")}
        assert any(plain.items() <= t["metadata"]["labels"].items() for t in templates), selector


def test_budgets_follow_the_clusters_hosting_replicas() -> None:
    run = MockRun()
    dep = deployment(SMALL)
    locked = [
        LockedReplica(
            name=replica_name("small", cluster, 0),
            cluster=cluster,
            index=0,
            pools={"unified": "mixed"},
        )
        for cluster in ("west", "east")
    ]

    def program() -> ModelDeploymentComponent:
        targets = {
            name: target(k8s.Provider(f"{name}-k8s", kubeconfig="kubeconfig-for-tests"))
            for name in ("west", "east")
        }
        return ModelDeploymentComponent("small", dep, locked, targets)

    run.run(program)
    budgets = run.of_type(PDB)
    assert sorted(b.name for b in budgets) == [
        "east/ml-team/small-unified",
        "west/ml-team/small-unified",
    ]
    providers = {run.provider_of(b).name for b in budgets}  # type: ignore[union-attr]
    assert providers == {"east-k8s", "west-k8s"}


@pytest.mark.parametrize(
    ("spec", "pools"),
    [
        ("SMALL", {"unified": "mixed"}),
        ("CODER", {"unified": "h200"}),
        ("PD", {"prefill": "h200", "decode": "h200"}),
    ],
)
def test_serving_pods_are_not_safe_to_evict(spec: str, pools: dict[str, str]) -> None:
    run, _ = deploy(globals()[spec], pools)
    templates = pod_templates(run)
    serving = [t for t in templates if "modelplane.ai/role" in t["metadata"]["labels"]]
    assert serving
    for template in serving:
        assert template["metadata"]["annotations"][SAFE_TO_EVICT] == "false"
    # the endpoint picker is no serving pod: the autoscaler may move it
    for template in templates:
        if "modelplane.ai/role" not in template["metadata"]["labels"]:
            assert SAFE_TO_EVICT not in template["metadata"].get("annotations", {})


def test_a_template_annotation_overrides_safe_to_evict() -> None:
    text = SMALL.replace(
        "    template:\n      spec:\n",
        "    template:\n      metadata:\n        annotations:\n"
        f'          {SAFE_TO_EVICT}: "true"\n      spec:\n',
    )
    assert "safe-to-evict" in text
    run, _ = deploy(text, {"unified": "mixed"})
    [template] = [t for t in pod_templates(run) if "modelplane.ai/role" in t["metadata"]["labels"]]
    assert template["metadata"]["annotations"][SAFE_TO_EVICT] == "true"
