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
    no_repeats,
)
from modelplane.api.limits import NonNegInt64, Port
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
    """The Secret or ConfigMap's name."""
    key: str = Field(min_length=1)
    """The key within it."""
    optional: bool | None = None
    """Whether the pod starts when it is missing."""


class FieldRef(Strict):
    field_path: str = Field(min_length=1)
    """The pod field to read (e.g. metadata.name, status.podIP)."""
    api_version: str | None = None
    """The schema version of fieldPath (default v1)."""


class ResourceFieldRef(Strict):
    resource: str = Field(min_length=1)
    """The container resource to read (e.g. limits.memory)."""
    container_name: str | None = None
    """The container whose resource is read (default: this one)."""
    divisor: QuantityStr | None = None
    """The unit of the value (a quantity, default 1)."""


class EnvVarSource(Strict):
    secret_key_ref: KeyRef | None = None
    """A key of a Secret."""
    config_map_key_ref: KeyRef | None = None
    """A key of a ConfigMap."""
    field_ref: FieldRef | None = None
    """A field of the pod."""
    resource_field_ref: ResourceFieldRef | None = None
    """A resource of a container."""


class EnvVar(Strict):
    name: EnvName
    """The variable's name."""
    value: str | None = None
    """A literal value (`$(VAR)` is expanded)."""
    value_from: EnvVarSource | None = None
    """Where the value comes from instead of a literal."""


class EnvFromSource(Strict):
    prefix: str | None = None
    """A prefix for every variable's name."""
    secret_ref: LocalObjectReference | None = None
    """A Secret whose keys become variables."""
    config_map_ref: LocalObjectReference | None = None
    """A ConfigMap whose keys become variables."""


class ContainerPort(Strict):
    container_port: Port
    """The port number (1..65535)."""
    name: PortName | None = None
    """The port's name (an IANA service name)."""
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    """TCP (default), UDP or SCTP."""


class ResourceRequirements(Strict):
    limits: dict[str, QuantityStr] = Field(default_factory=dict)
    """Resource limits (quantities); GPUs are claimed through DRA, not here."""
    requests: dict[str, QuantityStr] = Field(default_factory=dict)
    """Resource requests (quantities); GPUs are claimed through DRA, not here."""


class VolumeMount(Strict):
    name: DNSLabel
    """The volume to mount (one of the template's volumes)."""
    mount_path: str = Field(min_length=1)
    """Where in the container the volume is mounted."""
    read_only: bool | None = None
    """Mount read-only."""
    sub_path: str | None = None
    """A path within the volume to mount instead of its root."""


class Container(Strict):
    name: DNSLabel
    """The container's name; exactly one container is named `engine`, the others are sidecars."""
    image: str = Field(min_length=1)
    """The container image."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    """Always, IfNotPresent or Never."""
    command: list[str] = Field(default_factory=list)
    """The entrypoint (the image's when empty); `$(VAR)` is expanded."""
    args: list[str] = Field(default_factory=list)
    """The arguments (the engine's flags are the user's, never rewritten); `$(VAR)` is expanded."""
    working_dir: str | None = None
    """The working directory."""
    env: list[EnvVar] = Field(default_factory=list)
    """Environment variables (modelplane adds MODELPLANE_* to the engine)."""
    env_from: list[EnvFromSource] = Field(default_factory=list)
    """Secrets and ConfigMaps whose keys become environment variables."""
    ports: list[ContainerPort] = Field(default_factory=list)
    """The ports the container listens on."""
    resources: ResourceRequirements | None = None
    """Extra resource requests and limits (the pod's cpu and memory come from workers.resources)."""
    volume_mounts: list[VolumeMount] = Field(default_factory=list)
    """Volumes mounted into the container."""
    # Probes and security context pass through to the pod as written.
    readiness_probe: dict[str, Any] | None = None
    """A Kubernetes Probe, passed through as written."""
    liveness_probe: dict[str, Any] | None = None
    """A Kubernetes Probe, passed through as written."""
    startup_probe: dict[str, Any] | None = None
    """A Kubernetes Probe, passed through as written."""
    security_context: dict[str, Any] | None = None
    """A Kubernetes SecurityContext, passed through as written."""

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
    """The volume's name, referenced by volumeMounts."""
    config_map: dict[str, Any] | None = None
    """A Kubernetes ConfigMapVolumeSource, passed through."""
    secret: dict[str, Any] | None = None
    """A Kubernetes SecretVolumeSource, passed through."""
    empty_dir: dict[str, Any] | None = None
    """A Kubernetes EmptyDirVolumeSource, passed through."""
    persistent_volume_claim: dict[str, Any] | None = None
    """A Kubernetes PersistentVolumeClaimVolumeSource, passed through."""


class TemplateMetadata(Strict):
    labels: UserLabels = Field(default_factory=dict)
    """Labels of every pod (and of the replica's composed ModelEndpoint); not modelplane.ai/."""
    annotations: dict[LabelKey, str] = Field(default_factory=dict)
    """Annotations of every pod."""


class TemplateSpec(Strict):
    shm_size: QuantityStr | None = None
    """The size of /dev/shm (a memory emptyDir), as a quantity."""
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list)
    """Secrets for pulling the images."""
    service_account_name: DNSSubdomain | None = None
    """The pods' service account."""
    containers: list[Container] = Field(min_length=1)
    """The containers; exactly one is named `engine`."""
    init_containers: list[Container] = Field(default_factory=list)
    """Containers run to completion before the others start."""
    volumes: list[Volume] = Field(default_factory=list)
    """Pod volumes (model caches are mounted by modelplane itself)."""
    termination_grace_period_seconds: NonNegInt64 | None = None
    """Seconds a pod gets to stop gracefully."""

    @field_validator("containers")
    @classmethod
    def _one_engine(cls, containers: list[Container]) -> list[Container]:
        engines = [c for c in containers if c.name == "engine"]
        if len(engines) != 1:
            raise ValueError(f"exactly one container must be named 'engine' (found {len(engines)})")
        no_repeats((c.name for c in containers), "container names must be unique")
        return containers

    @property
    def engine(self) -> Container:
        return next(c for c in self.containers if c.name == "engine")


class PodTemplate(Strict):
    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    """Labels and annotations of every pod."""
    spec: TemplateSpec
    """The pod spec."""
