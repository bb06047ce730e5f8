"""Security M5 (docs/architecture.md, "Security"; docs/api.md "TLS"): what the front door
renders for its transport, and the real Traefik (the dev fleet's cached build) serving it.

- `tls.http: Refuse` (the default with `auth`): Envoy Gateway has no `web` listener, so no
  port 80; Traefik's chart Service exposes no port 80 either, and `web` is published by the
  release's ClusterIP Service `mp-traefik-internal` only, which a sharded service's second
  pass goes through (api.md "Large services").
- HSTS (`Strict-Transport-Security: max-age=31536000`) on every answer of the HTTPS listener:
  Traefik's `websecure` entrypoint runs the headers Middleware `front-door-hsts` first (a key
  check's 401 carries it too); Envoy Gateway's ClientTrafficPolicy sets it late.
- TLS 1.2 at least, TLS 1.2 suites with forward secrecy and AEAD only: Traefik's TLSOption
  `default` (what its Gateway routes' routers use), Envoy Gateway's ClientTrafficPolicy `tls`.

Select with `pytest -k security`.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi_kubernetes as k8s
import pytest

from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.model_service import ModelService
from modelplane.components.gateway import (
    HSTS_HEADER,
    HSTS_MIDDLEWARE,
    HSTS_VALUE,
    INTERNAL_SERVICE,
    TLS_OPTION,
    TRAEFIK,
    InferenceGatewayComponent,
    callers_table,
    hsts_middleware,
    release_values,
    tls_option,
)
from modelplane.components.load_balancers import ENVOY_TLS_CIPHERS
from modelplane.components.model_service import (
    LOOP_INTERNAL_SERVICE,
    LOOP_NAMESPACE,
    LOOP_PORT,
    EndpointInfo,
    FrontDoor,
    service_route_manifests,
)
from modelplane.components.workload.routes import traefik_auth_middleware
from tests import k8s_schemas
from tests.components.test_gateway_auth import manifests
from tests.components.traefik_helpers import QuietHandler, running_traefik, serve_http
from tests.components.workload_helpers import load
from tests.pulumi_mocks import MockRun

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "kubernetes:helm.sh/v3:Release"
GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
ROUTE = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"
CTP = "kubernetes:gateway.envoyproxy.io/v1alpha1:ClientTrafficPolicy"
MIDDLEWARE = "kubernetes:traefik.io/v1alpha1:Middleware"
TLS_OPTION_TYPE = "kubernetes:traefik.io/v1alpha1:TLSOption"
HSTS_REF = f"modelplane-system-{HSTS_MIDDLEWARE}@kubernetescrd"


# --------------------------------------------------------------------------- chart values

# (spec.tls.http or None, the `ports` values, the `service` values, defaultTLSResourcesNamespace)
VALUES = [
    (None, None, None, None),
    ("Redirect", {"websecure": {"http": {"middlewares": [HSTS_REF]}}}, None, "modelplane-system"),
    (
        "Refuse",
        {
            "websecure": {"http": {"middlewares": [HSTS_REF]}},
            # traefik-helm-chart v41.3.0 values.yaml: `ports.web.expose.default` (the
            # LoadBalancer Service) and one key per `service.additionalServices` entry.
            "web": {"expose": {"default": False, "internal": True}},
        },
        {"additionalServices": {"internal": {"spec": {"type": "ClusterIP"}}}},
        "modelplane-system",
    ),
]


@pytest.mark.parametrize(("http", "ports", "service", "tls_namespace"), VALUES)
def test_security_transport_traefik_chart_values(
    http: Any, ports: Any, service: Any, tls_namespace: Any
) -> None:
    values = release_values("Traefik", None, tls=http)
    assert values.get("ports") == ports
    assert values.get("service") == service
    crd = values["providers"]["kubernetesCRD"]
    assert crd.get("defaultTLSResourcesNamespace") == tls_namespace
    # On a cloud the LoadBalancer Service keeps its annotations beside the internal one.
    cloud = release_values("Traefik", "EKS", tls=http)["service"]
    assert cloud["annotations"] and cloud.get("additionalServices") == (service or {}).get(
        "additionalServices"
    )
    # The chart names an additional Service `<fullname>-<key>`: the loop's Service.
    assert INTERNAL_SERVICE == LOOP_INTERNAL_SERVICE == f"{TRAEFIK['release']}-internal"


# --------------------------------------------------------------------------- the component


def _gateway(backend: str, http: str | None) -> InferenceGateway:
    spec: dict[str, Any] = {"backend": backend, "cluster": {"inferenceClusterRef": "west"}}
    if http is not None:
        spec["tls"] = {
            "certificate": {"name": "tls", "key": "crt"},
            "privateKey": {"name": "tls", "key": "key"},
            "http": http,
        }
    return InferenceGateway.model_validate({"metadata": {"name": "default"}, "spec": spec})


# (backend, tls.http or None, listeners, a redirect route, Traefik's HSTS and TLS objects)
FRONT_DOORS = [
    ("Traefik", None, ["web"], False, False),
    ("Traefik", "Redirect", ["web", "websecure"], True, True),
    # `web` stays, on no LoadBalancer port (the chart values above): the shards' loop.
    ("Traefik", "Refuse", ["web", "websecure"], False, True),
    ("EnvoyGateway", None, ["web"], False, False),
    ("EnvoyGateway", "Redirect", ["web", "websecure"], True, False),
    # Envoy Gateway makes its Service's ports from the listeners: no listener, no port 80.
    ("EnvoyGateway", "Refuse", ["websecure"], False, False),
]


@pytest.mark.parametrize(
    ("backend", "http", "listeners", "redirect", "traefik_objects"), FRONT_DOORS
)
def test_security_transport_front_door_render(
    backend: str, http: str | None, listeners: list[str], redirect: bool, traefik_objects: bool
) -> None:
    run = MockRun.of(
        lambda: InferenceGatewayComponent(
            "default",
            _gateway(backend, http),
            k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests"),
            tls_material=("CERT", "KEY") if http else None,
        )
    )
    gateway = run.one(GATEWAY)
    assert [item["name"] for item in gateway.get("spec.listeners")] == listeners
    routes = [r.get("metadata.name") for r in run.of_type(ROUTE)]
    assert ("modelplane-https-redirect" in routes) == redirect
    middlewares = run.of_type(MIDDLEWARE)
    options = run.of_type(TLS_OPTION_TYPE)
    if traefik_objects:
        [hsts] = middlewares
        [option] = options
        assert hsts.get("metadata.name") == HSTS_MIDDLEWARE
        assert hsts.get("spec") == {"headers": {"stsSeconds": 31536000}}
        assert option.get("metadata.name") == TLS_OPTION
        assert option.get("metadata.namespace") == "modelplane-system"
        assert option.get("spec.minVersion") == "VersionTLS12"
        assert all("GCM" in c or "CHACHA20" in c for c in option.get("spec.cipherSuites"))
        # Both exist before the Gateway's HTTPS listener does.
        assert gateway.depends_on(hsts) and gateway.depends_on(option)
        values = run.one(RELEASE).get("values")
        assert values["ports"]["websecure"]["http"]["middlewares"] == [HSTS_REF]
        assert ("web" in values["ports"]) == (http == "Refuse")
    else:
        assert not middlewares and not options
    if backend == "EnvoyGateway":
        spec = run.one(CTP).get("spec")
        if http is None:
            assert "tls" not in spec and "lateResponseHeaders" not in spec["headers"]
        else:
            assert spec["tls"] == {"minVersion": "1.2", "ciphers": list(ENVOY_TLS_CIPHERS)}
            assert spec["headers"]["lateResponseHeaders"] == {
                "set": [{"name": HSTS_HEADER, "value": HSTS_VALUE}]
            }
            assert spec["headers"]["withUnderscoresAction"] == "RejectRequest"  # kept
            policy = run.one(CTP)
            manifest = {k: policy.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}
            assert k8s_schemas.errors(manifest) == []


def test_security_transport_traefik_objects_match_their_crd_schemas() -> None:
    for manifest in (hsts_middleware(), tls_option()):
        assert k8s_schemas.errors(manifest) == [], manifest["kind"]


# --------------------------------------------------------------------------- shards


SERVICE = load(
    ModelService,
    """
