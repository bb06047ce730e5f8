"""PlacementLock: the scheduler's output, committed next to the specs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from modelplane.api.base import DNSLabel, Strict
from modelplane.api.inference_cluster import cidr
from modelplane.api.limits import (
    INT32_MAX,
    MAX_DEVICES_PER_POD,
    MAX_NODES_PER_WORKER,
    MAX_WORKERS,
    NonNegInt64,
    Replicas,
)

Role = Literal["unified", "prefill", "decode"]


class RoleFootprint(Strict):
    """What the pods of one role of a placed replica hold on their pool, as the scheduler
    accounts it (scheduling.md, "Pools and capacity")."""

    workers: int = Field(ge=1, le=MAX_WORKERS)
    """Worker instances of the role."""
    nodes_per_worker: int = Field(ge=1, le=MAX_NODES_PER_WORKER)
    """Pods per worker, each on a node of its own."""
    devices: dict[str, Annotated[int, Field(le=MAX_DEVICES_PER_POD)]] = Field(default_factory=dict)
    """Per pod: the consumed device kinds of the pool's class it takes, by kind name."""
    cpu_millis: NonNegInt64
    """CPU per pod, in millicores."""
    memory_bytes: NonNegInt64
    """Memory per pod, in bytes."""

    @field_validator("devices")
    @classmethod
    def _counts(cls, devices: dict[str, int]) -> dict[str, int]:
        bad = sorted(name for name, count in devices.items() if count < 1)
        if bad:
            raise ValueError(f"device counts must be at least 1 ({', '.join(bad)})")
        return devices

    @property
    def pods(self) -> int:
        return self.workers * self.nodes_per_worker

    @property
    def devices_held(self) -> int:
        """Devices all its pods hold."""
        return self.pods * sum(self.devices.values())


class LockedReplica(Strict):
    name: DNSLabel
    """The replica's name (<deployment[:57]>-<5-char hash>)."""
    cluster: DNSLabel
    """The InferenceCluster the replica is placed on."""
    index: int = Field(ge=0, le=INT32_MAX)
    """The replica's index (its modelplane.ai/replica-index label); (cluster, index) is unique per
    deployment.
    """
    pools: dict[Role, DNSLabel] = Field(min_length=1)
    """The node pool of each role: {unified} or {prefill, decode}."""
    draining: bool = False
    """Autoscaling scale-in: out of the routes, the workload still up."""
    footprint: dict[Role, RoleFootprint] | None = None
    """Per role, what its pods hold on their pool (absent in locks written before it)."""
    revision: str | None = Field(default=None, pattern=r"^[0-9a-f]{10}$")
    """The deployment revision (a hash of its pod templates, `modelplane.rollout.revision`)
    the replica's pods were last rolled to; absent in locks written before rollouts."""
    surge: bool = False
    """Placed beyond the deployment's count by a rollout's `maxSurge` (make-before-break): the
    scheduler keeps it until the rollout retires an old replica in its stead."""

    @field_validator("pools")
    @classmethod
    def _role_set(cls, pools: dict[str, str]) -> dict[str, str]:
        if set(pools) not in ({"unified"}, {"prefill", "decode"}):
            raise ValueError("pools must be {unified} or {prefill, decode}")
        return pools

    @model_validator(mode="after")
    def _footprint_roles(self) -> LockedReplica:
        if self.footprint is not None and set(self.footprint) != set(self.pools):
            raise ValueError("footprint must have the roles of pools")
        return self


class LockedDeployment(Strict):
    autoscaled_replicas: Replicas | None = None
    """The autoscaled replica count (absent: the spec's replicas)."""
    replicas: list[LockedReplica] = Field(default_factory=list)
    """The placed replicas."""

    @property
    def serving(self) -> list[LockedReplica]:
        """The replicas that are not draining."""
        return [r for r in self.replicas if not r.draining]


Cidr = Annotated[str, AfterValidator(lambda v: cidr(v, ipv4=True))]


