"""Security M1 and L7 as rendered (docs/architecture.md, "Security"; api.md "Callers"): a
client's `x-modelplane-*` headers, in every spelling, are removed first on every ModelService
route; only replicas get the caller's name; Envoy Gateway refuses underscore headers. The
real Traefik runs the same Middleware in tests/components/test_gateway_security_traefik.py
(`test_hostile_forged_caller_headers_stripped_and_never_counted`)."""

from __future__ import annotations

import pytest

from modelplane.api.model_service import ModelService
from modelplane.components.load_balancers import client_traffic_policy
from modelplane.components.model_service import (
    EndpointInfo,
    FrontDoor,
    service_policy_manifests,
    service_route_manifest,
)
from modelplane.components.workload.routes import (
    header_spellings,
    traefik_client_headers_middleware,
)
from tests import k8s_schemas
from tests.components.workload_helpers import load

CHAT = """
metadata: {name: chat, namespace: demo}
spec:
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: qwen}}
  - selector: {matchLabels: {provider: partner}}
"""
ENDPOINTS = [
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


@pytest.mark.parametrize(
    ("name", "spellings"),
    [
        ("x-a", ["x-a", "x_a"]),
        (
            "x-modelplane-caller",
            [
                "x-modelplane-caller",
                "x-modelplane_caller",
                "x_modelplane-caller",
                "x_modelplane_caller",
            ],
        ),
        ("plain", ["plain"]),
    ],
)
def test_security_header_spellings(name: str, spellings: list[str]) -> None:
    assert sorted(header_spellings(name)) == sorted(spellings)


def test_security_client_headers_middleware_removes_every_spelling() -> None:
    manifest = traefik_client_headers_middleware("chat-client-headers", "demo", {})
    removed = manifest["spec"]["headers"]["customRequestHeaders"]
    # An empty value removes the header (Traefik); one entry per spelling of each own header.
    assert set(removed.values()) == {""}
    assert {h.lower() for h in removed} == {
        f"x{a}modelplane{b}{name}" for a in "-_" for b in "-_" for name in ("caller", "endpoint")
    }
    assert k8s_schemas.errors(manifest) == []


@pytest.mark.parametrize("authz", ["http://authz/", None], ids=["auth", "no-auth"])
def test_security_traefik_route_removes_client_headers_first(authz: str | None) -> None:
    """Before the key check (which sets the caller on its yes) and before the retries, with
    or without `spec.auth`; the Middleware exists (a route naming a missing one answers 404)."""
    service = load(ModelService, CHAT)
    door = FrontDoor(authz_address=authz)
    route = service_route_manifest(service, ENDPOINTS, "Traefik", ("gw", "ns"), door)
    assert route is not None
    [rule] = route["spec"]["rules"]
    names = [f["extensionRef"]["name"] for f in rule["filters"]]
    assert names[0] == "chat-client-headers"
    assert ("chat-auth" in names) is (authz is not None)
    made = {m["metadata"]["name"] for m in service_policy_manifests(service, "Traefik", door)}
    assert set(names) <= made
    # Only the replica gets the caller's name (and the front door's credentials).
    replica, outside = (ref.get("filters", []) for ref in rule["backendRefs"])
    removes = [
        f["requestHeaderModifier"]["remove"] for f in outside if "requestHeaderModifier" in f
    ]
    assert removes == [["Authorization", "x-modelplane-caller"]]
    assert not [f for f in replica if "requestHeaderModifier" in f]


def test_security_envoy_gateway_refuses_underscore_headers() -> None:
    """Envoy Gateway's ClientTrafficPolicy on every Gateway (front door and workload
    gateways): a header spelled with `_` is refused, never folded into `x-modelplane-*` by
    an engine; valid against the v1.8.3 CRD."""
    policy = client_traffic_policy("modelplane", "modelplane-system", {})
    assert policy["spec"]["headers"]["withUnderscoresAction"] == "RejectRequest"
    assert k8s_schemas.errors(policy) == []


def test_security_authz_pod_is_hardened() -> None:
    """L2: the key check talks to no API server and needs no privilege."""
    from modelplane.components.gateway import authz_manifests

    [deployment] = [m for m in authz_manifests("{}") if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["limits"]["memory"]
    assert k8s_schemas.errors(deployment) == []
    # A drain takes the key check's pods one at a time.
    [budget] = [m for m in authz_manifests("{}") if m["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == 1 < deployment["spec"]["replicas"]
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert k8s_schemas.errors(budget) == []