metadata: {name: big, namespace: team}
spec:
  endpoints:
  - selector: {matchLabels: {modelplane.ai/deployment: big}}
""",
)


def test_security_transport_shards_loop_through_the_internal_service() -> None:
    """Refuse: more than 16 endpoints still shard; the second pass goes to the ClusterIP
    Service of the `web` entrypoint, the shard routes on `web` (no public port)."""
    endpoints = [
        EndpointInfo(
            f"big-{i}",
            "team",
            f"http://10.0.0.{i + 1}/",
            f"/team/big-{i}/",
            {"modelplane.ai/deployment": "big"},
            replica=True,
        )
        for i in range(20)
    ]
    door = FrontDoor(
        listener="websecure",
        scheme="https",
        authz_address="http://authz/",
        shard_users="modelplane:{SHA}x\n",
        shard_listener="web",
        loop_service=LOOP_INTERNAL_SERVICE,
    )
    manifests = service_route_manifests(
        SERVICE, endpoints, "Traefik", ("modelplane", "modelplane-system"), door
    )
    routes = [m for m in manifests if m["kind"] == "HTTPRoute"]
    first, shards = routes[-1], routes[:-1]
    assert first["spec"]["parentRefs"][0]["sectionName"] == "websecure"
    [rule] = first["spec"]["rules"]
    assert {(r["name"], r["namespace"], r["port"]) for r in rule["backendRefs"]} == {
        (INTERNAL_SERVICE, LOOP_NAMESPACE, LOOP_PORT)
    }
    assert len(shards) == 2
    assert all(s["spec"]["parentRefs"][0]["sectionName"] == "web" for s in shards)
    [grant] = [m for m in manifests if m["kind"] == "ReferenceGrant"]
    assert grant["spec"]["to"] == [{"group": "", "kind": "Service", "name": INTERNAL_SERVICE}]


# --------------------------------------------------------------------------- render


KEYS = {
    "MODELPLANE_SECRET_KEYS_A": "sk-a-3c9e-5b8d1f4a7c2e9b0d6f3a8e1c",
    "MODELPLANE_SECRET_FRONT_TLS_CRT": "-----BEGIN CERTIFICATE-----\nfakecert\n",
    "MODELPLANE_SECRET_FRONT_TLS_KEY": "-----BEGIN PRIVATE KEY-----\nfakekey\n",
}


def test_security_transport_auth_render_refuses_plain_http(tmp_path: Path) -> None:
    """specs/local with callers and TLS, `http` unset: Refuse, HSTS and the TLS minimum in
    the gateway stack's render, every manifest schema-valid."""
    import shutil

    from modelplane.render import render_fleet

    target = tmp_path / "local"
    shutil.copytree(ROOT / "specs" / "local", target)
    fleet = target / "fleet.yaml"
    anchor = "  cluster: {inferenceClusterRef: local}\n"
    text = fleet.read_text()
    assert anchor in text and "  auth:" not in text
    fleet.write_text(
        text.replace(
            anchor,
            anchor + "  auth:\n    callers:\n    - {name: a, secretRef: {name: keys, key: a}}\n"
            "  tls:\n    certificate: {name: front-tls, key: crt}\n"
            "    privateKey: {name: front-tls, key: key}\n",
        )
    )
    with pytest.MonkeyPatch.context() as env:  # the callers' and TLS secrets, this render only
        for key, value in KEYS.items():
            env.setenv(key, value)
        render_fleet(target, tmp_path / "out", stacks=["gateway"])
    found = manifests(tmp_path / "out" / "gateway")
    for key, doc in found.items():
        assert k8s_schemas.errors(doc) == [], key
    assert ("HTTPRoute", "modelplane-https-redirect") not in found
    assert found[("Middleware", HSTS_MIDDLEWARE)]["spec"]["headers"]["stsSeconds"] == 31536000
    assert found[("TLSOption", TLS_OPTION)]["spec"]["minVersion"] == "VersionTLS12"
    routes = [doc for (kind, _), doc in found.items() if kind == "HTTPRoute"]
    assert routes and all(
        ref.get("sectionName") == "websecure" for r in routes for ref in r["spec"]["parentRefs"]
    )


