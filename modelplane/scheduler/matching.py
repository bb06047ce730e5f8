"""Which device kind of a class serves each of a role's device requests (CEL, memoized).

A role's pod asks, per device request in order, for `count` devices of the
device kind `choose_device` picks for that request on the class (the same
function names the DeviceClass of the workload's ResourceClaimTemplate), or of
another kind the same claim can be served by on a real node (`same_claim`), so
the scheduler charges only what the claim can get. What is static about that (the
kind, and whether a pod fits on an empty node, CPU and memory included) is
computed once per (deployment, role, class) here; what depends on occupancy
lives in `capacity`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from modelplane.api.inference_class import ClassDevice, InferenceClass
from modelplane.api.model_deployment import Role
from modelplane.cel import CelCompileError, Device, compile_selector
from modelplane.cel.quantity import parse_quantity

# The name a role without a nodeSelector gives its one implicit device request.
IMPLICIT_GPU_REQUEST = "gpu"


def choose_device(
    name: str | None,
    count: int,
    devices: Sequence[ClassDevice],
    satisfies: Callable[[int], bool],
    *,
    selectors: bool,
) -> int | None:
    """The one device kind (index into `devices`) that serves a device request, or None.

    The candidates are the kinds with at least `count` devices per node for which
    `satisfies(index)` holds (every CEL selector of the request matches). Of those: the
    kind named like the request; else, for a request with selectors, the first candidate;
    else (no selectors, or the implicit GPU request with `name` None) the first DRA
    candidate. The scheduler charges this kind and the workload's ResourceClaimTemplate
    claims its DeviceClass, so both always agree."""
    candidates = [i for i, d in enumerate(devices) if d.count >= count and satisfies(i)]
    named = [i for i in candidates if name is not None and devices[i].name == name]
    if named:
        return named[0]
    if selectors:
        return candidates[0] if candidates else None
    return next((i for i in candidates if devices[i].claim == "DRA"), None)


def same_claim(a: ClassDevice, b: ClassDevice) -> bool:
    """Whether what claims `a` may be served by `b` on a real node: the same DeviceClass of
    the same driver (DRA), the same extended resource, or (Synthetic) the same device."""
    if a.claim != b.claim:
        return False
    if a.claim == "DRA":
        return (a.device_class_name, a.driver) == (b.device_class_name, b.driver)
    if a.claim == "ExtendedResource":
        return a.resource_name == b.resource_name
    return a is b


def device_kinds(
    name: str | None,
    count: int,
    devices: Sequence[ClassDevice],
    satisfies: Callable[[int], bool],
    *,
    selectors: bool,
) -> tuple[int, ...]:
    """The kinds a request may take its devices from: the kind `choose_device` picks (whose
    DeviceClass the claim names), then the other candidates the same claim can be served
    by (`same_claim`), in class order; () when no kind serves it."""
    chosen = choose_device(name, count, devices, satisfies, selectors=selectors)
    if chosen is None:
        return ()
    peers = [
        i
        for i, d in enumerate(devices)
        if i != chosen and d.count >= count and same_claim(devices[chosen], d) and satisfies(i)
    ]
    return (chosen, *peers)


@dataclass(frozen=True)
class Request:
    """One device request of a pod, resolved against one class."""

    name: str
    count: int
    kinds: tuple[int, ...]  # the kinds that may serve it (`device_kinds`), or ()


@dataclass(frozen=True)
class ClassShape:
    """The node of a pool: per device kind, how many and whether they are consumed."""

    counts: tuple[int, ...]
    consumed: tuple[bool, ...]  # DRA and ExtendedResource devices are consumed, Synthetic
    # ones only matched
    # Per node (cpu millicores, memory bytes), or () when the class's allocatable is unknown
    # (CPU and memory unchecked). A node's row of free amounts is counts + resources.
    resources: tuple[int, ...] = ()

    @cached_property
    def consumed_per_node(self) -> int:
        return sum(c for c, used in zip(self.counts, self.consumed, strict=True) if used)

    def row(self) -> list[int]:
        """What an empty node has free: per device kind, then per resource."""
        return [*self.counts, *self.resources]

    @staticmethod
    def of(cls: InferenceClass) -> ClassShape:
        devices = cls.spec.devices
        allocatable = cls.spec.node_allocatable
        return ClassShape(
            counts=tuple(d.count for d in devices),
            consumed=tuple(d.claim != "Synthetic" for d in devices),
            resources=()
            if allocatable is None
            else (allocatable.cpu_milli, allocatable.memory_bytes),
        )


@dataclass(frozen=True)
class PodDemand:
    """What one role asks of one pool's class: `workers` gangs of `pods_per_worker` pods
    on distinct nodes, each pod taking `requests` from its node."""

    requests: tuple[Request, ...]
    pods_per_worker: int
    workers: int
    devices_per_pod: int  # sum of request counts: the pod's size, for packing order
    pods: int  # pods_per_worker x workers
    least_consumed: int  # DRA devices all pods surely consume (requests only DRA kinds serve)
    resources: tuple[int, ...] = ()  # per pod (cpu millicores, memory bytes), as ClassShape

    def __post_init__(self) -> None:
        # Demands key the scheduler's memos (misfits, free nodes, demand numbers) many
        # thousand times a run: hash once (the generated hash re-hashed every field,
        # requests included, on each lookup). Equality is the generated one.
        object.__setattr__(
            self,
            "_hash",
            hash(
                (
                    self.requests,
                    self.pods_per_worker,
                    self.workers,
                    self.devices_per_pod,
                    self.pods,
                    self.least_consumed,
                    self.resources,
                )
            ),
        )

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]


def pod_resources(role: Role) -> tuple[int, int]:
    """A role's per-pod (cpu millicores, memory bytes), rounded up."""
    res = role.workers.resources
    cpu = parse_quantity(res.cpu).value * 1000
    return math.ceil(cpu), math.ceil(parse_quantity(res.memory).value)


