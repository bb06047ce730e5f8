"""Properties of the scheduler over generated fleets (hypothesis).

- no pool's capacity is exceeded (checked by an independent exhaustive search
  for a node assignment of every pod placed on it);
- the output does not depend on the order of the input;
- kept replicas never move;
- scheduling again with the produced lock changes nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelplane.api.fleet import FleetSpec
from modelplane.api.names import replica_name
from modelplane.api.placement_lock import LockedDeployment, PlacementLock
from modelplane.scheduler import ScheduleResult, schedule
from tests.factories import (
    cluster,
    deployment,
    gpu_device,
    inference_class,
    nic_device,
    pool,
    request,
    role,
    taint,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MEM = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{}Gi")) >= 0'
EFA = 'device.attributes["dra.net"].linkType == "efa"'

# The classes generated fleets draw from; the checker below reads the same table.
# kind: (name, DRA?, count, memory GiB or None, is an EFA NIC)
KINDS: dict[str, list[tuple[str, bool, int, int | None, bool]]] = {
    "h8": [("gpu", True, 8, 80, False)],
    "h8efa": [("gpu", True, 8, 141, False), ("nic", False, 16, None, True)],
    "g4": [("gpu", True, 4, 40, False)],
    "duo": [("g1", True, 2, 80, False), ("g2", True, 4, 80, False)],
    "nicdra": [("gpu", True, 8, 24, False), ("nic", True, 4, None, True)],
}


def _class(name: str) -> Any:
    devices = []
    for kind, dra, count, mem, efa in KINDS[name]:
        if efa:
            devices.append(nic_device(count, claim="DRA" if dra else "Synthetic"))
        else:
            devices.append(gpu_device(count, name=kind, memory=f"{mem}Gi"))
    return inference_class(name, devices=devices)


CLASSES = {name: _class(name) for name in KINDS}


# -- plain descriptions of fleets (so they can be rebuilt in any order) -----------------------


@dataclass(frozen=True)
class RoleSpec:
    tensor: int
    pipeline: int
    workers: int
    gpu_mem: int | None  # None: no nodeSelector at all
    nic: int | None  # count of an extra EFA NIC request


@dataclass(frozen=True)
class DepSpec:
    name: str
    replicas: int
    roles: tuple[RoleSpec, ...]  # one (unified) or two (prefill, decode)
    priority: int
    zone: str | None
    tolerate: bool


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    pools: tuple[tuple[str, str, int], ...]  # (name, class, nodes)
    zone: str | None
    taint: str | None  # None, "NoSchedule" or "NoExecute"


@dataclass(frozen=True)
class FleetDesc:
    clusters: tuple[ClusterSpec, ...]
    deployments: tuple[DepSpec, ...]


roles_ = st.builds(
    RoleSpec,
    tensor=st.sampled_from([1, 2, 4, 8]),
    pipeline=st.sampled_from([1, 1, 1, 2]),
    workers=st.sampled_from([1, 1, 2]),
    gpu_mem=st.sampled_from([None, None, 20, 40, 80, 100]),
    nic=st.sampled_from([None, None, None, 1, 4, 16]),
)


@st.composite
def fleets(draw: st.DrawFn) -> FleetDesc:
    names = draw(
        st.lists(
            st.sampled_from("abcd"),
            min_size=draw(st.sampled_from([0, 1, 1, 1])),
            max_size=4,
            unique=True,
        )
    )
    clusters = []
    for name in names:
        pools = draw(
            st.lists(
                st.tuples(st.sampled_from(sorted(KINDS)), st.integers(0, 3)), min_size=1, max_size=3
            )
        )
        clusters.append(
            ClusterSpec(
                name=name,
                pools=tuple((f"p{i}", cls, nodes) for i, (cls, nodes) in enumerate(pools)),
                zone=draw(st.sampled_from([None, "x", "y"])),
                taint=draw(st.sampled_from([None] * 6 + ["NoSchedule", "NoExecute"])),
            )
        )
    deps = []
    for i in range(draw(st.integers(1, 5))):
        disagg = draw(st.booleans()) and draw(st.booleans())
        deps.append(
            DepSpec(
                name=f"m{i}",
                replicas=draw(st.integers(0, 4)),
                roles=tuple(draw(roles_) for _ in range(2 if disagg else 1)),
                priority=draw(st.integers(0, 2)),
                zone=draw(st.sampled_from([None, None, None, "x", "y"])),
                tolerate=draw(st.booleans()),
            )
        )
    return FleetDesc(tuple(clusters), tuple(deps))


def _role(spec: RoleSpec) -> dict[str, Any]:
    devices = None
    if spec.gpu_mem is not None:
        devices = [request("gpu", None, MEM.format(spec.gpu_mem))]
        if spec.nic is not None:
            devices.append(request("nic", spec.nic, EFA))
    return role(spec.tensor, pipeline=spec.pipeline, workers=spec.workers, devices=devices)


@lru_cache(maxsize=4096)
def _deployment(spec: DepSpec) -> Any:
    extra: dict[str, Any] = {
        "priority": spec.priority,
        "selector": {"matchLabels": {"zone": spec.zone}} if spec.zone else None,
        "tolerations": [{"key": "maint", "operator": "Exists"}] if spec.tolerate else [],
    }
    if len(spec.roles) == 2:
        return deployment(
            spec.name,
            spec.replicas,
            prefill=_role(spec.roles[0]),
            decode=_role(spec.roles[1]),
            **extra,
        )
    r = _role(spec.roles[0])
    only = spec.roles[0]
    devices = r.get("nodeSelector", {}).get("devices")
    return deployment(
        spec.name,
        spec.replicas,
        tensor=only.tensor,
        pipeline=only.pipeline,
        workers=only.workers,
        devices=devices,
        **extra,
    )


@lru_cache(maxsize=4096)
def _cluster(spec: ClusterSpec) -> Any:
    return cluster(
        spec.name,
        [pool(name, cls, nodes) for name, cls, nodes in spec.pools],
        labels={"zone": spec.zone} if spec.zone else {},
        taints=[taint("maint", "on", spec.taint)] if spec.taint else [],
    )


def build(desc: FleetDesc, rng: random.Random | None = None) -> FleetSpec:
    """The FleetSpec of `desc`, its dicts filled in a shuffled order when `rng` is given."""
    classes = list(CLASSES.items())
    clusters = [(c.name, _cluster(c)) for c in desc.clusters]
    deps = [(_deployment(d).key, _deployment(d)) for d in desc.deployments]
    if rng is not None:
        for items in (classes, clusters, deps):
            rng.shuffle(items)
    return FleetSpec(classes=dict(classes), clusters=dict(clusters), deployments=dict(deps))


def shuffled_lock(lock: PlacementLock, rng: random.Random) -> PlacementLock:
    deployments = list(lock.deployments.items())
    rng.shuffle(deployments)
    out = {}
    for key, dep in deployments:
        replicas = list(dep.replicas)
        rng.shuffle(replicas)
        out[key] = LockedDeployment(replicas=replicas)
    return PlacementLock(deployments=out)


@st.composite
def edits(draw: st.DrawFn, desc: FleetDesc) -> FleetDesc:
    """Another version of `desc`: clusters dropped or re-labelled, tainted, pools resized or
    of another class, deployments resized, reshaped or re-prioritised."""
    clusters = []
    for c in desc.clusters:
        if draw(st.integers(0, 9)) == 0:
            continue
        pools = tuple(
            (
                name,
                draw(st.sampled_from([cls, cls, cls, *sorted(KINDS)])),
                max(0, nodes + draw(st.sampled_from([0, 0, 0, -1, 1]))),
            )
            for name, cls, nodes in c.pools
        )
        clusters.append(
            replace(
                c,
                pools=pools,
                zone=draw(st.sampled_from([c.zone] * 4 + [None, "x", "y"])),
                taint=draw(st.sampled_from([c.taint] * 4 + [None, "NoSchedule", "NoExecute"])),
            )
        )
    deps = []
    for d in desc.deployments:
        deps.append(
            replace(
                d,
                replicas=draw(st.integers(0, 5)),
                roles=d.roles if draw(st.integers(0, 3)) else tuple(draw(roles_) for _ in d.roles),
                priority=draw(st.sampled_from([d.priority, d.priority, 0, 1, 2])),
            )
        )
    return FleetDesc(tuple(clusters), tuple(deps))


@st.composite
def previous_locks(draw: st.DrawFn, desc: FleetDesc) -> PlacementLock | None:
    """None, or the lock planned for an earlier version of the fleet (so that specs have
    drifted since), plus a few arbitrary entries."""
    if draw(st.integers(0, 3)) == 0:
        return None
    lock = schedule(build(draw(edits(desc))), None).lock
    deployments = dict(lock.deployments)
    junk = draw(
        st.lists(
            st.tuples(
                st.sampled_from([d.name for d in desc.deployments]),
                st.sampled_from("abcde"),
                st.integers(0, 3),
                st.sampled_from([("unified",), ("prefill", "decode")]),
                st.sampled_from(["p0", "p1", "p2", "zz"]),
            ),
            max_size=3,
        )
    )
    for name, cluster_name, index, roles, pool_name in junk:
        key = f"ml/{name}"
        replicas = [r.model_dump() for r in deployments.get(key, LockedDeployment()).replicas]
        replicas.append(
            {
                "name": replica_name(name, cluster_name, index),
                "cluster": cluster_name,
                "index": index,
                "pools": dict.fromkeys(roles, pool_name),
            }
        )
        deployments[key] = LockedDeployment.model_validate({"replicas": replicas})
    return PlacementLock(deployments=deployments)


# -- the independent capacity check ---------------------------------------------------------


def _request_kinds(class_name: str, spec: RoleSpec) -> list[tuple[int, tuple[int, ...]]]:
    """Per request of one pod: (count, kinds that may serve it), from the KINDS table."""
    kinds = KINDS[class_name]
    gpus = spec.tensor
    if spec.gpu_mem is None:
        return [(gpus, tuple(i for i, k in enumerate(kinds) if k[1] and k[2] >= gpus))]
    out = [
        (
            gpus,
            tuple(
                i
                for i, k in enumerate(kinds)
                if k[3] is not None and k[3] >= spec.gpu_mem and k[2] >= gpus
            ),
        )
    ]
    if spec.nic is not None:
        out.append((spec.nic, tuple(i for i, k in enumerate(kinds) if k[4] and k[2] >= spec.nic)))
    return out


def feasible(
    class_name: str, nodes: int, workers: list[tuple[int, list[tuple[int, tuple[int, ...]]]]]
) -> bool:
    """Is there an assignment of every pod to a node, and of every request of a pod to a
    device kind with enough devices (DRA ones used up, Synthetic only matched), with the
    pods of one worker on distinct nodes? Exhaustive search."""
    kinds = KINDS[class_name]
    dra = [k[1] for k in kinds]
    pods: list[tuple[int, list[tuple[int, tuple[int, ...]]]]] = []  # (worker id, requests)
    for wid, (n_pods, requests) in enumerate(workers):
        pods += [(wid, requests)] * n_pods
    start = tuple(tuple(k[2] for k in kinds) for _ in range(nodes))

    def pod_options(
        state: tuple[int, ...], requests: list[tuple[int, tuple[int, ...]]]
    ) -> set[tuple[int, ...]]:
        results: set[tuple[int, ...]] = set()

        def go(i: int, left: list[int], own: list[int]) -> None:
            if i == len(requests):
                results.add(tuple(left))
                return
            count, options = requests[i]
            for k in options:
                have = left[k] if dra[k] else kinds[k][2] - own[k]
                if have >= count:
                    own[k] += count
                    if dra[k]:
                        left[k] -= count
                    go(i + 1, left, own)
                    own[k] -= count
                    if dra[k]:
                        left[k] += count

        go(0, list(state), [0] * len(kinds))
        return results

    seen: set[tuple[int, tuple[tuple[int, ...], ...], frozenset[int]]] = set()

    def search(i: int, state: tuple[tuple[int, ...], ...], used: frozenset[int]) -> bool:
        if i == len(pods):
            return True
        memo = (i, state, used)
        if memo in seen:
            return False
        seen.add(memo)
        wid, requests = pods[i]
        if i > 0 and pods[i - 1][0] != wid:
            used = frozenset()
        for node in range(nodes):
            if node in used:
                continue
            for after in pod_options(state[node], requests):
                nxt = state[:node] + (after,) + state[node + 1 :]
                if search(i + 1, nxt, used | {node}):
                    return True
        return False

    return search(0, start, frozenset())


def assert_capacity_respected(desc: FleetDesc, result: ScheduleResult) -> None:
    by_cluster = {c.name: c for c in desc.clusters}
    by_dep = {f"ml/{d.name}": d for d in desc.deployments}
    load: dict[tuple[str, str], list[tuple[int, list[tuple[int, tuple[int, ...]]]]]] = {}
    for key, dep in result.lock.deployments.items():
        spec = by_dep[key]
        names = ["unified"] if len(spec.roles) == 1 else ["prefill", "decode"]
        for replica in dep.replicas:
            pools = {name: (cls, nodes) for name, cls, nodes in by_cluster[replica.cluster].pools}
            assert set(replica.pools) == set(names)
            for role_name, role_spec in zip(names, spec.roles, strict=True):
                cls, _ = pools[replica.pools[role_name]]  # type: ignore[index]
                requests = _request_kinds(cls, role_spec)
                assert all(options for _, options in requests), "placed on a pool that can't fit"
                load.setdefault((replica.cluster, replica.pools[role_name]), []).extend(  # type: ignore[index]
                    [(role_spec.pipeline, requests)] * role_spec.workers
                )
    for (cluster_name, pool_name), workers in load.items():
        pools = {name: (cls, nodes) for name, cls, nodes in by_cluster[cluster_name].pools}
        cls, nodes = pools[pool_name]
        assert feasible(cls, nodes, workers), f"{cluster_name}/{pool_name} is over capacity"


# -- the properties -------------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_no_pool_capacity_is_exceeded(data: st.DataObject) -> None:
    desc = data.draw(fleets())
    previous = data.draw(previous_locks(desc))
    result = schedule(build(desc), previous)
    assert_capacity_respected(desc, result)
    for key, report in result.report.items():
        assert report.desired == len(report.replicas) + report.unplaced
        assert bool(report.reasons) == bool(report.unplaced), key


@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_output_is_independent_of_input_order(data: st.DataObject, seed: int) -> None:
    desc = data.draw(fleets())
    previous = data.draw(previous_locks(desc))
    expected = schedule(build(desc), previous)
    rng = random.Random(seed)
    shuffled_previous = shuffled_lock(previous, rng) if previous is not None else None
    assert schedule(build(desc, rng), shuffled_previous) == expected


@st.composite
def growths(draw: st.DrawFn, desc: FleetDesc) -> FleetDesc:
    """`desc` with only additions: more replicas, nodes, clusters and deployments."""
    deps = [replace(d, replicas=d.replicas + draw(st.integers(0, 2))) for d in desc.deployments]
    clusters = [
        replace(
            c, pools=tuple((n, cls, nodes + draw(st.integers(0, 2))) for n, cls, nodes in c.pools)
        )
        for c in desc.clusters
    ]
    extra = draw(fleets())
    taken = {c.name for c in clusters}
    clusters += [c for c in extra.clusters if c.name not in taken]
    deps += [replace(d, name=f"new{d.name}") for d in extra.deployments]
    return FleetDesc(tuple(clusters), tuple(deps))


@SETTINGS
@given(data=st.data())
def test_kept_replicas_never_move(data: st.DataObject) -> None:
    desc = data.draw(fleets())
    first = schedule(build(desc), data.draw(previous_locks(desc)))
    grown = data.draw(growths(desc))
    second = schedule(build(grown), first.lock)
    for key, dep in first.lock.deployments.items():
        after = {r.name: r for r in second.lock.deployments[key].replicas}
        for replica in dep.replicas:
            assert after.get(replica.name) == replica, f"{key}: {replica.name} moved"
    assert_capacity_respected(grown, second)


@SETTINGS
@given(data=st.data())
def test_scheduling_again_with_the_produced_lock_changes_nothing(data: st.DataObject) -> None:
    desc = data.draw(fleets())
    fleet = build(desc)
    first = schedule(fleet, data.draw(previous_locks(desc)))
    assert schedule(fleet, first.lock) == first


def test_the_capacity_checker_is_not_vacuous() -> None:
    gpu8 = [(8, (0,))]
    assert feasible("h8", 1, [(1, gpu8)])
    assert not feasible("h8", 1, [(1, gpu8), (1, [(1, (0,))])])
    assert feasible("h8", 2, [(1, gpu8), (1, [(1, (0,))])])
    assert not feasible("h8", 1, [(2, [(1, (0,))])])  # a 2-pod worker needs 2 nodes
    assert feasible("h8", 1, [(1, [(1, (0,))])] * 8)  # 8 one-pod workers share a node
    efa = [(1, (0,)), (16, (1,))]
    assert feasible("h8efa", 1, [(1, efa)] * 8)  # the Synthetic NICs are not used up
    assert not feasible("nicdra", 1, [(1, [(1, (0,)), (4, (1,))])] * 2)  # DRA NICs are