# --------------------------------------------------------------------------- real Traefik


class Hello(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.answer(200, b"hello")


@contextlib.contextmanager
def https_front_door(tmp_path: Path) -> Iterator[tuple[int, ssl.SSLContext]]:
    """The real Traefik with the `websecure` entrypoint as the chart values set it (its
    entrypoint middleware, the HSTS Middleware's spec) and the TLSOption `default`'s spec as
    its default TLS options (file provider: the same fields), a route to a backend and one
    behind modelplane's key check (modelplane/authz.py). Yields the HTTPS port and a client
    context trusting the test CA."""
    from modelplane import authz
    from modelplane.devcluster.certs import write_pki

    pki = write_pki(tmp_path / "pki")
    keys = tmp_path / "callers.json"
    keys.write_text(callers_table({"a": "sk-a-77f1"}))
    check = authz.serve(keys, "127.0.0.1", 0)
    threading.Thread(target=check.serve_forever, daemon=True).start()
    backend = serve_http(Hello)
    tls_port = _free_port()
    service = {"loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{backend.server_port}"}]}}
    auth = traefik_auth_middleware(
        "chat", "demo", {}, f"http://127.0.0.1:{check.server_address[1]}/"
    )
    dynamic = {
        "http": {
            "routers": {
                "open": {
                    "rule": "PathPrefix(`/open/`)",
                    "entryPoints": ["websecure"],
                    "service": "hello",
                    "tls": {},  # as Traefik's Gateway provider makes it: no options of its own
                },
                "keyed": {
                    "rule": "PathPrefix(`/keyed/`)",
                    "entryPoints": ["websecure"],
                    "middlewares": ["auth"],
                    "service": "hello",
                    "tls": {},
                },
            },
            "middlewares": {HSTS_MIDDLEWARE: hsts_middleware()["spec"], "auth": auth["spec"]},
            "services": {"hello": service},
        },
        "tls": {
            "options": {"default": tls_option()["spec"]},
            "certificates": [{"certFile": str(pki.serving_cert), "keyFile": str(pki.serving_key)}],
        },
    }
    client = ssl.create_default_context(cafile=str(pki.ca_cert))

    def started(_: int) -> bool:
        return _get(tls_port, client, "/open/")[0] == 200

    try:
        with running_traefik(
            tmp_path,
            dynamic,
            started,
            f"--entryPoints.websecure.address=127.0.0.1:{tls_port}",
            f"--entryPoints.websecure.http.middlewares={HSTS_MIDDLEWARE}@file",
        ):
            yield tls_port, client
    finally:
        backend.shutdown()
        check.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(
    port: int, context: ssl.SSLContext, path: str, headers: dict[str, str] | None = None
) -> tuple[int, str | None]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader(HSTS_HEADER)
    finally:
        conn.close()


