"""InferenceClass: a tested hardware recipe for one node of a pool."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from modelplane.api import machines
from modelplane.api.base import API_VERSION, DNSSubdomain, ObjectMeta, Strict, no_repeats
from modelplane.api.limits import MAX_DISK_GB, Int64
from modelplane.api.quantities import QuantityStr
from modelplane.cel.quantity import parse_quantity

_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z_][A-Za-z0-9_]{0,62}$")
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)


class DeviceAttribute(Strict):
    """Exactly one of string | version | bool | int."""

    string: str | None = Field(default=None, max_length=253)
    """A string attribute value."""
    version: str | None = Field(default=None, max_length=32)
    """A semantic-version attribute value (x.y.z)."""
    bool_: bool | None = Field(default=None, alias="bool")
    """A boolean attribute value."""
    int_: Int64 | None = Field(default=None, alias="int")
    """An integer attribute value."""

    @model_validator(mode="after")
    def _exactly_one(self) -> DeviceAttribute:
        set_ = [n for n in ("string", "version", "bool_", "int_") if getattr(self, n) is not None]
        if len(set_) != 1:
            raise ValueError("exactly one of string, version, bool or int must be set")
        if self.version is not None and not _SEMVER.match(self.version):
            raise ValueError(f"version {self.version!r} is not a semantic version (x.y.z)")
        return self

    @property
    def kind(self) -> str:
        """ "string", "version", "bool" or "int"."""
        return next(wire for wire, attr in _ATTRIBUTE_KINDS if getattr(self, attr) is not None)

    @property
    def value(self) -> str | bool | int:
        return next(getattr(self, a) for _, a in _ATTRIBUTE_KINDS if getattr(self, a) is not None)


_ATTRIBUTE_KINDS = (
    ("string", "string"),
    ("version", "version"),
    ("bool", "bool_"),
    ("int", "int_"),
)


class DeviceCapacity(Strict):
    value: QuantityStr = Field(min_length=1, max_length=32)
    """The capacity as a Kubernetes quantity (e.g. 141Gi)."""


def _check_names(mapping: dict[str, object], what: str) -> None:
    for name in mapping:
        if not _QUALIFIED_NAME.match(name):
            raise ValueError(
                f"{what} name {name!r} must be an identifier, optionally qualified as domain/id"
            )


_RESOURCE_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class ClassDevice(Strict):
    name: str = Field(min_length=1, max_length=63)
    """The device's name within the class (unique), referenced by nodeSelector.devices[].name."""
    driver: DNSSubdomain
    """The DRA driver; also the domain of bare attribute and capacity names in CEL."""
    device_class_name: DNSSubdomain | None = None
    """The DRA DeviceClass the device is claimed from; required when claim is DRA."""
    claim: Literal["DRA", "ExtendedResource", "Synthetic"] = "DRA"
    """DRA (default): claimed through a ResourceClaim; ExtendedResource: a device plugin's
    extended resource (`resourceName`) the pod requests; Synthetic: matched by the scheduler,
    never claimed.
    """
    resource_name: str | None = Field(default=None, max_length=253)
    """The extended resource (domain/name, e.g. vpc.amazonaws.com/efa); only with claim
    ExtendedResource, and required there."""
    count: int = Field(default=1, ge=1, le=64)
    """Devices of this kind per node (1..64)."""
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict, max_length=32)
    """Device attributes by name (at most 32), each exactly one of string, version, bool, int."""
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict, max_length=32)
    """Device capacities by name (at most 32), as Kubernetes quantities."""

    @model_validator(mode="after")
    def _dra_needs_class(self) -> ClassDevice:
        if self.claim == "DRA" and not self.device_class_name:
            raise ValueError("deviceClassName is required when claim is DRA")
        if self.claim == "ExtendedResource":
            if not self.resource_name or not _RESOURCE_NAME.match(self.resource_name):
                raise ValueError(
                    "resourceName (a device plugin's extended resource, domain/name such as "
                    "vpc.amazonaws.com/efa) is required when claim is ExtendedResource"
                )
        elif self.resource_name is not None:
            raise ValueError("resourceName is only for claim ExtendedResource")
        _check_names(self.attributes, "attribute")
        _check_names(self.capacity, "capacity")
        return self


class Accelerator(Strict):
    type: str = Field(min_length=1, max_length=63)
    """The cloud's accelerator type (e.g. nvidia-h200, nvidia-l4)."""
    count: int = Field(ge=1, le=16)
    """Accelerators per node (1..16); must equal the count of the class's first DRA device."""


class GKEMachine(Strict):
    machine_type: str = Field(min_length=1)
    """The GCE machine type of the pool's nodes (e.g. a3-highgpu-8g)."""
    disk_size_gb: int = Field(default=100, ge=10, le=MAX_DISK_GB)
    """Boot disk size in GB (default 100, 10..65536)."""
    disk_type: Literal["pd-balanced", "pd-ssd", "pd-standard", "hyperdisk-balanced"] | None = None
    """Boot disk type (default: GKE's, pd-balanced); machines that take only Hyperdisk
    (a3-ultragpu, a4) need hyperdisk-balanced."""
    reservation: str | None = Field(
        default=None,
        max_length=200,
        pattern=r"^(projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/reservations/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?$",
    )
    """A specific Compute Engine reservation the pool's nodes consume (its name, or
    projects/<project>/reservations/<name> for a shared one); default none."""
    accelerator: Accelerator
    """The GPUs attached to each node."""


