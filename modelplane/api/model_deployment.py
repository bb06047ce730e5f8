"""ModelDeployment: a model served as N identical replicas across the fleet."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import Field, field_validator, model_validator

from modelplane.api.autoscaling import Autoscaling, autoscaling_problems
from modelplane.api.base import (
    API_VERSION,
    DNSLabel,
    LabelKey,
    LabelSelector,
    Namespaced,
    ObjectMeta,
    Strict,
    no_repeats,
)
from modelplane.api.limits import Int32, Replicas
from modelplane.api.pod_template import PodTemplate
from modelplane.api.problems import raise_if
from modelplane.api.quantities import QuantityStr
from modelplane.api.rollout import Rollout
from modelplane.api.topology import (
    POOL_PORT,
    TOPOLOGY_ENV,
    WorkerShape,
    flag_value_agrees,
    parallel_flags,
    port_arg,
)

RoleName = Literal["unified", "prefill", "decode"]


class Toleration(Strict):
    key: str = ""
    """The taint key to tolerate; empty with Exists tolerates every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Equal (default; key and value must match) or Exists (any value)."""
    value: str = ""
    """The taint value to match with Equal."""
    effect: Literal["NoSchedule", "NoExecute", ""] = ""
    """The taint effect to tolerate; empty: every effect."""

    @model_validator(mode="after")
    def _operator_rules(self) -> Toleration:
        if self.operator == "Equal" and not self.key:
            raise ValueError("operator Equal needs a key")
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists must not set a value")
        return self


class CelSelector(Strict):
    cel: str = Field(min_length=1, max_length=10240)
    """A CEL expression over `device` (attributes, capacity) that must be true."""


class DeviceRequest(Strict):
    name: DNSLabel
    """The device's name in the InferenceClass (e.g. gpu, nic)."""
    count: int | None = Field(default=None, ge=1, le=64)
    """Devices per node; the GPU request defaults to the topology's GPUs per node, others need it.
    """
    selectors: list[CelSelector] = Field(default_factory=list, max_length=8)
    """CEL expressions the device must satisfy (at most 8, all must hold)."""


class NodeSelector(Strict):
    devices: list[DeviceRequest] = Field(min_length=1, max_length=16)
    """What each worker node must offer (1..16 requests, unique names), in DRA terms."""

    @field_validator("devices")
    @classmethod
    def _unique(cls, devices: list[DeviceRequest]) -> list[DeviceRequest]:
        no_repeats((d.name for d in devices), "device request names must be unique")
        return devices

    @property
    def gpu_request(self) -> DeviceRequest:
        """The request whose count defaults to GPUs per node: `gpu`, else the first."""
        return next((d for d in self.devices if d.name == "gpu"), self.devices[0])


class Topology(Strict):
    tensor: int = Field(ge=1, le=64)
    """Tensor-parallel degree (GPUs per node of one model shard)."""
    pipeline: int = Field(default=1, ge=1, le=64)
    """Pipeline-parallel degree (default 1)."""
    data: int = Field(default=1, ge=1, le=1024)
    """Data-parallel degree (default 1); a multiple of dataLocal."""
    data_local: int = Field(default=1, ge=1, le=64)
    """Data-parallel ranks per node (default 1)."""

    @model_validator(mode="after")
    def _data_multiple_of_local(self) -> Topology:
        if self.data % self.data_local:
            raise ValueError(
                f"data ({self.data}) must be a multiple of dataLocal ({self.data_local})"
            )
        return self

    @property
    def shape(self) -> WorkerShape:
        return WorkerShape(self.tensor, self.pipeline, self.data, self.data_local)


class WorkerResources(Strict):
    cpu: QuantityStr
    """CPU per pod (a Kubernetes quantity)."""
    memory: QuantityStr
    """Memory per pod (a Kubernetes quantity)."""