class ClusterAddresses(Strict):
    """A provisioned cluster's ranges from the fleet address plan (docs/api.md, "Addresses"):
    given once, kept while the cluster exists."""

    source: Literal["GKE", "EKS"]
    """The cluster's provider, which decides how its block is cut."""
    block: Cidr | None = None
    """The cluster's block of the fleet range (absent: the ranges a cluster had before the
    address plan, kept where it stands)."""
    nodes: Cidr | None = None
    """GKE: the nodes' subnet."""
    pods: Cidr | None = None
    """GKE: the pods' secondary range."""
    services: Cidr | None = None
    """The services' range (EKS: absent when EKS picked it)."""
    vpc: Cidr | None = None
    """EKS: the VPC's block."""
    subnets: list[Cidr] | None = Field(default=None, min_length=2, max_length=6)
    """EKS: the subnet blocks, one per zone, by position."""

    @model_validator(mode="after")
    def _fields_of_the_source(self) -> ClusterAddresses:
        need = ("nodes", "pods", "services") if self.source == "GKE" else ("vpc", "subnets")
        never = ("vpc", "subnets") if self.source == "GKE" else ("nodes", "pods")
        missing = [f for f in need if getattr(self, f) is None]
        extra = [f for f in never if getattr(self, f) is not None]
        if missing or extra:
            raise ValueError(
                f"a {self.source} cluster's addresses have {', '.join(need)}"
                + (f" (missing {', '.join(missing)})" if missing else "")
                + (f" and never {', '.join(extra)}" if extra else "")
            )
        return self

    def ranges(self) -> list[tuple[str, str]]:
        """(field, block) of every range the cluster's network uses (EKS: the VPC holds the
        subnets)."""
        names = ("nodes", "pods", "services") if self.source == "GKE" else ("vpc", "services")
        return [(n, getattr(self, n)) for n in names if getattr(self, n) is not None]


class NetworkLock(Strict):
    clusters: dict[DNSLabel, ClusterAddresses] = Field(default_factory=dict)
    """The ranges given to each provisioned cluster without declared ones, by cluster name.
    A cluster gone from the specs keeps its entry while its stack exists (until `up --prune`)."""


class PlacementLock(Strict):
    api_version: Literal["modelplane.ai/v1alpha1"] = "modelplane.ai/v1alpha1"
    """Always modelplane.ai/v1alpha1."""
    kind: Literal["PlacementLock"] = "PlacementLock"
    """Always PlacementLock."""
    deployments: dict[str, LockedDeployment] = Field(default_factory=dict)
    """Placements by deployment (<namespace>/<name>)."""
    removed: dict[str, LockedDeployment] = Field(default_factory=dict)
    """Deployments removed from the fleet whose stacks still run (until `up --prune`)."""
    network: NetworkLock | None = None
    """The fleet address plan (absent in locks written before it)."""

    @model_validator(mode="after")
    def _removed_apart(self) -> PlacementLock:
        both = sorted(set(self.deployments) & set(self.removed))
        if both:
            raise ValueError(f"in both deployments and removed: {', '.join(both)}")
        return self

    def replicas_of(self, key: str) -> list[LockedReplica]:
        dep = self.deployments.get(key)
        return list(dep.replicas) if dep else []

    def autoscaled(self, key: str) -> int | None:
        dep = self.deployments.get(key)
        return dep.autoscaled_replicas if dep else None

    def draining(self) -> set[str]:
        """Names of the replicas being drained (out of every route)."""
        return {r.name for d in self.deployments.values() for r in d.replicas if r.draining}


def duplicate_entries(lock: PlacementLock) -> list[tuple[str, str]]:
    """(path, message) for every second entry of a replica name or a (cluster, index) slot.

    A lock file must not hold them (read_lock rejects it); the scheduler tolerates
    them in memory and resolves them the same in any order.
    """
    problems = []
    for section, key, dep in [
        *(("deployments", k, d) for k, d in lock.deployments.items()),
        *(("removed", k, d) for k, d in lock.removed.items()),
    ]:
        names: dict[str, int] = {}
        slots: dict[tuple[str, int], int] = {}
        for i, r in enumerate(dep.replicas):
            at = f"{section}.{key}.replicas[{i}]"
            if r.name in names:
                problems.append(
                    (f"{at}.name", f"duplicate replica {r.name!r} (also replicas[{names[r.name]}])")
                )
            names.setdefault(r.name, i)
            slot = (r.cluster, r.index)
            if slot in slots:
                problems.append(
                    (
                        f"{at}.index",
                        f"duplicate slot {r.cluster}/{r.index} (also replicas[{slots[slot]}])",
                    )
                )
            slots.setdefault(slot, i)
    return problems
