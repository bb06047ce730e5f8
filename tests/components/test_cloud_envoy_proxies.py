"""Two Envoy proxies per Envoy Gateway Gateway (cloud review m8).

Envoy Gateway runs one proxy pod per Gateway by default, so every replica of a cluster (and, on
Envoy Gateway, the front door) went through one pod on a 1..2-node system pool. Each Gateway of
Envoy Gateway that modelplane installs now names an EnvoyProxy in
``spec.infrastructure.parametersRef`` (envoyproxy/gateway v1.8, "Customize EnvoyProxy"): two
replicas, preferred anti-affinity on the node, a zone spread, and a budget
(modelplane/components/serving_stack.py ``envoy_proxy_manifest``). These tests pin the rendered objects
(Pulumi's mocks, and `modelplane render specs/multicloud`) and check them against the v1.8.3
EnvoyProxy and Gateway API v1.5.1 CRDs. `pytest -k "cloud"`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.components.cloud import eks_args, gke
from modelplane.components.inference_cluster import InferenceClusterComponent
from modelplane.components.load_balancers import AWS_IDLE_TIMEOUT, INTERNAL_LB_ANNOTATIONS
from modelplane.components.serving_stack import PROXY_REPLICAS
from tests import k8s_schemas
from tests.components.cluster_helpers import (
    EKS_CLASSES,
    MNG,
    NODE_POOL,
    RELEASE,
    eks_cluster,
    existing_cluster,
    existing_run,
    gke_class,
    gke_cluster,
    release,
)
from tests.components.test_cloud_load_balancers import front_door
from tests.pulumi_mocks import MockRun, Registered

ROOT = Path(__file__).resolve().parents[2]
ENVOY_PROXY = "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy"
GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
NAMESPACE = "modelplane-system"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"

# What Envoy Gateway v1.8.3 gives a proxy pod (api/v1alpha1/shared_types.go defaults: the envoy
# container 100m / 512Mi, the shutdown manager 10m / 32Mi), and the labels it selects them by
# (internal/infrastructure/kubernetes/proxy: EnvoyAppLabel + the owning-gateway labels).
PROXY_CPU_MILLI = 100 + 10
PROXY_MEMORY_MI = 512 + 32
# The system pools' machines: (vCPU, memory MiB) of GKE's e2-standard-4 (16 GB) and EC2's
# m6i.xlarge (16 GiB).
SYSTEM_MACHINES = {"e2-standard-4": (4, 16 * 1000**3 // 2**20), "m6i.xlarge": (4, 16 * 1024)}


def proxy_pods(gateway: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "envoy",
        "app.kubernetes.io/component": "proxy",
        "app.kubernetes.io/managed-by": "envoy-gateway",
        "gateway.envoyproxy.io/owning-gateway-name": gateway,
        "gateway.envoyproxy.io/owning-gateway-namespace": NAMESPACE,
    }


def _manifest(resource: Registered) -> dict[str, Any]:
    return {k: resource.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}


def _gke() -> MockRun:
    return MockRun.of(
        lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": gke_class()})
    )


def _eks() -> MockRun:
    return MockRun.of(lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES))


def _render_to(tmp: Path) -> MockRun:
    cluster = existing_cluster({"renderTo": str(tmp / "rendered")})
    return MockRun.of(
        lambda: InferenceClusterComponent("on-prem", cluster, {"h100-gke": gke_class()})
    )


EKS_WORKLOAD = {**INTERNAL_LB_ANNOTATIONS["EKS"], AWS_IDLE_TIMEOUT: "3600"}

# case: (the run, the Gateway, its load balancer's annotations -- what the Gateway still says)
PROXIED: dict[str, tuple[Callable[[Path], MockRun], str, dict[str, str] | None]] = {
    "gke-workload": (lambda _: _gke(), "inference-gateway", INTERNAL_LB_ANNOTATIONS["GKE"]),
    "eks-workload": (lambda _: _eks(), "inference-gateway", EKS_WORKLOAD),
    "existing-workload": (lambda _: existing_run(), "inference-gateway", None),
    "render-to-workload": (_render_to, "inference-gateway", None),
    "eks-envoy-front-door": (
        lambda _: front_door("EnvoyGateway", "EKS"),
        "modelplane",
        {AWS_IDLE_TIMEOUT: "3600"},
    ),
    "gke-envoy-front-door": (lambda _: front_door("EnvoyGateway", "GKE"), "modelplane", None),
    "envoy-front-door-on-the-serving-stack-release": (
        lambda _: front_door("EnvoyGateway", None, install_controller=False),
        "modelplane",
        None,
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, MockRun]:
    tmp = tmp_path_factory.mktemp("m8")
    return {case: make(tmp) for case, (make, _, _) in PROXIED.items()}


@pytest.mark.parametrize("case", list(PROXIED))
def test_cloud_envoy_gateways_name_an_envoy_proxy_with_two_replicas(
    runs: dict[str, MockRun], case: str
) -> None:
    run = runs[case]
    _, gateway_name, annotations = PROXIED[case]
    [proxy] = run.of_type(ENVOY_PROXY)
    [gateway] = [g for g in run.of_type(GATEWAY) if g.get("metadata.name") == gateway_name]
    assert proxy.get("metadata.name") == f"{gateway_name}-proxy"
    assert proxy.get("metadata.namespace") == gateway.get("metadata.namespace") == NAMESPACE
    # The Gateway's own reference (namespace-local; it outranks the GatewayClass's).
    assert gateway.get("spec.infrastructure.parametersRef") == {
        "group": "gateway.envoyproxy.io",
        "kind": "EnvoyProxy",
        "name": f"{gateway_name}-proxy",
    }
    assert gateway.depends_on(proxy)  # in place before the Gateway is programmed
    # The load balancer's annotations stay the Gateway's: Envoy Gateway copies
    # spec.infrastructure.annotations onto the Service and then envoyService.annotations over
    # them (v1.8.3 ResourceRender.Service); the EnvoyProxy sets no envoyService.
    assert gateway.get("spec.infrastructure.annotations") == annotations
    kubernetes = proxy.get("spec.provider.kubernetes")
    assert proxy.get("spec.provider.type") == "Kubernetes"
    assert set(kubernetes) == {"envoyDeployment", "envoyPDB"}
    deployment = kubernetes["envoyDeployment"]
    assert deployment["replicas"] == PROXY_REPLICAS == 2
    selector = {"matchLabels": proxy_pods(gateway_name)}
    affinity = deployment["pod"]["affinity"]
    # Preferred, never required: a 1-node system pool still runs both proxies.
    assert affinity == {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {"labelSelector": selector, "topologyKey": HOSTNAME},
                }
            ]
        }
    }
    assert deployment["pod"]["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": selector,
        }
    ]
    # A drain takes one proxy at a time (one of the two keeps serving).
    assert kubernetes["envoyPDB"] == {"maxUnavailable": 1}
    assert k8s_schemas.errors(_manifest(proxy)) == []
    assert k8s_schemas.errors(_manifest(gateway)) == []


@pytest.mark.parametrize("cloud", ["GKE", "EKS", None])
def test_cloud_envoy_proxy_follows_the_serving_stack_release(cloud: str | None) -> None:
    """The EnvoyProxy CRD comes with Envoy Gateway's chart: the serving stack's proxy is
    created after that release; the front door's after its own release."""
    if cloud == "GKE":
        run = _gke()
    elif cloud == "EKS":
        run = _eks()
    else:
        run = front_door("EnvoyGateway", "EKS")
        assert run.one(ENVOY_PROXY).depends_on(run.one(RELEASE, name="mp-envoy-gateway"))
        return
    assert run.one(ENVOY_PROXY).depends_on(release(run, "envoyGateway"))


