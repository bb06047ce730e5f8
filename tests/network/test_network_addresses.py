"""The fleet address plan (docs/api.md, "Addresses"): blocks cut per provider, kept in the
lock whatever clusters come, go or move; declared ranges avoided; overlaps the front door
cannot route refused, naming both clusters, their files and fields."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from modelplane.api.fleet import FleetSpec
from modelplane.api.inference_class import InferenceClass
from modelplane.api.loader import load_fleet
from modelplane.api.placement_lock import (
    ClusterAddresses,
    LockedDeployment,
    LockedReplica,
    NetworkLock,
    PlacementLock,
)
from modelplane.components.inference_cluster import eks_args, gke_args
from modelplane.driver.fleet import _prune_removed
from modelplane.lock import dump_lock, read_lock, write_lock
from modelplane.network import addresses_of, plan_addresses, with_addresses
from tests.spec_docs import API, gateway, gpu_class, write_fleet


def _gke(name: str, networking: dict[str, Any] | None = None, nodes: int = 4) -> dict[str, Any]:
    gke: dict[str, Any] = {"project": "p", "region": "us-central1"}
    if networking is not None:
        gke["networking"] = networking
    pool = {"name": "gpu", "className": "l4-gke", "nodeCount": 1, "maxNodeCount": nodes}
    pool["zones"] = ["us-central1-a"]
    return _cluster(name, {"source": "GKE", "gke": gke}, pool)


def _eks(name: str, networking: dict[str, Any] | None = None) -> dict[str, Any]:
    eks: dict[str, Any] = {"region": "us-west-2"}
    if networking is not None:
        eks["networking"] = networking
    pool = {"name": "gpu", "className": "a10g", "nodeCount": 1, "zones": ["us-west-2a"]}
    return _cluster(name, {"source": "EKS", "eks": eks}, pool)


def _existing(name: str, network: dict[str, Any] | None = None) -> dict[str, Any]:
    existing: dict[str, Any] = {"renderTo": "out"}
    if network is not None:
        existing["network"] = network
    pool = {"name": "gpu", "className": "l4", "nodeCount": 1}
    return _cluster(name, {"source": "Existing", "existing": existing}, pool)


def _cluster(name: str, source: dict[str, Any], pool: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": name},
        "spec": {"cluster": source, "nodePools": [pool]},
    }


def _classes() -> list[dict[str, Any]]:
    eks = gpu_class("a10g")
    eks["spec"]["provisioning"] = {
        "provider": "EKS",
        "eks": {"instanceType": "g5.xlarge", "accelerator": {"type": "nvidia-a10g", "count": 1}},
    }
    return [gpu_class("l4"), gpu_class("l4-gke", provider="GKE"), eks]


def _fleet(root: Path, *docs: dict[str, Any], door: str | None = None) -> FleetSpec:
    """The fleet of ``docs`` (each cluster in a file of its own), its gateway on ``door``."""
    root.mkdir(parents=True, exist_ok=True)
    write_fleet(root, _classes(), "classes.yaml")
    for doc in docs:
        write_fleet(root, [doc], f"{doc['metadata']['name']}.yaml")
    if door is not None:
        write_fleet(root, [gateway(door)], "gateway.yaml")
    loaded = load_fleet(root)
    assert loaded.errors == []
    return loaded.fleet


def _blocks(network: NetworkLock) -> dict[str, str | None]:
    return {name: entry.block for name, entry in network.clusters.items()}


def test_network_plan_cuts_each_provider_from_blocks_in_name_order(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, _gke("b"), _eks("a"), _gke("c"), _existing("d"))
    plan = plan_addresses(fleet, PlacementLock())
    assert plan.errors == []
    assert plan.network.clusters == {
        "a": ClusterAddresses(
            source="EKS",
            block="10.0.0.0/16",
            vpc="10.0.0.0/17",
            subnets=["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20"],
            services="10.0.144.0/20",
        ),
        "b": ClusterAddresses(
            source="GKE",
            block="10.1.0.0/16",
            nodes="10.1.128.0/20",
            pods="10.1.0.0/17",
            services="10.1.144.0/20",
        ),
        "c": ClusterAddresses(
            source="GKE",
            block="10.2.0.0/16",
            nodes="10.2.128.0/20",
            pods="10.2.0.0/17",
            services="10.2.144.0/20",
        ),
    }


# (id, clusters of the second fleet, the blocks after) — the first fleet is gke a, b, c.
CHANGES = [
    ("same", ["a", "b", "c"], {"a": "10.0", "b": "10.1", "c": "10.2"}),
    ("one added first by name", ["0", "a", "b", "c"], {"0": "10.3", "a": "10.0", "b": "10.1", "c": "10.2"}),
    ("one removed keeps its block", ["a", "c"], {"a": "10.0", "b": "10.1", "c": "10.2"}),
    ("removed and added", ["a", "c", "z"], {"a": "10.0", "b": "10.1", "c": "10.2", "z": "10.3"}),
    ("all new but one", ["c", "x", "y"], {"a": "10.0", "b": "10.1", "c": "10.2", "x": "10.3", "y": "10.4"}),
]  # fmt: skip


@pytest.mark.parametrize(("names", "after"), [c[1:] for c in CHANGES], ids=[c[0] for c in CHANGES])
def test_network_plan_never_moves_a_cluster_that_has_a_block(
    tmp_path: Path, names: list[str], after: dict[str, str]
) -> None:
    first = plan_addresses(_fleet(tmp_path / "one", *map(_gke, "abc")), PlacementLock())
    lock = PlacementLock(network=first.network)
    second = plan_addresses(_fleet(tmp_path / "two", *map(_gke, names)), lock)
    assert second.errors == []
    assert _blocks(second.network) == {n: f"{prefix}.0.0/16" for n, prefix in after.items()}
    for name in set(names) & {"a", "b", "c"}:
        assert second.network.clusters[name] == first.network.clusters[name]


def test_network_plan_is_the_same_whatever_the_files_order(tmp_path: Path) -> None:
    docs = [_gke(n) for n in ("m", "b", "x", "a")]
    one = _fleet(tmp_path / "one", *docs)
    (tmp_path / "two").mkdir()
    for i, doc in enumerate(reversed(docs)):  # other file names, other order
        write_fleet(tmp_path / "two", [doc], f"{i}-{doc['metadata']['name']}.yaml")
    two = _fleet(tmp_path / "two")
    assert plan_addresses(one, PlacementLock()) == plan_addresses(two, PlacementLock())


def test_network_plan_avoids_every_declared_range(tmp_path: Path) -> None:
    fleet = _fleet(
        tmp_path,
        _existing("onprem", {"nodeCidrs": ["10.0.0.0/12"], "podCidrs": ["10.16.0.0/16"]}),
        _gke("own", {"nodeCidr": "10.17.0.0/24", "podCidr": "10.18.0.0/16", "serviceCidr": "10.19.0.0/20"}),
        _eks("svc", {"serviceCidr": "10.20.0.0/16"}),
        _gke("zz"),
    )  # fmt: skip
    plan = plan_addresses(fleet, PlacementLock())
    assert plan.errors == []
    assert _blocks(plan.network) == {"svc": "10.21.0.0/16", "zz": "10.22.0.0/16"}
    # A declared service range wins over the block's.
    svc = with_addresses(fleet.clusters["svc"], plan.network.clusters["svc"])
    assert svc.spec.cluster.eks.networking.service_cidr == "10.20.0.0/16"  # type: ignore[union-attr]


def test_network_plan_uses_the_gateways_fleet_range(tmp_path: Path) -> None:
    door = gateway("a")
    door["spec"]["network"] = {"fleetCidr": "172.16.0.0/12", "clusterPrefixLength": 18}
    fleet = _fleet(tmp_path, _gke("a"), _gke("b"))
    fleet.gateway = load_fleet(write_fleet(tmp_path / "g", [door])).fleet.gateway
    plan = plan_addresses(fleet, PlacementLock())
    assert _blocks(plan.network) == {"a": "172.16.0.0/18", "b": "172.16.64.0/18"}
    assert plan.network.clusters["a"].pods == "172.16.0.0/19"


def test_network_plan_refuses_a_full_range_naming_the_cluster(tmp_path: Path) -> None:
    root = tmp_path / "f"
    _fleet(root, _gke("a"), _gke("b"))
    door = gateway("a")
    door["spec"]["network"] = {"fleetCidr": "192.168.0.0/16", "clusterPrefixLength": 16}
    write_fleet(root, [door], "gateway.yaml")
    plan = plan_addresses(load_fleet(root).fleet, PlacementLock())
    assert _blocks(plan.network) == {"a": "192.168.0.0/16"}
    [error] = plan.errors
    assert (error.file, error.object, error.path) == (
        str(root / "b.yaml"),
        "InferenceCluster b",
        "spec.cluster",
    )
    assert "192.168.0.0/16 has no free /16 block" in error.message
    assert "spec.network.fleetCidr" in error.message


def test_network_plan_refuses_pools_the_pod_range_cannot_hold(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, _gke("small", nodes=128), _gke("big", nodes=129))
    [error] = plan_addresses(fleet, PlacementLock()).errors
    assert (error.object, error.path) == ("InferenceCluster big", "spec.nodePools")
    assert "may grow to 129 nodes but the pod range 10.0.0.0/17" in error.message
    assert "holds 128" in error.message


def test_network_eks_zones_added_append_blocks_and_move_none(tmp_path: Path) -> None:
    first = plan_addresses(_fleet(tmp_path / "one", _eks("e")), PlacementLock()).network
    four = {"zones": ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"]}
    second = plan_addresses(
        _fleet(tmp_path / "two", _eks("e", four)), PlacementLock(network=first)
    ).network
    assert second.clusters["e"].subnets == [
        "10.0.0.0/20",
        "10.0.16.0/20",
        "10.0.32.0/20",
        "10.0.48.0/20",
    ]
    assert second.clusters["e"].vpc == first.clusters["e"].vpc


OLD_LOCK = PlacementLock(
    deployments={
        "team/m": LockedDeployment(
            replicas=[LockedReplica(name="m-abcde", cluster="g", index=0, pools={"unified": "gpu"})]
        )
    }
)


def test_network_a_lock_from_before_the_plan_keeps_the_old_default_ranges(tmp_path: Path) -> None:
    """Clusters made before the address plan run on the old defaults: moving them would
    replace their networks, so a lock without a network section keeps them there."""
    fleet = _fleet(tmp_path, _gke("g"), _eks("e"))
    kept = plan_addresses(fleet, OLD_LOCK)
    assert kept.errors == []  # no front door: nothing must reach anything
    assert kept.network.clusters["g"] == ClusterAddresses(
        source="GKE", nodes="10.0.0.0/24", pods="10.1.0.0/16", services="10.2.0.0/16"
    )
    assert kept.network.clusters["e"].vpc == "10.0.0.0/16"
    assert kept.network.clusters["e"].services is None  # EKS picked it
    # Once the lock has its section, new clusters are planned.
    fresh = OLD_LOCK.model_copy(update={"network": NetworkLock()})
    assert _blocks(plan_addresses(fleet, fresh).network) == {"e": "10.0.0.0/16", "g": "10.1.0.0/16"}


def test_network_old_ranges_the_front_door_cannot_route_are_refused(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, _gke("g"), _eks("e"), door="g")
    errors = plan_addresses(fleet, OLD_LOCK, "fleet/modelplane.lock.yaml").errors
    [error] = errors
    assert (error.file, error.object, error.path) == (
        "fleet/modelplane.lock.yaml",
        "PlacementLock",
        "network.clusters.e.vpc",
    )
    assert "10.0.0.0/16 of cluster e overlaps 10.0.0.0/24 of cluster g" in error.message
    assert "network.clusters.g.nodes (fleet/modelplane.lock.yaml)" in error.message
    assert "the front door on g must reach e" in error.message


# (id, clusters, the gateway's cluster, the error paths) — declared ranges only.
OVERLAPS = [
    (
        "two GKE, one the front door",
        [_gke("a", {"nodeCidr": "10.0.0.0/24", "podCidr": "10.1.0.0/16", "serviceCidr": "10.2.0.0/16"}),
         _gke("b", {"nodeCidr": "10.9.0.0/24", "podCidr": "10.1.0.0/16", "serviceCidr": "10.8.0.0/16"})],
        "a",
        {("b", "spec.cluster.gke.networking.podCidr")},
    ),
    (
        "no front door: nothing must reach",
        [_gke("a", {"nodeCidr": "10.0.0.0/24", "podCidr": "10.1.0.0/16", "serviceCidr": "10.2.0.0/16"}),
         _gke("b", {"nodeCidr": "10.9.0.0/24", "podCidr": "10.1.0.0/16", "serviceCidr": "10.8.0.0/16"})],
        None,
        set(),
    ),
    (
        "front door elsewhere: a and b need not reach each other",
        [_gke("a", {"nodeCidr": "10.0.0.0/24", "podCidr": "10.1.0.0/16", "serviceCidr": "10.2.0.0/16"}),
         _gke("b", {"nodeCidr": "10.9.0.0/24", "podCidr": "10.1.0.0/16", "serviceCidr": "10.8.0.0/16"}),
         _gke("c")],
        "c",
        set(),
    ),
    (
        "an existing cluster inside the front door's VPC",
        [_eks("door", {"vpcCidr": "10.4.0.0/16", "subnetCidrs": ["10.4.0.0/20", "10.4.16.0/20"]}),
         _existing("dc", {"nodeCidrs": ["192.168.0.0/16"], "podCidrs": ["10.4.128.0/17"],
                          "connectedTo": ["door"]})],
        "door",
        {("dc", "spec.cluster.existing.network.podCidrs[0]")},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("docs", "door", "paths"), [c[1:] for c in OVERLAPS], ids=[c[0] for c in OVERLAPS]
)
def test_network_validate_refuses_overlaps_the_front_door_must_route(
    tmp_path: Path, docs: list[dict[str, Any]], door: str | None, paths: set[tuple[str, str]]
) -> None:
    write_fleet(tmp_path, _classes(), "classes.yaml")
    for doc in docs:
        write_fleet(tmp_path, [doc], f"{doc['metadata']['name']}.yaml")
    if door is not None:
        write_fleet(tmp_path, [gateway(door)], "gateway.yaml")
    errors = load_fleet(tmp_path).errors
    assert {(e.object.split()[-1], e.path) for e in errors} == paths
    for e in errors:
        assert e.file == str(tmp_path / f"{e.object.split()[-1]}.yaml") and e.line > 0
        assert f"of cluster {door}" in e.message and f"({tmp_path / door}.yaml)" in e.message
        assert f"the front door on {door} must reach" in e.message


# (id, the cluster's networking, the error paths)
BAD_NETWORKING = [
    ("gke partial", _gke("g", {"podCidr": "10.50.0.0/16"}),
     {"spec.cluster.gke.networking.nodeCidr", "spec.cluster.gke.networking.serviceCidr"}),
    ("eks vpc without subnets", _eks("e", {"vpcCidr": "10.4.0.0/16"}), {"spec.cluster.eks.networking"}),
    ("eks public service range", _eks("e", {"serviceCidr": "100.64.0.0/16"}), {"spec.cluster.eks.networking"}),
    ("eks service range in the vpc",
     _eks("e", {"vpcCidr": "10.4.0.0/16", "subnetCidrs": ["10.4.0.0/20", "10.4.16.0/20"],
                "serviceCidr": "10.4.128.0/20"}),
     {"spec.cluster.eks.networking"}),
    ("existing not a cidr", _existing("x", {"nodeCidrs": ["10.0.0.1/8"]}),
     {"spec.cluster.existing.network.nodeCidrs"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("doc", "paths"), [c[1:] for c in BAD_NETWORKING], ids=[c[0] for c in BAD_NETWORKING]
)
def test_network_bad_ranges_are_named(tmp_path: Path, doc: dict[str, Any], paths: set[str]) -> None:
    write_fleet(tmp_path, [*_classes(), doc])
    errors = load_fleet(tmp_path).errors
    assert {e.path for e in errors} == paths
    assert all(e.object == f"InferenceCluster {doc['metadata']['name']}" for e in errors)


# (id, the gateway's network, the message fragment)
BAD_FLEET_RANGES = [
    ("public", {"fleetCidr": "8.0.0.0/8"}, "must be an IPv4 block inside 10.0.0.0/8"),
    ("ipv6", {"fleetCidr": "fd00::/8"}, "must be an IPv4 block"),
    ("smaller than a block", {"fleetCidr": "10.0.0.0/20"}, "smaller than one cluster's block"),
    ("block too large for a VPC", {"clusterPrefixLength": 14}, "greater than or equal to 15"),
]


@pytest.mark.parametrize(
    ("network", "fragment"), [c[1:] for c in BAD_FLEET_RANGES], ids=[c[0] for c in BAD_FLEET_RANGES]
)
def test_network_bad_fleet_range_is_named(
    tmp_path: Path, network: dict[str, Any], fragment: str
) -> None:
    door = gateway("a")
    door["spec"]["network"] = network
    write_fleet(tmp_path, [*_classes(), _gke("a"), door])
    [error] = load_fleet(tmp_path).errors
    assert error.object == "InferenceGateway default" and error.path.startswith("spec.network")
    assert fragment in error.message


def test_network_lock_section_round_trips_and_reads_back(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path / "f", _gke("g"), _eks("e"))
    lock = OLD_LOCK.model_copy(update={"network": plan_addresses(fleet, PlacementLock()).network})
    path = tmp_path / "modelplane.lock.yaml"
    write_lock(path, lock)
    text = path.read_text()
    assert (
        "network:\n  clusters:\n    e: {source: EKS, block: 10.0.0.0/16, vpc: 10.0.0.0/17, "
        "subnets: [10.0.0.0/20, 10.0.16.0/20, 10.0.32.0/20], services: 10.0.144.0/20}\n"
        "    g: {source: GKE, block: 10.1.0.0/16, nodes: 10.1.128.0/20, pods: 10.1.0.0/17, "
        "services: 10.1.144.0/20}\n"
    ) in text
    assert read_lock(path) == lock
    empty = lock.model_copy(update={"network": NetworkLock()})
    assert dump_lock(empty).endswith("network: {clusters: {}}\n")
    assert read_lock_text(tmp_path, dump_lock(empty)) == empty


def read_lock_text(root: Path, text: str) -> PlacementLock:
    path = root / "again.lock.yaml"
    path.write_text(text)
    return read_lock(path)


def test_network_a_bad_lock_entry_is_named(tmp_path: Path) -> None:
    from modelplane.api.errors import FleetInvalid

    path = tmp_path / "modelplane.lock.yaml"
    path.write_text(
        "apiVersion: modelplane.ai/v1alpha1\nkind: PlacementLock\ndeployments: {}\n"
        "network:\n  clusters:\n    g: {source: GKE, block: 10.0.0.0/16, vpc: 10.0.0.0/17}\n"
    )
    with pytest.raises(FleetInvalid) as caught:
        read_lock(path)
    [error] = caught.value.errors
    assert error.path == "network.clusters.g"
    assert "missing nodes, pods, services" in error.message and "never vpc" in error.message


def test_network_components_build_the_planned_ranges(tmp_path: Path) -> None:
    """What the stack program builds: the lock's entry written into the cluster; a hand
    run before `plan` wrote the lock gets the same entry."""
    fleet = _fleet(tmp_path, _gke("g"), _eks("e"))
    classes: dict[str, InferenceClass] = fleet.classes
    lock = PlacementLock(network=plan_addresses(fleet, PlacementLock()).network)
    assert addresses_of(fleet, lock, "g") == addresses_of(fleet, PlacementLock(), "g")
    gke = gke_args(with_addresses(fleet.clusters["g"], addresses_of(fleet, lock, "g")), classes)
    assert (gke.networking.node_cidr, gke.networking.pod_cidr, gke.networking.service_cidr) == (
        "10.1.128.0/20",
        "10.1.0.0/17",
        "10.1.144.0/20",
    )
    eks = eks_args(with_addresses(fleet.clusters["e"], addresses_of(fleet, lock, "e")), classes)
    assert eks.networking.vpc_cidr == "10.0.0.0/17"
    assert eks.networking.subnet_cidrs == ("10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20")
    assert eks.networking.service_cidr == "10.0.144.0/20"
    with pytest.raises(ValueError, match="InferenceCluster g has no network ranges"):
        gke_args(fleet.clusters["g"], classes)


def test_network_prune_frees_the_blocks_of_clusters_whose_stack_is_gone() -> None:
    entry = ClusterAddresses(
        source="GKE", block="10.0.0.0/16", nodes="10.0.128.0/20", pods="10.0.0.0/17",
        services="10.0.144.0/20",
    )  # fmt: skip
    other = entry.model_copy(update={"block": "10.1.0.0/16"})
    lock = PlacementLock(
        network=NetworkLock(clusters={"gone": entry, "kept": other, "spec": other})
    )
    pruned = _prune_removed(lock, keep={"cluster-kept"}, clusters=["spec"])
    assert pruned.network is not None and set(pruned.network.clusters) == {"kept", "spec"}
    unchanged = _prune_removed(lock, keep={"cluster-gone", "cluster-kept"}, clusters=["spec"])
    assert unchanged is lock
    assert copy.deepcopy(lock) == lock


def test_network_cli_plan_shows_and_writes_the_ranges_and_validate_refuses_overlaps(
    tmp_path: Path,
) -> None:
    from tests.cli.helpers import run

    declared = {"nodeCidr": "10.0.0.0/24", "podCidr": "10.1.0.0/16", "serviceCidr": "10.2.0.0/16"}
    _fleet(tmp_path, _gke("door", declared), _gke("far"), door="door")
    out = json.loads(run("plan", str(tmp_path), "-o", "json", "--write").stdout)
    assert out["network"] == {
        "door": {"from": "declared", "nodeCidr": ["10.0.0.0/24"], "podCidr": ["10.1.0.0/16"],
                 "serviceCidr": ["10.2.0.0/16"]},
        "far": {"from": "plan", "block": "10.3.0.0/16", "nodes": "10.3.128.0/20",
                "pods": "10.3.0.0/17", "services": "10.3.144.0/20"},
    }  # fmt: skip
    lock = read_lock(tmp_path / "modelplane.lock.yaml")
    assert lock.network is not None and _blocks(lock.network) == {"far": "10.3.0.0/16"}
    table = run("plan", str(tmp_path)).stdout
    assert "addresses far: block 10.3.0.0/16 of the fleet address plan" in table

    far = _gke("far", {**declared, "nodeCidr": "10.9.0.0/24", "serviceCidr": "10.8.0.0/16"})
    write_fleet(tmp_path, [far], "far.yaml")
    bad = run("validate", str(tmp_path), "-o", "json")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    [error] = json.loads(bad.stdout)["errors"]
    assert (error["file"], error["object"], error["path"]) == (
        str(tmp_path / "far.yaml"),
        "InferenceCluster far",
        "spec.cluster.gke.networking.podCidr",
    )
    assert f"spec.cluster.gke.networking.podCidr ({tmp_path / 'door.yaml'})" in error["message"]
    assert run("plan", str(tmp_path), "--write").returncode == 2
    assert read_lock(tmp_path / "modelplane.lock.yaml") == lock  # nothing half-written
