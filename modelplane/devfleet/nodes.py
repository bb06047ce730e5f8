"""What a dev-fleet cluster's simulated GPU nodes look like, derived from the fleet's specs.

For every node pool the specs give a cluster: ``nodeCount`` Nodes (managed by kwok) labelled
``modelplane.ai/pool=<pool>``, tainted like a real GPU node, with allocatable CPU, memory and
pods, a pod CIDR of their own; one ``resource.k8s.io/v1`` ResourceSlice per node and DRA
driver holding exactly the devices the pool's InferenceClass declares (names, attributes,
capacity); and the DeviceClasses the class names. The real kube-scheduler then evaluates the
same CEL selectors modelplane evaluated, against the same devices.

Pure: manifests as dicts, no I/O.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from modelplane.api.inference_class import ClassDevice, InferenceClass
from modelplane.api.inference_cluster import InferenceCluster

POOL_LABEL = "modelplane.ai/pool"
CLUSTER_LABEL = "modelplane.ai/dev-fleet-cluster"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_VALUE = "fake"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
"""What GKE and the NVIDIA GPU operator put on GPU nodes; modelplane's pods tolerate it."""
SYSTEM_POOL = "system"
DEFAULT_CPU = "96"
DEFAULT_MEMORY = "1000Gi"
DEFAULT_PODS = "110"
DRA_GROUP = "resource.k8s.io/v1"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class NodeShape:
    """Allocatable resources of one simulated node."""

    cpu: str = DEFAULT_CPU
    memory: str = DEFAULT_MEMORY
    pods: str = DEFAULT_PODS
    extended: tuple[tuple[str, int], ...] = ()  # device plugins' resources (ExtendedResource)


def node_shape(klass: InferenceClass | None) -> NodeShape:
    """The class's allocatable CPU/memory (explicit or derived from its provisioning machine
    type, the figures the scheduler charges), else generous defaults."""
    if klass is None:
        return NodeShape(cpu="8", memory="32Gi")
    extended = tuple(
        (d.resource_name, d.count)
        for d in klass.spec.devices
        if d.claim == "ExtendedResource" and d.resource_name
    )
    allocatable = klass.spec.node_allocatable
    if allocatable is None:
        return NodeShape(extended=extended)
    return NodeShape(cpu=allocatable.cpu, memory=f"{allocatable.memory_bytes}", extended=extended)


def node_name(cluster: str, pool: str, index: int) -> str:
    return f"{cluster}-{pool}-{index}"


def _dns_label(text: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return label[:63].rstrip("-") or "x"


def _node(
    *, cluster: str, pool: str, index: int, shape: NodeShape, pod_cidr: str, gpu: bool
) -> Manifest:
    name = node_name(cluster, pool, index)
    resources = {"cpu": shape.cpu, "memory": shape.memory, "pods": shape.pods}
    resources.update((name, str(count)) for name, count in shape.extended)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                POOL_LABEL: pool,
                CLUSTER_LABEL: cluster,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
            "annotations": {KWOK_ANNOTATION: KWOK_VALUE},
        },
        "spec": {
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
            "taints": [dict(GPU_TAINT)] if gpu else [],
        },
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def _attribute(attr: Any) -> dict[str, Any]:
    kind = attr.kind
    return {kind: attr.value}


def _device_entries(device: ClassDevice) -> list[dict[str, Any]]:
    entries = []
    for i in range(device.count):
        entry: dict[str, Any] = {"name": _dns_label(f"{device.name}-{i}")}
        if device.attributes:
            entry["attributes"] = {k: _attribute(v) for k, v in sorted(device.attributes.items())}
        if device.capacity:
            entry["capacity"] = {k: {"value": v.value} for k, v in sorted(device.capacity.items())}
        entries.append(entry)
    return entries


def resource_slices(node: str, klass: InferenceClass) -> list[Manifest]:
    """One ResourceSlice per DRA driver of the class, for one node (its own pool)."""
    by_driver: dict[str, list[dict[str, Any]]] = {}
    for device in klass.spec.devices:
        if device.claim != "DRA":
            continue  # Synthetic devices are only matched; ExtendedResource ones are on the Node
        by_driver.setdefault(device.driver, []).extend(_device_entries(device))
    slices = []
    for driver, devices in sorted(by_driver.items()):
        slices.append(
            {
                "apiVersion": DRA_GROUP,
                "kind": "ResourceSlice",
                "metadata": {
                    "name": _dns_label(f"{node}-{driver}"),
                    "labels": {"modelplane.ai/dev-fleet-node": node},
                },
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return slices


def device_classes(classes: Iterable[InferenceClass]) -> list[Manifest]:
    """The DeviceClasses the classes name: each selects its driver's devices."""
    wanted: dict[str, str] = {}
    for klass in classes:
        for device in klass.spec.devices:
            if device.claim == "DRA" and device.device_class_name:
                wanted.setdefault(device.device_class_name, device.driver)
    return [
        {
            "apiVersion": DRA_GROUP,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
        for name, driver in sorted(wanted.items())
    ]


@dataclass(frozen=True)
class ClusterNodes:
    """Everything simulated for one cluster."""

    nodes: list[Manifest]
    slices: list[Manifest]
    device_classes: list[Manifest]

    def node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]


def cluster_nodes(
    cluster_name: str,
    spec: InferenceCluster | None,
    classes: dict[str, InferenceClass],
    pod_range: str,
    *,
    system_nodes: int = 1,
) -> ClusterNodes:
    """Nodes, slices and device classes for ``cluster_name``.

    ``spec`` is the fleet's InferenceCluster of that name (None: only system nodes). Each node
    gets the next /24 of ``pod_range`` as its pod CIDR. A small untainted ``system`` pool runs
    what is not a model server (hydration Jobs, endpoint pickers).
    """
    subnets = ipaddress.ip_network(pod_range).subnets(new_prefix=24)
    nodes: list[Manifest] = []
    slices: list[Manifest] = []
    used: list[InferenceClass] = []
    for i in range(system_nodes):
        nodes.append(
            _node(
                cluster=cluster_name,
                pool=SYSTEM_POOL,
                index=i,
                shape=node_shape(None),
                pod_cidr=str(next(subnets)),
                gpu=False,
            )
        )
    if spec is not None:
        for pool in spec.spec.node_pools:
            klass = classes.get(pool.class_name)
            if klass is None:
                continue  # validation reports unknown classes; nothing to simulate
            used.append(klass)
            for i in range(pool.node_count):
                node = _node(
                    cluster=cluster_name,
                    pool=pool.name,
                    index=i,
                    shape=node_shape(klass),
                    pod_cidr=str(next(subnets)),
                    gpu=klass.spec.gpu_device is not None,
                )
                nodes.append(node)
                slices.extend(resource_slices(node["metadata"]["name"], klass))
    return ClusterNodes(nodes=nodes, slices=slices, device_classes=device_classes(used))
