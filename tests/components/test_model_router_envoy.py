"""Routing by model name on an Envoy Gateway front door (issue 37): Envoy AI Gateway's
objects (modelplane/components/ai_gateway.py) in the gateway stack, and what stays Traefik's. Select with
`pytest -k openai`; the Traefik rendering is tests/components/test_model_router.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelplane.api.loader import load_fleet
from modelplane.api.model_service import ModelService
from modelplane.components import ai_gateway
from tests.components.test_gateway_auth import manifests
from tests.components.test_model_router import local_fleet

MODELS = "  models: [qwen, Qwen/Qwen2.5-7B-Instruct]\n"


def envoy_fleet(tmp: Path, service_spec: str, name: str = "envoy") -> Path:
    target = local_fleet(tmp, "", service_spec, name)
    fleet = target / "fleet.yaml"
    text = fleet.read_text()
    assert "backend: Traefik" in text
    fleet.write_text(text.replace("backend: Traefik", "backend: EnvoyGateway"))
    return target


def render_envoy(tmp: Path, service_spec: str, name: str = "envoy") -> dict[tuple[str, str], Any]:
    from modelplane.render import render_fleet

    fleet = envoy_fleet(tmp, service_spec, name)
    assert load_fleet(fleet).errors == []
    render_fleet(fleet, tmp / f"out-{name}", stacks=["gateway"])
    return manifests(tmp / f"out-{name}" / "gateway")


def test_openai_on_envoy_routes_each_model_name_through_ai_gateway_to_the_service_route(
    tmp_path: Path,
) -> None:
    from tests import k8s_schemas

    found = render_envoy(tmp_path, MODELS)
    # No modelplane router on Envoy: Envoy AI Gateway reads the body.
    assert not [k for k in found if k[1] == "modelplane-router"]
    route = found[("AIGatewayRoute", "modelplane-openai")]
    [parent] = route["spec"]["parentRefs"]
    assert (parent["name"], parent["namespace"], parent["sectionName"]) == (
        "modelplane",
        "modelplane-system",
        "web",
    )
    [rule] = route["spec"]["rules"]
    models = [m["headers"][0]["value"] for m in rule["matches"]]
    assert models == ["qwen", "Qwen/Qwen2.5-7B-Instruct"]
    assert {m["headers"][0]["name"] for m in rule["matches"]} == {"x-ai-eg-model"}
    assert rule["modelsOwnedBy"] == "demo"  # `owned_by` in GET /v1/models
    # Tokens counted from every answer (Envoy's dynamic metadata).
    costs = {c["type"] for c in route["spec"]["llmRequestCosts"]}
    assert {"InputToken", "OutputToken", "TotalToken"} <= costs
    # The rule's backend is the service's own path on the loop.
    [ref] = rule["backendRefs"]
    backend = found[("AIServiceBackend", ref["name"])]
    assert backend["spec"]["schema"] == {"name": "OpenAI", "prefix": "/demo/qwen/v1"}
    loop = found[("Backend", backend["spec"]["backendRef"]["name"])]
    [endpoint] = loop["spec"]["endpoints"]
    host = endpoint["fqdn"]["hostname"]
    # ... the loop Gateway's proxies, behind a ClusterIP Service of that name (never a LB).
    gateway = found[("Gateway", "modelplane-openai-loop")]
    proxy = found[("EnvoyProxy", gateway["spec"]["infrastructure"]["parametersRef"]["name"])]
    service = proxy["spec"]["provider"]["kubernetes"]["envoyService"]
    assert service["type"] == "ClusterIP"
    assert host == f"{service['name']}.envoy-gateway-system.svc.cluster.local"
    [listener] = gateway["spec"]["listeners"]
    assert (listener["protocol"], listener["port"]) == ("HTTP", endpoint["fqdn"]["port"])
    # ... which holds a silent stream as long as the front door does.
    loop_timeouts = found[("ClientTrafficPolicy", "modelplane-openai-loop-timeouts")]
    front_timeouts = found[("ClientTrafficPolicy", "modelplane-timeouts")]
    assert loop_timeouts["spec"]["targetRefs"][0]["name"] == "modelplane-openai-loop"
    assert loop_timeouts["spec"]["timeout"] == front_timeouts["spec"]["timeout"]
    # ... where the service's route takes the second pass, with its weights and checks.
    service_route = found[("HTTPRoute", "qwen")]
    parents = {(p["name"], p.get("sectionName")) for p in service_route["spec"]["parentRefs"]}
    assert parents == {("modelplane", "web"), ("modelplane-openai-loop", listener["name"])}
    assert service_route["spec"]["rules"][0]["matches"][0]["path"]["value"] == "/demo/qwen/"
    # One more try on the generated route while nothing was sent.
    retry = found[("BackendTrafficPolicy", "modelplane-openai-retry")]
    assert retry["spec"]["targetRefs"][0]["name"] == "modelplane-openai"
    assert {"reset", "connect-failure"} <= set(retry["spec"]["retry"]["retryOn"]["triggers"])
    for key, manifest in found.items():
        assert k8s_schemas.errors(manifest) == [], key


def test_openai_on_envoy_leaves_services_without_model_names_alone(tmp_path: Path) -> None:
    found = render_envoy(tmp_path, "", "plain")
    assert not [k for k in found if k[0] in ("AIGatewayRoute", "AIServiceBackend")]
    assert ("Gateway", "modelplane-openai-loop") not in found
    [parent] = found[("HTTPRoute", "qwen")]["spec"]["parentRefs"]
    assert parent["name"] == "modelplane"


@pytest.mark.parametrize(
    ("timeouts", "idle"),
    [
        ("", "300s"),  # the defaults: firstByte 5m, idle 60s
        ("  timeouts: {firstByte: 30s, idle: 90s}\n", "90s"),
        ("  timeouts: {firstByte: 2m, idle: 1500ms}\n", "120s"),
        ("  timeouts: {firstByte: 2500ms, idle: 1s}\n", "2500ms"),
    ],
)
def test_openai_on_envoy_one_idle_timer_is_the_longer_of_the_services_timeouts(
    tmp_path: Path, timeouts: str, idle: str
) -> None:
    found = render_envoy(tmp_path, MODELS + timeouts)
    [rule] = found[("AIGatewayRoute", "modelplane-openai")]["spec"]["rules"]
    assert rule["streamIdleTimeout"] == idle
    # The whole answer may take the longest generation (Envoy AI Gateway's default: 60 s).
    assert rule["timeouts"] == {"request": "3600s"}


def _service(namespace: str, name: str, models: list[str]) -> ModelService:
    return ModelService.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"models": models, "endpoints": [{"selector": {"matchLabels": {"a": "b"}}}]},
        }
    )


@pytest.mark.parametrize(
    ("count", "routes"),
    [(1, [1]), (15, [15]), (16, [15, 1]), (31, [15, 15, 1])],
)
def test_openai_on_envoy_splits_routes_at_fifteen_rules(count: int, routes: list[int]) -> None:
    services = [_service("team", f"svc-{i:02d}", [f"model-{i}"]) for i in range(count)]
    made = ai_gateway.openai_routes(services, ("modelplane", "modelplane-system"), "websecure")
    assert [len(r["spec"]["rules"]) for r in made] == routes
    names = [r["metadata"]["name"] for r in made]
    assert names[0] == "modelplane-openai" and len(set(names)) == len(names)
    # Every model name once, in the services' key order.
    matched = [
        m["headers"][0]["value"]
        for r in made
        for rule in r["spec"]["rules"]
        for m in rule["matches"]
    ]
    assert matched == [f"model-{i}" for i in range(count)]
    assert {r["spec"]["parentRefs"][0]["sectionName"] for r in made} == {"websecure"}


def test_openai_on_envoy_needs_the_front_door_on_an_inference_cluster(tmp_path: Path) -> None:
    target = envoy_fleet(tmp_path, "  models: [qwen]\n")
    fleet = target / "fleet.yaml"
    text = fleet.read_text()
    anchor = "  cluster: {inferenceClusterRef: local}\n"
    assert anchor in text
    existing = "  cluster: {existing: {secretRef: {name: gw, key: kubeconfig}}}\n"
    fleet.write_text(text.replace(anchor, existing))
    errors = [e for e in load_fleet(target).errors if e.path == "spec.models"]
    assert len(errors) == 1
    assert "Envoy AI Gateway" in errors[0].message
    assert "inferenceClusterRef" in errors[0].message


def test_openai_on_envoy_refuses_what_only_the_traefik_router_does(tmp_path: Path) -> None:
    """Tiers (the router sends a refused request to the next tier) stay Traefik's."""
    target = envoy_fleet(tmp_path, "  models: [qwen]\n")
    models = target / "qwen.yaml"
    text = models.read_text()
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("  endpoints:"))
    lines.insert(at + 1, "  - {selector: {matchLabels: {tier: saas}}, tier: 2}\n")
    models.write_text("".join(lines))
    paths = {e.path for e in load_fleet(target).errors}
    assert "spec.endpoints[1].tier" in paths or "spec.endpoints[0].tier" in paths
    assert "spec.models" not in paths


def test_openai_on_envoy_rendered_objects_are_apart_from_traefiks(tmp_path: Path) -> None:
    """The same fleet on each front door: the router's objects or Envoy AI Gateway's, never
    both."""
    from tests.components.test_model_router import render

    traefik = render(tmp_path, "", MODELS, "traefik")
    envoy = render_envoy(tmp_path, MODELS)
    ai_kinds = {"AIGatewayRoute", "AIServiceBackend"}
    assert not ai_kinds & {k for k, _ in traefik}
    assert ("Deployment", "modelplane-router") in traefik
    assert ai_kinds <= {k for k, _ in envoy}
    assert ("Deployment", "modelplane-router") not in envoy
