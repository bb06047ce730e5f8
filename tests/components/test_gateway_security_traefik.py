"""The front door -> workload gateway hop and the per-service callers, run by the real Traefik
(the dev fleet's build), everything on 127.0.0.1: a front-door Traefik with a ModelService
route's Middlewares as modelplane renders them (`<service>-auth` forwardAuth to
modelplane/authz.py, `<service>-strip-key`), forwarding to a workload Traefik whose route runs
the replica's `basicAuth` check (modelplane/components/workload/front_door.py), in front of a backend
that reports the headers it got. Traefik's file provider carries the Middlewares' specs (a
Secret's `users` become the inline `users`). Select with `pytest -k "security or auth"`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from modelplane.components.gateway import callers_table
from modelplane.components.workload import front_door
from modelplane.components.workload.routes import (
    OWN_REQUEST_HEADERS,
    header_spellings,
    traefik_auth_middleware,
    traefik_client_headers_middleware,
    traefik_strip_key_middleware,
)
from modelplane.observe.usage import Counts, access_log_arguments, count_usage
from tests.components.traefik_helpers import (
    HeadersEcho,
    free_port,
    routes_to,
    running_traefik,
    serve_http,
)
from tests.components.traefik_helpers import post_json as post

KEYS = {"team-a": "sk-team-a-4e1b", "batch": "sk-batch-90d3"}
HOP_KEY = "front-door-key-5b7c2d"


class OwnHeadersEcho(HeadersEcho):
    """HeadersEcho, plus `others`: any other spelling of modelplane's own headers that
    reached the engine (only when there is one, so the usual answer is HeadersEcho's)."""

    def answer(self, status: int, body: bytes, **headers: str) -> None:
        others = sorted(
            name.lower()
            for name in self.headers
            if name.lower().replace("_", "-").startswith("x-modelplane-")
            and name.lower() != "x-modelplane-caller"
        )
        if others and status == 200:
            body = json.dumps({**json.loads(body), "others": others}).encode()
        super().answer(status, body, **headers)


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """(front door port, workload gateway port)."""
    from modelplane import authz

    keys = tmp_path / "callers.json"
    keys.write_text(callers_table(KEYS, HOP_KEY))
    service = authz.serve(keys, "127.0.0.1", 0)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    echo = serve_http(OwnHeadersEcho)
    workload_port, front_port = free_port(), free_port()
    check = front_door.traefik_check("qwen-front-door", "demo", {})["spec"]["basicAuth"]
    check = {**check, "users": [front_door.htpasswd(HOP_KEY).strip()]}
    check.pop("secret")
    workload = {
        "http": {
            "routers": {
                "replica": {
                    "rule": "PathPrefix(`/demo/qwen-a/`)",
                    "entryPoints": ["web"],
                    "middlewares": ["front-door"],
                    "service": "echo",
                }
            },
            "middlewares": {"front-door": {"basicAuth": check}},
            "services": {
                "echo": {
                    "loadBalancer": {
                        "servers": [{"url": f"http://127.0.0.1:{echo.server_address[1]}"}]
                    }
                }
            },
        }
    }
    address = f"http://127.0.0.1:{service.server_address[1]}/"
    limited = address + "?" + urlencode({"callers": "team-a"})
    routers: dict[str, Any] = {}
    middlewares: dict[str, Any] = {
        "client-headers": traefik_client_headers_middleware("x", "demo", {})["spec"],
        "strip": traefik_strip_key_middleware("x", "demo", {})["spec"],
        "auth": traefik_auth_middleware("x", "demo", {}, address)["spec"],
        "auth-limited": traefik_auth_middleware("x", "demo", {}, limited)["spec"],
    }
    for name, auth in (("chat", "auth"), ("ops", "auth-limited")):
        routers[name] = {
            "rule": f"PathPrefix(`/demo/{name}/`)",
            "entryPoints": ["web"],
            "middlewares": ["client-headers", auth, "strip", f"{name}-rewrite"],
            "service": "workload",
        }
        middlewares[f"{name}-rewrite"] = {
            "replacePathRegex": {"regex": f"^/demo/{name}/(.*)", "replacement": "/demo/qwen-a/$1"}
        }
    front = {
        "http": {
            "routers": routers,
            "middlewares": middlewares,
            "services": {
                "workload": {
                    "loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{workload_port}"}]}
                }
            },
        }
    }
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(
                # Not waited on here: both start at once, the front door's check covers it.
                running_traefik(
                    tmp_path, workload, lambda _: True, name="workload", port=workload_port
                )
            )
            # With the access log the InferenceGateway's Traefik writes (`modelplane usage`).
            stack.enter_context(
                running_traefik(
                    tmp_path,
                    front,
                    lambda port: (
                        post(port, "/demo/chat/v1/x", {"x-api-key": KEYS["batch"]})[0] == 200
                        and post(workload_port, "/demo/qwen-a/v1/x", {})[0] == 401
                    ),
                    *access_log_arguments(str(tmp_path / "access.log")),
                    name="front",
                    port=front_port,
                )
            )
            yield front_port, workload_port
    finally:
        service.shutdown()
        echo.shutdown()


