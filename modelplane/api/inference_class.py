"""InferenceClass: a tested hardware recipe for one node of a pool."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from modelplane.api.base import API_VERSION, DNSSubdomain, ObjectMeta, Strict
from modelplane.api.quantities import QuantityStr

_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z_][A-Za-z0-9_]{0,62}$")
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)


class DeviceAttribute(Strict):
    """Exactly one of string | version | bool | int."""

    string: str | None = Field(default=None, max_length=253)
    version: str | None = Field(default=None, max_length=32)
    bool_: bool | None = Field(default=None, alias="bool")
    int_: int | None = Field(default=None, alias="int")

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


def _check_names(mapping: dict[str, object], what: str) -> None:
    for name in mapping:
        if not _QUALIFIED_NAME.match(name):
            raise ValueError(
                f"{what} name {name!r} must be an identifier, optionally qualified as domain/id"
            )


class ClassDevice(Strict):
    name: str = Field(min_length=1, max_length=63)
    driver: DNSSubdomain
    device_class_name: DNSSubdomain | None = None
    claim: Literal["DRA", "Synthetic"] = "DRA"
    count: int = Field(default=1, ge=1, le=64)
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict, max_length=32)
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict, max_length=32)

    @model_validator(mode="after")
    def _dra_needs_class(self) -> ClassDevice:
        if self.claim == "DRA" and not self.device_class_name:
            raise ValueError("deviceClassName is required when claim is DRA")
        _check_names(self.attributes, "attribute")
        _check_names(self.capacity, "capacity")
        return self


class Accelerator(Strict):
    type: str = Field(min_length=1, max_length=63)
    count: int = Field(ge=1, le=16)


class GKEMachine(Strict):
    machine_type: str = Field(min_length=1)
    disk_size_gb: int = Field(default=100, ge=10)
    accelerator: Accelerator


class EKSMachine(Strict):
    instance_type: str = Field(min_length=1)
    disk_size_gb: int = Field(default=100, ge=10)
    accelerator: Accelerator


class Provisioning(Strict):
    provider: Literal["GKE", "EKS"]
    gke: GKEMachine | None = None
    eks: EKSMachine | None = None

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


class InferenceClassSpec(Strict):
    description: str = ""
    devices: list[ClassDevice] = Field(min_length=1, max_length=16)
    provisioning: Provisioning | None = None

    @field_validator("devices")
    @classmethod
    def _unique_device_names(cls, devices: list[ClassDevice]) -> list[ClassDevice]:
        names = [d.name for d in devices]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"device names must be unique; repeated: {', '.join(dupes)}")
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
    def gpu_device(self) -> ClassDevice | None:
        """The first DRA device: what a role without a nodeSelector is sized against."""
        return next((d for d in self.devices if d.claim == "DRA"), None)


class InferenceClass(Strict):
    api_version: Literal["modelplane.ai/v1alpha1"] = API_VERSION
    kind: Literal["InferenceClass"] = "InferenceClass"
    metadata: ObjectMeta
    spec: InferenceClassSpec
