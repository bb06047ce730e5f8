"""Security review H3 (issue 33 item 4) as rendered: routes attach to the front door and the
workload gateways only from the namespaces modelplane manages (the label every namespace it
ensures carries), and the front door's Traefik reads its own objects (Middlewares,
IngressRoutes) only from those namespaces. The dev-fleet side is
`tests/devfleet/test_devfleet_auth.py::test_security_frontdoors_accept_no_route_from_another_namespace`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest

from modelplane.api.inference_gateway import InferenceGateway
from modelplane.components.gateway import InferenceGatewayComponent
from modelplane.components.model_deployment import ModelDeploymentComponent
from modelplane.components.workload.objects import ROUTES_FROM, ROUTES_LABEL, ensure_namespace
from modelplane.devfleet.cluster import traefik_argv
from modelplane.stacks import route_namespaces
from tests.components.workload_helpers import SMALL, deployment, replica, target
from tests.factories import cluster, fleet, inference_class, pool
from tests.factories import deployment as spec_deployment
from tests.pulumi_mocks import MockRun

PATCH = "kubernetes:core/v1:NamespacePatch"
SELECTOR = {"namespaces": {"from": "Selector", "selector": {"matchLabels": ROUTES_LABEL}}}


def test_security_routes_from_is_a_namespace_label_selector() -> None:
    assert ROUTES_FROM == SELECTOR


@pytest.mark.parametrize(
    ("namespace", "labels"),
    [
        ("ml-team", ROUTES_LABEL),  # with its other labels
        ("default", ROUTES_LABEL),  # the one built-in namespace models may use: this label only
        ("kube-system", None),  # never touched
    ],
)
def test_security_every_namespace_modelplane_ensures_carries_the_routes_label(
    namespace: str, labels: dict[str, str] | None
) -> None:
    run = MockRun()

    def program() -> None:
        provider = k8s.Provider("k8s", kubeconfig="kubeconfig-for-tests")
        ensure_namespace(namespace, pulumi.ResourceOptions(provider=provider), scope="t")

    run.run(program)
    patches = run.of_type(PATCH)
    if labels is None:
        assert patches == []
        return
    [patch] = patches
    got = patch.get("metadata.labels")
    assert {k: got[k] for k in labels} == labels
    if namespace == "default":
        assert got == ROUTES_LABEL  # no Pod Security or app labels on `default`


def test_security_a_deployment_namespace_carries_the_routes_label() -> None:
    run = MockRun()
    dep = deployment(SMALL)

    def program() -> ModelDeploymentComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        on = dataclasses.replace(target(provider))
        return ModelDeploymentComponent(
            dep.metadata.name, dep, [replica(dep, {"unified": "mixed"})], {"west": on}
        )

    run.run(program)
    [namespace] = run.of_type(PATCH)
    assert namespace.get("metadata.labels")["modelplane.ai/routes"] == "true"


@pytest.mark.parametrize("backend", ["Traefik", "EnvoyGateway"])
def test_security_front_door_listeners_and_traefik_namespaces(backend: str) -> None:
    gw = InferenceGateway.model_validate(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "InferenceGateway",
            "metadata": {"name": "default"},
            "spec": {
                "backend": backend,
                "cluster": {"inferenceClusterRef": "west"},
                "tls": {
                    "certificate": {"name": "file:cert", "key": "crt"},
                    "privateKey": {"name": "file:key", "key": "key"},
                },
            },
        }
    )
    run = MockRun.of(
        lambda: InferenceGatewayComponent(
            "default",
            gw,
            k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests"),
            tls_material=("CERT", "KEY"),
            namespaces=["web", "demo", "web"],
        )
    )
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    listeners = gateway.get("spec.listeners")
    assert [listener["name"] for listener in listeners] == ["web", "websecure"]
    assert all(listener["allowedRoutes"] == SELECTOR for listener in listeners)
    release = run.one("kubernetes:helm.sh/v3:Release")
    if backend == "Traefik":
        assert release.get("values.providers.kubernetesCRD.namespaces") == [
            "demo",
            "modelplane-system",
            "web",
        ]


def test_security_route_namespaces_are_every_deployment_service_and_endpoint_namespace() -> None:
    from modelplane.api.model_service import ModelEndpoint, ModelService

    f = fleet(
        [inference_class("h", 8)],
        [cluster("a", [pool("p", "h", 1)])],
        [spec_deployment("m", namespace="ml"), spec_deployment("n", namespace="default")],
    )
    doc = {"apiVersion": "modelplane.ai/v1alpha1"}
    f.services["web/chat"] = ModelService.model_validate(
        {
            **doc,
            "kind": "ModelService",
            "metadata": {"name": "chat", "namespace": "web"},
            "spec": {"endpoints": [{"selector": {"matchLabels": {"a": "b"}}}]},
        }
    )
    f.endpoints["saas/openai"] = ModelEndpoint.model_validate(
        {
            **doc,
            "kind": "ModelEndpoint",
            "metadata": {"name": "openai", "namespace": "saas"},
            "spec": {"url": "https://api.example.com/v1"},
        }
    )
    assert route_namespaces(f) == ["default", "ml", "saas", "web"]


def test_security_dev_fleet_traefik_reads_only_modelplanes_objects() -> None:
    argv = traefik_argv(
        Path("traefik"),
        server="https://127.0.0.1:6443",
        token_file=Path("t"),
        ca=Path("ca"),
        address="10.253.1.10",
        port=8000,
        selector="modelplane.ai/gateway=default",
    )
    assert "--providers.kubernetescrd.labelSelector=app.kubernetes.io/managed-by=modelplane" in argv