def _handshake(port: int, context: ssl.SSLContext) -> str:
    """The negotiated version, or the handshake's error."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                return str(tls.version())
        except ssl.SSLError as exc:
            return f"refused: {exc.reason}"


def _client(ca: ssl.SSLContext, version: ssl.TLSVersion, ciphers: str | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    # A client that may offer old versions and suites: whatever is refused, the server refused.
    context.set_ciphers((ciphers or "ALL") + ":@SECLEVEL=0")
    context.minimum_version = context.maximum_version = version
    return context


# (id, the client's only version, its only TLS 1.2 suites, the outcome)
HANDSHAKES = [
    ("tls1.1", ssl.TLSVersion.TLSv1_1, None, "refused"),
    ("tls1.0", ssl.TLSVersion.TLSv1, None, "refused"),
    ("tls1.2-aead", ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2"),
    ("tls1.2-chacha20", ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-CHACHA20-POLY1305", "TLSv1.2"),
    # CBC suites Go (and Traefik's own default TLS options) would take: not ours.
    (
        "tls1.2-cbc",
        ssl.TLSVersion.TLSv1_2,
        "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA",
        "refused",
    ),
    ("tls1.3", ssl.TLSVersion.TLSv1_3, None, "TLSv1.3"),
]


@pytest.fixture(scope="module")
def front_door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, ssl.SSLContext]]:
    with https_front_door(tmp_path_factory.mktemp("transport")) as found:
        yield found


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize(
    ("version", "ciphers", "outcome"), [h[1:] for h in HANDSHAKES], ids=[h[0] for h in HANDSHAKES]
)
def test_security_transport_real_traefik_tls_minimum(
    front_door: tuple[int, ssl.SSLContext],
    version: ssl.TLSVersion,
    ciphers: str | None,
    outcome: str,
) -> None:
    port, ca = front_door
    try:
        client = _client(ca, version, ciphers)
    except ssl.SSLError:  # pragma: no cover - an OpenSSL without the version at all
        pytest.skip(f"this OpenSSL cannot offer {version.name}")
    got = _handshake(port, client)
    if outcome == "refused":
        assert got.startswith("refused"), got
        # The server's alert, not a client that never offered: it reached Traefik.
        assert "NO_PROTOCOLS_AVAILABLE" not in got and "NO_CIPHERS" not in got, got
    else:
        assert got == outcome


@pytest.mark.parametrize(
    ("path", "headers", "status"),
    [
        ("/open/x", {}, 200),
        # The key check's refusal carries it too (the entrypoint middleware runs first).
        ("/keyed/x", {}, 401),
        ("/keyed/x", {"Authorization": "Bearer sk-a-77f1"}, 200),
    ],
    ids=["answer", "key-refused", "key-accepted"],
)
def test_security_transport_real_traefik_sends_hsts(
    front_door: tuple[int, ssl.SSLContext], path: str, headers: dict[str, str], status: int
) -> None:
    port, ca = front_door
    assert _get(port, ca, path, headers) == (status, HSTS_VALUE)
