"""Which stacks still hold objects on a cluster, from their exported state (driver/hosting)."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.driver.hosting import objects_per_cluster_stack, still_hosting


def provider(stack: str, name: str, parent: str = "") -> str:
    kind = f"{parent}$pulumi:providers:kubernetes" if parent else "pulumi:providers:kubernetes"
    return f"urn:pulumi:{stack}::modelplane::{kind}::{name}::0b5d-uuid"


def obj(stack: str, provider_name: str, kind: str = "kubernetes:apps/v1:Deployment") -> dict:
    return {
        "urn": f"urn:pulumi:{stack}::modelplane::{kind}::x",
        "type": kind,
        "provider": provider(stack, provider_name),
    }


def ref(stack: str, target: str) -> dict[str, Any]:
    return {"type": "pulumi:pulumi:StackReference", "inputs": {"name": f"org/modelplane/{target}"}}


@pytest.mark.parametrize(
    ("resources", "gateway_cluster", "expected"),
    [
        (
            [obj("d", "c1-k8s"), obj("d", "c1-k8s"), obj("d", "c2-k8s")],
            None,
            {"cluster-c1": 2, "cluster-c2": 1},
        ),
        # A reference alone (no objects) holds nothing; the provider itself is no object.
        ([ref("d", "cluster-c1"), {"type": "pulumi:providers:kubernetes"}], None, {}),
        # The gateway's objects are on the gateway cluster.
        ([obj("gateway", "gateway-k8s")], "c1", {"cluster-c1": 1}),
        ([obj("gateway", "gateway-k8s")], None, {}),
        # Not a kubernetes provider: not counted.
        (
            [
                {
                    "type": "kubernetes:core/v1:Namespace",
                    "provider": "urn:pulumi:d::modelplane::pulumi:providers:aws::c1-k8s::id",
                }
            ],
            None,
            {},
        ),
    ],
)
def test_objects_per_cluster_stack(
    resources: list[dict[str, Any]], gateway_cluster: str | None, expected: dict[str, int]
) -> None:
    assert objects_per_cluster_stack(resources, gateway_cluster) == expected


def test_still_hosting_names_the_stacks_per_cluster_being_destroyed() -> None:
    states = {
        "deploy-ml-b": [obj("deploy-ml-b", "c1-k8s")],
        "deploy-ml-a": [obj("deploy-ml-a", "c1-k8s"), obj("deploy-ml-a", "c2-k8s")],
        "cache-ml-w": [ref("cache-ml-w", "cluster-c3")],
        "gateway": [obj("gateway", "gateway-k8s")],
    }
    got = still_hosting(["cluster-c1", "cluster-c3"], states, gateway_cluster="c1")
    assert got == {"cluster-c1": ["deploy-ml-a", "deploy-ml-b", "gateway"]}
