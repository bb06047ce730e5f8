"""modelplane's Pulumi package (modelplane.package, provider/): the schema Pulumi's component
provider host infers from the package-facing components, and what they build under the mock
runtime (the same code the plugin runs when another program constructs them)."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
import pytest
from pulumi.provider.experimental.component import ComponentProvider

from modelplane import __version__
from modelplane.package import COMPONENTS, PACKAGE_NAME, ServingStack, WorkloadGateway
from tests.fixtures.engine import REPO
from tests.pulumi_mocks import MockRun


def schema() -> dict[str, Any]:
    provider = ComponentProvider(COMPONENTS, PACKAGE_NAME, None, __version__)
    return json.loads(provider.schema)


def test_package_schema_names_the_components_by_house_type_tokens() -> None:
    spec = schema()
    assert spec["name"] == "modelplane" and spec["version"] == __version__
    assert set(spec["resources"]) == {
        "modelplane:index:ServingStack",
        "modelplane:index:WorkloadGateway",
    }
    for resource in spec["resources"].values():
        assert resource["isComponent"] is True
        assert resource["requiredInputs"] == []  # every input has modelplane's default
    assert spec["types"]["modelplane:index:Cloud"]["enum"] == [
        {"name": "GKE", "value": "GKE", "description": None},
        {"name": "EKS", "value": "EKS", "description": None},
    ]


def test_package_schema_inputs_and_outputs() -> None:
    resources = schema()["resources"]
    serving = resources["modelplane:index:ServingStack"]
    inputs = serving["inputProperties"]
    assert set(inputs) == {
        "versions",
        "chartRepository",
        "nvidiaDriverRoot",
        "gkeDriverInstaller",
        "ownsNetwork",
        "cloud",
        "privateTo",
    }
    assert inputs["versions"]["additionalProperties"]["type"] == "string"
    assert inputs["privateTo"]["items"]["type"] == "string"
    assert inputs["cloud"]["$ref"] == "#/types/modelplane:index:Cloud"
    # Inputs that decide which resources exist are plain: validated while the component builds.
    assert all(p.get("plain") is True for p in inputs.values())
    assert set(serving["properties"]) == {"gatewayAddress", "releases"}
    assert serving["required"] == ["releases"]  # the address is None until a controller gives it

    gateway = resources["modelplane:index:WorkloadGateway"]
    assert {k: v.get("type") for k, v in gateway["inputProperties"].items()} == {
        "className": "string",
        "port": "integer",
        "cloud": None,
        "privateTo": "array",
        "awaitAddress": "boolean",
    }
    assert set(gateway["properties"]) == {"gatewayName", "namespace", "gatewayAddress"}
    assert sorted(gateway["required"]) == ["gatewayName", "namespace"]
    # Outputs are never plain (they may wait on resources).
    for resource in resources.values():
        assert all("plain" not in p for p in resource["properties"].values())


def test_package_plugin_hosts_the_package_components() -> None:
    plugin = REPO / "provider"
    assert "virtualenv: ../.venv" in (plugin / "PulumiPlugin.yaml").read_text()
    main = (plugin / "__main__.py").read_text()
    assert "component_provider_host(components=COMPONENTS, name=PACKAGE_NAME" in main


def test_package_workload_gateway_builds_the_rendered_gateway_objects() -> None:
    run = MockRun()
    gateway = run.run(
        lambda: WorkloadGateway(
            "edge",
            {"private_to": ["hub"], "await_address": False, "port": 8080},
        )
    )
    component = run.one("modelplane:index:WorkloadGateway", name="edge")
    children = {r.type for r in run.children_of(component)}
    assert children == {
        "kubernetes:core/v1:NamespacePatch",
        "kubernetes:gateway.networking.k8s.io/v1:GatewayClass",
        "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy",
        "kubernetes:gateway.networking.k8s.io/v1:Gateway",
    }
    gw = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert gw.get("spec.gatewayClassName") == "envoy"
    assert gw.get("spec.listeners.0.port") == 8080
    assert gw.get("metadata.annotations")["modelplane.ai/private-network"] == "hub"
    assert "pulumi.com/waitFor" not in gw.get("metadata.annotations")
    assert run.value(gateway.gateway_name) == "inference-gateway"
    assert run.value(gateway.namespace) == "modelplane-system"
    assert run.value(gateway.gateway_address) is None


def test_package_workload_gateway_of_a_platform_class_has_no_envoy_objects() -> None:
    run = MockRun()
    run.run(lambda: WorkloadGateway("own", {"class_name": "traefik"}))
    component = run.one("modelplane:index:WorkloadGateway", name="own")
    assert {r.type for r in run.children_of(component)} == {
        "kubernetes:core/v1:NamespacePatch",
        "kubernetes:gateway.networking.k8s.io/v1:Gateway",
    }
    with pytest.raises(ValueError, match="cloud is for class 'envoy'"):
        MockRun().run(lambda: WorkloadGateway("bad", {"class_name": "traefik", "cloud": "GKE"}))


def test_package_serving_stack_builds_modelplanes_serving_stack_on_the_given_provider() -> None:
    run = MockRun()

    def program() -> ServingStack:
        k8s = kubernetes.Provider("k8s", kubeconfig="{}")
        return ServingStack(
            "edge",
            {"versions": {"keda": "2.20.2"}, "cloud": "GKE"},
            pulumi.ResourceOptions(providers=[k8s]),
        )

    stack = run.run(program)
    outer = run.one("modelplane:index:ServingStack", name="edge")
    inner = run.one("modelplane:cluster:ServingStack", name="edge")
    assert inner.parent == outer.urn
    keda = run.one("kubernetes:helm.sh/v3:Release", name="edge-mp-keda")
    assert keda.inputs["version"] == "2.20.2"
    assert run.provider_of(keda) is not None and run.provider_of(keda).name == "k8s"
    assert run.value(stack.releases)["keda"] == "mp-keda"

    with pytest.raises(ValueError, match="unknown component"):
        MockRun().run(lambda: ServingStack("bad", {"versions": {"nope": "1"}}, None))


def test_package_serving_stack_needs_a_kubernetes_provider() -> None:
    with pytest.raises(ValueError, match="pass the cluster's Kubernetes provider"):
        MockRun().run(lambda: ServingStack("edge", {}, None))