class Workers(Strict):
    count: int = Field(default=1, ge=1, le=64)
    """Worker instances per replica (default 1); for prefill/decode, the P:D ratio."""
    topology: Topology
    """The parallelism of one worker: tensor, pipeline, data, dataLocal."""
    resources: WorkerResources
    """CPU and memory per pod."""
    template: PodTemplate
    """The pod template of every pod of a worker (a subset of a PodTemplateSpec)."""

    @model_validator(mode="after")
    def _args_agree_with_topology(self) -> Workers:
        shape = self.topology.shape
        expected = {
            "nodes": shape.nodes_per_worker,
            "tensor": shape.tensor,
            "pipeline": shape.pipeline,
            "data": shape.data,
            "data_local": shape.data_local,
        }
        containers = self.template.spec.containers
        index = next(i for i, c in enumerate(containers) if c.name == "engine")
        engine = containers[index]
        where = f"template.spec.containers[{index}]"
        problems: list[tuple[str, str]] = []
        for flag, field, raw in parallel_flags([*engine.command, *engine.args]):
            if not flag_value_agrees(raw, field, expected[field]):
                problems.append(
                    (
                        f"{where}.args",
                        f"{flag}={raw} disagrees with {_wire(field)}={expected[field]} "
                        f"(write the number or $({TOPOLOGY_ENV[field]}))",
                    )
                )
        by_name = {var: field for field, var in TOPOLOGY_ENV.items()}
        for j, env in enumerate(engine.env):
            field = by_name.get(env.name)
            if field is None:
                continue
            if env.value_from is not None or env.value is None:
                problems.append(
                    (
                        f"{where}.env[{j}]",
                        f"{env.name} is set by modelplane from the topology; set it only as "
                        f"a literal value equal to {_wire(field)}={expected[field]}",
                    )
                )
            elif env.value.strip() != str(expected[field]):
                problems.append(
                    (
                        f"{where}.env[{j}].value",
                        f"{env.name}={env.value} disagrees with {_wire(field)}={expected[field]}",
                    )
                )
        raise_if(problems)
        return self


def _wire(field: str) -> str:
    """The topology field as users write it (or the derived nodes per worker)."""
    if field == "nodes":
        return "nodes per worker (pipeline × data / dataLocal)"
    return "topology.dataLocal" if field == "data_local" else f"topology.{field}"


class Role(Strict):
    """One self-contained serving role: what each worker node needs and the workers."""

    node_selector: NodeSelector | None = None
    """What each worker node of this role must offer."""
    workers: Workers
    """The role's workers."""


class ModelCacheRef(Strict):
    name: DNSLabel
    """The ModelCache in the deployment's namespace."""


