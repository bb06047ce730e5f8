"""The driver against a real kube-apiserver on 127.0.0.1 (issue 6).

An Existing cluster whose kubeconfig is the dev cluster's, given as a secret (the environment
variable ``MODELPLANE_SECRET_DEV_KUBE_KUBECONFIG``, architecture.md "Secrets"). Every object
the stacks create is read back with the kubernetes Python client. The dev cluster has no
nodes or scheduler: the API server accepts, defaults, stores and deletes objects, which is
exactly what is under test (workloads skip Pulumi's readiness await). kube-controller-manager
runs beside it, so Pulumi's foreground deletions are completed by the real garbage collector
(pods that run are the dev fleet's business: tests/devfleet/test_devfleet.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, ApiException, CoreV1Api, CustomObjectsApi

from modelplane.driver.fleet import Fleet
from modelplane.driver.results import Outcome, RunResult
from tests.fixtures.apiserver import api_client, running_dev_cluster
from tests.fixtures.engine import bootstrapped_engine, engine_env
from tests.spec_docs import as_yaml, gpu_class

pytestmark = [pytest.mark.engine, pytest.mark.apiserver]

PASSPHRASE = "apiserver-test-passphrase"
NS = "serve"

# group, version, plural, namespaced
KINDS: dict[str, tuple[str, str, str, bool]] = {
    "Deployment": ("apps", "v1", "deployments", True),
    "Service": ("", "v1", "services", True),
    "HTTPRoute": ("gateway.networking.k8s.io", "v1", "httproutes", True),
    "ResourceClaimTemplate": ("resource.k8s.io", "v1", "resourceclaimtemplates", True),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", True),
    "Gateway": ("gateway.networking.k8s.io", "v1", "gateways", True),
    "GatewayClass": ("gateway.networking.k8s.io", "v1", "gatewayclasses", False),
    "InferencePool": ("inference.networking.k8s.io", "v1", "inferencepools", True),
}
MANAGED = "app.kubernetes.io/managed-by=modelplane"

CLASS = as_yaml(gpu_class("gpu8", 8, product="NVIDIA H100", memory="80Gi"))


def cluster_yaml(name: str, region: str, nodes: int = 8, taint: str = "") -> str:
    taints = f"  taints:\n  - {taint}\n" if taint else ""
    return f"""apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: {name}
  labels: {{modelplane.ai/region: {region}}}
spec:
  cluster:
    source: Existing
    existing:
      secretRef: {{name: dev-kube}}
  servingStack: {{install: false}}
  nodePools:
  - {{name: gpu, className: gpu8, nodeCount: {nodes}}}
{taints}"""


def workers(tensor: int, image: str, *, pipeline: int = 1) -> str:
    return f"""    topology: {{tensor: {tensor}, pipeline: {pipeline}}}
    resources: {{cpu: "4", memory: 16Gi}}
    template:
      spec:
        containers:
        - name: engine
          image: {image}
          args: ["--model=Qwen/Qwen2.5-0.5B-Instruct"]
"""


def deployments_yaml(
    *, single_replicas: int = 1, image: str = "vllm/vllm-openai:v0.11.0", selector: str = ""
) -> str:
    sel = (
        f"  clusterSelector: {{matchLabels: {{modelplane.ai/region: {selector}}}}}\n"
        if selector
        else ""
    )
    role = (
        workers(2, image).replace("\n    ", "\n      ").replace("    topology", "      topology", 1)
    )
    return f"""apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: single
  namespace: {NS}
spec:
  replicas: {single_replicas}
{sel}  workers:
{workers(1, image)}---
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: multi
  namespace: {NS}
spec:
  replicas: 1
{sel}  workers:
{workers(8, image, pipeline=2)}---
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: pd
  namespace: {NS}
spec:
  replicas: 1
{sel}  prefill:
    workers:
{role}  decode:
    workers:
{role}---
apiVersion: modelplane.ai/v1alpha1
kind: ModelService
metadata:
  name: chat
  namespace: {NS}
spec:
  endpoints:
  - selector: {{matchLabels: {{modelplane.ai/deployment: single}}}}
  - selector: {{matchLabels: {{modelplane.ai/deployment: multi}}}}
  - selector: {{matchLabels: {{modelplane.ai/deployment: pd}}}}
"""


GATEWAY = """apiVersion: modelplane.ai/v1alpha1
kind: InferenceGateway
metadata:
  name: default
spec:
  backend: Traefik
  cluster: {inferenceClusterRef: dev}