@pytest.mark.parametrize(
    "case",
    ["traefik-front-door", "platform-envoy-gateway", "platform-traefik"],
)
def test_cloud_no_envoy_proxy_where_modelplane_runs_no_envoy_gateway(case: str) -> None:
    """Traefik's front door has no EnvoyProxy; a platform's own controller (servingStack
    .gateway) keeps its own proxy settings: modelplane names none on its Gateway."""
    if case == "traefik-front-door":
        run = front_door("Traefik", "EKS")
    else:
        controller = "EnvoyGateway" if case == "platform-envoy-gateway" else "Traefik"
        run = existing_run(
            install=False, gateway={"className": "platform", "controller": controller}
        )
    assert not run.of_type(ENVOY_PROXY)
    for gateway in run.of_type(GATEWAY):
        assert gateway.get("spec.infrastructure.parametersRef") is None


@pytest.mark.parametrize(
    ("cloud", "system_pool", "machine"),
    [
        ("GKE", gke.system_pool(), gke.SYSTEM_MACHINE_TYPE),
        ("EKS", eks_args.system_pool(), eks_args.SYSTEM_INSTANCE_TYPE),
    ],
)
def test_cloud_system_pools_have_room_for_two_envoy_proxies(
    cloud: str, system_pool: Any, machine: str
) -> None:
    """The proxies run on the system pool (GPU nodes are tainted). It starts at 1 node, so the
    anti-affinity is preferred (a required term would leave the second proxy Pending, and the
    autoscaler adds no node for it); both fit one node with room to spare, and the pool may
    grow to a node per proxy."""
    assert system_pool.min_node_count == 1 < PROXY_REPLICAS
    assert system_pool.max_node_count >= PROXY_REPLICAS
    cpus, memory_mi = SYSTEM_MACHINES[machine]
    # Two proxies take under a tenth of one system node.
    assert PROXY_REPLICAS * PROXY_CPU_MILLI * 10 <= cpus * 1000
    assert PROXY_REPLICAS * PROXY_MEMORY_MI * 10 <= memory_mi