def test_security_front_door_reaches_the_workload_gateway_with_its_credentials(
    gateways: tuple[int, int],
) -> None:
    front, _ = gateways
    status, body = post(front, "/demo/chat/v1/chat/completions", {"x-api-key": KEYS["team-a"]})
    assert status == 200, body
    # The engine sees the caller, never the caller's key nor the front door's credentials.
    assert body == {"x-modelplane-caller": "team-a", "authorization": None, "x-api-key": None}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": f"Bearer {KEYS['team-a']}"},
        {"x-api-key": KEYS["team-a"]},
        {"Authorization": front_door.basic_credentials("not-the-key")},
        {"Authorization": f"Bearer {HOP_KEY}"},
    ],
    ids=["nothing", "caller-bearer", "caller-x-api-key", "wrong-credentials", "key-as-bearer"],
)
def test_security_workload_gateway_refuses_a_request_that_bypasses_the_front_door(
    gateways: tuple[int, int], headers: dict[str, str]
) -> None:
    _, workload = gateways
    status, body = post(workload, "/demo/qwen-a/v1/chat/completions", headers)
    assert status == 401, body
    # ... and the front door's own credentials are what lets a request in.
    good = {"Authorization": front_door.basic_credentials(HOP_KEY)}
    assert post(workload, "/demo/qwen-a/v1/chat/completions", good)[0] == 200


@pytest.mark.parametrize(
    ("caller", "status"), [("team-a", 200), ("batch", 403)], ids=["listed", "not-listed"]
)
def test_auth_service_limited_to_some_callers(
    gateways: tuple[int, int], caller: str, status: int
) -> None:
    """ModelService `spec.callers: [team-a]`: another caller with a valid key gets 403 with
    an OpenAI-shaped body; the same caller still uses the other services."""
    front, _ = gateways
    got, body = post(front, "/demo/ops/v1/chat/completions", {"x-api-key": KEYS[caller]})
    assert got == status, body
    if status == 403:
        assert body == {
            "error": {
                "message": "Caller 'batch' is not allowed to use this service.",
                "type": "permission_error",
                "param": None,
                "code": "caller_not_allowed",
            }
        }
        assert post(front, "/demo/chat/v1/chat/completions", {"x-api-key": KEYS[caller]})[0] == 200
    else:
        assert body["x-modelplane-caller"] == caller


def test_auth_usage_per_caller_from_the_front_doors_access_log(
    gateways: tuple[int, int], tmp_path: Path
) -> None:
    """Issue 26 item 4: requests, errors and refused per caller and service, from the access
    log the real Traefik writes; a forged caller header counts for the key's caller."""
    front, _ = gateways
    log = tmp_path / "access.log"
    start = len(log.read_text().splitlines()) if log.exists() else 0  # the readiness probes
    chat, ops = "/demo/chat/v1/chat/completions", "/demo/ops/v1/chat/completions"
    sent = [
        (chat, {"x-api-key": KEYS["team-a"]}),
        (chat, {"x-api-key": KEYS["team-a"], "x-modelplane-caller": "batch"}),
        (chat, {"x-api-key": KEYS["batch"]}),
        (ops, {"x-api-key": KEYS["batch"]}),  # 403: ops lists team-a only
        (ops, {"x-api-key": KEYS["team-a"]}),
        (chat, {}),  # 401
        (chat, {"x-api-key": "sk-wrong"}),  # 401
    ]
    for path, headers in sent:
        post(front, path, headers)
    deadline = time.monotonic() + 10
    while len(log.read_text().splitlines()) < start + len(sent):
        assert time.monotonic() < deadline, "the access log did not get every request"
        time.sleep(0.1)
    counts = count_usage(log.read_text().splitlines()[start:])
    assert counts == {
        ("team-a", "demo/chat"): Counts(requests=2),
        ("batch", "demo/chat"): Counts(requests=1),
        ("team-a", "demo/ops"): Counts(requests=1),
        # Refused by the key check: Traefik sets the caller only on its yes.
        ("-", "demo/ops"): Counts(requests=1, refused=1),
        ("-", "demo/chat"): Counts(requests=2, refused=2),
    }, counts
    assert HOP_KEY not in log.read_text() and KEYS["team-a"] not in log.read_text()


# Every spelling of modelplane's own request headers, forged as the caller `batch`.
FORGED = {h: "batch" for own in OWN_REQUEST_HEADERS for h in header_spellings(own)}


