"""Callers with keys (issue 26, item 3): the API, its validation, the rendered gateway
objects, and the authorization service behind Traefik's forwardAuth. Select with
`pytest -k "auth or tls or security"`."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelplane import authz
from modelplane.api.loader import load_fleet

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- the service


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "callers.json"
    path.write_text(json.dumps({authz.key_hash("key-a"): "team-a", authz.key_hash("key-b"): "b"}))
    return path


@pytest.fixture
def service(keys_file: Path) -> Iterator[str]:
    server = authz.serve(keys_file, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/check"
    finally:
        server.shutdown()
        server.server_close()


def ask(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


@pytest.mark.parametrize(
    ("headers", "status", "caller"),
    [
        ({}, 401, None),
        ({"Authorization": "Bearer wrong"}, 401, None),
        ({"x-api-key": "wrong"}, 401, None),
        ({"Authorization": "Basic a2V5LWE="}, 401, None),
        ({"Authorization": "Bearer key-a"}, 200, "team-a"),
        ({"authorization": "bearer  key-b "}, 200, "b"),
        ({"x-api-key": "key-a"}, 200, "team-a"),
        # A forged caller header does not let anyone in, nor survive: the answer sets it.
        ({"x-modelplane-caller": "team-a"}, 401, None),
        ({"x-api-key": "key-b", "x-modelplane-caller": "team-a"}, 200, "b"),
    ],
)
def test_auth_service_answers(
    service: str, headers: dict[str, str], status: int, caller: str | None
) -> None:
    got, answer, body = ask(service, headers)
    assert got == status
    assert answer.get("x-modelplane-caller") == caller
    if status == 401:
        error = json.loads(body)["error"]
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "invalid_api_key"
        assert "key-a" not in body.decode() and "wrong" not in body.decode()


def test_auth_key_rotation_is_picked_up_without_restart(service: str, keys_file: Path) -> None:
    assert ask(service, {"x-api-key": "key-a"})[0] == 200
    rotated = {authz.key_hash("key-a2"): "team-a", authz.key_hash("key-b"): "b"}
    keys_file.write_text(json.dumps(rotated))
    os.utime(keys_file, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    deadline = time.monotonic() + 10  # the file is checked every second
    while ask(service, {"x-api-key": "key-a"})[0] != 401:
        assert time.monotonic() < deadline, "the old key still works"
        time.sleep(0.1)
    assert ask(service, {"x-api-key": "key-a2"})[1].get("x-modelplane-caller") == "team-a"
    assert ask(service, {"x-api-key": "key-b"})[0] == 200


def test_auth_unreadable_keys_fail_closed(service: str, keys_file: Path) -> None:
    keys_file.write_text("{not json")
    os.utime(keys_file, ns=(time.time_ns() + 2 * 10**9, time.time_ns() + 2 * 10**9))
    deadline = time.monotonic() + 10  # the file is checked every second
    while ask(service, {"x-api-key": "key-a"})[0] != 401:
        assert time.monotonic() < deadline, "an unreadable keys file still lets key-a in"
        time.sleep(0.1)


# --------------------------------------------------------------------------- validation


def gateway_fleet(tmp_path: Path, gateway_spec: str) -> Path:
    """specs/dev with its InferenceGateway's spec extended by ``gateway_spec``."""
    import shutil

    target = tmp_path / "fleet"
    shutil.copytree(ROOT / "specs" / "dev", target)
    fleet = target / "fleet.yaml"
    text = without_auth(fleet.read_text())
    anchor = "  cluster: {inferenceClusterRef: dev-1}\n"
    assert anchor in text
    fleet.write_text(text.replace(anchor, anchor + gateway_spec))
    return target


def without_auth(text: str) -> str:
    """specs/dev's fleet.yaml without its InferenceGateway's `auth` (and its comment)."""
    lines = text.splitlines(keepends=True)
    auth = next((i for i, line in enumerate(lines) if line.startswith("  auth:")), None)
    if auth is None:
        return text
    start, end = auth, auth + 1
    while lines[start - 1].startswith("  #"):
        start -= 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    return "".join(lines[:start] + lines[end:])


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            "  auth:\n    allowInsecure: true\n    callers:\n"
            "    - {name: team-a, secretRef: {name: a, key: k}}\n"
            "    - {name: team-a, secretRef: {name: b, key: k}}\n",
            "spec.auth",
            "duplicate caller name(s): team-a",
        ),
        (
            "  auth:\n    callers:\n    - {name: team-a, secretRef: {name: a}}\n",
            "spec.auth.callers[0].secretRef.key",
            "required",
        ),
        ("  auth: {callers: []}\n", "spec.auth.callers", "at least 1"),
        (
            "  tls:\n    certificate: {name: tls}\n    privateKey: {name: tls, key: tls.key}\n",
            "spec.tls.certificate.key",
            "required",
        ),
        (
            "  tls:\n    certificate: {name: tls, key: tls.crt}\n",
            "spec.tls.privateKey",
            "required",
        ),
        (
            "  tls:\n    certificate: {name: t, key: c}\n    privateKey: {name: t, key: k}\n"
            "    http: Allow\n",
            "spec.tls.http",
            "",
        ),
    ],
)
def test_auth_and_tls_bad_input_is_a_validation_error(
    tmp_path: Path, spec: str, field: str, message: str
) -> None:
    result = load_fleet(gateway_fleet(tmp_path, spec))
    gateway_errors = [e for e in result.errors if e.object.startswith("InferenceGateway")]
    assert [e.path for e in gateway_errors] == [field], result.errors
    assert message in gateway_errors[0].message


def test_auth_and_tls_valid_spec_loads(tmp_path: Path) -> None:
    result = load_fleet(
        gateway_fleet(
            tmp_path,
            "  auth:\n    callers:\n"
            "    - {name: team-a, secretRef: {name: keys, key: team-a}}\n"
            "    - {name: batch, secretRef: {name: 'file:keys/batch', key: key}}\n"
            "  tls:\n    certificate: {name: tls, key: tls.crt}\n"
            "    privateKey: {name: tls, key: tls.key}\n    http: Refuse\n",
        )
    )
    assert not result.errors, result.errors
    gateway = result.fleet.gateway
    assert gateway is not None and gateway.spec.auth is not None and gateway.spec.tls
    assert [c.name for c in gateway.spec.auth.callers] == ["team-a", "batch"]
    assert gateway.spec.tls.http == "Refuse"


# --------------------------------------------------------------------------- the render

# `http: Redirect` with auth needs allowInsecure (security review M5): this render keeps the
# redirect route covered; the default with auth (Refuse) is test_security_transport.py's.
AUTH_SPEC = (
    "  auth:\n    allowInsecure: true\n    callers:\n"
    "    - {name: team-a, secretRef: {name: keys, key: team-a}}\n"
    "    - {name: batch, secretRef: {name: keys, key: batch}}\n"
    "  tls:\n    certificate: {name: front-tls, key: crt}\n"
    "    privateKey: {name: front-tls, key: key}\n    http: Redirect\n"
)
KEYS = {
    "MODELPLANE_SECRET_KEYS_TEAM_A": "sk-team-a-5f9c2e7d-0b41a9c3e6f2d8b7",
    "MODELPLANE_SECRET_KEYS_BATCH": "sk-batch-81b3a0c4-7e2d5f9a1c6b3e08",
    "MODELPLANE_SECRET_FRONT_TLS_CRT": "-----BEGIN CERTIFICATE-----\nfakecert7c1d\n",
    "MODELPLANE_SECRET_FRONT_TLS_KEY": "-----BEGIN PRIVATE KEY-----\nfakekey93ab\n",
}


def local_fleet(tmp_path: Path, gateway_spec: str) -> Path:
    import shutil

    target = tmp_path / "local"
    shutil.copytree(ROOT / "specs" / "local", target)
    fleet = target / "fleet.yaml"
    anchor = "  cluster: {inferenceClusterRef: local}\n"
    text = without_auth(fleet.read_text())
    assert anchor in text
    fleet.write_text(text.replace(anchor, anchor + gateway_spec))
    return target


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from modelplane.render import render_fleet

    tmp = tmp_path_factory.mktemp("auth-render")
    saved = {k: os.environ.get(k) for k in KEYS}
    os.environ.update(KEYS)
    try:
        render_fleet(local_fleet(tmp, AUTH_SPEC), tmp / "out", stacks=["gateway"])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return tmp / "out" / "gateway"


def manifests(out: Path) -> dict[tuple[str, str], dict]:
    import yaml

    found = {}
    for path in sorted((out / "manifests").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def test_auth_and_tls_render_no_secret_value(rendered: Path) -> None:
    files = [p for p in rendered.rglob("*") if p.is_file()]
    assert files
    for path in files:
        text = path.read_text()
        for value in KEYS.values():
            assert value.strip().splitlines()[-1] not in text, f"a secret leaked into {path}"
        # Not even the hashes of the keys are in the render: the whole table is a secret.
        for value in ("sk-team-a-5f9c2e7d-0b41a9c3e6f2d8b7", "sk-batch-81b3a0c4-7e2d5f9a1c6b3e08"):
            assert authz.key_hash(value) not in text, path
    found = manifests(rendered)
    # specs/local's cluster renders to a folder: its Secrets are hand-offs (H5), keys named.
    callers = found[("Secret", "modelplane-callers")]
    assert "stringData" not in callers and "data" not in callers
    assert "keys: callers.json)" in callers["metadata"]["annotations"]["modelplane.ai/hand-off"]
    tls = found[("Secret", "modelplane-front-door-tls")]
    assert tls["type"] == "kubernetes.io/tls" and "stringData" not in tls
    assert "keys: tls.crt, tls.key)" in tls["metadata"]["annotations"]["modelplane.ai/hand-off"]


def test_tls_listener_redirect_and_auth_middlewares_in_order(rendered: Path) -> None:
    from tests import k8s_schemas

    found = manifests(rendered)
    gateway = found[("Gateway", "modelplane")]
    listeners = {item["name"]: item for item in gateway["spec"]["listeners"]}
    assert listeners["web"]["protocol"] == "HTTP"
    assert listeners["websecure"]["protocol"] == "HTTPS"
    assert listeners["websecure"]["port"] == 8443
    assert listeners["websecure"]["tls"]["certificateRefs"] == [
        {"group": "", "kind": "Secret", "name": "modelplane-front-door-tls"}
    ]
    redirect = found[("HTTPRoute", "modelplane-https-redirect")]
    assert redirect["spec"]["parentRefs"][0]["sectionName"] == "web"
    assert redirect["spec"]["rules"][0]["filters"][0]["requestRedirect"]["scheme"] == "https"
    route = found[("HTTPRoute", "qwen")]
    assert route["spec"]["parentRefs"][0]["sectionName"] == "websecure"
    [rule] = route["spec"]["rules"]
    order = [f["extensionRef"]["name"] for f in rule["filters"]]
    assert order == ["qwen-client-headers", "qwen-auth", "qwen-strip-key", "qwen-retry"]
    auth = found[("Middleware", "qwen-auth")]["spec"]["forwardAuth"]
    assert auth["address"].startswith("http://modelplane-authz.modelplane-system.svc")
    # The caller's name, and the front door's credentials in place of the caller's key.
    assert auth["authResponseHeaders"] == ["x-modelplane-caller", "Authorization"]
    assert auth["trustForwardHeader"] is False
    strip = found[("Middleware", "qwen-strip-key")]["spec"]["headers"]
    assert strip["customRequestHeaders"] == {"X-Api-Key": ""}
    service = found[("Deployment", "modelplane-authz")]["spec"]["template"]["spec"]
    assert service["volumes"][1] == {"name": "keys", "secret": {"secretName": "modelplane-callers"}}
    for key in [
        ("Middleware", "qwen-auth"),
        ("Middleware", "qwen-strip-key"),
        ("Gateway", "modelplane"),
        ("HTTPRoute", "qwen"),
        ("HTTPRoute", "modelplane-https-redirect"),
    ]:
        assert k8s_schemas.errors(found[key]) == [], key


def test_auth_refuse_plain_http_has_no_public_web_listener() -> None:
    """Envoy Gateway: no `web` listener, so no port 80 on its Service. Traefik keeps `web` for
    the shards' second pass, on no LoadBalancer port (tests/components/
    test_security_transport.py)."""
    from modelplane.components.gateway import gateway_manifest

    listeners = gateway_manifest("EnvoyGateway", tls="Refuse")["spec"]["listeners"]
    assert [item["name"] for item in listeners] == ["websecure"]
    listeners = gateway_manifest("Traefik", tls="Refuse")["spec"]["listeners"]
    assert [item["name"] for item in listeners] == ["web", "websecure"]


def test_auth_on_envoy_gateway_is_refused(tmp_path: Path) -> None:
    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n    - {name: a, secretRef: {name: k, key: a}}\n",
    )
    fleet = target / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("backend: Traefik", "backend: EnvoyGateway"))
    errors = [e for e in load_fleet(target).errors if e.object.startswith("InferenceGateway")]
    assert [e.path for e in errors] == ["spec"], errors
    assert "auth needs backend Traefik" in errors[0].message


# --------------------------------------------------------------------------- modelplane call


def test_auth_call_picks_the_named_or_first_readable_caller_key(tmp_path: Path) -> None:
    from modelplane.cli.call import caller_key

    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n"
        "    - {name: team-a, secretRef: {name: keys, key: team-a}}\n"
        "    - {name: batch, secretRef: {name: 'file:keys/batch.key', key: k}}\n",
    )
    (target / "keys").mkdir()
    (target / "keys" / "batch.key").write_text("sk-batch\n")  # inside the fleet folder
    gateway = load_fleet(target).fleet.gateway
    env = {"MODELPLANE_SECRET_KEYS_TEAM_A": "sk-a"}
    assert caller_key(gateway, None, env=env, base_dir=target) == ("team-a", "sk-a", "")
    assert caller_key(gateway, None, env={}, base_dir=target) == ("batch", "sk-batch", "")
    assert caller_key(gateway, "batch", env=env, base_dir=target)[:2] == ("batch", "sk-batch")
    name, key, why = caller_key(gateway, "team-a", env={}, base_dir=target)
    assert (name, key) == (None, None) and "MODELPLANE_SECRET_KEYS_TEAM_A" in why
    assert "no caller 'nobody'" in caller_key(gateway, "nobody", env=env, base_dir=target)[2]
    open_gateway = load_fleet(gateway_fleet(tmp_path / "open", "")).fleet.gateway
    assert caller_key(open_gateway, None, env=env, base_dir=target) == (None, None, "")
    assert "no spec.auth" in caller_key(open_gateway, "x", env=env, base_dir=target)[2]


def test_auth_dev_fleet_writes_missing_caller_keys_into_its_state(tmp_path: Path) -> None:
    from modelplane.devfleet.fleet import ensure_caller_keys

    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n"
        "    - {name: dev, secretRef: {name: 'file:${MODELPLANE_DEV_FLEET_STATE}/callers/dev', "
        "key: key}}\n"
        "    - {name: ops, secretRef: {name: ops-keys, key: ops}}\n"
        "    - {name: out, secretRef: {name: 'file:${MODELPLANE_DEV_FLEET_STATE}/../out', "
        "key: key}}\n",
    )
    state = tmp_path / "state"
    state.mkdir()
    fleet = load_fleet(target).fleet
    [written] = ensure_caller_keys(fleet, state)
    assert written == state / "callers" / "dev"
    key = written.read_text().strip()
    assert key.startswith("sk-mp-") and len(key) > 40
    assert written.stat().st_mode & 0o777 == 0o600
    assert ensure_caller_keys(fleet, state) == []  # kept: a key is not rotated by `up`
    assert written.read_text().strip() == key
    assert not (tmp_path / "out").exists()  # never outside the state directory


def test_auth_keys_table_hashes_keys_without_surrounding_whitespace() -> None:
    from modelplane.components.gateway import callers_table

    table = json.loads(callers_table({"dev": "sk-dev\n", "ops": "  sk-ops "}, "hop-key\n"))
    assert table["callers"] == {authz.key_hash("sk-dev"): "dev", authz.key_hash("sk-ops"): "ops"}
    assert table["open"] is False
    # The front door's credentials for the workload gateways (api.md "Private workload
    # gateways"): Basic, user modelplane, the key without its whitespace.
    assert table["frontDoor"] == "Basic " + base64.b64encode(b"modelplane:hop-key").decode()
    assert "sk-dev" not in callers_table({"dev": "sk-dev"})
    # Without spec.auth every request gets in (still with the front door's credentials).
    assert json.loads(callers_table(None, "k"))["open"] is True


def test_auth_rotated_key_changes_the_gateway_stack_fingerprint(tmp_path: Path) -> None:
    from modelplane.driver.fingerprint import secret_digests, secret_refs

    target = gateway_fleet(tmp_path, AUTH_SPEC)
    fleet = load_fleet(target).fleet
    [unit] = [u for u in _units(target) if u.kind == "InferenceGateway"]
    assert ("keys", "team-a") in secret_refs(fleet, unit)
    assert ("front-tls", "key") in secret_refs(fleet, unit)
    before = secret_digests(fleet, unit, environ=KEYS, base_dir=target)
    after = secret_digests(
        fleet, unit, environ={**KEYS, "MODELPLANE_SECRET_KEYS_TEAM_A": "sk-new"}, base_dir=target
    )
    assert before != after and "sk-new" not in json.dumps(after)


def _units(target: Path) -> list:
    from modelplane.lock import PlacementLock
    from modelplane.stacks import stack_units

    return stack_units(load_fleet(target).fleet, PlacementLock())


@pytest.mark.parametrize(
    ("gateway_spec", "callers", "object_", "field", "message"),
    [
        (
            "",  # no spec.auth
            "[dev]",
            "ModelService demo/chat",
            "spec.callers",
            "callers needs the InferenceGateway's spec.auth",
        ),
        (
            "  auth:\n    allowInsecure: true\n    callers:\n    - {name: dev, secretRef: {name: k, key: dev}}\n",
            "[dev, ops]",
            "ModelService demo/chat",
            "spec.callers",
            "no InferenceGateway caller named 'ops'",
        ),
        (
            "  auth:\n    allowInsecure: true\n    callers:\n    - {name: dev, secretRef: {name: k, key: dev}}\n",
            "[dev, dev]",
            "ModelService demo/chat",
            "spec.callers",
            "duplicate caller name(s): dev",
        ),
        (
            "  auth:\n    allowInsecure: true\n    callers:\n    - {name: dev, secretRef: {name: k, key: dev}}\n",
            "[]",
            "ModelService demo/chat",
            "spec.callers",
            "at least 1",
        ),
    ],
    ids=["without-auth", "unknown-caller", "duplicate", "empty"],
)
def test_auth_service_callers_bad_input_is_a_validation_error(
    tmp_path: Path, gateway_spec: str, callers: str, object_: str, field: str, message: str
) -> None:
    target = gateway_fleet(tmp_path, gateway_spec)
    models = target / "models.yaml"
    anchor = "  name: chat\n  namespace: demo\nspec:\n"
    text = models.read_text()
    assert anchor in text
    models.write_text(text.replace(anchor, anchor + f"  callers: {callers}\n"))
    errors = load_fleet(target).errors
    assert [(e.object, e.path) for e in errors] == [(object_, field)], errors
    assert message in errors[0].message


def test_auth_service_callers_valid_spec_and_its_route_names_them(tmp_path: Path) -> None:
    from modelplane.components.model_service import FrontDoor, service_policy_manifests

    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n    - {name: dev, secretRef: {name: k, key: dev}}\n"
        "    - {name: ops, secretRef: {name: k, key: ops}}\n",
    )
    models = target / "models.yaml"
    anchor = "  name: chat\n  namespace: demo\nspec:\n"
    models.write_text(models.read_text().replace(anchor, anchor + "  callers: [ops]\n"))
    result = load_fleet(target)
    assert not result.errors, result.errors
    service = result.fleet.services["demo/chat"]
    assert service.spec.callers == ["ops"]
    [_headers, auth, *_] = service_policy_manifests(
        service, "Traefik", FrontDoor(authz_address="http://a/")
    )
    assert auth["spec"]["forwardAuth"]["address"] == "http://a/?callers=ops"


def test_auth_missing_gateway_secret_is_reported_before_anything_runs(tmp_path: Path) -> None:
    """`validate` lists a gateway secret no source has (a warning: the environment lacks it;
    --strict makes it an error) and `up` refuses the fleet before any stack runs."""
    from typer.testing import CliRunner

    from modelplane.cli import app, commands  # noqa: F401  (registers every verb)
    from modelplane.driver.fleet import Fleet
    from modelplane.errors import UserError

    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n"
        "    - {name: team-a, secretRef: {name: 'file:team-a.key', key: k}}\n"
        "    - {name: ops, secretRef: {name: missing-keys, key: ops}}\n",
    )
    (target / "team-a.key").write_text("sk-a-" + "4" * 40 + "\n")
    runner = CliRunner()
    plain = runner.invoke(app, ["validate", str(target), "-o", "json"], env={"COLUMNS": "500"})
    assert plain.exit_code == 0, plain.output
    [warning] = json.loads(plain.output)["warnings"]
    assert (warning["object"], warning["path"]) == (
        "InferenceGateway default",
        "spec.auth.callers[1].secretRef",
    )
    assert "MODELPLANE_SECRET_MISSING_KEYS_OPS" in warning["message"]
    strict = runner.invoke(app, ["validate", str(target), "--strict"], env={"COLUMNS": "500"})
    assert strict.exit_code == 2, strict.output
    with pytest.raises(UserError) as raised:
        Fleet.load(target, env={"PATH": os.environ["PATH"]}).check_gateway_secrets()
    assert "spec.auth.callers[1].secretRef" in str(raised.value)
    assert "spec.auth.callers[0]" not in str(raised.value)
    # Set in the environment: nothing to report.
    env = {"PATH": os.environ["PATH"], "MODELPLANE_SECRET_MISSING_KEYS_OPS": "sk-ops-" + "5" * 40}
    Fleet.load(target, env=env).check_gateway_secrets()


def test_auth_example_fleets_keys_are_made_by_keys_create_never_by_up(tmp_path: Path) -> None:
    """specs/quickstart (like every cloud example) turns auth on with keys in its own `.modelplane/`:
    `up` (Fleet.load for up) makes none and names them all (security review M3); `modelplane keys
    create` writes them (0600), later `up`s keep them; a file outside the fleet's state is never made."""
    import shutil

    from typer.testing import CliRunner

    from modelplane.cli import app, commands  # noqa: F401  (registers every verb)
    from modelplane.cli.call import caller_key
    from modelplane.driver.fleet import Fleet
    from modelplane.secrets import CallerKeysMissing

    target = tmp_path / "quickstart"
    shutil.copytree(
        ROOT / "specs" / "quickstart", target, ignore=shutil.ignore_patterns(".modelplane")
    )
    gateway = load_fleet(target).fleet.gateway
    assert gateway is not None and gateway.spec.auth is not None
    # Its front door's certificate (security review M5) comes from the environment here.
    env = {
        "PATH": os.environ["PATH"],
        "MODELPLANE_SECRET_FRONT_DOOR_TLS_CRT": "-----BEGIN CERTIFICATE-----\n",
        "MODELPLANE_SECRET_FRONT_DOOR_TLS_KEY": "-----BEGIN PRIVATE KEY-----\n",
    }
    with pytest.raises(CallerKeysMissing) as missing:
        Fleet.load(target, env=env).check_gateway_secrets()
    assert [m.caller for m in missing.value.missing] == ["app", "ops"]
    assert not (target / ".modelplane" / "callers").exists()
    created = CliRunner().invoke(app, ["keys", "create", str(target)], env={"COLUMNS": "500"})
    assert created.exit_code == 0, created.output
    made = sorted((target / ".modelplane" / "callers").iterdir())
    assert [p.name for p in made] == ["app", "ops"]
    keys = {p.name: p.read_text() for p in made}
    assert all(k.startswith("sk-mp-") for k in keys.values())
    assert not any(k.strip() in created.output for k in keys.values())  # never printed
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in made)
    assert Fleet.load(target, env=env).check_gateway_secrets() == []
    assert {p.name: p.read_text() for p in made} == keys  # kept, never rotated by `up`
    assert caller_key(gateway, None, env=env, base_dir=target)[:2] == ("app", keys["app"].strip())
    # Outside the fleet's state: not made (and so reported).
    fleet = target / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("file:.modelplane/callers/ops", "file:../ops.key"))
    with pytest.raises(Exception, match="spec.auth.callers\\[1\\].secretRef"):
        Fleet.load(target, env=env).check_gateway_secrets()
    assert not (tmp_path / "ops.key").exists()


def test_auth_keys_modelplane_keeps_are_files_in_the_fleets_state(tmp_path: Path) -> None:
    from modelplane.secrets import caller_key_files, missing_caller_keys

    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n"
        "    - {name: dev, secretRef: {name: 'file:.modelplane/callers/dev', key: key}}\n"
        "    - {name: ops, secretRef: {name: ops-keys, key: ops}}\n"
        "    - {name: out, secretRef: {name: 'file:callers/out', key: key}}\n",
    )
    fleet = load_fleet(target).fleet
    dev, ops, out = caller_key_files(fleet, target, {})
    assert dev.path == (target / ".modelplane" / "callers" / "dev").resolve()
    assert ops.path is None and "MODELPLANE_SECRET_OPS_KEYS_OPS" in ops.why
    assert out.path is None and "outside .modelplane/" in out.why  # yours: never made
    assert [m.caller for m in missing_caller_keys(fleet, target, {})] == ["dev"]
    # Given through the environment (CI, the reconcile pod): not missing.
    env = {"MODELPLANE_SECRET_FILE__MODELPLANE_CALLERS_DEV_KEY": "sk-dev"}
    assert dev.env_var in env
    assert missing_caller_keys(fleet, target, env) == []
