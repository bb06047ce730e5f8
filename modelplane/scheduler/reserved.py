"""Capacity held by deployments removed from the fleet (scheduling.md, "Pools and capacity").

A removed deployment's stack keeps running until `up --prune` destroys it, so its
replicas keep their pools' devices, CPU and memory. The lock records what each
placed replica holds (its `footprint`); here those footprints become pool items that
are charged before anything is placed, and sort after every other item, so kept
replicas are laid out first and no new replica may leave a removed one without room.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_class import InferenceClass
from modelplane.api.model_deployment import ModelDeployment
from modelplane.api.placement_lock import (
    LockedDeployment,
    PlacementLock,
    Role,
    RoleFootprint,
)
from modelplane.scheduler.capacity import Item, Pool
from modelplane.scheduler.matching import Matcher, PodDemand, Request, pod_resources

ROLE_ORDER: tuple[Role, ...] = ("unified", "prefill", "decode")
# Below any priority a spec can hold: reserved items sort after every placed one.
RESERVED_PRIORITY = -(2**62)

PoolKey = tuple[str, str]  # (cluster, pool)


def removed_deployments(
    fleet: FleetSpec, previous: PlacementLock | None
) -> dict[str, LockedDeployment]:
    """The lock's deployments that the fleet no longer has and whose stacks still run:
    those in `removed`, and those the fleet dropped since the lock was written."""
    if previous is None:
        return {}
    out: dict[str, LockedDeployment] = {}
    for key, dep in [*previous.removed.items(), *previous.deployments.items()]:
        if key in fleet.deployments or not dep.replicas:
            continue
        out[key] = LockedDeployment(replicas=list(dep.replicas))
    return dict(sorted(out.items()))


def footprint(
    matcher: Matcher,
    classes: Mapping[str, InferenceClass],
    dep_key: str,
    dep: ModelDeployment,
    pools: Mapping[str, Pool],
) -> dict[Role, RoleFootprint] | None:
    """What a placed replica of `dep` holds, per role, on the pools it is placed on (None
    when some role no longer fits its pool's class, which a placed replica never has)."""
    out: dict[Role, RoleFootprint] = {}
    for role_name, role in dep.spec.roles.items():
        pool = pools[role_name]
        demand = matcher.fit(dep_key, role_name, role, pool.class_name).demand
        cls = classes.get(pool.class_name)
        if demand is None or cls is None:
            return None
        devices: dict[str, int] = {}
        for req in demand.requests:
            kind = req.kinds[0]
            if pool.shape.consumed[kind]:
                name = cls.spec.devices[kind].name
                devices[name] = devices.get(name, 0) + req.count
        cpu, memory = pod_resources(role)
        out[role_name] = RoleFootprint(  # type: ignore[index]
            workers=demand.workers,
            nodes_per_worker=demand.pods_per_worker,
            devices=dict(sorted(devices.items())),
            cpu_millis=cpu,
            memory_bytes=memory,
        )
    return out


def demand_of(fp: RoleFootprint, cls: InferenceClass, pool: Pool) -> PodDemand:
    """The demand that charges `fp` on `pool`: each recorded device kind the class still
    has and consumes; CPU and memory where the class has an allocatable."""
    names = [d.name for d in cls.spec.devices]
    requests: list[Request] = []
    for name in sorted(fp.devices):
        if name in names and pool.shape.consumed[names.index(name)]:
            requests.append(Request(name, fp.devices[name], (names.index(name),)))
    per_pod = sum(r.count for r in requests)
    return PodDemand(
        requests=tuple(requests),
        pods_per_worker=fp.nodes_per_worker,
        workers=fp.workers,
        devices_per_pod=per_pod,
        pods=fp.pods,
        least_consumed=fp.pods * per_pod,
        resources=(fp.cpu_millis, fp.memory_bytes) if pool.shape.resources else (),
    )


def reserved_items(
    removed: Mapping[str, LockedDeployment],
    pools: Mapping[PoolKey, Pool],
    classes: Mapping[str, InferenceClass],
) -> dict[PoolKey, list[Item]]:
    """Per pool, the items that the removed deployments' recorded footprints charge."""
    out: dict[PoolKey, list[Item]] = {}
    for key, dep in removed.items():
        for replica in dep.replicas:
            if replica.footprint is None:
                continue
            for position, role in enumerate(ROLE_ORDER):
                fp = replica.footprint.get(role)
                pool_name = replica.pools.get(role)
                if fp is None or pool_name is None:
                    continue
                pool = pools.get((replica.cluster, pool_name))
                cls = classes.get(pool.class_name) if pool is not None else None
                if pool is None or cls is None:
                    continue
                demand = demand_of(fp, cls, pool)
                item = Item.make(RESERVED_PRIORITY, key, replica.index, role, position, demand)
                out.setdefault((pool.cluster, pool.name), []).append(item)
    return out


def held(pool: Pool, deployments: Mapping[str, Any]) -> dict[str, int]:
    """Devices each removed deployment (a key not in `deployments`) holds on `pool`."""
    out: dict[str, int] = {}
    for item in pool.layout.items:
        if item.deployment not in deployments:
            out[item.deployment] = out.get(item.deployment, 0) + item.demand.least_consumed
    return out


@dataclass(frozen=True)
class RemovedReport:
    """A deployment removed from the fleet whose stack still runs."""

    replicas: int
    holds: dict[str, int] = field(default_factory=dict)  # "cluster/pool" -> devices charged
    unknown: int = 0  # replicas without a recorded footprint: not charged

    @property
    def note(self) -> str:
        text = f"{self.replicas} replica(s) keep running until `up --prune` destroys its stack"
        if self.holds:
            where = ", ".join(f"{n} devices on {pool}" for pool, n in self.holds.items())
            text += f": they hold {where}"
        if self.unknown:
            text += (
                f"; the lock does not record what {self.unknown} of them hold (an older lock):"
                " not counted in this plan"
            )
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "holds": dict(self.holds),
            "unknown": self.unknown,
            "note": self.note,
        }


def removed_reports(
    removed: Mapping[str, LockedDeployment],
    pools: Mapping[PoolKey, Pool],
    deployments: Mapping[str, Any],
) -> dict[str, RemovedReport]:
    """What each removed deployment holds in the final layouts."""
    holds: dict[str, dict[str, int]] = {key: {} for key in removed}
    for (cluster, name), pool in sorted(pools.items()):
        for key, n in held(pool, deployments).items():
            if key in holds and n:
                holds[key][f"{cluster}/{name}"] = n
    return {
        key: RemovedReport(
            replicas=len(dep.replicas),
            holds=holds[key],
            unknown=sum(1 for r in dep.replicas if r.footprint is None),
        )
        for key, dep in removed.items()
    }
