"""modelplane's scheduler against Kubernetes' on generated fleets (issue 15).

Per seed: a random set of GPU classes and pools on one dev-fleet cluster (kwok nodes and DRA
ResourceSlices generated from the classes), and random single-node deployments, usually more
than fit. modelplane schedules them; then the very workloads modelplane generates (its
ResourceClaimTemplates and Deployments) are created:

- the replicas modelplane placed, in namespace ``placed-<seed>``: kube-scheduler must bind
  every pod on the pool modelplane chose (a pod left Pending is a disagreement);
- the replicas modelplane reported unplaced, in ``forced-<seed>``, without the pool pin:
  kube-scheduler must fail to bind them with the capacity that is left (a forced pod that
  binds means modelplane left capacity unused: a disagreement).

A disagreement names which side is wrong and why.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api

from modelplane.api.fleet import FleetSpec
from modelplane.api.placement_lock import LockedReplica
from modelplane.devcluster.rest import KubeRest, KubeRestError
from modelplane.devfleet import fleet as devfleet
from modelplane.devfleet.nodes import SYSTEM_POOL, cluster_nodes
from modelplane.scheduler import schedule
from tests.factories import cluster, deployment, gpu_device, inference_class, pool, request
from tests.fixtures.devfleet import api_client, prerequisites

pytestmark = [pytest.mark.devfleet]

SEEDS = range(12)  # 3 per cluster: the shapes vary enough, and each seed costs ~25 s
WORKERS = 4  # seeds run on this many dev-fleet clusters at once
CLUSTER = "dev-1"
MEM = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{}Gi")) >= 0'
# Generous (binding takes seconds): a pod still unbound after it is the scheduler's answer,
# not a slow machine's.
BIND_TIMEOUT = 120.0
SETTLE = 4.0  # how long a forced pod must stay unbound
FORCED_POOL = "any-pool"


@dataclass(frozen=True)
class Generated:
    spec: FleetSpec
    description: str


def generate(seed: int) -> Generated:
    rng = random.Random(seed)
    classes, pools = [], []
    for i in range(rng.randint(1, 3)):
        gpus = rng.choice([1, 2, 4, 8])
        memory = rng.choice([24, 80, 141])
        name = f"c{i}-{gpus}x{memory}"
        classes.append(inference_class(name, devices=[gpu_device(gpus, memory=f"{memory}Gi")]))
        pools.append(pool(f"p{i}", name, nodes=rng.randint(1, 3)))
    deployments = []
    for j in range(rng.randint(2, 4)):
        tensor = rng.choice([1, 2, 4, 8])
        need = rng.choice([16, 40, 80])
        deployments.append(
            deployment(
                f"m{j}",
                replicas=rng.randint(1, 4),
                namespace="gen",
                tensor=tensor,
                devices=[request("gpu", None, MEM.format(need))],
            )
        )
    spec = FleetSpec(
        classes={c.metadata.name: c for c in classes},
        clusters={CLUSTER: cluster(CLUSTER, pools)},
        deployments={d.key: d for d in deployments},
    )
    spec.sort()
    description = (
        f"pools {[(p['name'], p['className'], p['nodeCount']) for p in pools]}, deployments "
        + str(
            [
                (d.metadata.name, d.spec.replicas, d.spec.roles["unified"].workers.topology.tensor)
                for d in deployments
            ]
        )
    )
    return Generated(spec, description)


@pytest.fixture(scope="module")
def one_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[devfleet.DevFleet]:
    prerequisites()
    state = tmp_path_factory.mktemp("crosscheck-fleet")
    fleet = devfleet.up(state, clusters=WORKERS, specs=None)
    try:
        yield fleet
    finally:
        devfleet.down(state)


def _reset_nodes(rest: KubeRest, generated: Generated, pod_range: str) -> list[str]:
    """Replace every GPU node and slice with the generated pools' (the system node stays)."""
    for slice_ in rest.get("/apis/resource.k8s.io/v1/resourceslices")["items"]:
        rest.request(
            "DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{slice_['metadata']['name']}"
        )
    for node in rest.get("/api/v1/nodes")["items"]:
        if node["metadata"]["labels"].get("modelplane.ai/pool") != SYSTEM_POOL:
            rest.request("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
    sim = cluster_nodes(
        CLUSTER,
        generated.spec.clusters[CLUSTER],
        generated.spec.classes,
        pod_range,
        system_nodes=0,
    )
    for manifest in sim.device_classes:
        rest.apply(manifest, field_manager="crosscheck")
    for node in sim.nodes:
        for _ in range(50):  # the old node of the same name may still be terminating
            try:
                rest.request("POST", "/api/v1/nodes", body=node)
                break
            except KubeRestError as exc:
                if exc.status != 409:
                    raise
                time.sleep(0.2)
    for slice_ in sim.slices:
        rest.apply(slice_, field_manager="crosscheck")
    return sim.node_names()


def _workloads(
    spec: FleetSpec, key: str, replica: LockedReplica, namespace: str, pin: bool
) -> list[dict[str, Any]]:
    """modelplane's own ResourceClaimTemplate and Deployment for the replica, in ``namespace``."""
    from modelplane.components.model_deployment import replica_manifests
    from modelplane.components.workload.targets import ClusterTarget

    target = ClusterTarget.from_spec(
        spec.clusters[CLUSTER],
        spec.classes,
        None,  # type: ignore[arg-type]
    )
    if not pin:
        # An unplaced replica has no pool: its claim asks for the same devices (class and CEL
        # selectors) from any node. Build it from the first class whose device kind matches
        # (with room enough); when no class matches, no node can hold it: nothing to force.
        for klass in spec.classes.values():
            gpu = klass.spec.devices[0]
            devices = dict(target.pool_devices)
            devices[FORCED_POOL] = (gpu.model_copy(update={"count": 64}),)
            candidate = replace(target, pool_devices=devices)
            try:
                replica_manifests(spec.deployments[key], replica, candidate)
            except ValueError:
                continue
            target = candidate
            break
        else:
            return []
    out = []
    for manifest in replica_manifests(spec.deployments[key], replica, target):
        if manifest["kind"] not in ("ResourceClaimTemplate", "Deployment"):
            continue
        manifest["metadata"]["namespace"] = namespace
        if manifest["kind"] == "Deployment":
            pod = manifest["spec"]["template"]["spec"]
            if not pin:
                pod.get("nodeSelector", {}).pop("modelplane.ai/pool", None)
        out.append(manifest)
    return out


def _create(rest: KubeRest, manifests: list[dict[str, Any]], namespace: str) -> None:
    rest.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        field_manager="crosscheck",
    )
    for manifest in manifests:
        rest.apply(manifest, field_manager="crosscheck")


