"""The subset of a Kubernetes PodTemplateSpec that a ModelDeployment carries."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from modelplane.api.base import (
    DNSLabel,
    DNSSubdomain,
    LabelKey,
    LocalObjectReference,
    Strict,
    UserLabels,
)
from modelplane.api.quantities import QuantityStr

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(
            f"{value!r} is not a valid environment variable name (letters, digits, '_', '-', "
            "'.', not starting with a digit)"
        )
    return value


def _port_name(value: str) -> str:
    if (
        len(value) > 15
        or not _PORT_NAME.match(value)
        or "--" in value
        or not any(c.isalpha() for c in value)
    ):
        raise ValueError(
            f"{value!r} is not a valid port name (an IANA service name: at most 15 lower-case "
            "alphanumerics or '-', at least one letter, no '--')"
        )
    return value


def _is_gpu_resource(name: str) -> bool:
    """Extended resources that count GPUs (device plugins): `*/gpu`, `*/gpu.shared`,
    `nvidia.com/mig-*`."""
    domain, _, resource = name.rpartition("/")
    return bool(domain) and (
        resource in ("gpu", "gpu.shared")
        or (domain == "nvidia.com" and resource.startswith("mig-"))
    )


EnvName = Annotated[str, AfterValidator(_env_name)]
PortName = Annotated[str, AfterValidator(_port_name)]


class KeyRef(Strict):
    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1)
    optional: bool | None = None


class FieldRef(Strict):
    field_path: str = Field(min_length=1)
    api_version: str | None = None


class ResourceFieldRef(Strict):
    resource: str = Field(min_length=1)
    container_name: str | None = None
    divisor: QuantityStr | None = None


class EnvVarSource(Strict):
    secret_key_ref: KeyRef | None = None
    config_map_key_ref: KeyRef | None = None
    field_ref: FieldRef | None = None
    resource_field_ref: ResourceFieldRef | None = None


class EnvVar(Strict):
    name: EnvName
    value: str | None = None
    value_from: EnvVarSource | None = None


class EnvFromSource(Strict):
    prefix: str | None = None
    secret_ref: LocalObjectReference | None = None
    config_map_ref: LocalObjectReference | None = None


class ContainerPort(Strict):
    container_port: int = Field(ge=1, le=65535, strict=True)
    name: PortName | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"


class ResourceRequirements(Strict):
    limits: dict[str, QuantityStr] = Field(default_factory=dict)
    requests: dict[str, QuantityStr] = Field(default_factory=dict)


class VolumeMount(Strict):
    name: DNSLabel
    mount_path: str = Field(min_length=1)
    read_only: bool | None = None
    sub_path: str | None = None


class Container(Strict):
    name: DNSLabel
    image: str = Field(min_length=1)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    working_dir: str | None = None
    env: list[EnvVar] = Field(default_factory=list)
    env_from: list[EnvFromSource] = Field(default_factory=list)
    ports: list[ContainerPort] = Field(default_factory=list)
    resources: ResourceRequirements | None = None
    volume_mounts: list[VolumeMount] = Field(default_factory=list)
    # Probes and security context pass through to the pod as written.
    readiness_probe: dict[str, Any] | None = None
    liveness_probe: dict[str, Any] | None = None
    startup_probe: dict[str, Any] | None = None
    security_context: dict[str, Any] | None = None

    @field_validator("resources")
    @classmethod
    def _no_gpu_limits(cls, value: ResourceRequirements | None) -> ResourceRequirements | None:
        if value is not None:
            for section in (value.limits, value.requests):
                gpu = [k for k in section if _is_gpu_resource(k)]
                if gpu:
                    raise ValueError(
                        f"{', '.join(gpu)}: GPUs are claimed through DRA (nodeSelector.devices), "
                        "not container resources"
                    )
        return value


class Volume(Strict):
    """A pod volume; exactly one source. Model caches are mounted by modelplane itself."""

    name: DNSLabel
    config_map: dict[str, Any] | None = None
    secret: dict[str, Any] | None = None
    empty_dir: dict[str, Any] | None = None
    persistent_volume_claim: dict[str, Any] | None = None


class TemplateMetadata(Strict):
    labels: UserLabels = Field(default_factory=dict)
    annotations: dict[LabelKey, str] = Field(default_factory=dict)


class TemplateSpec(Strict):
    shm_size: QuantityStr | None = None
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list)
    service_account_name: DNSSubdomain | None = None
    containers: list[Container] = Field(min_length=1)
    init_containers: list[Container] = Field(default_factory=list)
    volumes: list[Volume] = Field(default_factory=list)
    termination_grace_period_seconds: int | None = Field(default=None, ge=0)

    @field_validator("containers")
    @classmethod
    def _one_engine(cls, containers: list[Container]) -> list[Container]:
        engines = [c for c in containers if c.name == "engine"]
        if len(engines) != 1:
            raise ValueError(f"exactly one container must be named 'engine' (found {len(engines)})")
        names = [c.name for c in containers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"container names must be unique; repeated: {', '.join(dupes)}")
        return containers

    @property
    def engine(self) -> Container:
        return next(c for c in self.containers if c.name == "engine")


class PodTemplate(Strict):
    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    spec: TemplateSpec