def take_pod(demand: PodDemand, free: list[int]) -> dict[int, int] | None:
    """What one pod of `demand` takes from a node's row of free amounts (devices per kind,
    then cpu and memory at the row's end), or None when the node has no room for it."""
    taken = take_from_node(demand.requests, free)
    if taken is None:
        return None
    base = len(free) - len(demand.resources)
    for offset, amount in enumerate(demand.resources):
        if free[base + offset] < amount:
            return None
        if amount:
            taken[base + offset] = amount
    return taken


def take_from_node(requests: tuple[Request, ...], free: list[int]) -> dict[int, int] | None:
    """Devices per kind one pod takes from a node with `free` devices left, or None.

    Each request takes from the first of its kinds with `count` left for this pod
    (Synthetic kinds are always at full count on the node, but a pod's own
    requests do not share the same device).
    """
    taken: dict[int, int] = {}
    for req in requests:
        for kind in req.kinds:
            already = taken.get(kind, 0)
            if free[kind] - already >= req.count:
                taken[kind] = already + req.count
                break
        else:
            return None
    return taken


@dataclass(frozen=True)
class RoleFit:
    """A role against one class: its demand, or the request that cannot be served."""

    demand: PodDemand | None
    unmatched: str | None = None
    oversized: str | None = None  # the pod's cpu/memory, when the devices match but a node
    # of the class has less CPU or memory than one pod asks


