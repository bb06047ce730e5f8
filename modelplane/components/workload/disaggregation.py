"""Prefill/decode routing, llm-d style (original-modelplane §3.3, ecosystem §A.3, §D.6).

The replica's HTTPRoute sends requests to a GAIE `InferencePool` over the
replica's serving pods of both roles (labelled `llm-d.ai/role=prefill|decode`).
Its endpoint picker (EPP, the llm-d router) runs two scheduling profiles: it
picks a decode pod, and -- when the prompt's uncached part is long enough -- a
prefill pod, which it passes in a header. The chosen decode pod's routing
sidecar (port 8000, the pool's target port) first sends the prompt to that
prefill pod, then lets its own engine decode with the KV cache pulled over NIXL.
So every request reaches decode, and decode reaches prefill.

Ports: prefill engines serve on 8000; on decode pods the sidecar owns 8000 and
the engine serves on its `--port`, else 8001. That last case is the one place
modelplane adds an engine flag (`--port=8001`): the sidecar needs the port.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import yaml

from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.pod_template import Container
from modelplane.api.topology import POOL_PORT as POOL_PORT
from modelplane.api.topology import port_arg
from modelplane.components.workload.objects import SKIP_AWAIT, Manifest, metadata
from modelplane.components.workload.routes import INFERENCE_GROUP

LLMD_ROLE = "llm-d.ai/role"
LLMD_SERVING = "llm-d.ai/inference-serving"
DECODE_ENGINE_PORT = 8001
NIXL_PORT = 5557
EPP_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
EPP_IMAGE = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.0"
SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0"
EPP_CONFIG_FILE = "epp-config.yaml"
CHECKSUM_ANNOTATION = "modelplane.ai/epp-config-checksum"
DEFAULT_KV_BLOCK = 16


def role_labels(role: str) -> dict[str, str]:
    return {LLMD_ROLE: role, LLMD_SERVING: "true"}


def nixl_env() -> list[dict[str, Any]]:
    return [
        {
            "name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
        },
        {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_PORT)},
    ]


def decode_engine_port(engine: Container) -> tuple[int, list[str]]:
    """(port, extra args): the decode engine's `--port`, else 8001 added as a flag."""
    if engine.ports and engine.ports[0].container_port != POOL_PORT:
        return engine.ports[0].container_port, []
    port = port_arg([*engine.command, *engine.args])
    if port is not None and port != POOL_PORT:
        return port, []
    if port == POOL_PORT:  # validate rejects this (ModelDeploymentSpec); kept as a guard
        raise ValueError(
            "the decode engine listens on 8000, which the P/D routing sidecar owns: "
            "give it another --port (or omit --port to get 8001)"
        )
    return DECODE_ENGINE_PORT, [f"--port={DECODE_ENGINE_PORT}"]


SIDECAR_PORT_NAME = "pd-proxy"


def routing_sidecar(engine_port: int) -> dict[str, Any]:
    return {
        "name": "pd-sidecar",
        "image": SIDECAR_IMAGE,
        "args": [
            f"--port={POOL_PORT}",
            f"--vllm-port={engine_port}",
            "--kv-connector=nixlv2",
            "--secure-proxy=false",
        ],
        # Not `http`: that names the engine's port, the one Prometheus scrapes.
        "ports": [{"name": SIDECAR_PORT_NAME, "containerPort": POOL_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": POOL_PORT}, "periodSeconds": 5},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }


def kv_block_size(deployment: ModelDeployment) -> int:
    """`--block-size` / `--page-size` of the decode engine, else 16 (vLLM's default)."""
    role = deployment.spec.roles.get("decode") or next(iter(deployment.spec.roles.values()))
    engine = role.workers.template.spec.engine
    tokens: list[str] = []
    for item in [*engine.command, *engine.args]:
        tokens.extend(item.split())
    for i, tok in enumerate(tokens):
        flag, eq, value = tok.partition("=")
        if flag in ("--block-size", "--page-size"):
            if not eq:
                value = tokens[i + 1] if i + 1 < len(tokens) else ""
            if value.isdigit():
                return int(value)
    return DEFAULT_KV_BLOCK


def epp_config(block_size: int) -> dict[str, Any]:
    """EndpointPickerConfig for P/D: two profiles, prefix-aware and load-aware scoring."""
    scorers = [
        {"pluginRef": "prefix-cache-scorer", "weight": 2},
        {"pluginRef": "queue-scorer", "weight": 1},
        {"pluginRef": "max-score-picker"},
    ]
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "disagg-headers-handler"},
            {
                "type": "approx-prefix-cache-producer",
                "parameters": {
                    "autoTune": False,
                    "blockSizeTokens": block_size,
                    "maxPrefixBlocksToMatch": 256,
                    "lruCapacityPerServer": 31250,
                },
            },
            {"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 16}},
            {
                "type": "disagg-profile-handler",
                "parameters": {"deciders": {"prefill": "prefix-based-pd-decider"}},
            },
            {"type": "prefill-filter"},
            {"type": "decode-filter"},
            {"type": "prefix-cache-scorer"},
            {"type": "queue-scorer"},
            {"type": "max-score-picker"},
        ],
        "schedulingProfiles": [
            {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, *scorers]},
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, *scorers]},
        ],
    }