class ModelDeploymentSpec(Strict):
    replicas: Replicas = 1
    """ModelReplicas across the fleet (0..1000)."""
    cluster_selector: LabelSelector = Field(default_factory=LabelSelector)
    """Which InferenceClusters may host replicas, by their labels; empty: all."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """Cluster taints the deployment tolerates (Kubernetes semantics)."""
    node_selector: NodeSelector | None = None
    """Unified serving: what each worker node must offer."""
    workers: Workers | None = None
    """Unified serving: the workers of each replica."""
    prefill: Role | None = None
    """Disaggregated serving: the prefill role (with decode)."""
    decode: Role | None = None
    """Disaggregated serving: the decode role (with prefill)."""
    model_cache_ref: ModelCacheRef | None = None
    """A ModelCache mounted read-only at /mnt/models; replicas go only where it is."""
    priority: Int32 = 0
    """Higher is placed first when capacity is short (default 0)."""
    autoscaling: Autoscaling | None = None
    """Move the replica count between bounds after the engines' load (`reconcile`); replicas is the
    start.
    """
    rollout: Rollout = Field(default_factory=Rollout)
    """How a pod-template change reaches the replicas (default: one replica at a time)."""
    placement_policy: Literal["Spread", "Cheapest"] = "Spread"
    """Where new replicas go among the clusters and pools with room: Spread (default) over
    clusters first; Cheapest: the lowest price per hour first (InferenceClass
    `pricePerNodeHour`), then spread. Placed replicas never move either way."""

    @model_validator(mode="after")
    def _autoscaling_bounds(self) -> ModelDeploymentSpec:
        if self.autoscaling is not None:
            raise_if(autoscaling_problems(self.autoscaling, self.replicas))
        return self

    @model_validator(mode="after")
    def _unified_xor_disaggregated(self) -> ModelDeploymentSpec:
        unified = self.workers is not None or self.node_selector is not None
        disagg = self.prefill is not None or self.decode is not None
        if unified and disagg:
            raise ValueError(
                "set either nodeSelector + workers (unified) or prefill + decode "
                "(disaggregated), not both"
            )
        if not unified and not disagg:
            raise ValueError("set workers (unified serving) or prefill + decode")
        problems: list[tuple[str, str]] = []
        if unified and self.workers is None:
            problems.append(("workers", "required with nodeSelector"))
        if disagg:
            for name in ("prefill", "decode"):
                if getattr(self, name) is None:
                    problems.append((name, "prefill and decode must both be set"))
        raise_if(problems)
        for name, role in self.roles.items():
            self._check_device_counts(name, role)
        if self.decode is not None:
            engine = self.decode.workers.template.spec.engine
            first = engine.ports[0].container_port if engine.ports else None
            if (
                first in (None, POOL_PORT)
                and port_arg([*engine.command, *engine.args]) == POOL_PORT
            ):
                raise_if(
                    [
                        (
                            "decode.workers.template.spec.containers[engine].args",
                            f"the decode engine listens on {POOL_PORT}, which the P/D routing "
                            "sidecar owns: give it another --port (or omit --port to get 8001)",
                        )
                    ]
                )
        return self

    def _check_device_counts(self, name: str, role: Role) -> None:
        if role.node_selector is None:
            return
        gpu = role.node_selector.gpu_request
        prefix = "" if name == "unified" else f"{name}."
        problems = [
            (f"{prefix}nodeSelector.devices[{i}].count", "required for a non-GPU device request")
            for i, d in enumerate(role.node_selector.devices)
            if d is not gpu and d.count is None
        ]
        per_node = role.workers.topology.shape.gpus_per_node
        if gpu.count is not None and gpu.count != per_node:
            i = role.node_selector.devices.index(gpu)
            topo = role.workers.topology
            problems.append(
                (
                    f"{prefix}nodeSelector.devices[{i}].count",
                    f"the GPU request's count {gpu.count} disagrees with the topology: GPUs "
                    f"per node = tensor × dataLocal = {topo.tensor} × {topo.data_local} = "
                    f"{per_node} (leave count out to use it)",
                )
            )
        raise_if(problems)

    @cached_property
    def roles(self) -> dict[str, Role]:
        """The serving roles in a fixed order: {unified} or {prefill, decode}."""
        if self.workers is not None:
            unified = Role.model_construct(node_selector=self.node_selector, workers=self.workers)
            return {"unified": unified}
        assert self.prefill is not None and self.decode is not None
        return {"prefill": self.prefill, "decode": self.decode}

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None


class ModelDeployment(Namespaced):
    api_version: Literal["modelplane.ai/v1alpha1"] = API_VERSION
    kind: Literal["ModelDeployment"] = "ModelDeployment"
    metadata: ObjectMeta
    spec: ModelDeploymentSpec

    def template_labels(self) -> dict[str, str]:
        """Labels from the pod templates (both roles' merged, prefill first)."""
        labels: dict[str, str] = {}
        for role in self.spec.roles.values():
            labels.update(role.workers.template.metadata.labels)
        return labels


__all__ = ["ModelDeployment", "ModelDeploymentSpec", "Role", "RoleName", "LabelKey"]
