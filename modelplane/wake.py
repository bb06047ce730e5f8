"""Scale to zero and wake on request (api.md, "Autoscaling"): which deployments a model
name wakes. Pure: specs, the lock and the router's held counts in, names out.

A deployment with `autoscaling.minReplicas: 0` is woken through the OpenAI base URL of a
ModelService that can select its replicas (any entry, any tier) and names `models`: the
router holds that model's requests while no endpoint answers and reports how many
(`modelplane_router_held{model}`); `reconcile` reads the counts and sets every such
deployment at 0 to 1 replica.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from modelplane.api.fleet import FleetSpec
from modelplane.api.notices import scalable_to_zero, serves
from modelplane.api.placement_lock import PlacementLock
from modelplane.scheduler import autoscaled_count

HELD_METRIC = "modelplane_router_held"  # the router's gauge: requests held now, per model


def waking_models(fleet: FleetSpec) -> dict[str, list[str]]:
    """Model name -> the deployments (keys) it wakes: those scalable to zero that its
    service serves."""
    clusters = sorted(fleet.clusters)
    out: dict[str, list[str]] = {}
    for key in sorted(fleet.services):
        service = fleet.services[key]
        woken = [
            dep_key
            for dep_key, dep in sorted(fleet.deployments.items())
            if scalable_to_zero(dep) and serves(service, dep, clusters)
        ]
        if woken:
            for name in service.spec.models or ():
                out[name] = woken
    return out


def at_zero(fleet: FleetSpec, lock: PlacementLock) -> set[str]:
    """The deployments scalable to zero whose count in the lock is 0."""
    return {
        key
        for key, dep in fleet.deployments.items()
        if scalable_to_zero(dep) and autoscaled_count(dep, lock) == 0
    }


def to_wake(fleet: FleetSpec, lock: PlacementLock, held: Mapping[str, int]) -> dict[str, str]:
    """Deployment -> the model name whose held requests wake it (those at 0 only)."""
    sleeping = at_zero(fleet, lock)
    out: dict[str, str] = {}
    for model, deployments in sorted(waking_models(fleet).items()):
        if held.get(model, 0) <= 0:
            continue
        for key in deployments:
            if key in sleeping:
                out.setdefault(key, model)
    return out


def active_deployments(fleet: FleetSpec, held: Mapping[str, int]) -> set[str]:
    """The deployments some held request waits for (at any count: never idle)."""
    models = waking_models(fleet)
    return {key for model, n in held.items() if n > 0 for key in models.get(model, ())}


def sleeping_models(fleet: FleetSpec, lock: PlacementLock) -> list[str]:
    """The model names with a deployment at zero behind them: what a probe asks about."""
    sleeping = at_zero(fleet, lock)
    return sorted(m for m, deps in waking_models(fleet).items() if set(deps) & sleeping)


def parse_held(texts: Iterable[str]) -> dict[str, int]:
    """`modelplane_router_held{model="chat"} 3` lines of every router pod, summed per model."""
    out: dict[str, int] = {}
    for text in texts:
        for line in text.splitlines():
            if not line.startswith(HELD_METRIC + "{"):
                continue
            labels, _, value = line[len(HELD_METRIC) + 1 :].rpartition("}")
            name = None
            for part in labels.split(","):
                key, _, raw = part.partition("=")
                if key.strip() == "model" and len(raw) >= 2 and raw[0] == raw[-1] == '"':
                    name = raw[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            try:
                count = int(float(value.split()[0]))
            except (ValueError, IndexError):
                continue
            if name and count > 0:
                out[name] = out.get(name, 0) + count
    return out


__all__ = [
    "HELD_METRIC",
    "active_deployments",
    "at_zero",
    "parse_held",
    "scalable_to_zero",
    "serves",
    "sleeping_models",
    "to_wake",
    "waking_models",
]
