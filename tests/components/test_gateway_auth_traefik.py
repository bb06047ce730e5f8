"""The key check modelplane renders (api.md "Callers"), run by the real Traefik (the dev
fleet's build): the route's `<service>-auth` forwardAuth against modelplane/authz.py, then
`<service>-strip-key`, in front of a backend that reports the headers it got. Everything on
127.0.0.1; Traefik reads the Middlewares' specs from its file provider. Select with
`pytest -k auth`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelplane import authz
from modelplane.components.workload.routes import (
    traefik_auth_middleware,
    traefik_strip_key_middleware,
)
from tests.components.traefik_helpers import (
    HeadersEcho,
    post_json,
    routes_to,
    running_traefik,
    serve_http,
)

KEYS = {"team-a": "sk-team-a-0c1d", "batch": "sk-batch-77e2"}


def echo_behind_key_check(service: Any) -> tuple[dict[str, Any], Any]:
    """Traefik's dynamic config: a headers echo (started, returned to shut down) behind the
    key check (forwardAuth to the running authz ``service``) and the key's removal, as a
    service route runs them."""
    echo = serve_http(HeadersEcho)
    address = f"http://127.0.0.1:{service.server_address[1]}/"
    dynamic = {
        "http": {
            "routers": routes_to("echo", "auth", "strip"),
            "middlewares": {
                "auth": traefik_auth_middleware("chat-auth", "demo", {}, address)["spec"],
                "strip": traefik_strip_key_middleware("chat-strip-key", "demo", {})["spec"],
            },
            "services": {
                "echo": {
                    "loadBalancer": {
                        "servers": [{"url": f"http://127.0.0.1:{echo.server_address[1]}"}]
                    }
                }
            },
        }
    }
    return dynamic, echo


@pytest.fixture
def front_door(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    keys = tmp_path / "callers.json"
    keys.write_text(json.dumps({authz.key_hash(k): c for c, k in KEYS.items()}))
    service = authz.serve(keys, "127.0.0.1", 0)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    dynamic, echo = echo_behind_key_check(service)
    try:
        with running_traefik(tmp_path, dynamic, lambda port: post(port, {})[0] == 401) as port:
            yield port, keys
    finally:
        service.shutdown()
        echo.shutdown()


def post(port: int, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    return post_json(port, "/demo/chat/v1/chat/completions", headers)


@pytest.mark.parametrize(
    ("headers", "status", "caller"),
    [
        ({}, 401, None),
        ({"Authorization": "Bearer sk-wrong"}, 401, None),
        ({"x-api-key": "sk-wrong"}, 401, None),
        ({"x-modelplane-caller": "team-a"}, 401, None),
        ({"Authorization": f"Bearer {KEYS['team-a']}"}, 200, "team-a"),
        ({"x-api-key": KEYS["batch"]}, 200, "batch"),
        ({"x-api-key": KEYS["batch"], "x-modelplane-caller": "team-a"}, 200, "batch"),
    ],
)
def test_auth_through_traefik(
    front_door: tuple[int, Path], headers: dict[str, str], status: int, caller: str | None
) -> None:
    port, _ = front_door
    got, body = post(port, headers)
    assert got == status, body
    if status == 401:
        assert body["error"]["code"] == "invalid_api_key", body
        assert body["error"]["type"] == "invalid_request_error", body
        return
    # The engine sees the caller's name, never a forged one, and never the key.
    assert body == {"x-modelplane-caller": caller, "authorization": None, "x-api-key": None}


def test_auth_rotation_through_traefik_fails_no_other_caller(
    front_door: tuple[int, Path],
) -> None:
    port, keys = front_door
    results: list[int] = []
    stop = threading.Event()

    def steady() -> None:
        while not stop.is_set():
            results.append(post(port, {"x-api-key": KEYS["batch"]})[0])

    thread = threading.Thread(target=steady, daemon=True)
    thread.start()
    try:
        time.sleep(0.5)
        rotated = {
            authz.key_hash("sk-team-a-new"): "team-a",
            authz.key_hash(KEYS["batch"]): "batch",
        }
        keys.write_text(json.dumps(rotated))
        deadline = time.monotonic() + 10
        while post(port, {"x-api-key": "sk-team-a-new"})[0] != 200:
            assert time.monotonic() < deadline, "the rotated key is not let in"
            time.sleep(0.1)
        assert post(port, {"x-api-key": KEYS["team-a"]})[0] == 401
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(10)
    assert len(results) > 20 and set(results) == {200}, results[:20]


def test_keys_two_keys_of_one_caller_through_traefik(tmp_path: Path) -> None:
    """A rotation end to end (api.md "Keys"): the table `up` publishes for a caller with an old
    key ending in an hour and a new one, read by the real authz behind the real Traefik: both
    keys let the caller in during the grace period, and once authz's clock passes the end the
    old one gets 401 with no new table, the new one 200."""
    from datetime import UTC, datetime, timedelta

    from modelplane.caller_keys import rfc3339
    from modelplane.components.gateway import callers_table

    start = datetime.now(UTC)
    now = [start.timestamp()]
    keys = tmp_path / "callers.json"
    end = rfc3339(start + timedelta(hours=1))
    keys.write_text(callers_table({"team-a": f"sk-a-old notAfter={end}\nsk-a-new\n"}, now=start))
    handler = authz.make_handler(authz.Keys(keys, clock=lambda: now[0]))
    service = authz.BoundedServer(("127.0.0.1", 0), handler, 64)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    dynamic, echo = echo_behind_key_check(service)
    try:
        with running_traefik(tmp_path, dynamic, lambda port: post(port, {})[0] == 401) as port:
            for key in ("sk-a-old", "sk-a-new"):
                status, body = post(port, {"Authorization": f"Bearer {key}"})
                assert status == 200 and body["x-modelplane-caller"] == "team-a", body
                assert body["authorization"] is None  # the key never reaches the engine
            now[0] = (start + timedelta(hours=1)).timestamp()  # the grace period is over
            status, body = post(port, {"Authorization": "Bearer sk-a-old"})
            assert status == 401 and body["error"]["code"] == "invalid_api_key", body
            assert post(port, {"x-api-key": "sk-a-new"})[0] == 200
    finally:
        service.shutdown()
        echo.shutdown()