"""


@pytest.fixture(scope="module")
def engine_ready() -> Path:
    return bootstrapped_engine()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Any]:
    """A dev cluster of this test's own (so objects of one test never meet another's)."""
    with running_dev_cluster(tmp_path / "dev-cluster") as dev:
        yield dev


@pytest.fixture
def api(cluster: Any) -> Iterator[ApiClient]:
    with contextlib.closing(api_client(cluster)) as client:
        yield client


def make_env(tmp_path: Path, kubeconfig: str) -> dict[str, str]:
    return engine_env(tmp_path, PASSPHRASE, MODELPLANE_SECRET_DEV_KUBE_KUBECONFIG=kubeconfig)


def check(run: RunResult) -> RunResult:
    failed = {r.stack: r.error or r.note for r in run.results if not r.ok}
    assert not failed, f"{run.operation} failed: {failed}"
    return run


def objects(
    api: ApiClient, namespace: str = NS, unserved: list[str] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """Every modelplane-managed object of the kinds above: (kind, name) -> object.
    ``unserved`` collects the kinds the API server answered 404 for."""
    custom = CustomObjectsApi(api)
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for kind, (group, version, plural, namespaced) in KINDS.items():
        try:
            if not group:
                services = CoreV1Api(api).list_namespaced_service(namespace, label_selector=MANAGED)
                data = api.sanitize_for_serialization(services)
            elif namespaced:
                data = custom.list_namespaced_custom_object(
                    group, version, namespace, plural, label_selector=MANAGED
                )
            else:
                data = custom.list_cluster_custom_object(
                    group, version, plural, label_selector=MANAGED
                )
        except ApiException as exc:
            if exc.status == 404:
                if unserved is not None:
                    unserved.append(kind)
                continue
            raise
        for item in data.get("items", []):
            found[(kind, item["metadata"]["name"])] = item
    return found


def generations(objs: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], str]:
    return {key: o["metadata"]["resourceVersion"] for key, o in objs.items()}


def engine_images(obj: dict[str, Any]) -> set[str]:
    """The images of the `engine` containers of a Deployment or LeaderWorkerSet."""
    spec = obj.get("spec", {})
    templates = [spec.get("template")]
    lws = spec.get("leaderWorkerTemplate") or {}
    templates += [lws.get("leaderTemplate"), lws.get("workerTemplate")]
    return {
        c["image"]
        for t in templates
        if t
        for c in t.get("spec", {}).get("containers", [])
        if c.get("name") == "engine"
    }


def write_fleet(fleet_dir: Path, clusters: str, deployments: str) -> None:
    fleet_dir.mkdir(parents=True, exist_ok=True)
    (fleet_dir / "fleet.yaml").write_text(CLASS + "---\n" + clusters + "---\n" + GATEWAY)
    (fleet_dir / "models.yaml").write_text(deployments)


def test_apply_update_destroy_on_a_real_api_server(
    tmp_path: Path, engine_ready: Path, cluster: Any, api: ApiClient
) -> None:
    env = make_env(tmp_path, cluster.kubeconfig_text)
    fleet_dir = tmp_path / "fleet"
    write_fleet(fleet_dir, cluster_yaml("dev", "dev"), deployments_yaml())

    # up: every object is on the server with the expected spec
    run = check(Fleet.load(fleet_dir, env=env).up())
    assert {r.stack: r.outcome for r in run.results} == {
        "cluster-dev": Outcome.SUCCEEDED,
        "deploy-serve-multi": Outcome.SUCCEEDED,
        "deploy-serve-pd": Outcome.SUCCEEDED,
        "deploy-serve-single": Outcome.SUCCEEDED,
        "gateway": Outcome.SUCCEEDED,
    }
    expected = {"Deployment", "Service", "HTTPRoute", "ResourceClaimTemplate", "LeaderWorkerSet"}
    # A custom resource's list can lag its creation on a busy API server (a CI run once
    # listed no LeaderWorkerSet right after a successful `up`): poll briefly, then say which
    # kinds were not served (404) and which were served empty.
    deadline = time.monotonic() + 30
    while True:
        unserved: list[str] = []
        objs = objects(api, unserved=unserved)
        kinds = {kind for kind, _ in objs}
        if expected <= kinds or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert expected <= kinds, f"missing {sorted(expected - kinds)}; not served: {unserved}"
    single = [
        o for (k, _), o in objs.items() if k == "Deployment" and "single" in o["metadata"]["name"]
    ]
    assert len(single) == 1
    pod = single[0]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "vllm/vllm-openai:v0.11.0"
    assert pod["nodeSelector"]["modelplane.ai/pool"] == "gpu"
    claims = pod.get("resourceClaims") or []
    assert claims and claims[0].get("resourceClaimTemplateName")
    rct = objs[("ResourceClaimTemplate", claims[0]["resourceClaimTemplateName"])]
    request = rct["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["count"] == 1
    lws = [o for (k, _), o in objs.items() if k == "LeaderWorkerSet"]
    assert any(o["spec"]["leaderWorkerTemplate"]["size"] == 2 for o in lws), lws
    pd = {
        o["metadata"]["name"]
        for (k, _), o in objs.items()
        if k in ("Deployment", "LeaderWorkerSet") and "pd" in o["metadata"]["name"]
    }
    assert any("prefill" in n for n in pd) and any("decode" in n for n in pd), pd
    routes = [o for (k, n), o in objs.items() if k == "HTTPRoute" and n == "chat"]
    assert routes, sorted(n for k, n in objs if k == "HTTPRoute")

    # a second up changes nothing (forced through the engine too)
    fleet = Fleet.load(fleet_dir, env=env)
    again = check(fleet.up())
    assert {r.outcome for r in again.results} == {Outcome.UNCHANGED}
    before_objs = objects(api)
    before = generations(before_objs)
    forced = check(fleet.up(all_stacks=True))
    assert not any(r.changed for r in forced.results), [
        (r.stack, r.changes) for r in forced.results
    ]
    assert generations(objects(api)) == before

    # scale single to 2 and change the image: exactly the affected objects change (all at
    # once: this API server has no kubelet, no pod ever becomes Ready for a rollout to wait on)
    (fleet_dir / "models.yaml").write_text(
        deployments_yaml(single_replicas=2, image="vllm/vllm-openai:v0.12.0")
    )
    run = check(Fleet.load(fleet_dir, env=env).up(strategy="AllAtOnce"))
    after_objs = objects(api)
    after = generations(after_objs)
    added = set(after) - set(before)
    changed = {k for k in set(before) & set(after) if before[k] != after[k]}
    assert not set(before) - set(after)
    assert added and all("single" in name for _, name in added), added
    before_objs_images = {k: engine_images(o) for k, o in before_objs.items()}
    engines = {k for k, images in before_objs_images.items() if images}
    assert {k for k in changed if k[0] in ("Deployment", "LeaderWorkerSet")} == engines
    assert all(k in engines or k == ("HTTPRoute", "chat") for k in changed), changed
    for key in engines | {k for k in added if engine_images(after_objs[k])}:
        assert engine_images(after_objs[key]) == {"vllm/vllm-openai:v0.12.0"}, key
    epp = [k for k in before_objs if k[0] == "Deployment" and k[1].endswith("-epp")]
    assert epp and not set(epp) & changed  # the endpoint picker does not run the engine

    # destroy: nothing left on the server, no resources in any stack
    fleet = Fleet.load(fleet_dir, env=env)
    check(fleet.destroy())
    assert objects(api) == {}
    for r in run.results:
        assert fleet.resources(r.stack) == []


def test_moving_a_replica_between_clusters(
    tmp_path: Path, engine_ready: Path, cluster: Any, api: ApiClient
) -> None:
    """Two InferenceClusters on one API server; a NoExecute taint moves the replica."""
    env = make_env(tmp_path, cluster.kubeconfig_text)
    fleet_dir = tmp_path / "fleet"
    one = (
        "apiVersion: modelplane.ai/v1alpha1\nkind: ModelDeployment\nmetadata:\n  name: single\n"
        f"  namespace: {NS}\nspec:\n  replicas: 1\n  workers:\n"
        + workers(1, "vllm/vllm-openai:v0.11.0")
    )
    clusters = cluster_yaml("dev", "east") + "---\n" + cluster_yaml("west", "west")
    write_fleet(fleet_dir, clusters, one)
    check(Fleet.load(fleet_dir, env=env).up())
    lock1 = Fleet.load(fleet_dir, env=env).previous.replicas_of(f"{NS}/single")
    assert [r.cluster for r in lock1] == ["dev"]
    before = objects(api)
    old_name = lock1[0].name
    assert ("Deployment", f"{old_name}-unified") in before or any(old_name in n for _, n in before)

    tainted = (
        cluster_yaml(
            "dev", "east", taint='{key: modelplane.ai/maintenance, value: "on", effect: NoExecute}'
        )
        + "---\n"
        + cluster_yaml("west", "west")
    )
    write_fleet(fleet_dir, tainted, one)
    run = check(Fleet.load(fleet_dir, env=env).up())
    lock2 = Fleet.load(fleet_dir, env=env).previous.replicas_of(f"{NS}/single")
    assert [r.cluster for r in lock2] == ["west"]
    new_name = lock2[0].name
    deploy = run.result("deploy-serve-single")
    assert deploy.count("create") > 0 and deploy.count("delete") > 0
    after = objects(api)
    assert not any(old_name in n for _, n in after), sorted(after)
    assert any(new_name in n for _, n in after), sorted(after)
    check(Fleet.load(fleet_dir, env=env).destroy())
    assert objects(api) == {}