class EKSMachine(Strict):
    instance_type: str = Field(min_length=1)
    """The EC2 instance type of the pool's nodes (e.g. p5en.48xlarge)."""
    disk_size_gb: int = Field(default=100, ge=10, le=MAX_DISK_GB)
    """Root volume size in GB (default 100, 10..65536)."""
    accelerator: Accelerator
    """The GPUs of each node."""


class Provisioning(Strict):
    provider: Literal["GKE", "EKS"]
    """GKE or EKS; the block of that name is required."""
    gke: GKEMachine | None = None
    """How to provision such a node on GKE."""
    eks: EKSMachine | None = None
    """How to provision such a node on EKS."""

    @model_validator(mode="after")
    def _block_named_by_provider(self) -> Provisioning:
        wanted = self.provider.lower()
        if getattr(self, wanted) is None:
            raise ValueError(f"provider is {self.provider}, so the {wanted!r} block is required")
        other = "eks" if wanted == "gke" else "gke"
        if getattr(self, other) is not None:
            raise ValueError(f"provider is {self.provider}, so the {other!r} block must not be set")
        return self

    @property
    def recipe(self) -> GKEMachine | EKSMachine:
        recipe = self.gke if self.provider == "GKE" else self.eks
        assert recipe is not None
        return recipe


class NodeAllocatable(Strict):
    """CPU and memory one node offers pods (its Node `.status.allocatable`)."""

    cpu: QuantityStr = Field(min_length=1, max_length=32)
    """Allocatable CPU per node, a Kubernetes quantity (e.g. "188", "7910m")."""
    memory: QuantityStr = Field(min_length=1, max_length=32)
    """Allocatable memory per node, a Kubernetes quantity (e.g. 1900Gi)."""

    @model_validator(mode="after")
    def _positive(self) -> NodeAllocatable:
        for name in ("cpu", "memory"):
            if parse_quantity(getattr(self, name)).sign() <= 0:
                raise ValueError(f"{name} must be greater than zero")
        return self


class InferenceClassSpec(Strict):
    description: str = ""
    """A human-readable description of the recipe."""
    devices: list[ClassDevice] = Field(min_length=1, max_length=16)
    """The devices on one node of a pool (1..16, unique names), one entry per kind of device."""
    allocatable: NodeAllocatable | None = None
    """CPU and memory one node offers pods; default: derived from a known provisioning
    machine type, else unchecked."""
    provisioning: Provisioning | None = None
    """How to provision such a node on a cloud; absent: capabilities only (existing pools)."""
    price_per_node_hour: float | None = Field(default=None, ge=0, le=1_000_000, allow_inf_nan=False)
    """What one node of this class costs per hour, in the fleet's one currency (0..1000000);
    read by deployments with `placementPolicy: Cheapest` and by `plan`'s cost per hour.
    Absent: unknown (such pools come after every priced one)."""

    @field_validator("devices")
    @classmethod
    def _unique_device_names(cls, devices: list[ClassDevice]) -> list[ClassDevice]:
        no_repeats((d.name for d in devices), "device names must be unique")
        return devices

    @model_validator(mode="after")
    def _accelerator_matches_devices(self) -> InferenceClassSpec:
        if self.provisioning is None:
            return self
        first_dra = next((d for d in self.devices if d.claim == "DRA"), None)
        acc = self.provisioning.recipe.accelerator
        if first_dra is not None and acc.count != first_dra.count:
            raise ValueError(
                f"provisioning accelerator count {acc.count} disagrees with device "
                f"{first_dra.name!r} count {first_dra.count}"
            )
        return self

    @property
    def node_allocatable(self) -> machines.Allocatable | None:
        """What one node offers pods: `allocatable` if set, else derived from the
        provisioning machine type when it is a known one, else None (unchecked)."""
        if self.allocatable is not None:
            cpu = parse_quantity(self.allocatable.cpu).value * 1000
            memory = parse_quantity(self.allocatable.memory).value
            return machines.Allocatable(int(cpu), int(memory))
        if self.provisioning is None:
            return None
        recipe = self.provisioning.recipe
        machine = recipe.machine_type if isinstance(recipe, GKEMachine) else recipe.instance_type
        return machines.derived(self.provisioning.provider, machine)

    @property
    def gpu_device(self) -> ClassDevice | None:
        """The first DRA device: what a role without a nodeSelector is sized against."""
        return next((d for d in self.devices if d.claim == "DRA"), None)


class InferenceClass(Strict):
    api_version: Literal["modelplane.ai/v1alpha1"] = API_VERSION
    kind: Literal["InferenceClass"] = "InferenceClass"
    metadata: ObjectMeta
    spec: InferenceClassSpec
