"""Serving pods and their workloads: a Deployment per one-node role, a LeaderWorkerSet otherwise.

Every serving pod is pinned to its pool (`nodeSelector modelplane.ai/pool`),
tolerates the GPU taint, gets `/dev/shm` as a memory emptyDir, the CPU/memory
requests of `workers.resources`, the DRA claim of its role, the model cache
read-only at `/mnt/models`, the `MODELPLANE_*` env of api.md, and the annotation
`cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` (budgets.py). The user's
template (labels, annotations, containers, env, volumes, pull secrets) passes
through; modelplane's labels win where they collide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from modelplane.api.model_deployment import ModelDeployment, Role
from modelplane.api.placement_lock import LockedReplica
from modelplane.api.pod_template import Container
from modelplane.api.topology import WorkerShape, port_arg
from modelplane.components.images import MODEL_CACHE_IMAGE
from modelplane.components.workload.claims import CLAIM_NAME
from modelplane.components.workload.objects import (
    DEPLOYMENT,
    POOL,
    REPLICA,
    ROLE,
    SAFE_TO_EVICT,
    SKIP_AWAIT,
    Manifest,
    app_labels,
    labels,
    metadata,
)

ENGINE = "engine"
DEFAULT_ENGINE_PORT = 8000
CACHE_MOUNT = "/mnt/models"
SHM_VOLUME = "dshm"
CACHE_VOLUME = "model-cache"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
READINESS = {"initialDelaySeconds": 30, "periodSeconds": 10, "timeoutSeconds": 5}
# Loading weights takes minutes to tens of minutes: the startup probe allows an hour, then the
# liveness probe restarts an engine that stops answering (a hung engine was never restarted).
STARTUP = {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 360}
LIVENESS = {"periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 4}

Position = Literal["single", "leader", "worker"]


CACHE_WAIT_IMAGE = MODEL_CACHE_IMAGE  # the hydration Job's image: one pull per node


@dataclass(frozen=True)
class PodContext:
    """What one role of one replica needs to build its pods."""

    deployment: ModelDeployment
    replica: LockedReplica
    role_name: str
    role: Role
    claim_template: str | None = None
    cache_claim: str | None = None
    # `repo@revision` the cache's marker holds once hydrated: pods wait for it (init container).
    cache_ready: str | None = None
    # The source's directory of the volume (`revisions/<digest>`), mounted at CACHE_MOUNT;
    # None: the volume's root (a replica from before sources had directories).
    cache_dir: str | None = None
    # The image of the wait for the cache (ClusterTarget.model_cache_image).
    cache_image: str = CACHE_WAIT_IMAGE
    # Extended resources (device plugins) each pod requests, e.g. {"vpc.amazonaws.com/efa": 16}.
    extended: Mapping[str, int] = field(default_factory=dict)
    # Labels of serving pods only (prefill/decode: the llm-d role labels the EPP filters on).
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def shape(self) -> WorkerShape:
        return self.role.workers.topology.shape

    @property
    def pool(self) -> str:
        return self.replica.pools[self.role_name]  # type: ignore[index]

    @property
    def multi_node(self) -> bool:
        return self.shape.nodes_per_worker > 1

    @property
    def namespace(self) -> str:
        return self.deployment.metadata.namespace or "default"


def _clean(value: Any) -> Any:
    """Drop empty lists/dicts (and None) so manifests carry only what was set."""
    if isinstance(value, dict):
        out = {k: _clean(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def dump(model: Any) -> Any:
    return _clean(model.model_dump(mode="json", by_alias=True, exclude_none=True))


def engine_port(engine: Container) -> int:
    """The port the engine serves on: its first declared port, else `--port`, else 8000."""
    if engine.ports:
        return engine.ports[0].container_port
    return port_arg([*engine.command, *engine.args]) or DEFAULT_ENGINE_PORT


#: `app.kubernetes.io/component` of each serving role's objects and pods.
ROLE_COMPONENT = {"unified": "model-server", "prefill": "prefill-server", "decode": "decode-server"}


def replica_app_labels(ctx: PodContext) -> dict[str, str]:
    """The recommended labels of a role's objects: the model, the replica, the role."""
    return app_labels(ctx.deployment.metadata.name, ctx.replica.name, ROLE_COMPONENT[ctx.role_name])


