"""Security M4 as rendered (docs/architecture.md "Security"; api.md "Network policies"): a
deployment's serving pods admit connections only from its workload gateway's proxies (and the
front door's, on the front door's own cluster) on the serving ports, from Prometheus on the
engine ports, and from the deployment's own pods on any port; `modelplane-authz` only from the
front door's Traefik; GKE clusters are created with Dataplane V2 and EKS's VPC CNI enforces
NetworkPolicy. The policies are evaluated here with NetworkPolicy's own rules (`admits`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pulumi_kubernetes as k8s
import pytest

from modelplane.api.model_deployment import ModelDeployment
from modelplane.components.gateway import AUTHZ_PORT, GATEWAY_NAME, TRAEFIK, authz_manifests
from modelplane.components.model_deployment import ModelDeploymentComponent
from modelplane.components.model_router import ROUTER_LABELS, ROUTER_SELECTOR
from modelplane.components.workload import network_policies as np
from modelplane.components.workload.targets import ClusterTarget
from modelplane.observe.prometheus import PROMETHEUS_NAMESPACE
from tests import k8s_schemas
from tests.components.cluster_helpers import eks_cluster, eks_run, gke_class, gke_cluster
from tests.components.workload_helpers import (
    CODER,
    DEPLOYMENT,
    LWS,
    PD,
    SMALL,
    deployment,
    pod_templates,
    replica,
    target,
)
from tests.pulumi_mocks import MockRun

POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "ml-team"

# --- NetworkPolicy semantics (Kubernetes docs, "Network Policies") ---------------------------


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector: every matchLabels pair, every matchExpression (Exists, In)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr["key"], expr["operator"]
        if op == "Exists" and key not in labels:
            return False
        if op == "In" and labels.get(key) not in expr["values"]:
            return False
    return True


Source = tuple[str, Mapping[str, str]]  # (namespace, pod labels)


def admits(policy: Mapping[str, Any], pod: Mapping[str, str], source: Source, port: int) -> bool:
    """Whether ``policy`` lets a pod of ``source`` open a TCP connection to ``port`` of a pod
    labelled ``pod`` in the policy's namespace (a pod it does not select is not its to
    restrict: True)."""
    spec = policy["spec"]
    if not _matches(spec["podSelector"], pod):
        return True
    assert spec["policyTypes"] == ["Ingress"]
    src_ns, src_labels = source
    for rule in spec.get("ingress") or []:
        ports = rule.get("ports")
        if ports and not any(p["port"] == port and p["protocol"] == "TCP" for p in ports):
            continue
        for peer in rule.get("from") or []:
            ns_sel = peer.get("namespaceSelector")
            if ns_sel is None:
                ns_ok = src_ns == policy["metadata"]["namespace"]
            else:
                ns_ok = _matches(ns_sel, {np.NAMESPACE_NAME: src_ns})
            pod_sel = peer.get("podSelector")
            if ns_ok and (pod_sel is None or _matches(pod_sel, src_labels)):
                return True
    return False


def selects(policy: Mapping[str, Any], pod: Mapping[str, str]) -> bool:
    return _matches(policy["spec"]["podSelector"], pod)


# --- who is who ---------------------------------------------------------------------------

ENVOY_PROXY = {
    "app.kubernetes.io/name": "envoy",
    "app.kubernetes.io/component": "proxy",
    "app.kubernetes.io/managed-by": "envoy-gateway",
    "gateway.envoyproxy.io/owning-gateway-namespace": "modelplane-system",
}
WORKLOAD_ENVOY: Source = (
    "envoy-gateway-system",
    {**ENVOY_PROXY, "gateway.envoyproxy.io/owning-gateway-name": "inference-gateway"},
)
FRONT_DOOR_ENVOY: Source = (
    "envoy-gateway-system",
    {**ENVOY_PROXY, "gateway.envoyproxy.io/owning-gateway-name": GATEWAY_NAME},
)
# The second pass of an Envoy front door's OpenAI base URL (modelplane/components/ai_gateway.py).
OPENAI_LOOP: Source = (
    "envoy-gateway-system",
    {**ENVOY_PROXY, "gateway.envoyproxy.io/owning-gateway-name": "modelplane-openai-loop"},
)
# The Traefik chart's pod labels for release mp-traefik in traefik-system (plus its others).
FRONT_DOOR_TRAEFIK: Source = (
    "traefik-system",
    {
        "app.kubernetes.io/name": "traefik",
        "app.kubernetes.io/instance": "mp-traefik-traefik-system",
        "helm.sh/chart": "traefik-41.3.0",
    },
)
PROMETHEUS: Source = (PROMETHEUS_NAMESPACE, {"app.kubernetes.io/name": "prometheus"})
TENANT: Source = (NAMESPACE, {"app": "curl"})
ELSEWHERE: Source = ("batch", {"app": "curl"})
# Envoy's labels copied onto a pod of another namespace: still refused.
FORGED_PROXY: Source = (NAMESPACE, WORKLOAD_ENVOY[1])
ROUTER: Source = ("modelplane-system", {**ROUTER_LABELS, **ROUTER_SELECTOR})
PLATFORM_GATEWAY: Source = ("gateways", {"app": "platform-proxy"})

NIXL = 5557  # the NIXL side channel (disaggregation.NIXL_PORT)
PORTED = SMALL.replace('"--tensor-parallel-size=2"]', '"--tensor-parallel-size=2", "--port=9000"]')


def _render(
    text: str,
    pools: dict[str, str],
    *,
    on: dict[str, Any] | None = None,
    at_revision: dict[int, str] | None = None,
    replicas: int = 1,
) -> tuple[MockRun, dict[str, Any], ModelDeployment]:
    """The deployment on cluster west (the helpers' target, changed by ``on``): the run, its
    one NetworkPolicy (as a manifest) and the deployment."""
    run = MockRun()
    dep = deployment(text)
    locked = [replica(dep, pools, i) for i in range(replicas)]
    revisions = {locked[i].name: deployment(t) for i, t in (at_revision or {}).items()}

    def program() -> ModelDeploymentComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        west = dataclasses.replace(target(provider), **(on or {}))
        return ModelDeploymentComponent(
            dep.metadata.name, dep, locked, {"west": west}, at_revision=revisions
        )

    run.run(program)
    [policy] = run.of_type(POLICY)
    manifest = {
        "apiVersion": policy.inputs["apiVersion"],
        "kind": policy.inputs["kind"],
        "metadata": policy.get("metadata"),
        "spec": policy.get("spec"),
    }
    return run, manifest, dep


def _serving_pods(run: MockRun) -> list[dict[str, str]]:
    """The pod labels of every serving workload's templates (not the endpoint picker's)."""
    found = [t["metadata"]["labels"] for t in pod_templates(run)]
    return [labels for labels in found if "modelplane.ai/role" in labels]


# --- a unified replica ----------------------------------------------------------------------

UNIFIED_CASES = [
    # (who, port, admitted)
    ("workload gateway, engine port", WORKLOAD_ENVOY, 9000, True),
    ("workload gateway, another port", WORKLOAD_ENVOY, 8000, False),
    ("Prometheus, metrics port", PROMETHEUS, 9000, True),
    ("Prometheus, another port", PROMETHEUS, NIXL, False),
    ("a pod of the namespace", TENANT, 9000, False),
    ("a pod of another namespace", ELSEWHERE, 9000, False),
    ("Envoy's labels outside its namespace", FORGED_PROXY, 9000, False),
    ("the front door, not on this cluster", FRONT_DOOR_TRAEFIK, 9000, False),
    ("the front door's Envoy, not on this cluster", FRONT_DOOR_ENVOY, 9000, False),
    ("the OpenAI router", ROUTER, 9000, False),
]


@pytest.mark.parametrize(
    ("who", "source", "port", "admitted"), UNIFIED_CASES, ids=[c[0] for c in UNIFIED_CASES]
)
def test_security_unified_engine_admits_its_gateway_and_prometheus_only(
    who: str, source: Source, port: int, admitted: bool
) -> None:
    run, policy, _ = _render(PORTED, {"unified": "mixed"})
    [pod] = _serving_pods(run)
    assert selects(policy, pod)
    assert admits(policy, pod, source, port) is admitted, who


def test_security_policy_is_one_per_deployment_and_cluster_and_valid() -> None:
    run, policy, dep = _render(SMALL, {"unified": "mixed"}, replicas=3)
    assert len(run.of_type(POLICY)) == 1  # three replicas on west, one policy
    assert policy["metadata"]["name"] == "small-west-ingress"  # per InferenceCluster
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert k8s_schemas.errors(policy) == []
    pods = _serving_pods(run)
    assert len(pods) == 3 and all(selects(policy, p) for p in pods)
    # Another deployment's pods in the namespace are neither selected nor admitted as own.
    other = {**pods[0], "modelplane.ai/deployment": "other"}
    assert not selects(policy, other)
    assert not admits(policy, pods[0], (NAMESPACE, other), 12345)


# --- multi-node groups: leaders and workers ------------------------------------------------


def test_security_multi_node_groups_talk_among_themselves_on_any_port() -> None:
    run, policy, _ = _render(CODER, {"unified": "h200"})
    [lws] = run.of_type(LWS)
    leader = lws.get("spec.leaderWorkerTemplate.leaderTemplate.metadata.labels")
    worker = lws.get("spec.leaderWorkerTemplate.workerTemplate.metadata.labels")
    assert selects(policy, leader) and selects(policy, worker)
    for a, b in ((leader, worker), (worker, leader), (worker, worker)):
        for port in (8000, 29500, 6379, NIXL):
            assert admits(policy, b, (NAMESPACE, a), port)
    # The gateway and Prometheus reach the leader's engine, nothing else of any pod.
    assert admits(policy, leader, WORKLOAD_ENVOY, 8000)
    assert admits(policy, leader, PROMETHEUS, 8000)
    assert not admits(policy, worker, WORKLOAD_ENVOY, 6379)
    assert not admits(policy, worker, TENANT, 6379)


# --- prefill/decode ---------------------------------------------------------------------------

PD_CASES = [
    # (who, role, port, admitted); decode: sidecar 8000, engine 8001; prefill engine 8000
    ("gateway to the decode sidecar", WORKLOAD_ENVOY, "decode", 8000, True),
    ("gateway to the prefill engine", WORKLOAD_ENVOY, "prefill", 8000, True),
    ("gateway to the decode engine itself", WORKLOAD_ENVOY, "decode", 8001, False),
    ("Prometheus to the decode engine", PROMETHEUS, "decode", 8001, True),
    ("Prometheus to the prefill engine", PROMETHEUS, "prefill", 8000, True),
    ("Prometheus to NIXL", PROMETHEUS, "prefill", NIXL, False),
    ("a tenant to the decode sidecar", TENANT, "decode", 8000, False),
    ("a tenant to NIXL", TENANT, "prefill", NIXL, False),
]


@pytest.mark.parametrize(
    ("who", "source", "role", "port", "admitted"), PD_CASES, ids=[c[0] for c in PD_CASES]
)
def test_security_prefill_decode_admissions(
    who: str, source: Source, role: str, port: int, admitted: bool
) -> None:
    run, policy, _ = _render(PD, {"prefill": "h200", "decode": "h200"})
    pods = {p["modelplane.ai/role"]: p for p in _serving_pods(run)}
    assert admits(policy, pods[role], source, port) is admitted, who


def test_security_prefill_decode_roles_and_endpoint_picker() -> None:
    run, policy, _ = _render(PD, {"prefill": "h200", "decode": "h200"})
    pods = {p["modelplane.ai/role"]: p for p in _serving_pods(run)}
    assert set(pods) == {"prefill", "decode"} and all(selects(policy, p) for p in pods.values())
    # The decode sidecar sends the prompt to prefill, KV moves over NIXL: any port.
    assert admits(policy, pods["prefill"], (NAMESPACE, pods["decode"]), 8000)
    assert admits(policy, pods["prefill"], (NAMESPACE, pods["decode"]), NIXL)
    assert admits(policy, pods["decode"], (NAMESPACE, pods["prefill"]), NIXL)
    # The endpoint picker scrapes the pods it picks; its own pods are not selected (Envoy
    # reaches its ext-proc port untouched).
    epp = next(
        d.get("spec.template.metadata.labels")
        for d in run.of_type(DEPLOYMENT)
        if "modelplane.ai/epp" in d.get("spec.template.metadata.labels")
    )
    assert not selects(policy, epp)
    for role in ("prefill", "decode"):
        assert admits(policy, pods[role], (NAMESPACE, epp), 8000)
    assert not admits(policy, pods["decode"], (NAMESPACE, epp), NIXL)
    assert k8s_schemas.errors(policy) == []


# --- which gateway: installed stack, platform's, front door on this cluster ---------------

GATEWAY_CASES = [
    # (case, target changes, source, admitted on the engine port 8000)
    ("installed stack: its Envoy", {}, WORKLOAD_ENVOY, True),
    ("installed stack: a platform pod", {}, PLATFORM_GATEWAY, False),
    (
        "platform gateway with a namespace: its pods",
        {"inference_pools": False, "front_door": "Traefik", "gateway_namespace": "gateways"},
        PLATFORM_GATEWAY,
        True,
    ),
    (
        "platform gateway with a namespace: another namespace",
        {"inference_pools": False, "front_door": "Traefik", "gateway_namespace": "gateways"},
        ELSEWHERE,
        False,
    ),
    (
        "platform gateway with a namespace: Envoy's labels elsewhere",
        {"inference_pools": False, "front_door": "Traefik", "gateway_namespace": "gateways"},
        WORKLOAD_ENVOY,
        False,
    ),
    (
        "platform gateway without a namespace: every namespace",
        {"inference_pools": False, "front_door": "Traefik"},
        ELSEWHERE,
        True,
    ),
    (
        "front door Traefik on this cluster",
        {"front_door_here": "Traefik"},
        FRONT_DOOR_TRAEFIK,
        True,
    ),
    (
        "front door Envoy on this cluster",
        {"front_door_here": "EnvoyGateway"},
        FRONT_DOOR_ENVOY,
        True,
    ),
    (
        "front door's OpenAI loop on this cluster",
        {"front_door_here": "EnvoyGateway"},
        OPENAI_LOOP,
        True,
    ),
    ("front door's OpenAI loop elsewhere", {}, OPENAI_LOOP, False),
    (
        "front door Traefik, Envoy front door here",
        {"front_door_here": "EnvoyGateway"},
        FRONT_DOOR_TRAEFIK,
        False,
    ),
    ("front door here: still no tenant", {"front_door_here": "Traefik"}, TENANT, False),
]


@pytest.mark.parametrize(
    ("case", "on", "source", "admitted"), GATEWAY_CASES, ids=[c[0] for c in GATEWAY_CASES]
)
def test_security_gateways_admitted_per_cluster(
    case: str, on: dict[str, Any], source: Source, admitted: bool
) -> None:
    run, policy, _ = _render(SMALL, {"unified": "mixed"}, on=on)
    [pod] = _serving_pods(run)
    assert admits(policy, pod, source, 8000) is admitted, case
    # Whatever the gateway, only the serving port: never NIXL or another port.
    assert not admits(policy, pod, source, NIXL) or source == TENANT, case


def test_security_replicas_not_yet_rolled_keep_their_port() -> None:
    """A rollout renders replicas it has not reached from their own revision: the old engine
    port stays admitted while one of them is on it."""
    run, policy, _ = _render(PORTED, {"unified": "mixed"}, at_revision={0: SMALL}, replicas=2)
    pods = _serving_pods(run)
    assert all(selects(policy, p) for p in pods)
    for port in (8000, 9000):
        assert admits(policy, pods[0], WORKLOAD_ENVOY, port)
        assert admits(policy, pods[0], PROMETHEUS, port)
    _, rolled, _ = _render(PORTED, {"unified": "mixed"}, replicas=2)
    assert not admits(rolled, pods[0], WORKLOAD_ENVOY, 8000)


def test_security_cluster_target_reads_the_platform_gateway_namespace() -> None:
    from modelplane.api.inference_cluster import InferenceCluster
    from tests.factories import cluster, pool

    data = cluster("c1", [pool("gpu", "h100")]).model_dump(by_alias=True, exclude_none=True)
    gateway = {"className": "platform", "controller": "Traefik", "namespace": "gateways"}
    data["spec"]["servingStack"] = {"install": False, "gateway": gateway}
    on = ClusterTarget.from_spec(InferenceCluster.model_validate(data), {}, None)  # type: ignore[arg-type]
    assert (on.inference_pools, on.gateway_namespace, on.front_door_here) == (
        False,
        "gateways",
        None,
    )
    here = ClusterTarget.from_spec(
        InferenceCluster.model_validate(data),
        {},
        None,  # type: ignore[arg-type]
        front_door_here="Traefik",
    )
    assert here.front_door_here == "Traefik"
    gateway["namespace"] = "Not_A_Label"
    with pytest.raises(ValueError, match="namespace"):
        InferenceCluster.model_validate(data)


# --- the authorization service --------------------------------------------------------------

AUTHZ_CASES = [
    ("the front door's Traefik", FRONT_DOOR_TRAEFIK, AUTHZ_PORT, True),
    ("the front door's Traefik, another port", FRONT_DOOR_TRAEFIK, 9999, False),
    ("the OpenAI router (reads the keys itself)", ROUTER, AUTHZ_PORT, False),
    ("a workload gateway's Envoy", WORKLOAD_ENVOY, AUTHZ_PORT, False),
    ("Prometheus", PROMETHEUS, AUTHZ_PORT, False),
    ("a tenant pod", ELSEWHERE, AUTHZ_PORT, False),
    (
        "Traefik's labels in another namespace",
        ("modelplane-system", FRONT_DOOR_TRAEFIK[1]),
        AUTHZ_PORT,
        False,
    ),
]


@pytest.mark.parametrize(
    ("who", "source", "port", "admitted"), AUTHZ_CASES, ids=[c[0] for c in AUTHZ_CASES]
)
def test_security_authz_admits_only_the_front_doors_traefik(
    who: str, source: Source, port: int, admitted: bool
) -> None:
    manifests = authz_manifests("{}")
    [policy] = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    [authz] = [m for m in manifests if m["kind"] == "Deployment"]
    pod = authz["spec"]["template"]["metadata"]["labels"]
    assert selects(policy, pod)
    assert k8s_schemas.errors(policy) == []
    assert admits(policy, pod, source, port) is admitted, who


def test_security_front_door_labels_follow_the_installed_traefik() -> None:
    assert (np.TRAEFIK_RELEASE, np.TRAEFIK_NAMESPACE) == (TRAEFIK["release"], TRAEFIK["namespace"])
    assert np.METRICS_NAMESPACE == PROMETHEUS_NAMESPACE


# --- the clouds enforce them ------------------------------------------------------------------


def test_security_gke_clusters_get_dataplane_v2_without_replacing_existing_ones() -> None:
    from modelplane.components.inference_cluster import InferenceClusterComponent

    run = MockRun.of(
        lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": gke_class()})
    )
    [cluster] = run.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["datapathProvider"] == "ADVANCED_DATAPATH"
    # Immutable: a cluster created on the legacy datapath is never replaced by an `up`.
    assert cluster.ignore_changes == ["datapathProvider"]
    # Dataplane V2 enforces NetworkPolicy itself: no Calico addon or networkPolicy block.
    assert "networkPolicy" not in cluster.inputs


def test_security_eks_vpc_cni_enforces_network_policy() -> None:
    run = eks_run("eks-west", eks_cluster())
    [cni] = [a for a in run.of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == "vpc-cni"]
    assert json.loads(cni.inputs["configurationValues"]) == {"enableNetworkPolicy": "true"}
