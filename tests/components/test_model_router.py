"""Routing by model name (issue 37): `spec.models`, its validation, and the router objects
the gateway stack renders (modelplane/components/model_router.py). Select with `pytest -k openai`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from modelplane.api.loader import load_fleet
from tests.components.test_gateway_auth import manifests, without_auth

ROOT = Path(__file__).resolve().parents[2]
AUTH = (
    "  auth:\n    allowInsecure: true\n    callers:\n"
    "    - {name: team-a, secretRef: {name: keys, key: team-a}}\n"
    "    - {name: batch, secretRef: {name: keys, key: batch}, limits: {requestsPerMinute: 60}}\n"
)
KEYS = {
    "MODELPLANE_SECRET_KEYS_TEAM_A": "sk-a-1f2e-8c4d2b7e9a0f3c6d5b1e7a9c",
    "MODELPLANE_SECRET_KEYS_BATCH": "sk-b-9d8c-3f7a1e5c0b9d2e4f6a8c1d3e",
    "MODELPLANE_SECRET_FRONT_TLS_CRT": "-----BEGIN CERTIFICATE-----\nfakecert5e1a\n",
    "MODELPLANE_SECRET_FRONT_TLS_KEY": "-----BEGIN PRIVATE KEY-----\nfakekey0b7d\n",
}
TLS = "  tls:\n    certificate: {name: front-tls, key: crt}\n    privateKey: {name: front-tls, key: key}\n"
MODELS = "  models: [Qwen/Qwen2.5-7B-Instruct, qwen]\n  callers: [batch]\n"


def local_fleet(tmp: Path, gateway_spec: str, service_spec: str, name: str = "local") -> Path:
    target = tmp / name
    shutil.copytree(ROOT / "specs" / "local", target)
    fleet = target / "fleet.yaml"
    anchor = "  cluster: {inferenceClusterRef: local}\n"
    fleet.write_text(without_auth(fleet.read_text()).replace(anchor, anchor + gateway_spec))
    models = target / "qwen.yaml"
    text = models.read_text()
    assert "  endpoints:\n" in text
    models.write_text(text.replace("  endpoints:\n", service_spec + "  endpoints:\n"))
    return target


def render(
    tmp: Path, gateway_spec: str, service_spec: str, name: str
) -> dict[tuple[str, str], Any]:
    from modelplane.render import render_fleet

    with pytest.MonkeyPatch.context() as env:  # the callers' and TLS secrets, this render only
        for key, value in KEYS.items():
            env.setenv(key, value)
        fleet = local_fleet(tmp, gateway_spec, service_spec, name)
        render_fleet(fleet, tmp / f"out-{name}", stacks=["gateway"])
    return manifests(tmp / f"out-{name}" / "gateway")


@pytest.mark.parametrize(
    ("auth", "keys_arg"),
    [(AUTH, ["--keys", "/keys/callers.json"]), ("", ["--open"])],
    ids=["with-keys", "open"],
)
def test_openai_router_renders_its_table_service_and_route(
    tmp_path: Path, auth: str, keys_arg: list[str]
) -> None:
    from tests import k8s_schemas

    callers = MODELS if auth else "  models: [Qwen/Qwen2.5-7B-Instruct, qwen]\n"
    found = render(tmp_path, auth, callers, "with" if auth else "open")
    table = json.loads(found[("ConfigMap", "modelplane-router")]["data"]["models.json"])
    [[replica, weight]] = table["models"]["qwen"]["endpoints"]  # specs/local's one replica
    assert replica.startswith("demo/qwen-") and weight == 1
    entry = {
        "service": "demo/qwen",
        "path": "/demo/qwen/",
        "owner": "demo",
        "callers": ["batch"] if auth else None,
        "ready": True,
        "firstByte": 300.0,
        "idle": 60.0,
        "endpoints": [[replica, 1]],
        "tiers": [],
    }
    assert table["models"] == {"Qwen/Qwen2.5-7B-Instruct": entry, "qwen": entry}
    assert table["replicas"] == 2  # each router replica enforces half a caller's limits
    assert table["limits"] == ({"batch": {"requestsPerMinute": 60}} if auth else {})
    # The service's route: the weighted rule, then one rule per endpoint for a pinned session.
    weighted, pinned = found[("HTTPRoute", "qwen")]["spec"]["rules"]
    assert pinned["matches"] == [
        {
            "path": {"type": "PathPrefix", "value": "/demo/qwen/"},
            "headers": [{"type": "Exact", "name": "x-modelplane-pin", "value": replica}],
        }
    ]
    assert pinned["filters"] == weighted["filters"]  # the same checks
    assert pinned["backendRefs"] == weighted["backendRefs"]  # its one endpoint
    assert k8s_schemas.errors(found[("HTTPRoute", "qwen")]) == []
    code = found[("ConfigMap", "modelplane-router")]["data"]
    assert "def make_handler" in code["router.py"] and "class Keys" in code["authz.py"]
    pod = found[("Deployment", "modelplane-router")]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    command = container["command"]
    assert command[:4] == ["python", "/app/router.py", "--models", "/app/models.json"]
    assert command[4 : 4 + len(keys_arg)] == keys_arg
    # Requests go on to the front door's own Service, at the service's path.
    assert command[-4:-2] == [
        "--front-door",
        "http://mp-traefik.traefik-system.svc.cluster.local:80",
    ]
    volumes = {v["name"] for v in pod["volumes"]}
    assert volumes == ({"code", "keys"} if auth else {"code"})
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    route = found[("HTTPRoute", "modelplane-openai")]
    [rule] = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/v1/"}}]
    assert rule["backendRefs"] == [
        {"group": "", "kind": "Service", "name": "modelplane-router", "port": 8080}
    ]
    service = found[("Service", "modelplane-router")]
    assert service["spec"]["selector"] == {"modelplane.ai/router": "modelplane-router"}
    for key in [
        ("ConfigMap", "modelplane-router"),
        ("Deployment", "modelplane-router"),
        ("Service", "modelplane-router"),
        ("HTTPRoute", "modelplane-openai"),
    ]:
        assert k8s_schemas.errors(found[key]) == [], key


def test_openai_router_is_absent_without_model_names(tmp_path: Path) -> None:
    found = render(tmp_path, "", "", "none")
    assert not [k for k in found if k[1] in ("modelplane-router", "modelplane-openai")]
    assert len(found[("HTTPRoute", "qwen")]["spec"]["rules"]) == 1  # no pinned rules


SECOND = """---
apiVersion: modelplane.ai/v1alpha1
kind: ModelService
metadata: {name: other, namespace: demo}
spec:
  models: [qwen, other]
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: qwen}}
"""


@pytest.mark.parametrize(
    ("gateway", "service", "extra", "where", "message"),
    [
        ("", "  models: [qwen]\n", SECOND, ("demo/qwen", "spec.models[0]"), "already served"),
        ("", "  models: [qwen, qwen]\n", "", ("demo/qwen", "spec.models"), "duplicate model"),
        ("", "  models: [' bad']\n", "", ("demo/qwen", "spec.models[0]"), "pattern"),
        ("", "  models: []\n", "", ("demo/qwen", "spec.models"), "at least 1"),
        (
            "",
            "  models: [q]\n  timeouts: {firstByte: 0s}\n",
            "",
            ("demo/qwen", "spec.timeouts.firstByte"),
            "more than 0s",
        ),
    ],
)
def test_openai_model_names_bad_input(
    tmp_path: Path,
    gateway: str,
    service: str,
    extra: str,
    where: tuple[str, str],
    message: str,
) -> None:
    target = local_fleet(tmp_path, gateway, service)
    if extra:
        models = target / "qwen.yaml"
        models.write_text(models.read_text() + extra)
    errors = [e for e in load_fleet(target).errors if e.object.startswith("ModelService")]
    assert [(e.object, e.path) for e in errors] == [(f"ModelService {where[0]}", where[1])], errors
    assert message in errors[0].message


def test_openai_router_behind_tls_trusts_only_the_front_doors_certificate(tmp_path: Path) -> None:
    """With `spec.tls` the router sends requests on over https to the front door's own Service
    and mounts the TLS Secret's certificate alone: never its private key."""
    found = render(tmp_path, AUTH + TLS, MODELS, "tls")
    pod = found[("Deployment", "modelplane-router")]["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    at = command.index("--front-door")
    assert command[at : at + 4] == [
        "--front-door",
        "https://mp-traefik.traefik-system.svc.cluster.local:443",
        "--front-door-ca",
        "/tls/front-door.crt",
    ]
    [tls] = [v for v in pod["volumes"] if v["name"] == "front-door-tls"]
    assert tls["secret"] == {
        "secretName": "modelplane-front-door-tls",
        "items": [{"key": "tls.crt", "path": "front-door.crt"}],
    }
    route = found[("HTTPRoute", "modelplane-openai")]
    assert route["spec"]["parentRefs"][0]["sectionName"] == "websecure"


# --------------------------------------------------------------------------- tiers

TIERED = """
metadata: {name: chat, namespace: team}
spec:
  models: [chat]
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: qwen}}
  - selector: {matchLabels: {provider: saas}}
    tier: 2
"""


def _endpoints(replicas: int) -> list[Any]:
    from modelplane.components.model_service import EndpointInfo

    out = [
        EndpointInfo(
            f"qwen-{i}",
            "team",
            f"http://10.0.0.{i + 1}/",
            f"/team/qwen-{i}/",
            {"modelplane.ai/deployment": "qwen"},
            replica=True,
        )
        for i in range(replicas)
    ]
    return [
        *out,
        EndpointInfo("saas", "team", "https://api.example.com/", "/", {"provider": "saas"}),
    ]


@pytest.mark.parametrize(
    ("replicas", "serving", "overflow"),
    [
        (2, ["team/qwen-0", "team/qwen-1"], ["team/saas"]),  # replicas first, SaaS on a header
        (0, ["team/saas"], []),  # no replica in the route: the SaaS tier serves everything
    ],
)
def test_tiers_route_the_first_tier_and_keep_the_next_behind_a_header(
    replicas: int, serving: list[str], overflow: list[str]
) -> None:
    from modelplane.api.model_service import ModelService
    from modelplane.components.model_service import FrontDoor, service_route_manifests
    from tests import k8s_schemas
    from tests.components.workload_helpers import load

    service = load(ModelService, TIERED)
    door = FrontDoor(listener="web", authz_address="http://authz/")
    [route] = [
        m
        for m in service_route_manifests(
            service, _endpoints(replicas), "Traefik", ("modelplane", "modelplane-system"), door
        )
        if m["kind"] == "HTTPRoute"
    ]
    rules = route["spec"]["rules"]

    def keys(rule: dict[str, Any]) -> list[str]:
        return sorted(ref["name"] for ref in rule["backendRefs"])

    assert len(rules[0]["backendRefs"]) == len(serving)
    assert "headers" not in rules[0]["matches"][0]
    tier_rules = [
        r
        for r in rules
        if any(h["name"] == "x-modelplane-tier" for h in r["matches"][0].get("headers", []))
    ]
    assert [r["matches"][0]["headers"][0]["value"] for r in tier_rules] == (
        ["2"] if overflow else []
    )
    if overflow:
        assert keys(tier_rules[0]) == ["ep-saas"]
        assert "ep-saas" not in keys(rules[0])  # the SaaS endpoint takes no share of tier 1
    assert k8s_schemas.errors(route) == []


def test_tiers_need_traefik(tmp_path: Path) -> None:
    target = local_fleet(tmp_path, "", "")
    models = target / "qwen.yaml"
    models.write_text(
        models.read_text().replace(
            "  - selector: {matchLabels: {modelplane.ai/deployment: qwen}}\n",
            "  - selector: {matchLabels: {modelplane.ai/deployment: qwen}}\n    tier: 2\n",
        )
    )
    fleet = target / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("backend: Traefik", "backend: EnvoyGateway"))
    errors = [e for e in load_fleet(target).errors if e.path.endswith(".tier")]
    assert [e.path for e in errors] == ["spec.endpoints[0].tier"], load_fleet(target).errors


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ("{requestsPerMinute: 0}", "spec.auth.callers[0].limits.requestsPerMinute"),
        ("{tokensPerDay: -5}", "spec.auth.callers[0].limits.tokensPerDay"),
        ("{tokensPerHour: 5}", "spec.auth.callers[0].limits.tokensPerHour"),
    ],
)
def test_limits_bad_input_names_the_field(tmp_path: Path, limits: str, field: str) -> None:
    spec = (
        "  auth:\n    allowInsecure: true\n    callers:\n"
        f"    - {{name: team-a, secretRef: {{name: keys, key: team-a}}, limits: {limits}}}\n"
    )
    errors = load_fleet(local_fleet(tmp_path, spec, "")).errors
    assert [e.path for e in errors if e.object.startswith("InferenceGateway")] == [field], errors


def test_openai_router_runs_from_its_configmap_files_alone(tmp_path: Path) -> None:
    """The pod runs `python /app/router.py` with only the ConfigMap's files beside it: no
    modelplane package (`-S`: no site-packages), authz.py imported as a sibling."""
    import subprocess
    import sys
    import urllib.request

    from modelplane.components.model_router import router_sources

    for name, text in router_sources().items():
        (tmp_path / name).write_text(text)
    (tmp_path / "models.json").write_text(json.dumps({"models": {}}))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-S",
            str(tmp_path / "router.py"),
            "--models",
            str(tmp_path / "models.json"),
            "--open",
            "--front-door",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
        ],
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
        ready = next(line for line in lines if line.startswith("router ready"))
        port = int(ready.strip().rsplit(":", 1)[1])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as resp:
            assert json.loads(resp.read()) == {"object": "list", "data": []}
    finally:
        proc.terminate()
        proc.wait(10)


ZERO = (
    "  autoscaling:\n    minReplicas: 0\n    maxReplicas: 2\n"
    "    metrics: [{type: queueDepth, target: 4}]\n    idleWindow: 2m\n"
)


def zero_fleet(tmp: Path, gateway: str, service: str, name: str = "zero") -> Path:
    target = local_fleet(tmp, gateway, service, name)
    models = target / "qwen.yaml"
    models.write_text(models.read_text().replace("  replicas: 1\n", "  replicas: 1\n" + ZERO, 1))
    return target


def test_wake_a_service_over_a_deployment_at_zero_holds_its_model_names(tmp_path: Path) -> None:
    from modelplane.components.model_router import waking_services
    from modelplane.render import render_fleet

    target = zero_fleet(tmp_path, "", "  models: [qwen]\n  wake: {deadline: 2m, queue: 8}\n")
    loaded = load_fleet(target)
    assert not loaded.errors, loaded.errors
    assert waking_services(loaded.fleet) == ["demo/qwen"]
    render_fleet(target, tmp_path / "out", stacks=["gateway"])
    found = manifests(tmp_path / "out" / "gateway")
    table = json.loads(found[("ConfigMap", "modelplane-router")]["data"]["models.json"])
    assert table["models"]["qwen"]["wake"] == {"deadline": 120.0, "queue": 8}
    # without scale to zero, nothing is held
    plain = local_fleet(tmp_path, "", "  models: [qwen]\n", "plain")
    assert waking_services(load_fleet(plain).fleet) == []


@pytest.mark.parametrize(
    ("backend", "service", "field", "message"),
    [
        ("EnvoyGateway", "  models: [qwen]\n", "spec.autoscaling.minReplicas", "backend Traefik"),
        ("Traefik", "", "spec.autoscaling.minReplicas", "ModelService with `models`"),
        ("Traefik", "  models: [q]\n  wake: {queue: 0}\n", "spec.wake.queue", "greater than"),
        ("Traefik", "  models: [q]\n  wake: {deadline: 0s}\n", "spec.wake.deadline", "more than"),
    ],
)
def test_wake_bad_input_names_the_field(
    tmp_path: Path, backend: str, service: str, field: str, message: str
) -> None:
    target = zero_fleet(tmp_path, "", service)
    fleet = target / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("backend: Traefik", f"backend: {backend}"))
    errors = [e for e in load_fleet(target).errors if e.path == field]
    assert errors and message in errors[0].message, load_fleet(target).errors