def pod_labels(ctx: PodContext, position: Position = "single") -> dict[str, str]:
    """The recommended labels, the template's (which may refine them), then modelplane's;
    `extra_labels` only on serving pods (not LWS workers)."""
    user = ctx.role.workers.template.metadata.labels
    return labels(
        replica_app_labels(ctx),
        user,
        ctx.extra_labels if position != "worker" else None,
        {
            DEPLOYMENT: ctx.deployment.metadata.name,
            REPLICA: ctx.replica.name,
            ROLE: ctx.role_name,
        },
    )


def selector_labels(ctx: PodContext) -> dict[str, str]:
    return {REPLICA: ctx.replica.name, ROLE: ctx.role_name}


def injected_env(ctx: PodContext, position: Position) -> list[dict[str, Any]]:
    shape = ctx.shape
    if position == "single":
        leader: dict[str, Any] = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        rank: dict[str, Any] = {"value": "0"}
    else:
        leader = {"value": "$(LWS_LEADER_ADDRESS)"}
        rank = {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{LWS_WORKER_INDEX}']"}}}
    env = [
        {"name": "MODELPLANE_LEADER_ADDRESS", **leader},
        {"name": "MODELPLANE_RANK", **rank},
        {"name": "MODELPLANE_NODES", "value": str(shape.nodes_per_worker)},
        {"name": "MODELPLANE_TENSOR", "value": str(shape.tensor)},
        {"name": "MODELPLANE_PIPELINE", "value": str(shape.pipeline)},
        {"name": "MODELPLANE_DATA", "value": str(shape.data)},
        {"name": "MODELPLANE_DATA_LOCAL", "value": str(shape.data_local)},
        {"name": "MODELPLANE_REPLICA", "value": ctx.replica.name},
    ]
    return env


def engine_container(
    ctx: PodContext,
    position: Position,
    *,
    port: int | None = None,
    extra_env: list[dict[str, Any]] | None = None,
    extra_args: list[str] | None = None,
) -> dict[str, Any]:
    """The engine container: the user's, plus env, port, probe, requests, claim and mounts."""
    spec = ctx.role.workers.template.spec
    engine = spec.engine
    body: dict[str, Any] = dump(engine)
    user_env = body.pop("env", [])
    user_names = {e["name"] for e in user_env}
    env = [
        e for e in [*injected_env(ctx, position), *(extra_env or [])] if e["name"] not in user_names
    ]
    body["env"] = env + user_env
    if extra_args:
        body["args"] = [*body.get("args", []), *extra_args]
    serving = position != "worker"
    port = port or engine_port(engine)
    if serving and not engine.ports:
        body["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    health = {"httpGet": {"path": "/health", "port": port}}
    if serving and engine.readiness_probe is None:
        body["readinessProbe"] = {**health, **READINESS}
    if serving and engine.startup_probe is None:
        body["startupProbe"] = {**health, **STARTUP}
    if serving and engine.liveness_probe is None:
        body["livenessProbe"] = {**health, **LIVENESS}
    resources = body.pop("resources", {})
    requests = dict(resources.get("requests", {}))
    requests.update(cpu=ctx.role.workers.resources.cpu, memory=ctx.role.workers.resources.memory)
    resources["requests"] = requests
    if ctx.extended:
        limits = dict(resources.get("limits", {}))
        for name, count in sorted(ctx.extended.items()):
            requests[name] = limits[name] = str(count)
        resources["limits"] = limits
    if ctx.claim_template is not None:
        resources["claims"] = [{"name": CLAIM_NAME}]
    body["resources"] = resources
    mounts = list(body.pop("volumeMounts", []))
    mounted = {m["mountPath"] for m in mounts}
    if "/dev/shm" not in mounted:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if ctx.cache_claim is not None and CACHE_MOUNT not in mounted:
        mount = {"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT, "readOnly": True}
        if ctx.cache_dir is not None:
            mount["subPath"] = ctx.cache_dir  # this revision's directory, nothing else
        mounts.append(mount)
    body["volumeMounts"] = mounts
    return body


CACHE_MARKER = ".modelplane-hydrated"  # written by the cache's hydration Job


def cache_wait_container(
    ready: str, directory: str | None = None, image: str = CACHE_WAIT_IMAGE
) -> dict[str, Any]:
    """Waits until the model cache's marker in ``directory`` (None: the volume's root) names
    `ready` (`repo@revision`). It mounts the whole volume: the directory may not exist yet.
    ``image``: the hydration Job's (one pull per node)."""
    marker = (
        f"{CACHE_MOUNT}/{directory}/{CACHE_MARKER}"
        if directory
        else f"{CACHE_MOUNT}/{CACHE_MARKER}"
    )
    script = (
        f'until [ "$(cat {marker} 2>/dev/null || true)" = "$MODELPLANE_CACHE_READY" ]; do '
        'echo "waiting for the model cache to hold $MODELPLANE_CACHE_READY"; sleep 15; done'
    )
    return {
        "name": "wait-for-model-cache",
        "image": image,
        "command": ["/bin/sh", "-c", script],
        "env": [{"name": "MODELPLANE_CACHE_READY", "value": ready}],
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT, "readOnly": True}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }


def pod_template(
    ctx: PodContext,
    position: Position,
    *,
    engine: dict[str, Any] | None = None,
    sidecars: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec = ctx.role.workers.template.spec
    meta = ctx.role.workers.template.metadata
    engine = engine or engine_container(ctx, position)
    containers = [engine if c.name == ENGINE else dump(c) for c in spec.containers]
    containers.extend(sidecars or [])
    volumes = [dump(v) for v in spec.volumes]
    names = {v["name"] for v in volumes}
    if SHM_VOLUME not in names:
        shm: dict[str, Any] = {"medium": "Memory"}
        if spec.shm_size:
            shm["sizeLimit"] = spec.shm_size
        volumes.append({"name": SHM_VOLUME, "emptyDir": shm})
    if ctx.cache_claim is not None and CACHE_VOLUME not in names:
        volumes.append(
            {
                "name": CACHE_VOLUME,
                "persistentVolumeClaim": {"claimName": ctx.cache_claim, "readOnly": True},
            }
        )
    pod: dict[str, Any] = {
        "nodeSelector": {POOL: ctx.pool},
        "tolerations": [dict(GPU_TOLERATION)],
    }
    if ctx.claim_template is not None:
        pod["resourceClaims"] = [
            {"name": CLAIM_NAME, "resourceClaimTemplateName": ctx.claim_template}
        ]
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s.name} for s in spec.image_pull_secrets]
    if spec.service_account_name:
        pod["serviceAccountName"] = spec.service_account_name
    if spec.termination_grace_period_seconds is not None:
        pod["terminationGracePeriodSeconds"] = spec.termination_grace_period_seconds
    init = [dump(c) for c in spec.init_containers]
    if ctx.cache_claim is not None and ctx.cache_ready is not None:
        init.insert(0, cache_wait_container(ctx.cache_ready, ctx.cache_dir, ctx.cache_image))
    if init:
        pod["initContainers"] = init
    pod["containers"] = containers
    pod["volumes"] = volumes
    template_meta: dict[str, Any] = {"labels": pod_labels(ctx, position)}
    # Every pod of a replica holds devices and is lost for the model's load time: the
    # cluster autoscaler leaves its node alone (the template may say otherwise).
    template_meta["annotations"] = {SAFE_TO_EVICT: "false", **meta.annotations}
    return {"metadata": template_meta, "spec": pod}


def deployment_manifest(
    ctx: PodContext, name: str, object_labels: Mapping[str, str], template: dict[str, Any]
) -> Manifest:
    """A one-node worker: a Deployment with `workers.count` pods.

    Strategy `Recreate`: the scheduler packs a pool's devices exactly, so a rolling
    update's surge pod could never get its claim allocated and the rollout would
    never finish; the old pods go first, then the new ones start.
    """
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, ctx.namespace, object_labels, SKIP_AWAIT),
        "spec": {
            "replicas": ctx.role.workers.count,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector_labels(ctx)},
            "template": template,
        },
    }


def lws_manifest(
    ctx: PodContext,
    name: str,
    object_labels: Mapping[str, str],
    leader: dict[str, Any],
    worker: dict[str, Any],
) -> Manifest:
    """A multi-node worker: a LeaderWorkerSet group of `nodes per worker` pods."""
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": metadata(name, ctx.namespace, object_labels),
        "spec": {
            "replicas": ctx.role.workers.count,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": ctx.shape.nodes_per_worker,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }
