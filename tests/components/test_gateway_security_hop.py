"""Private workload gateways (issue 26 item 1): internal load balancers on GKE/EKS, the front
door's credentials required by every replica route, fail closed, no secret in a render.
Select with `pytest -k security`."""

from __future__ import annotations

import base64
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from modelplane import authz
from modelplane.api.inference_cluster import InferenceCluster
from modelplane.api.model_service import ModelService
from modelplane.components.load_balancers import (
    AWS_IDLE_TIMEOUT,
    INTERNAL_LB_ANNOTATIONS,
    LONGEST_REQUEST_SECONDS,
    duration_seconds,
)
from modelplane.components.model_deployment import ModelDeploymentComponent
from modelplane.components.model_service import EndpointInfo, ModelServiceComponent
from modelplane.components.workload import front_door
from modelplane.components.workload.targets import ClusterTarget
from tests.components.workload_helpers import (
    CLASSES,
    ROUTE,
    SMALL,
    deployment,
    load,
    replica,
)
from tests.pulumi_mocks import MockRun, contains_secret

ROOT = Path(__file__).resolve().parents[2]
KEY = "hop-key-3c9e51f0a7"
SECRET = "kubernetes:core/v1:Secret"
MIDDLEWARE = "kubernetes:traefik.io/v1alpha1:Middleware"
POLICY = "kubernetes:gateway.envoyproxy.io/v1alpha1:SecurityPolicy"
FILTER = "kubernetes:gateway.envoyproxy.io/v1alpha1:HTTPRouteFilter"


def cluster(serving_stack: str) -> InferenceCluster:
    return load(
        InferenceCluster,
        f"""
metadata: {{name: west}}
spec:
  cluster: {{source: Existing, existing: {{secretRef: {{name: west-kubeconfig}}}}}}
  servingStack: {serving_stack}
  nodePools:
  - {{name: mixed, className: mixed, nodeCount: 2}}
""",
    )


INSTALLED = cluster("{install: true}")
TRAEFIK = cluster("{install: false, gateway: {className: dev, controller: Traefik}}")
UNKNOWN = cluster("{install: false, gateway: {className: dev}}")


def deploy(
    spec: InferenceCluster, key: str | None = KEY, render_only: bool = False
) -> tuple[MockRun, Any]:
    run = MockRun()
    dep = deployment(SMALL)
    locked = [replica(dep, {"unified": "mixed"}, i) for i in range(2)]

    def program() -> ModelDeploymentComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        target = ClusterTarget.from_spec(
            spec,
            CLASSES,
            provider,
            gateway_address="gw.west.example.com",
            front_door_key=pulumi.Output.secret(key) if key is not None else None,
            render_only=render_only,
        )
        return ModelDeploymentComponent(dep.metadata.name, dep, locked, {"west": target})

    comp = run.run(program)
    return run, comp


def test_security_envoy_replica_routes_require_the_front_door() -> None:
    run, comp = deploy(INSTALLED)
    [secret] = run.of_type(SECRET)
    [policy] = run.of_type(POLICY)
    routes = run.of_type(ROUTE)
    assert len(routes) == 2
    # The htpasswd line: a secret input, never the key itself.
    assert contains_secret(secret.inputs["stringData"])
    assert secret.get("stringData")[".htpasswd"] == front_door.htpasswd(KEY)
    assert KEY not in front_door.htpasswd(KEY)
    assert policy.get("spec.basicAuth.users") == {
        "group": "",
        "kind": "Secret",
        "name": secret.get("metadata.name"),
    }
    assert sorted(t["name"] for t in policy.get("spec.targetRefs")) == sorted(
        r.get("metadata.name") for r in routes
    )
    for route in routes:
        # Never a route without its check; the credentials go no further than the gateway.
        assert route.depends_on(policy) and route.depends_on(secret)
        for rule in route.get("spec.rules"):
            assert rule["filters"][0] == {
                "type": "RequestHeaderModifier",
                "requestHeaderModifier": {"remove": ["Authorization"]},
            }
    assert all(e["url"] for e in run.value(comp.endpoints))


def test_security_traefik_replica_routes_run_the_basic_auth_middleware_first() -> None:
    run, _ = deploy(TRAEFIK)
    [secret] = run.of_type(SECRET)
    [middleware] = run.of_type(MIDDLEWARE)
    assert run.of_type(POLICY) == []
    assert set(secret.get("stringData")) == {"users"}
    assert secret.get("stringData")["users"] == front_door.htpasswd(KEY)
    name = middleware.get("metadata.name")
    assert middleware.get("spec.basicAuth") == {
        "secret": secret.get("metadata.name"),
        "removeHeader": True,
        "realm": "modelplane",
    }
    for route in run.of_type(ROUTE):
        assert route.depends_on(middleware)
        for rule in route.get("spec.rules"):
            assert rule["filters"][0] == {
                "type": "ExtensionRef",
                "extensionRef": {"group": "traefik.io", "kind": "Middleware", "name": name},
            }


@pytest.mark.parametrize(("spec", "key"), [(UNKNOWN, KEY), (INSTALLED, None)])
def test_security_fail_closed_no_check_no_route(spec: InferenceCluster, key: str | None) -> None:
    """A gateway modelplane cannot configure, or no key: no replica route, no url."""
    run, comp = deploy(spec, key)
    assert run.of_type(ROUTE) == []
    assert run.of_type(POLICY) == [] and run.of_type(MIDDLEWARE) == []
    assert [e["url"] for e in run.value(comp.endpoints)] == [None, None]
    # The workloads are still there (they serve as soon as a route may exist).
    assert run.of_type("kubernetes:apps/v1:Deployment")


def test_security_render_to_hand_off_keeps_routes_and_check_but_no_key() -> None:
    """A renderTo cluster: modelplane never learns its gateway's address (the front door does
    not come through it), so its stacks need no key; the hand-off still protects the routes:
    the check is there, its Secret is not (everything refused until the platform adds it)."""
    run, comp = deploy(INSTALLED, key=None, render_only=True)
    assert len(run.of_type(ROUTE)) == 2
    [policy] = run.of_type(POLICY)
    assert policy.get("spec.basicAuth.users.name") == "small-front-door"
    assert run.of_type(SECRET) == []
    for route in run.of_type(ROUTE):
        assert route.depends_on(policy)


def test_security_workload_gateway_controller_is_validated() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="controller"):
        cluster("{install: false, gateway: {className: dev, controller: Nginx}}")


def test_security_htpasswd_and_basic_credentials_agree() -> None:
    import hashlib

    line = front_door.htpasswd(KEY + "\n")
    user, _, hashed = line.strip().partition(":")
    token = front_door.basic_credentials(KEY).removeprefix("Basic ")
    sent_user, _, password = base64.b64decode(token).decode().partition(":")
    assert (user, sent_user) == ("modelplane", "modelplane")
    assert hashed == "{SHA}" + base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()


# --- the front door's side ----------------------------------------------------------------


CHAT = """
metadata: {name: chat, namespace: demo}
spec:
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: qwen}}
  - selector: {matchLabels: {provider: partner}}
"""
SERVICE_ENDPOINTS = [
    EndpointInfo(
        "qwen-a",
        "demo",
        "http://10.0.0.1/demo/qwen-a/",
        "/demo/qwen-a/",
        {"modelplane.ai/deployment": "qwen"},
        replica=True,
    ),
    EndpointInfo("partner", "demo", "https://10.9.0.1/", "/", {"provider": "partner"}),
]


def test_security_envoy_front_door_injects_the_credentials_from_a_secret() -> None:
    service = load(ModelService, CHAT)
    run = MockRun()

    def program() -> None:
        from modelplane.components.model_service import FrontDoor

        provider = k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests")
        ModelServiceComponent(
            service.key,
            service,
            SERVICE_ENDPOINTS,
            backend="EnvoyGateway",
            gateway_address="front.example.com",
            gateway=("modelplane", "modelplane-system"),
            front_door=FrontDoor(
                credential=pulumi.Output.secret(front_door.basic_credentials(KEY))
            ),
            opts=pulumi.ResourceOptions(providers=[provider]),
        )

    run.run(program)
    [secret] = run.of_type(SECRET)
    [route_filter] = run.of_type(FILTER)
    assert contains_secret(secret.inputs["stringData"])
    assert secret.get("stringData") == {"credential": front_door.basic_credentials(KEY)}
    injection = route_filter.get("spec.credentialInjection")
    assert injection["header"] == "Authorization" and injection["overwrite"] is True
    assert injection["credential"]["valueRef"]["name"] == secret.get("metadata.name")
    route = run.one(ROUTE)
    [rule] = route.get("spec.rules")
    inject = {
        "type": "ExtensionRef",
        "extensionRef": {
            "group": "gateway.envoyproxy.io",
            "kind": "HTTPRouteFilter",
            "name": route_filter.get("metadata.name"),
        },
    }
    # On the replica's backendRef only: an outside provider never gets the credentials.
    replica_ref, outside_ref = rule["backendRefs"]
    assert inject in replica_ref["filters"]
    assert inject not in outside_ref.get("filters", [])
    assert inject not in rule["filters"]
    assert route.depends_on(route_filter)


def test_security_traefik_front_door_sends_no_credentials_to_an_outside_provider() -> None:
    from modelplane.components.model_service import FrontDoor, service_route_manifest

    route = service_route_manifest(
        load(ModelService, CHAT),
        SERVICE_ENDPOINTS,
        "Traefik",
        ("modelplane", "modelplane-system"),
        FrontDoor(authz_address="http://authz/"),
    )
    assert route is not None
    # ... nor the caller's name (L7: an outside provider learns no internal caller).
    remove = {
        "type": "RequestHeaderModifier",
        "requestHeaderModifier": {"remove": ["Authorization", "x-modelplane-caller"]},
    }
    replica_ref, outside_ref = route["spec"]["rules"][0]["backendRefs"]
    assert remove not in replica_ref["filters"] and remove in outside_ref["filters"]


@pytest.fixture
def authz_url(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    path = tmp_path / "callers.json"
    server = authz.serve(path, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", path
    finally:
        server.shutdown()
        server.server_close()


def _ask(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}


@pytest.mark.parametrize(
    ("table", "headers", "status", "caller"),
    [
        # spec.auth: a caller's key in, its name and the front door's credentials out.
        ({"callers": {authz.key_hash("k1"): "dev"}}, {"x-api-key": "k1"}, 200, "dev"),
        ({"callers": {authz.key_hash("k1"): "dev"}}, {}, 401, None),
        # No spec.auth: everyone in as `anonymous`, still with the credentials.
        ({"callers": {}, "open": True}, {}, 200, "anonymous"),
        ({"callers": {}, "open": True}, {"x-modelplane-caller": "ops"}, 200, "anonymous"),
    ],
)
def test_security_authz_answers_with_the_front_door_credentials(
    authz_url: tuple[str, Path],
    table: dict[str, Any],
    headers: dict[str, str],
    status: int,
    caller: str | None,
) -> None:
    url, path = authz_url
    credentials = front_door.basic_credentials(KEY)
    path.write_text(json.dumps({**table, "frontDoor": credentials}))
    got, answer = _ask(url, headers)
    assert got == status
    assert answer.get("x-modelplane-caller") == caller
    assert answer.get("authorization") == (credentials if status == 200 else None)


# --- rendered GKE/EKS fleets ----------------------------------------------------------------


@pytest.fixture(scope="module")
def multicloud(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from modelplane.render import render_fleet

    out = tmp_path_factory.mktemp("hop-render")
    saved = os.environ.get("MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY")
    os.environ["MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY"] = KEY
    try:
        render_fleet(ROOT / "specs" / "multicloud", out)
    finally:
        if saved is None:
            os.environ.pop("MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY", None)
        else:
            os.environ["MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY"] = saved
    return out


def _docs(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    return [(p, yaml.safe_load(p.read_text())) for p in sorted(root.glob("*/manifests/*.yaml"))]


def test_security_render_gke_eks_workload_gateways_are_internal(multicloud: Path) -> None:
    gateways = {
        p.name.split("-k8s_")[0]: d
        for p, d in _docs(multicloud)
        if d["kind"] == "Gateway" and d["metadata"]["name"] == "inference-gateway"
    }
    assert (
        gateways["gke-us-central"]["spec"]["infrastructure"]["annotations"]
        == (INTERNAL_LB_ANNOTATIONS["GKE"])
    )
    eks = gateways["eks-us-west"]["spec"]["infrastructure"]["annotations"]
    assert INTERNAL_LB_ANNOTATIONS["EKS"].items() <= eks.items()
    # The platform's network: no load-balancer annotation (only the EnvoyProxy reference).
    assert "annotations" not in gateways["onprem-east"]["spec"]["infrastructure"]


def test_cloud_render_multicloud_gateways_outlast_the_longest_request(multicloud: Path) -> None:
    """Every gateway `modelplane render specs/multicloud` writes holds a silent request for
    the longest request (modelplane/components/load_balancers.py): the EKS Classic LB's idle timeout,
    and every Envoy listener's stream idle timeout (Envoy's default is 5 minutes)."""
    docs = _docs(multicloud)
    gateways = {
        p.name.split("-k8s_")[0]: d
        for p, d in docs
        if d["kind"] == "Gateway" and d["metadata"]["name"] == "inference-gateway"
    }
    assert set(gateways) == {"gke-us-central", "eks-us-west", "onprem-east"}
    eks = gateways["eks-us-west"]["spec"]["infrastructure"]["annotations"]
    assert int(eks[AWS_IDLE_TIMEOUT]) >= LONGEST_REQUEST_SECONDS
    policies = {p.name.split("-k8s_")[0]: d for p, d in docs if d["kind"] == "ClientTrafficPolicy"}
    assert set(policies) == set(gateways)  # every Envoy workload gateway, the installed stack's
    for cluster_name, policy in policies.items():
        assert policy["spec"]["targetRefs"][0]["name"] == "inference-gateway", cluster_name
        http = policy["spec"]["timeout"]["http"]
        assert duration_seconds(http["streamIdleTimeout"]) >= LONGEST_REQUEST_SECONDS
    # The front door is Traefik on GKE: a passthrough LB (no idle timeout to raise) and no
    # response timeout in Traefik; on EKS its Service would carry the idle timeout too.
    [front_door] = [
        d for p, d in docs if d["kind"] == "Gateway" and d["metadata"]["name"] == "modelplane"
    ]
    assert front_door["spec"]["gatewayClassName"] == "traefik"


def test_security_render_has_the_checks_and_no_secret_value(multicloud: Path) -> None:
    docs = _docs(multicloud)
    routes = {
        (p.name.split("-k8s_")[0], d["metadata"]["namespace"], d["metadata"]["name"])
        for p, d in docs
        if d["kind"] == "HTTPRoute" and p.parent.parent.name.startswith("deploy-")
    }
    assert routes
    protected = set()
    for path, doc in docs:
        if doc["kind"] == "SecurityPolicy":
            cluster_name = path.name.split("-k8s_")[0]
            ns = doc["metadata"]["namespace"]
            secret = path.parent / f"{cluster_name}-k8s_secret_{ns}_{doc['metadata']['name']}.yaml"
            assert yaml.safe_load(secret.read_text())["stringData"] == {".htpasswd": "[secret]"}
            protected |= {(cluster_name, ns, t["name"]) for t in doc["spec"]["targetRefs"]}
    assert protected == routes  # every replica route on GKE/EKS, and only those
    leaks = (KEY, front_door.htpasswd(KEY).strip(), front_door.basic_credentials(KEY))
    for path in multicloud.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not [v for v in leaks if v in text], f"the front-door key leaked into {path}"
    callers = multicloud / "gateway" / "manifests"
    [table] = [p for p in callers.glob("*_secret_modelplane-system_modelplane-callers.yaml")]
    assert yaml.safe_load(table.read_text())["stringData"] == {"callers.json": "[secret]"}


def test_cloud_render_multicloud_caches_are_sized_per_cloud(multicloud: Path) -> None:
    """`render specs/multicloud`: llama-70b's Filestore instance on GKE is sized for its
    1,000 MiB/s hint (4 TiB of Zonal), the EFS volume on EKS is the spec's size."""
    claims = {
        p.name.split("-k8s_")[0]: d["spec"]
        for p, d in _docs(multicloud)
        if d["kind"] == "PersistentVolumeClaim" and p.parent.parent.name.endswith("llama-70b")
    }
    assert claims["gke-us-central"]["storageClassName"] == "modelplane-rwx"
    assert claims["gke-us-central"]["resources"]["requests"]["storage"] == "4096Gi"
    assert claims["eks-us-west"]["storageClassName"] == "modelplane-rwx-efs"
    assert claims["eks-us-west"]["resources"]["requests"]["storage"] == "300Gi"