def test_hostile_forged_caller_headers_stripped_and_never_counted(
    gateways: tuple[int, int], tmp_path: Path
) -> None:
    """M1, L7: a client's `x-modelplane-caller` / `x-modelplane-endpoint`, in every spelling
    (`x_modelplane_caller`, ...), never reaches the engine, and `usage` never counts the
    forged caller, whether the key check says yes or no."""
    front, _ = gateways
    log = tmp_path / "access.log"
    start = len(log.read_text().splitlines()) if log.exists() else 0
    sent = [(KEYS["team-a"], 200), (None, 401), ("sk-wrong", 401)]
    for key, status in sent:
        headers = {**FORGED, **({"x-api-key": key} if key else {})}
        got, body = post(front, "/demo/chat/v1/chat/completions", headers)
        assert got == status, body
        if status == 200:  # the key's caller, nothing of what the client sent
            assert body == {
                "x-modelplane-caller": "team-a",
                "authorization": None,
                "x-api-key": None,
            }
    deadline = time.monotonic() + 10
    while len(log.read_text().splitlines()) < start + len(sent):
        assert time.monotonic() < deadline, "the access log did not get every request"
        time.sleep(0.1)
    assert count_usage(log.read_text().splitlines()[start:]) == {
        ("team-a", "demo/chat"): Counts(requests=1),
        ("-", "demo/chat"): Counts(requests=2, refused=2),
    }


@pytest.mark.parametrize("size", [2 * 1024 * 1024, 8 * 1024 * 1024], ids=["2MiB", "8MiB"])
def test_hostile_huge_headers_at_the_front_door_are_refused(
    gateways: tuple[int, int], size: int
) -> None:
    """Security review L2 at the front door: headers past the entry point's bound (Go's
    1 MiB) get 431 before the key check or an engine sees them, with a valid key too; the
    front door goes on serving."""
    import socket

    front, _ = gateways
    request = (
        b"POST /demo/chat/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        + f"x-api-key: {KEYS['team-a']}\r\n".encode()
        + b"x-padding: "
        + b"a" * size
        + b"\r\nContent-Length: 2\r\n\r\n{}"
    )
    with socket.create_connection(("127.0.0.1", front), timeout=30) as conn:
        try:
            conn.sendall(request)
        except OSError:
            pass  # the server may close while the rest is still being sent
        answer = conn.recv(1024)
    assert answer.split(b"\r\n")[0].split(b" ")[1] == b"431", answer[:200]
    assert post(front, "/demo/chat/v1/x", {"x-api-key": KEYS["team-a"]})[0] == 200


def test_keys_workload_gateway_accepts_both_front_door_keys_during_a_rotation(
    tmp_path: Path,
) -> None:
    """Security review M2: while the front-door key is rotated, the workload gateway's check
    (the real Traefik's `basicAuth`, the htpasswd modelplane renders) lets in the old key
    and the new one, each only under its own user; the front door sends the new one."""
    from datetime import UTC, datetime, timedelta

    from modelplane import front_door_keys
    from modelplane.caller_keys import CallerKey, format_keys

    now = datetime.now(UTC)
    old = HOP_KEY * 3
    # Rotated five minutes ago, switched one minute later, the old key ends in an hour.
    keys = front_door_keys.rotated(
        [CallerKey(old)],
        now - timedelta(minutes=5),
        after=timedelta(minutes=1),
        grace=timedelta(hours=1),
    )
    text, new = format_keys(keys), keys[1]
    check = front_door.traefik_check("qwen-front-door", "demo", {})["spec"]["basicAuth"]
    check = {**check, "users": front_door.htpasswd(text).splitlines()}
    check.pop("secret")
    echo = serve_http(HeadersEcho)
    upstream = f"http://127.0.0.1:{echo.server_address[1]}"
    dynamic = {
        "http": {
            "routers": routes_to("echo", "front-door"),
            "middlewares": {"front-door": {"basicAuth": check}},
            "services": {"echo": {"loadBalancer": {"servers": [{"url": upstream}]}}},
        }
    }

    def basic(user: str, key: str) -> dict[str, str]:
        import base64

        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()}

    path = "/demo/qwen-a/v1/chat/completions"
    try:
        with running_traefik(tmp_path, dynamic, lambda p: post(p, path, {})[0] == 401) as port:
            sent = {"Authorization": front_door.basic_credentials(text)}
            assert sent == basic(f"modelplane-{new.id}", new.key)
            cases = {
                "sent (new)": (sent, 200),
                "old": (basic("modelplane", old), 200),
                "new key, old user": (basic("modelplane", new.key), 401),
                "old key, new user": (basic(f"modelplane-{new.id}", old), 401),
            }
            got = {name: post(port, path, headers)[0] for name, (headers, _) in cases.items()}
            assert got == {name: status for name, (_, status) in cases.items()}
    finally:
        echo.shutdown()
