"""specs/dev on the dev fleet: scheduled by kube-scheduler, claims allocated by DRA, LWS groups
formed, scaled, moved and destroyed by real controllers (issue 15).

Tests in this module run in order on one dev fleet and one deployment of specs/dev.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi

from modelplane.devfleet import fleet as devfleet
from tests.fixtures import devfleet as fx

pytestmark = [pytest.mark.devfleet, pytest.mark.engine]

NS = "demo"
EXPECTED_NODES = {"dev-1": 5, "dev-2": 5, "dev-3": 4}  # pools + one system node


@pytest.fixture(scope="module")
def engine_ready() -> None:
    from modelplane.engine import EngineNotFound, ensure_engine

    try:
        ensure_engine(progress=lambda _msg: None)
    except EngineNotFound as exc:
        pytest.fail(f"the Pulumi engine is not available: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def apis(dev_fleet: devfleet.DevFleet) -> Iterator[dict[str, ApiClient]]:
    clients = {c.name: fx.api_client(c) for c in dev_fleet.clusters}
    try:
        yield clients
    finally:
        for client in clients.values():
            client.close()


@pytest.fixture(scope="module")
def fleet_dir(deployer: fx.Deployer) -> Path:
    return deployer.dev_specs("dev")


def lock_of(fleet_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((fleet_dir / "modelplane.lock.yaml").read_text())


def serving_pods(api: ApiClient) -> list[Any]:
    pods = CoreV1Api(api).list_namespaced_pod(NS, label_selector="modelplane.ai/role")
    return list(pods.items)


def all_running(apis: dict[str, ApiClient], expected: int) -> list[Any] | Exception:
    """The serving pods once ``expected`` of them are bound and Running, else what there is."""
    pods = [p for api in apis.values() for p in serving_pods(api)]
    if len(pods) == expected and all(
        p.spec.node_name and p.status.phase == "Running" for p in pods
    ):
        return pods
    return RuntimeError(
        f"{len(pods)} of {expected} pods: "
        + ", ".join(f"{p.metadata.name}@{p.spec.node_name}:{p.status.phase}" for p in pods)
    )


# --------------------------------------------------------------------------- the fleet itself


def test_dev_fleet_runs_real_control_planes(
    dev_fleet: devfleet.DevFleet, apis: dict[str, Any]
) -> None:
    report = devfleet.status(dev_fleet)
    assert report["running"], report
    for cluster in report["clusters"]:
        assert all(cluster["processes"].values()), cluster["processes"]
        assert cluster["apiReachable"]
        assert (cluster["nodesReady"], cluster["nodes"]) == (EXPECTED_NODES[cluster["name"]],) * 2
        assert cluster["server"].startswith("https://127.77.")
    custom = CustomObjectsApi(apis["dev-1"])
    slices = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")["items"]
    per_node = {s["spec"]["nodeName"]: len(s["spec"]["devices"]) for s in slices}
    assert per_node == {"dev-1-h100-0": 8, "dev-1-h100-1": 8, "dev-1-l4-0": 1, "dev-1-l4-1": 1}
    classes = custom.list_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses")["items"]
    assert [c["metadata"]["name"] for c in classes] == ["gpu.nvidia.com"]


# --------------------------------------------------------------------------- specs/dev served


@pytest.fixture(scope="module")
def deployed(
    engine_ready: None, deployer: fx.Deployer, fleet_dir: Path, apis: dict[str, ApiClient]
) -> dict[str, Any]:
    run = fx.check(deployer.fleet(fleet_dir).up())
    lock = lock_of(fleet_dir)
    # qwen 3 pods, llama one LWS group of 2, mistral-pd one prefill + one decode pod
    pods = fx.wait_for("every serving pod bound and Running", lambda: all_running(apis, 7), 180)
    return {"run": run, "lock": lock, "pods": pods}


def test_every_replica_is_bound_by_kube_scheduler_and_running(
    deployed: dict[str, Any], apis: dict[str, ApiClient]
) -> None:
    placement = {
        r["name"]: (r["cluster"], r["pools"])
        for entry in deployed["lock"]["deployments"].values()
        for r in entry["replicas"]
    }
    seen: set[str] = set()
    for cluster, api in apis.items():
        nodes = {n.metadata.name: n for n in CoreV1Api(api).list_node().items}
        for pod in serving_pods(api):
            replica = pod.metadata.labels["modelplane.ai/replica"]
            role = pod.metadata.labels["modelplane.ai/role"]
            want_cluster, pools = placement[replica]
            assert cluster == want_cluster, (replica, cluster)
            node = nodes[pod.spec.node_name]
            assert node.metadata.labels["modelplane.ai/pool"] == pools[role], (replica, role)
            assert pod.status.phase == "Running"
            seen.add(replica)
    assert seen == set(placement)


def test_claims_are_allocated_from_the_bound_node_slices(
    deployed: dict[str, Any], apis: dict[str, ApiClient]
) -> None:
    allocated = 0
    for api in apis.values():
        custom = CustomObjectsApi(api)
        slices = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
        devices = {
            (s["spec"]["nodeName"], d["name"])
            for s in slices["items"]
            for d in s["spec"]["devices"]
        }
        pods = {p.metadata.name: p for p in serving_pods(api)}
        claims = custom.list_namespaced_custom_object(
            "resource.k8s.io", "v1", NS, "resourceclaims"
        )["items"]
        for claim in claims:
            results = claim["status"]["allocation"]["devices"]["results"]
            owner = next(
                o["name"] for o in claim["metadata"]["ownerReferences"] if o["kind"] == "Pod"
            )
            node = pods[owner].spec.node_name
            for result in results:
                assert result["pool"] == node and (node, result["device"]) in devices
                allocated += 1
    # qwen 3 x 1 GPU, llama 2 nodes x 8, prefill 2 + decode 2
    assert allocated == 3 + 16 + 4


def test_lws_group_spans_distinct_nodes_of_the_pool(
    deployed: dict[str, Any], apis: dict[str, ApiClient]
) -> None:
    (replica,) = deployed["lock"]["deployments"]["demo/llama"]["replicas"]
    api = apis[replica["cluster"]]
    pods = [
        p for p in serving_pods(api) if p.metadata.labels.get("modelplane.ai/deployment") == "llama"
    ]
    assert len(pods) == 2
    indexes = sorted(p.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"] for p in pods)
    assert indexes == ["0", "1"]  # set by the LWS webhook: a real group
    nodes = {p.spec.node_name for p in pods}
    assert len(nodes) == 2 and all(re.match(rf"{replica['cluster']}-h100-\d", n) for n in nodes)


def test_gateways_are_programmed_with_addresses(
    deployed: dict[str, Any], dev_fleet: devfleet.DevFleet
) -> None:
    report = devfleet.status(dev_fleet)
    for cluster in report["clusters"]:
        by_name = {g["name"]: g for g in cluster["gateways"]}
        workload = by_name["modelplane-system/inference-gateway"]
        assert workload["programmed"] and workload["addresses"] == [cluster["gatewayAddress"]]
    front = {g["name"]: g for g in report["clusters"][0]["gateways"]}[
        "modelplane-system/modelplane"
    ]
    assert front["programmed"] and front["addresses"][0].startswith("127.77.")


# --------------------------------------------------------------------------- changes follow


def set_qwen_replicas(fleet_dir: Path, replicas: int) -> None:
    path = fleet_dir / "models.yaml"
    text = path.read_text()
    text = re.sub(
        r"(name: qwen\n  namespace: demo\nspec:\n  replicas: )\d+", rf"\g<1>{replicas}", text
    )
    path.write_text(text)


def qwen_pods(apis: dict[str, ApiClient]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for cluster, api in apis.items():
        for pod in serving_pods(api):
            if pod.metadata.labels.get("modelplane.ai/deployment") == "qwen" and (
                pod.status.phase == "Running" and not pod.metadata.deletion_timestamp
            ):
                found.setdefault(cluster, []).append(pod.spec.node_name)
    return found


def claims(apis: dict[str, ApiClient]) -> int:
    return sum(
        len(
            CustomObjectsApi(api).list_namespaced_custom_object(
                "resource.k8s.io", "v1", NS, "resourceclaims"
            )["items"]
        )
        for api in apis.values()
    )


def test_scale_up_and_down_pods_and_claims_follow(
    deployed: dict[str, Any], deployer: fx.Deployer, fleet_dir: Path, apis: dict[str, ApiClient]
) -> None:
    set_qwen_replicas(fleet_dir, 5)
    fx.check(deployer.fleet(fleet_dir).up())
    fx.wait_for("5 qwen pods", lambda: sum(map(len, qwen_pods(apis).values())) == 5, 120)
    fx.wait_for("claims for 9 pods", lambda: claims(apis) == 9, 60)
    set_qwen_replicas(fleet_dir, 3)
    fx.check(deployer.fleet(fleet_dir).up())
    fx.wait_for("3 qwen pods", lambda: sum(map(len, qwen_pods(apis).values())) == 3, 120)
    # the garbage collector removes the claims of the deleted pods
    fx.wait_for("claims back to 7", lambda: claims(apis) == 7, 60)


def test_a_noexecute_taint_moves_the_replica(
    deployed: dict[str, Any], deployer: fx.Deployer, fleet_dir: Path, apis: dict[str, ApiClient]
) -> None:
    assert "dev-3" in qwen_pods(apis)
    path = fleet_dir / "fleet.yaml"
    text = path.read_text()
    tainted = text.replace(
        "  nodePools:\n  - {name: l4, className: l4, nodeCount: 3}",
        '  taints:\n  - {key: modelplane.ai/maintenance, value: "on", effect: NoExecute}\n'
        "  nodePools:\n  - {name: l4, className: l4, nodeCount: 3}",
    )
    assert tainted != text
    path.write_text(tainted)
    fx.check(deployer.fleet(fleet_dir).up())
    moved = fx.wait_for(
        "qwen off dev-3",
        lambda: (lambda p: p if "dev-3" not in p and sum(map(len, p.values())) == 3 else None)(
            qwen_pods(apis)
        ),
        120,
    )
    assert set(moved) == {"dev-1", "dev-2"}


def test_destroy_leaves_nothing_behind(
    deployed: dict[str, Any], deployer: fx.Deployer, fleet_dir: Path, apis: dict[str, ApiClient]
) -> None:
    run = deployer.fleet(fleet_dir).destroy()
    assert all(r.ok for r in run.results), [(r.stack, r.error) for r in run.results]

    def leftovers() -> list[str] | None:
        left = []
        for cluster, api in apis.items():
            core = CoreV1Api(api)
            left += [f"{cluster}/pod/{p.metadata.name}" for p in core.list_namespaced_pod(NS).items]
            custom = CustomObjectsApi(api)
            for group, version, plural in (
                ("resource.k8s.io", "v1", "resourceclaims"),
                ("resource.k8s.io", "v1", "resourceclaimtemplates"),
                ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
                ("apps", "v1", "deployments"),
                ("apps", "v1", "replicasets"),
                ("apps", "v1", "statefulsets"),
                ("gateway.networking.k8s.io", "v1", "httproutes"),
            ):
                items = custom.list_namespaced_custom_object(group, version, NS, plural)["items"]
                left += [f"{cluster}/{plural}/{i['metadata']['name']}" for i in items]
        return None if left else ["clean"]

    fx.wait_for("nothing left in the demo namespace", leftovers, 120)


def test_rwx_volumes_bind_for_model_caches(apis: dict[str, ApiClient]) -> None:
    """ModelCache PVCs (ReadWriteMany, the class specs/dev names) bind to the pre-made PVs."""
    core = CoreV1Api(apis["dev-3"])
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "cache-probe", "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "modelplane-dev-rwx",
            "resources": {"requests": {"storage": "100Gi"}},
        },
    }
    core.create_namespaced_persistent_volume_claim("default", claim)
    try:
        fx.wait_for(
            "the RWX claim bound",
            lambda: (
                core.read_namespaced_persistent_volume_claim("cache-probe", "default").status.phase
                == "Bound"
            ),
            60,
        )
    finally:
        core.delete_namespaced_persistent_volume_claim("cache-probe", "default")
