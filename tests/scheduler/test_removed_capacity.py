"""Deployments removed from the fleet hold their capacity until pruned (scheduling.md,
"Pools and capacity"): the lock records each placed replica's footprint, the scheduler
charges it for removed deployments, and `plan` says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from modelplane.api.errors import FleetInvalid
from modelplane.api.placement_lock import LockedDeployment, PlacementLock
from modelplane.lock import dump_lock, read_lock, write_lock
from modelplane.planning import plan_fleet
from modelplane.scheduler import schedule
from tests.factories import cluster, deployment, fleet, gpu_device, inference_class, pool
from tests.spec_docs import deployment as deployment_doc
from tests.spec_docs import existing_cluster, gpu_class, write_fleet

L4 = inference_class("l4", devices=[gpu_device(8, name="l4")], allocatable=("32", "128Gi"))
OLD = deployment("old", 2, tensor=8)  # 2 replicas x 8 GPUs
NEW = deployment("new", 1, tensor=8)


def dev_fleet(*deployments: Any, nodes: int = 2) -> Any:
    return fleet([L4], [cluster("dev-1", [pool("gpu-l4", "l4", nodes)])], deployments)


def placed_lock() -> PlacementLock:
    """The lock after `old` was placed: both nodes of dev-1/gpu-l4."""
    return schedule(dev_fleet(OLD)).lock


def without_footprints(lock: PlacementLock) -> PlacementLock:
    deployments = {
        key: LockedDeployment(
            replicas=[r.model_copy(update={"footprint": None}) for r in dep.replicas]
        )
        for key, dep in lock.deployments.items()
    }
    return PlacementLock(deployments=deployments)


def test_placed_replicas_record_their_footprint() -> None:
    (first, _) = placed_lock().deployments["ml/old"].replicas
    assert first.footprint is not None
    fp = first.footprint["unified"]
    assert (fp.workers, fp.nodes_per_worker, fp.devices) == (1, 1, {"l4": 8})
    assert (fp.cpu_millis, fp.memory_bytes) == (4000, 16 * 2**30)


@pytest.mark.parametrize(
    ("name", "previous", "new_placed", "holds", "unknown"),
    [
        # Just removed: the previous lock still has it under deployments.
        ("removed this plan", lambda: placed_lock(), 0, {"dev-1/gpu-l4": 16}, 0),
        # Carried over by an earlier plan: under removed.
        (
            "carried in removed",
            lambda: PlacementLock(removed=placed_lock().deployments),
            0,
            {"dev-1/gpu-l4": 16},
            0,
        ),
        # Pruned: the lock entry is gone, the GPUs are free.
        ("pruned", lambda: PlacementLock(), 1, None, None),
        # An old lock without footprints: unknown, nothing charged.
        ("old lock", lambda: without_footprints(placed_lock()), 1, {}, 2),
    ],
)
def test_removed_deployment_holds_its_gpus(
    name: str, previous: Any, new_placed: int, holds: dict[str, int] | None, unknown: int | None
) -> None:
    result = schedule(dev_fleet(NEW), previous())
    report = result.report["ml/new"]
    assert len(report.replicas) == new_placed, name
    if holds is None:
        assert result.removed == {} and result.lock.removed == {}
        return
    assert result.removed["ml/old"].holds == holds
    assert result.removed["ml/old"].unknown == unknown
    assert [r.name for r in result.lock.removed["ml/old"].replicas] == [
        r.name for r in placed_lock().deployments["ml/old"].replicas
    ]
    if new_placed == 0:
        assert report.reasons == [
            "dev-1: pool gpu-l4 has 0 free nodes, unified needs 1 "
            "(removed ml/old holds 16 devices on gpu-l4 until up --prune)"
        ]


def test_removed_partial_room_is_shared() -> None:
    """Only what the removed deployment holds is charged: the third node is free."""
    result = schedule(dev_fleet(NEW, nodes=3), placed_lock())
    assert [r.cluster for r in result.lock.deployments["ml/new"].replicas] == ["dev-1"]
    # Re-planning the written lock keeps everything where it is, byte for byte.
    again = schedule(dev_fleet(NEW, nodes=3), result.lock)
    assert dump_lock(again.lock) == dump_lock(result.lock)


def test_removed_cpu_memory_charged() -> None:
    """A removed replica's CPU and memory are charged where the class has an allocatable."""
    small = deployment("old", 1, tensor=1, resources=("30", "8Gi"))
    cpu_hungry = deployment("new", 1, tensor=1, resources=("4", "8Gi"))
    previous = schedule(dev_fleet(small, nodes=1)).lock
    result = schedule(dev_fleet(cpu_hungry, nodes=1), previous)
    # 7 GPUs are free on the node, but only 2 of its 32 CPUs.
    assert result.report["ml/new"].unplaced == 1
    assert "removed ml/old holds 1 devices" in result.report["ml/new"].reasons[0]


def test_removed_deployment_returns_from_removed() -> None:
    """Back in the fleet under the same key: its replicas are kept, not charged twice."""
    previous = PlacementLock(removed=placed_lock().deployments)
    result = schedule(dev_fleet(OLD), previous)
    assert result.lock.removed == {}
    assert [r.name for r in result.lock.deployments["ml/old"].replicas] == [
        r.name for r in placed_lock().deployments["ml/old"].replicas
    ]
    assert result.report["ml/old"].unplaced == 0


def test_removed_on_a_removed_cluster_charges_nothing() -> None:
    gone = fleet([L4], [cluster("dev-2", [pool("gpu-l4", "l4", 2)])], [NEW])
    result = schedule(gone, placed_lock())
    assert result.removed["ml/old"].holds == {}
    assert result.report["ml/new"].unplaced == 0