class Matcher:
    """Resolves roles against classes, memoizing CEL results per
    (expression, class, device) and role fits per (deployment, role, class)."""

    def __init__(self, classes: Mapping[str, InferenceClass]) -> None:
        self._classes = classes
        self._shapes: dict[str, ClassShape] = {}
        self._devices: dict[tuple[str, str], Device | None] = {}
        self._cel: dict[tuple[str, str, str], bool] = {}
        self._fits: dict[tuple[str, str, str], RoleFit] = {}

    def shape(self, class_name: str) -> ClassShape | None:
        shape = self._shapes.get(class_name)
        if shape is None:
            cls = self._classes.get(class_name)
            if cls is None:
                return None
            shape = self._shapes[class_name] = ClassShape.of(cls)
        return shape

    def fit(self, deployment: str, role_name: str, role: Role, class_name: str) -> RoleFit:
        """How `role` of `deployment` (its key) fits a node of `class_name`."""
        memo_key = (deployment, role_name, class_name)
        fit = self._fits.get(memo_key)
        if fit is None:
            fit = self._fits[memo_key] = self._resolve(role, class_name)
        return fit

    def _resolve(self, role: Role, class_name: str) -> RoleFit:
        cls = self._classes.get(class_name)
        shape = self.shape(class_name)
        worker = role.workers.topology.shape
        gpus = worker.gpus_per_node
        if cls is None or shape is None:
            name = IMPLICIT_GPU_REQUEST
            if role.node_selector is not None:
                name = role.node_selector.devices[0].name
            return RoleFit(None, name)
        devices = cls.spec.devices
        requests: list[Request] = []
        if role.node_selector is None:
            kinds = device_kinds(None, gpus, devices, lambda _: True, selectors=False)
            requests.append(Request(IMPLICIT_GPU_REQUEST, gpus, kinds))
        else:
            for req in role.node_selector.devices:
                # Only the GPU request (`gpu_request`) may omit count (validated); it
                # defaults to the topology's GPUs per node.
                count = req.count if req.count is not None else gpus
                exprs = [s.cel for s in req.selectors]
                kinds = device_kinds(
                    req.name,
                    count,
                    devices,
                    lambda i, exprs=exprs: all(  # type: ignore[misc]
                        self._matches(e, class_name, devices[i]) for e in exprs
                    ),
                    selectors=bool(exprs),
                )
                requests.append(Request(req.name, count, kinds))
        # A pod must fit on an empty node; the first request it cannot take is the culprit.
        for upto in range(1, len(requests) + 1):
            if take_from_node(tuple(requests[:upto]), list(shape.counts)) is None:
                return RoleFit(None, requests[upto - 1].name)
        resources: tuple[int, ...] = ()
        if shape.resources:
            resources = pod_resources(role)
            if any(a > b for a, b in zip(resources, shape.resources, strict=True)):
                res = role.workers.resources
                return RoleFit(None, oversized=f"cpu {res.cpu}, memory {res.memory}")
        pods = worker.nodes_per_worker * role.workers.count
        demand = PodDemand(
            requests=tuple(requests),
            pods_per_worker=worker.nodes_per_worker,
            workers=role.workers.count,
            devices_per_pod=sum(r.count for r in requests),
            pods=pods,
            least_consumed=pods
            * sum(r.count for r in requests if all(shape.consumed[k] for k in r.kinds)),
            resources=resources,
        )
        return RoleFit(demand)

    def _matches(self, expr: str, class_name: str, device: ClassDevice) -> bool:
        memo_key = (expr, class_name, device.name)
        hit = self._cel.get(memo_key)
        if hit is None:
            cel_device = self._device(class_name, device)
            hit = False
            if cel_device is not None:
                try:
                    hit = compile_selector(expr).matches(cel_device)
                except CelCompileError:
                    hit = False  # validation reports it; here it simply matches nothing
            self._cel[memo_key] = hit
        return hit

    def _device(self, class_name: str, device: ClassDevice) -> Device | None:
        memo_key = (class_name, device.name)
        if memo_key not in self._devices:
            try:
                self._devices[memo_key] = Device.from_class_device(
                    device.driver,
                    {name: (a.kind, a.value) for name, a in device.attributes.items()},
                    {name: c.value for name, c in device.capacity.items()},
                )
            except (ValueError, TypeError):
                self._devices[memo_key] = None  # validation reports it; nothing matches it
        return self._devices[memo_key]
