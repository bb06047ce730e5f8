"""DRA: one ResourceClaimTemplate per role, one request per device request that DRA claims.

Which DeviceClass a request claims comes from the pool the scheduler chose: the
class device `modelplane.scheduler.matching.choose_device` picks for the request
on the pool's InferenceClass (the same function the scheduler charges), whose
`deviceClassName` names the class. A request that lands on a `Synthetic` device is
matched but never claimed, so a role whose requests are all synthetic gets no
claim at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from modelplane.api.inference_class import ClassDevice
from modelplane.api.model_deployment import DeviceRequest, Role
from modelplane.cel import Device, DeviceSelector, compile_selector
from modelplane.components.workload.objects import Manifest, metadata
from modelplane.scheduler.matching import choose_device

CLAIM_NAME = "devices"  # the pod-level claim name containers reference


@dataclass(frozen=True)
class ClaimRequest:
    name: str
    device_class_name: str
    count: int
    selectors: tuple[str, ...] = ()

    def as_manifest(self) -> dict[str, Any]:
        exactly: dict[str, Any] = {
            "deviceClassName": self.device_class_name,
            "count": self.count,
        }
        if self.selectors:
            exactly["selectors"] = [{"cel": {"expression": s}} for s in self.selectors]
        return {"name": self.name, "exactly": exactly}


@lru_cache(maxsize=1024)
def _selector(expression: str) -> DeviceSelector:
    return compile_selector(expression)


def _device(cd: ClassDevice) -> Device:
    return Device.from_class_device(
        cd.driver,
        attributes={n: (a.kind, a.value) for n, a in cd.attributes.items()},
        capacity={n: c.value for n, c in cd.capacity.items()},
    )


def request_count(role: Role, request: DeviceRequest) -> int:
    """The explicit count, else GPUs per node for the GPU request."""
    if request.count is not None:
        return request.count
    return role.workers.topology.shape.gpus_per_node


def match_device(
    request: DeviceRequest, count: int, devices: Sequence[ClassDevice]
) -> ClassDevice | None:
    """The class device that serves `request` (the scheduler's `choose_device`)."""
    selectors = [_selector(s.cel) for s in request.selectors]
    kind = choose_device(
        request.name,
        count,
        devices,
        lambda i: all(sel.matches(_device(devices[i])) for sel in selectors),
        selectors=bool(selectors),
    )
    return None if kind is None else devices[kind]


def claim_requests(role: Role, devices: Sequence[ClassDevice], *, pool: str) -> list[ClaimRequest]:
    """The DRA requests of a role on a pool whose class has `devices`.

    Raises ValueError when a request matches no device of the pool (the lock is
    then out of date with the specs: run `modelplane plan`).
    """
    gpus = role.workers.topology.shape.gpus_per_node
    if role.node_selector is None:
        kind = choose_device(None, gpus, devices, lambda _: True, selectors=False)
        gpu = None if kind is None else devices[kind]
        if gpu is None or gpu.device_class_name is None:
            return []
        return [ClaimRequest("gpu", gpu.device_class_name, gpus)]
    out: list[ClaimRequest] = []
    for request in role.node_selector.devices:
        count = request_count(role, request)
        device = match_device(request, count, devices)
        if device is None:
            raise ValueError(
                f"device request {request.name!r} (count {count}) matches no device of pool "
                f"{pool!r}; the placement lock is stale, re-run `modelplane plan`"
            )
        if device.claim != "DRA" or device.device_class_name is None:
            continue
        out.append(
            ClaimRequest(
                request.name,
                device.device_class_name,
                count,
                tuple(s.cel for s in request.selectors),
            )
        )
    return out


def extended_resources(role: Role, devices: Sequence[ClassDevice]) -> dict[str, int]:
    """Per extended resource, how many of it each pod of the role requests: the requests
    that land on `ExtendedResource` devices (e.g. EFA interfaces through the AWS EFA device
    plugin, `vpc.amazonaws.com/efa`)."""
    out: dict[str, int] = {}
    if role.node_selector is None:
        return out
    for request in role.node_selector.devices:
        device = match_device(request, request_count(role, request), devices)
        if device is not None and device.claim == "ExtendedResource" and device.resource_name:
            count = request_count(role, request)
            out[device.resource_name] = out.get(device.resource_name, 0) + count
    return out


def claim_template(
    name: str, namespace: str, labels: Mapping[str, str], requests: Sequence[ClaimRequest]
) -> Manifest:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata(name, namespace, labels),
        "spec": {
            "metadata": {"labels": dict(labels)},
            "spec": {"devices": {"requests": [r.as_manifest() for r in requests]}},
        },
    }