# -- the lock -----------------------------------------------------------------------------


def test_lock_round_trip_byte_stable(tmp_path: Path) -> None:
    result = schedule(dev_fleet(NEW, nodes=3), placed_lock())
    path = tmp_path / "modelplane.lock.yaml"
    write_lock(path, result.lock)
    text = path.read_text()
    assert "removed:\n  ml/old:\n" in text
    assert (
        "      footprint: {unified: {workers: 1, nodesPerWorker: 1, devices: {l4: 8}, "
        "cpuMillis: 4000, memoryBytes: 17179869184}}\n"
    ) in text
    loaded = read_lock(path)
    assert loaded == result.lock
    assert write_lock(path, schedule(dev_fleet(NEW, nodes=3), loaded).lock) is False


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "deployments:\n  a/b:\n    replicas: []\nremoved:\n  a/b:\n    replicas: []\n",
            "in both deployments and removed: a/b",
        ),
        (
            "deployments:\n  a/b:\n    replicas:\n    - {name: b-1, cluster: c, index: 0,"
            " pools: {unified: p}, footprint: {decode: {workers: 1, nodesPerWorker: 1,"
            " cpuMillis: 1, memoryBytes: 1}}}\n",
            "footprint must have the roles of pools",
        ),
        (
            "deployments:\n  a/b:\n    replicas:\n    - {name: b-1, cluster: c, index: 0,"
            " pools: {unified: p}, footprint: {unified: {workers: 0, nodesPerWorker: 1,"
            " cpuMillis: 1, memoryBytes: 1}}}\n",
            "greater than or equal to 1",
        ),
    ],
)
def test_bad_footprint_or_removed_is_an_error(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "lock.yaml"
    path.write_text("apiVersion: modelplane.ai/v1alpha1\nkind: PlacementLock\n" + body)
    with pytest.raises(FleetInvalid) as exc:
        read_lock(path)
    assert any(message in e.message for e in exc.value.errors), exc.value.errors


def test_old_lock_without_footprint_loads(tmp_path: Path) -> None:
    path = tmp_path / "lock.yaml"
    path.write_text(
        "apiVersion: modelplane.ai/v1alpha1\nkind: PlacementLock\ndeployments:\n  ml/old:\n"
        "    replicas:\n    - name: old-1\n      cluster: dev-1\n      index: 0\n"
        "      pools: {unified: gpu-l4}\n"
    )
    lock = read_lock(path)
    assert lock.deployments["ml/old"].replicas[0].footprint is None
    assert dump_lock(lock) == path.read_text()


# -- plan: table and JSON -------------------------------------------------------------------


def spec_fleet(root: Path, *names: str) -> Path:
    docs = [gpu_class("l4", 8), existing_cluster("c1", "l4", nodes=2)]
    docs += [deployment_doc(name, tensor=8, replicas=2 if name == "old" else 1) for name in names]
    return write_fleet(root, docs)


def test_plan_says_what_removed_deployments_hold(tmp_path: Path) -> None:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    fleet_dir = spec_fleet(tmp_path / "fleet", "old")
    lock = tmp_path / "lock.yaml"
    write_lock(lock, plan_fleet(fleet_dir, lock).result.lock)  # type: ignore[union-attr]
    spec_fleet(tmp_path / "fleet", "new")
    runner = CliRunner()
    args = ["plan", str(fleet_dir), "--lock", str(lock)]
    table = runner.invoke(app, args, env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    assert (
        "removed team/old: 2 replica(s) keep running until `up --prune` destroys its stack: "
        "they hold 16 devices on c1/gpu"
    ) in " ".join(table.output.split())
    data = json.loads(runner.invoke(app, [*args, "-o", "json"]).output)
    assert data["removed"]["team/old"] == {
        "replicas": 2,
        "holds": {"c1/gpu": 16},
        "unknown": 0,
        "note": (
            "2 replica(s) keep running until `up --prune` destroys its stack: "
            "they hold 16 devices on c1/gpu"
        ),
    }
    assert data["deployments"]["team/new"]["unplaced"] == 1
    assert "removed team/old holds 16 devices" in data["deployments"]["team/new"]["reasons"][0]
    # --write carries it over in `removed`; a second plan is byte-stable.
    assert runner.invoke(app, [*args, "--write"]).exit_code == 0
    text = lock.read_text()
    assert "removed:\n  team/old:" in text
    assert runner.invoke(app, [*args, "--write"]).exit_code == 0
    assert lock.read_text() == text


@pytest.mark.parametrize(
    ("stacks", "kept"),
    [
        ({"deploy-ml-old", "gateway"}, ["ml/old"]),  # its stack still runs: keep holding
        ({"gateway"}, []),  # destroyed by --prune (or never created): capacity free
    ],
)
def test_up_keeps_removed_entries_while_their_stack_exists(
    stacks: set[str], kept: list[str]
) -> None:
    from modelplane.driver.fleet import _prune_removed

    lock = schedule(dev_fleet(NEW, nodes=3), placed_lock()).lock
    assert list(_prune_removed(lock, keep=stacks, clusters=()).removed) == kept
    assert _prune_removed(lock, keep=stacks, clusters=()).deployments == lock.deployments


def test_removed_replica_that_no_longer_fits_is_not_charged() -> None:
    """The pool shrank to one node: one removed replica is charged, the other cannot be."""
    result = schedule(dev_fleet(nodes=1), placed_lock())
    assert result.removed["ml/old"].holds == {"dev-1/gpu-l4": 8}
    assert len(result.lock.removed["ml/old"].replicas) == 2  # both stay until pruned