def inference_pool(
    name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    selector: Mapping[str, str],
    epp_service: str,
) -> Manifest:
    return {
        "apiVersion": f"{INFERENCE_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": metadata(name, namespace, object_labels),
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "targetPorts": [{"number": POOL_PORT}],
            "endpointPickerRef": {
                "group": "",
                "kind": "Service",
                "name": epp_service,
                "port": {"number": EPP_PORT},
                "failureMode": "FailOpen",
            },
        },
    }


def pool_backend(name: str) -> dict[str, Any]:
    return {"group": INFERENCE_GROUP, "kind": "InferencePool", "name": name}


def epp_manifests(
    name: str,
    namespace: str,
    object_labels: Mapping[str, str],
    pool: str,
    block_size: int,
) -> list[Manifest]:
    """The endpoint picker: ServiceAccount, Role, RoleBinding, ConfigMap, Deployment, Service."""
    config_text = yaml.safe_dump(epp_config(block_size), sort_keys=False)
    checksum = hashlib.sha256(config_text.encode()).hexdigest()
    selector = {"modelplane.ai/epp": name}
    pod_labels = {**object_labels, **selector}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(name, namespace, object_labels),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(name, namespace, object_labels),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]},
                {
                    "apiGroups": [INFERENCE_GROUP],
                    "resources": ["inferencepools"],
                    "verbs": ["get", "watch", "list"],
                },
                {
                    "apiGroups": ["inference.networking.x-k8s.io"],
                    "resources": ["inferenceobjectives", "inferencepools"],
                    "verbs": ["get", "watch", "list"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(name, namespace, object_labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(name, namespace, object_labels),
            "data": {EPP_CONFIG_FILE: config_text},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata(name, namespace, object_labels, SKIP_AWAIT),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {
                        "labels": pod_labels,
                        "annotations": {CHECKSUM_ANNOTATION: checksum},
                    },
                    "spec": {
                        "serviceAccountName": name,
                        "containers": [
                            {
                                "name": "epp",
                                "image": EPP_IMAGE,
                                "args": [
                                    f"--pool-name={pool}",
                                    f"--pool-namespace={namespace}",
                                    f"--pool-group={INFERENCE_GROUP}",
                                    f"--config-file=/config/{EPP_CONFIG_FILE}",
                                    f"--grpc-port={EPP_PORT}",
                                    f"--grpc-health-port={EPP_HEALTH_PORT}",
                                    f"--metrics-port={EPP_METRICS_PORT}",
                                ],
                                "ports": [
                                    {"name": "grpc", "containerPort": EPP_PORT, "protocol": "TCP"},
                                    {
                                        "name": "grpc-health",
                                        "containerPort": EPP_HEALTH_PORT,
                                        "protocol": "TCP",
                                    },
                                    {
                                        "name": "metrics",
                                        "containerPort": EPP_METRICS_PORT,
                                        "protocol": "TCP",
                                    },
                                ],
                                "readinessProbe": {
                                    "grpc": {
                                        "port": EPP_HEALTH_PORT,
                                        "service": "inference-extension",
                                    },
                                    "periodSeconds": 5,
                                },
                                "volumeMounts": [{"name": "config", "mountPath": "/config"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": name}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(name, namespace, object_labels, SKIP_AWAIT),
            "spec": {
                "type": "ClusterIP",
                "selector": selector,
                "ports": [
                    {
                        "name": "grpc-ext-proc",
                        "port": EPP_PORT,
                        "targetPort": EPP_PORT,
                        "protocol": "TCP",
                        "appProtocol": "http2",
                    }
                ],
            },
        },
    ]