def test_cloud_rendered_system_pools_match_the_room_assumed() -> None:
    """What GKE and EKS are given: the 1..2-node system pools of the machines above; EKS'
    system group spans the control plane's zones (the zone spread applies), GKE's is in one."""
    run = _gke()
    system = run.one(NODE_POOL, name="gke-central-system")
    assert system.get("autoscaling.totalMinNodeCount") == 1
    assert system.get("autoscaling.totalMaxNodeCount") >= PROXY_REPLICAS
    assert system.get("nodeConfig.machineType") in SYSTEM_MACHINES
    assert len(system.get("nodeLocations")) == 1
    run = _eks()
    group = run.one(MNG, name="eks-west-system")
    assert group.get("scalingConfig.minSize") == 1
    assert group.get("scalingConfig.maxSize") >= PROXY_REPLICAS
    assert group.get("instanceTypes") == [eks_args.SYSTEM_INSTANCE_TYPE]
    assert len(group.get("subnetIds")) > 1


@pytest.fixture(scope="module")
def multicloud(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, dict[str, Any]]]:
    from modelplane.render import render_fleet

    out = tmp_path_factory.mktemp("m8-render")
    render_fleet(ROOT / "specs" / "multicloud", out)
    return [
        (path.parent.parent.name, yaml.safe_load(path.read_text()))
        for path in sorted(out.glob("*/manifests/*.yaml"))
    ]


def test_cloud_render_multicloud_every_envoy_gateway_has_its_proxies(
    multicloud: list[tuple[str, dict[str, Any]]],
) -> None:
    """`modelplane render specs/multicloud`: each cluster's workload Gateway (GKE, EKS and the
    Existing one with the installed stack) names an EnvoyProxy rendered into the same stack,
    with two replicas, schema-valid."""
    gateways = {
        stack: doc
        for stack, doc in multicloud
        if doc["kind"] == "Gateway" and doc["spec"]["gatewayClassName"] == "envoy"
    }
    assert set(gateways) == {"cluster-gke-us-central", "cluster-eks-us-west", "cluster-onprem-east"}
    proxies = {
        (stack, doc["metadata"]["namespace"], doc["metadata"]["name"]): doc
        for stack, doc in multicloud
        if doc["kind"] == "EnvoyProxy"
    }
    assert len(proxies) == len(gateways)
    for stack, gateway in gateways.items():
        ref = gateway["spec"]["infrastructure"]["parametersRef"]
        proxy = proxies[(stack, gateway["metadata"]["namespace"], ref["name"])]
        kubernetes = proxy["spec"]["provider"]["kubernetes"]
        assert kubernetes["envoyDeployment"]["replicas"] == PROXY_REPLICAS, stack
        assert kubernetes["envoyPDB"] == {"maxUnavailable": 1}, stack
        assert k8s_schemas.errors(proxy) == [], stack
