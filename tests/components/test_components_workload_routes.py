"""Workload routing: Traefik and Envoy Gateway routes, retries, endpoint slices, gateways."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.model_service import ModelService
from modelplane.components.gateway import InferenceGatewayComponent
from modelplane.components.model_service import (
    EndpointInfo,
    ModelEndpointComponent,
    ModelServiceComponent,
    endpoint_manifests,
)
from modelplane.components.workload.objects import HAND_OFF_ANNOTATION, hand_off
from tests.components.workload_helpers import (
    ROUTE,
    SERVICE,
    SLICE,
    load,
)
from tests.pulumi_mocks import MockRun, Registered

SERVICE_SPEC = load(
    ModelService,
    """
metadata: {name: coder, namespace: ml-team}
spec:
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: coder}}
    weight: 80
  - selector: {matchLabels: {provider: together}}
    weight: 20
""",
)

ENDPOINTS = [
    EndpointInfo(
        "coder-a",
        "ml-team",
        "http://10.0.0.1/ml-team/coder-a/",
        "/ml-team/coder-a/",
        {"modelplane.ai/deployment": "coder"},
    ),
    EndpointInfo(
        "coder-b",
        "ml-team",
        "http://[2001:db8::1]/ml-team/coder-b/",
        "/ml-team/coder-b/",
        {"modelplane.ai/deployment": "coder"},
    ),
    EndpointInfo(
        "coder-c",
        "ml-team",
        "http://gw.east.example.com/ml-team/coder-c/",
        "/ml-team/coder-c/",
        {"modelplane.ai/deployment": "coder"},
    ),
    EndpointInfo("together", "ml-team", "https://api.together.xyz/", "/", {"provider": "together"}),
    # Another namespace: never selected by a ml-team service.
    EndpointInfo(
        "coder-x", "other", "http://10.9.9.9/", "/", {"modelplane.ai/deployment": "coder"}
    ),
]


# The same endpoints, coder-* as composed replicas (records of a deployment stack).
REPLICA_ENDPOINTS = [
    dataclasses.replace(ep, replica=ep.name.startswith("coder")) for ep in ENDPOINTS
]


def route_for(
    backend: str, endpoints: list[EndpointInfo] = ENDPOINTS
) -> tuple[MockRun, Registered, ModelServiceComponent]:
    run = MockRun()

    def program() -> ModelServiceComponent:
        provider = k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests")
        opts = pulumi.ResourceOptions(providers=[provider])
        for ep in endpoints:
            ModelEndpointComponent(ep.key, ep, backend=backend, opts=opts)  # type: ignore[arg-type]
        return ModelServiceComponent(
            SERVICE_SPEC.key,
            SERVICE_SPEC,
            endpoints,
            backend=backend,  # type: ignore[arg-type]
            gateway_address="front.example.com",
            gateway=("modelplane", "modelplane-system"),
            opts=opts,
        )

    comp = run.run(program)
    return run, run.one(ROUTE), comp


def test_traefik_route_weights_and_per_backend_rewrites() -> None:
    run, route, comp = route_for("Traefik")
    assert route.parent_type == "modelplane:gateway:ModelService"
    [rule] = route.get("spec.rules")
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/ml-team/coder/"}}]
    refs = rule["backendRefs"]
    assert [r["weight"] for r in refs] == [27, 27, 26, 20]
    assert [r["name"] for r in refs] == ["ep-coder-a", "ep-coder-b", "ep-coder-c", "ep-together"]
    rewrites = [r["filters"][0]["urlRewrite"] for r in refs]
    assert [w["path"]["replacePrefixMatch"] for w in rewrites] == [
        "/ml-team/coder-a/",
        "/ml-team/coder-b/",
        "/ml-team/coder-c/",
        "/",
    ]
    assert rewrites[3]["hostname"] == "api.together.xyz"
    assert "hostname" not in rewrites[0]
    assert refs[3]["port"] == 443
    assert run.value(comp.address) == "http://front.example.com/ml-team/coder/"
    assert run.value(comp.weights) == {
        "ml-team/coder-a": 27,
        "ml-team/coder-b": 27,
        "ml-team/coder-c": 26,
        "ml-team/together": 20,
    }


MIDDLEWARE = "kubernetes:traefik.io/v1alpha1:Middleware"
TRAFFIC_POLICY = "kubernetes:gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy"


def test_retry_traefik_route_runs_the_retry_middleware_before_its_backends() -> None:
    """api.md "Retries and ejection": a refused/reset connection and 502/503/429 before the
    first byte are retried on the next endpoint, POST included, a bounded number of times."""
    from tests import k8s_schemas

    run, route, _ = route_for("Traefik")
    [rule] = route.get("spec.rules")
    middlewares = {m.get("metadata.name"): m for m in run.of_type(MIDDLEWARE)}
    middleware = middlewares["coder-retry"]
    # A client's x-modelplane-* headers go first (api.md "Callers"), then the retries.
    assert rule["filters"] == [
        {
            "type": "ExtensionRef",
            "extensionRef": {"group": "traefik.io", "kind": "Middleware", "name": name},
        }
        for name in ("coder-client-headers", "coder-retry")
    ]
    assert middleware.get("metadata.namespace") == route.get("metadata.namespace") == "ml-team"
    assert middleware.get("spec.retry") == {
        "attempts": 4,
        "status": ["502", "503", "429"],
        "retryNonIdempotentMethod": True,
        "maxRequestBodyBytes": 2 * 1024 * 1024,
    }
    # The route waits for its middleware (a route naming a missing one answers 404).
    assert route.depends_on(middleware)
    assert not run.of_type(TRAFFIC_POLICY)
    manifest = {
        "apiVersion": "traefik.io/v1alpha1",
        "kind": "Middleware",
        "metadata": middleware.get("metadata"),
        "spec": middleware.get("spec"),
    }
    assert k8s_schemas.errors(manifest) == []


def test_retry_envoy_gateway_policy_retries_and_ejects() -> None:
    run, route, _ = route_for("EnvoyGateway", REPLICA_ENDPOINTS)
    policy = run.one(TRAFFIC_POLICY)
    assert "filters" not in route.get("spec.rules")[0] or all(
        f["type"] != "ExtensionRef" for f in route.get("spec.rules")[0]["filters"]
    )
    assert policy.get("spec.targetRefs") == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "name": route.get("metadata.name"),
        }
    ]
    assert policy.get("metadata.namespace") == route.get("metadata.namespace")
    retry = policy.get("spec.retry")
    assert retry["numRetries"] == 3
    assert set(retry["retryOn"]["triggers"]) == {
        "connect-failure",
        "refused-stream",
        "reset",
        "retriable-status-codes",
    }
    assert retry["retryOn"]["httpStatusCodes"] == [502, 503, 429]
    passive = policy.get("spec.healthCheck.passive")
    # 5xx and gateway errors (connection failures count as such) eject; a 429 does not.
    assert passive["consecutive5XxErrors"] == passive["consecutiveGatewayErrors"] == 3
    assert passive["maxEjectionPercent"] == 50
    assert not run.of_type(MIDDLEWARE)


def test_endpoint_slices_by_address_type() -> None:
    run, _, _ = route_for("Traefik")
    slices = {s.get("metadata.labels")["kubernetes.io/service-name"]: s for s in run.of_type(SLICE)}
    assert slices["ep-coder-a"].get("addressType") == "IPv4"
    assert slices["ep-coder-b"].get("addressType") == "IPv6"
    assert slices["ep-coder-b"].get("endpoints.0.addresses") == ["2001:db8::1"]
    assert slices["ep-coder-c"].get("addressType") == "FQDN"
    assert slices["ep-together"].get("ports") == [{"name": "http", "port": 443, "protocol": "TCP"}]
    services = {s.get("metadata.name"): s for s in run.of_type(SERVICE)}
    assert "selector" not in services["ep-coder-a"].get("spec")
    assert services["ep-together"].get("spec.ports.0.appProtocol") == "https"
    for s in run.of_type(SLICE):
        assert s.parent_type == "modelplane:gateway:ModelEndpoint"


def test_envoy_gateway_one_weighted_rule_replicas_by_header() -> None:
    """Weights hold on Envoy Gateway: one rule (rewrite to '/'), replicas named by header."""
    run, route, comp = route_for("EnvoyGateway", REPLICA_ENDPOINTS)
    [rule] = route.get("spec.rules")
    assert rule["filters"] == [
        {
            "type": "URLRewrite",
            "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
        },
        # A client's caller header never reaches an engine (api.md "Callers").
        {
            "type": "RequestHeaderModifier",
            "requestHeaderModifier": {"remove": ["x-modelplane-caller"]},
        },
    ]
    refs = rule["backendRefs"]
    assert [r["weight"] for r in refs] == [27, 27, 26, 20]
    headers = [
        f["requestHeaderModifier"]["set"]
        for r in refs
        for f in r.get("filters", [])
        if f["type"] == "RequestHeaderModifier"
    ]
    assert headers == [
        [{"name": "x-modelplane-endpoint", "value": f"ml-team/coder-{x}"}] for x in "abc"
    ]
    hosts = {
        r["name"]: f["urlRewrite"]
        for r in refs
        for f in r.get("filters", [])
        if f["type"] == "URLRewrite"
    }
    # Host rewrites only (Envoy Gateway drops path rewrites on a backendRef).
    assert hosts == {
        "ep-coder-c": {"hostname": "gw.east.example.com"},
        "ep-together": {"hostname": "api.together.xyz"},
    }
    assert run.value(comp.weights)["ml-team/together"] == 20
    backends = {
        b.get("metadata.name"): b
        for b in run.of_type("kubernetes:gateway.envoyproxy.io/v1alpha1:Backend")
    }
    assert backends["ep-together"].get("spec.endpoints") == [
        {"fqdn": {"hostname": "api.together.xyz", "port": 443}}
    ]
    assert backends["ep-together"].get("spec.tls.sni") == "api.together.xyz"
    assert set(backends) == {"ep-coder-c", "ep-together"}  # IP endpoints stay Service + slice


def test_endpoint_manifests_are_plain_and_named_apart_from_workloads() -> None:
    ep = ENDPOINTS[0]
    kinds = [m["kind"] for m in endpoint_manifests(ep, "Traefik")]
    assert kinds == ["Service", "EndpointSlice"]


@pytest.mark.parametrize(
    ("backend", "release", "controller", "port"),
    [
        ("Traefik", "mp-traefik", "traefik.io/gateway-controller", 8000),
        ("EnvoyGateway", "mp-envoy-gateway", "gateway.envoyproxy.io/gatewayclass-controller", 80),
    ],
)
def test_inference_gateway(backend: str, release: str, controller: str, port: int) -> None:
    gw = load(
        InferenceGateway,
        "metadata: {name: default}\n"
        f"spec: {{backend: {backend}, cluster: {{inferenceClusterRef: west}}}}",
    )
    run = MockRun.of(
        lambda: InferenceGatewayComponent(
            "default", gw, k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests")
        )
    )
    rel = run.one("kubernetes:helm.sh/v3:Release")
    assert rel.get("name") == release
    assert rel.parent_type == "modelplane:gateway:InferenceGateway"
    if backend == "Traefik":
        assert rel.get("values.providers.kubernetesGateway.enabled") is True
        assert rel.get("repositoryOpts.repo") == "https://traefik.github.io/charts"
        # Traefik's own objects from modelplane's namespaces only (H3).
        assert rel.get("values.providers.kubernetesCRD.namespaces") == ["modelplane-system"]
    else:
        assert rel.get("values.config.envoyGateway.extensionApis.enableBackend") is True
    cls = run.one("kubernetes:gateway.networking.k8s.io/v1:GatewayClass")
    assert cls.get("spec.controllerName") == controller
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert gateway.get("spec.listeners.0.port") == port
    # Routes of modelplane's namespaces only (H3): the label every namespace it ensures has.
    assert gateway.get("spec.listeners.0.allowedRoutes") == {
        "namespaces": {
            "from": "Selector",
            "selector": {"matchLabels": {"modelplane.ai/routes": "true"}},
        }
    }
    assert gateway.depends_on(rel)
    ns = run.one("kubernetes:core/v1:NamespacePatch")
    assert ns.get("metadata.labels")["modelplane.ai/routes"] == "true"


def rendered_gateway(spec: str, **options: Any) -> MockRun:
    """A mocked run of an InferenceGateway (``spec``: its spec fields) on a renderTo provider,
    no controller installed; ``options``: more InferenceGatewayComponent arguments."""
    gw = load(InferenceGateway, f"metadata: {{name: default}}\nspec: {{{spec}}}")
    return MockRun.of(
        lambda: InferenceGatewayComponent(
            "default",
            gw,
            k8s.Provider("gw-k8s", render_yaml_to_directory="/tmp/x"),
            install_controller=False,
            **options,
        )
    )


def test_render_only_gateway_skips_the_helm_release() -> None:
    run = rendered_gateway("backend: Traefik, cluster: {inferenceClusterRef: west}")
    assert run.of_type("kubernetes:helm.sh/v3:Release") == []
    assert len(run.of_type("kubernetes:gateway.networking.k8s.io/v1:Gateway")) == 1


@pytest.mark.parametrize("render_only", [False, True])
def test_render_only_gateway_hands_off_its_secrets_without_values(render_only: bool) -> None:
    """H5: on a renderTo cluster the TLS key and the callers table (with the front door's
    credentials) reach the rendered folder as Secrets that name their keys, without values."""
    run = rendered_gateway(
        "backend: Traefik, cluster: {inferenceClusterRef: west},"
        " tls: {certificate: {name: t, key: crt}, privateKey: {name: t, key: key}},"
        " auth: {callers: [{name: app, secretRef: {name: app, key: key}}]}",
        caller_keys={"app": "sk-app-key"},
        front_door_key="door-key",
        tls_material=("CERT", "PRIVATE-KEY"),
        render_only=render_only,
    )
    secrets = {r.name: r for r in run.of_type("kubernetes:core/v1:Secret")}
    assert len(secrets) == 2, sorted(secrets)
    for secret in secrets.values():
        if render_only:
            assert "stringData" not in secret.inputs and "data" not in secret.inputs
            note = secret.get("metadata.annotations")[HAND_OFF_ANNOTATION]
            assert "keys: " in note
        else:
            assert secret.get("stringData")
    if render_only:
        notes = sorted(s.get("metadata.annotations")[HAND_OFF_ANNOTATION] for s in secrets.values())
        assert any("keys: tls.crt, tls.key" in n for n in notes)
        assert any("keys: callers.json" in n for n in notes)


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (  # a Secret: its name, type and keys, never a value
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s", "annotations": {"a": "b"}},
                "type": "Opaque",
                "stringData": {"token": "v"},
                "data": {"ca": "dg=="},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "s",
                    "annotations": {
                        "a": "b",
                        HAND_OFF_ANNOTATION: "create this Secret's data out of band (keys: "
                        "ca, token); modelplane writes no secret value into rendered files",
                    },
                },
                "type": "Opaque",
            },
        ),
        (  # anything else as it is
            {"apiVersion": "v1", "kind": "ConfigMap", "data": {"x": "y"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "data": {"x": "y"}},
        ),
    ],
)
def test_hand_off_keeps_a_secrets_keys_and_drops_its_values(
    manifest: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert hand_off(manifest) == expected