def _pods(core: CoreV1Api, namespace: str) -> list[Any]:
    return list(core.list_namespaced_pod(namespace).items)


def _unschedulable_reason(pod: Any) -> str:
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return f"{condition.reason}: {condition.message}"
    return "not scheduled yet"


def check_seed(fleet: devfleet.DevFleet, seed: int, physical: str) -> str | None:
    """Run one seed on the dev-fleet cluster ``physical``; the disagreements, or None."""
    generated = generate(seed)
    result = schedule(generated.spec)
    target = fleet.cluster(physical)
    rest = target.rest()
    api: ApiClient = api_client(target)
    core = CoreV1Api(api)
    try:
        _reset_nodes(rest, generated, target.addresses.pod_range)
        placed_ns, forced_ns = f"placed-{seed}", f"forced-{seed}"
        placed: list[dict[str, Any]] = []
        expected_pool: dict[str, str] = {}
        unplaced: list[dict[str, Any]] = []
        for key, report in result.report.items():
            for replica in report.replicas:
                placed += _workloads(generated.spec, key, replica, placed_ns, pin=True)
                expected_pool[replica.name] = replica.pools["unified"]
            for extra in range(report.unplaced):
                ghost = LockedReplica.model_construct(
                    name=f"{key.split('/')[1]}-unplaced-{extra}",
                    cluster=CLUSTER,
                    index=1000 + extra,
                    pools={"unified": FORCED_POOL},
                )
                unplaced += _workloads(generated.spec, key, ghost, forced_ns, pin=False)
        _create(rest, placed, placed_ns)
        problems: list[str] = []
        deadline = time.monotonic() + BIND_TIMEOUT
        want = len(expected_pool)
        while time.monotonic() < deadline:
            pods = _pods(core, placed_ns)
            if len(pods) == want and all(p.spec.node_name for p in pods):
                break
            time.sleep(0.3)
        pods = _pods(core, placed_ns)
        nodes = {n.metadata.name: n.metadata.labels for n in core.list_node().items}
        if len(pods) != want:
            problems.append(f"{len(pods)} of {want} placed pods were created")
        for pod in pods:
            replica = pod.metadata.labels["modelplane.ai/replica"]
            if not pod.spec.node_name:
                problems.append(
                    f"modelplane placed {replica} on {expected_pool[replica]} but "
                    f"kube-scheduler cannot bind it ({_unschedulable_reason(pod)}): "
                    "modelplane's scheduler over-commits"
                )
            elif nodes[pod.spec.node_name]["modelplane.ai/pool"] != expected_pool[replica]:
                problems.append(f"{replica} bound outside its pool: {pod.spec.node_name}")
        if unplaced:
            _create(rest, unplaced, forced_ns)
            time.sleep(SETTLE)
            for pod in _pods(core, forced_ns):
                if pod.spec.node_name:
                    problems.append(
                        f"modelplane left {pod.metadata.labels['modelplane.ai/replica']} unplaced "
                        f"but kube-scheduler bound it on {pod.spec.node_name}: modelplane's "
                        "scheduler leaves usable capacity"
                    )
        if problems:
            return f"seed {seed} ({generated.description}):\n" + "\n".join(problems)
        return None
    finally:
        namespaces = (f"placed-{seed}", f"forced-{seed}")
        for ns in namespaces:
            try:
                rest.request("DELETE", f"/api/v1/namespaces/{ns}")
            except KubeRestError:
                pass
        # The next seed reuses node names: wait until every pod and claim of this one is gone.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            left = 0
            for ns in namespaces:
                try:
                    rest.get(f"/api/v1/namespaces/{ns}")
                    left += 1
                except KubeRestError:
                    pass
            if not left:
                break
            time.sleep(0.5)
        api.close()


def test_modelplane_and_kube_scheduler_agree_on_generated_fleets(
    one_cluster: devfleet.DevFleet,
) -> None:
    """Every seed in SEEDS; cluster k of the dev fleet takes seeds k, k+WORKERS, ..."""

    def worker(k: int) -> list[str]:
        found = []
        for seed in SEEDS:
            if seed % WORKERS == k:
                problem = check_seed(one_cluster, seed, f"dev-{k + 1}")
                if problem:
                    found.append(problem)
        return found

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        problems = [p for found in pool.map(worker, range(WORKERS)) for p in found]
    assert not problems, f"{len(problems)} of {len(SEEDS)} seeds disagree:\n" + "\n\n".join(
        problems
    )
