"""`modelplane/router.py`, the front door's OpenAI endpoint, against a stand-in front door on
127.0.0.1 (what Traefik's service route would answer: the engine's reply at the service's
path). Model-name routing, the model list, tokens per caller, the hung backend."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from modelplane import authz, router

KEYS = {"key-dev": "dev", "key-batch": "batch", "key-rpm": "rpm", "key-tpm": "tpm"}
TABLE: dict[str, Any] = {
    # 4 requests a minute over 2 router replicas: 2 for this one; 10 tokens a minute
    "limits": {"rpm": {"requestsPerMinute": 4}, "tpm": {"tokensPerMinute": 10}},
    "replicas": 2,
    "models": {
        "qwen": {
            "service": "demo/chat",
            "path": "/demo/chat/",
            "owner": "demo",
            "ready": True,
            "endpoints": [["demo/down", 1], ["demo/r1", 1], ["demo/r2", 1]],
        },
        "qwen-alias": {"service": "demo/chat", "path": "/demo/chat/", "owner": "demo"},
        "secret-model": {
            "service": "lab/secret",
            "path": "/lab/secret/",
            "owner": "lab",
            "callers": ["batch"],
        },
        "hangs": {
            "service": "demo/hang",
            "path": "/demo/hang/",
            "owner": "demo",
            "firstByte": 0.6,
            "idle": 0.4,
        },
        "stalls": {"service": "demo/stall", "path": "/demo/stall/", "owner": "demo", "idle": 0.4},
        # tier 1 refuses everything (all its replicas gone): tier 2 answers
        "overflows": {"service": "demo/full", "path": "/demo/full/", "owner": "demo", "tiers": [2]},
        # tier 1 answers: tier 2 never sees a request
        "tiered": {"service": "demo/chat", "path": "/demo/chat/", "owner": "demo", "tiers": [2]},
        # at zero: no route (404), then no server (503), then the woken engine answers
        "sleepy": {
            "service": "demo/sleepy",
            "path": "/demo/sleepy/",
            "owner": "demo",
            "wake": {"deadline": 8, "queue": 2},
        },
        # never wakes within its deadline
        "asleep": {
            "service": "demo/asleep",
            "path": "/demo/asleep/",
            "owner": "demo",
            "wake": {"deadline": 1.5, "queue": 2},
        },
        # no `wake`: the front door's 404 goes back as it is
        "unrouted": {"service": "demo/asleep", "path": "/demo/asleep/", "owner": "demo"},
        # the engine's own 404 (JSON) is an answer, not a missing route
        "engine-404": {
            "service": "demo/e404",
            "path": "/demo/e404/",
            "owner": "demo",
            "wake": {"deadline": 8, "queue": 2},
        },
    },
}


class FrontDoor(BaseHTTPRequestHandler):
    """What the front door's service route answers (an engine behind it)."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []
    peers: list[Any] = []
    hangs = 0
    awake_at = 0.0  # /demo/sleepy/ answers from then on (time.monotonic)
    sleepy_tries = 0

    def _plain(self, status: int, text: bytes, kind: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FrontDoor.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        FrontDoor.peers.append(self.client_address)
        if self.path.startswith("/demo/asleep/") or (
            self.path.startswith("/demo/sleepy/") and time.monotonic() < FrontDoor.awake_at
        ):
            FrontDoor.sleepy_tries += 1
            if FrontDoor.sleepy_tries <= 2:
                self._plain(404, b"404 page not found\n")  # Traefik: no route
            else:
                self._plain(503, b"no available server\n")  # a route, no Ready pod yet
            return
        if self.path.startswith("/demo/e404/"):
            self._plain(404, b'{"error": "no such thing"}', "application/json")
            return
        usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        if self.headers.get("x-modelplane-pin") == "demo/down":
            self.send_response(503)  # the pinned endpoint refuses before answering
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/demo/full/") and "x-modelplane-tier" not in self.headers:
            self.send_response(502)  # every tier-1 endpoint is gone
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/demo/hang/"):
            FrontDoor.hangs += 1
            time.sleep(5)  # accepts, never answers in time
            return
        if not body.get("stream"):
            data = json.dumps({"object": "chat.completion", "choices": [], "usage": usage})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for piece in ("a", "b"):
            chunk = {"choices": [{"delta": {"content": piece}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            if self.path.startswith("/demo/stall/"):
                time.sleep(3)  # started, then silent
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk = {"choices": [], "usage": usage}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *_: object) -> None:
        return


@pytest.fixture
def door(tmp_path: Path) -> Iterator[tuple[int, router.Usage]]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), FrontDoor)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, args=(0.05,), daemon=True).start()
    (tmp_path / "callers.json").write_text(
        json.dumps({"callers": {authz.key_hash(k): c for k, c in KEYS.items()}, "open": False})
    )
    (tmp_path / "models.json").write_text(json.dumps(TABLE))
    server, usage = router.serve(
        tmp_path / "models.json",
        tmp_path / "callers.json",
        f"http://127.0.0.1:{upstream.server_address[1]}",
        "127.0.0.1",
        0,
    )
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    FrontDoor.seen, FrontDoor.hangs = [], 0
    FrontDoor.awake_at, FrontDoor.sleepy_tries = 0.0, 0
    try:
        yield server.server_address[1], usage
    finally:
        server.shutdown()
        upstream.shutdown()


def call(
    port: int, method: str, path: str, body: Any = None, key: str | None = "key-dev"
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


@pytest.mark.parametrize(
    ("path", "model", "key", "status", "code", "sent_to"),
    [
        ("/v1/chat/completions", "qwen", "key-dev", 200, None, "/demo/chat/v1/chat/completions"),
        ("/v1/completions", "qwen-alias", "key-dev", 200, None, "/demo/chat/v1/completions"),
        ("/v1/embeddings", "qwen", "key-batch", 200, None, "/demo/chat/v1/embeddings"),
        ("/v1/responses", "secret-model", "key-batch", 200, None, "/lab/secret/v1/responses"),
        # a model the caller may not use answers exactly like one that does not exist
        ("/v1/chat/completions", "secret-model", "key-dev", 404, "model_not_found", None),
        ("/v1/chat/completions", "nope", "key-dev", 404, "model_not_found", None),
        ("/v1/chat/completions", "qwen", "wrong", 401, "invalid_api_key", None),
        ("/v1/chat/completions", "qwen", None, 401, "invalid_api_key", None),
        ("/v1/chat/completions", None, "key-dev", 400, "missing_model", None),
    ],
)
def test_openai_routes_by_model_name(
    door: tuple[int, router.Usage],
    path: str,
    model: str | None,
    key: str | None,
    status: int,
    code: str | None,
    sent_to: str | None,
) -> None:
    port, _ = door
    body = {"messages": [{"role": "user", "content": "hi"}]}
    if model:
        body["model"] = model
    got, _, data = call(port, "POST", path, body, key)
    assert got == status, data
    if code:
        assert json.loads(data)["error"]["code"] == code
        assert FrontDoor.seen == []  # refused before anything was sent on
    else:
        [(where, headers, sent)] = FrontDoor.seen
        assert where == sent_to
        assert headers["authorization"] == f"Bearer {key}"  # the service route checks it too
        assert sent["model"] == model


def test_openai_unknown_and_forbidden_models_are_indistinguishable(
    door: tuple[int, router.Usage],
) -> None:
    port, _ = door
    forbidden = call(port, "POST", "/v1/chat/completions", {"model": "secret-model"})
    unknown = call(port, "POST", "/v1/chat/completions", {"model": "secret-model"}, "key-dev")
    assert forbidden[0] == unknown[0] == 404
    assert forbidden[2] == unknown[2]
    again = call(port, "GET", "/v1/models/secret-model")
    assert again[0] == 404 and again[2] == forbidden[2]


ALL = ["asleep", "engine-404", "hangs", "overflows", "qwen", "qwen-alias"]


@pytest.mark.parametrize(
    ("key", "listed"),
    [
        ("key-dev", [*ALL, "sleepy", "stalls", "tiered", "unrouted"]),
        ("key-batch", [*ALL, "secret-model", "sleepy", "stalls", "tiered", "unrouted"]),
    ],
)
def test_models_list_shows_the_callers_models(
    door: tuple[int, router.Usage], key: str, listed: list[str]
) -> None:
    port, _ = door
    status, _, data = call(port, "GET", "/v1/models", key=key)
    assert status == 200
    answer = json.loads(data)
    assert answer["object"] == "list"
    assert [m["id"] for m in answer["data"]] == listed
    qwen = next(m for m in answer["data"] if m["id"] == "qwen")
    assert (qwen["object"], qwen["owned_by"], qwen["modelplane"]["ready"]) == (
        "model",
        "demo",
        True,
    )
    assert call(port, "GET", "/v1/models", key=None)[0] == 401


def _metrics(port: int) -> dict[str, float]:
    _, _, data = call(port, "GET", "/metrics", key=None)
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_tokens_are_counted_per_caller_and_model_streams_included(
    door: tuple[int, router.Usage],
) -> None:
    port, _ = door
    ask = {"model": "qwen", "messages": []}
    call(port, "POST", "/v1/chat/completions", ask)  # whole answer: 7 + 3
    # A stream that did not ask for usage: asked for it on the way, the chunk dropped.
    status, headers, data = call(port, "POST", "/v1/chat/completions", {**ask, "stream": True})
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert b'"usage"' not in data and data.endswith(b"data: [DONE]\n\n")
    assert FrontDoor.seen[-1][2]["stream_options"] == {"include_usage": True}
    # One that asked keeps it.
    own = {**ask, "stream": True, "stream_options": {"include_usage": True}}
    _, _, data = call(port, "POST", "/v1/chat/completions", own, key="key-batch")
    assert b'"usage"' in data
    call(port, "POST", "/v1/chat/completions", {"model": "nope"})  # refused: no tokens
    seen = _metrics(port)
    assert seen['modelplane_router_tokens_total{caller="dev",model="qwen",kind="prompt"}'] == 14
    assert seen['modelplane_router_tokens_total{caller="dev",model="qwen",kind="completion"}'] == 6
    assert seen['modelplane_router_tokens_total{caller="batch",model="qwen",kind="prompt"}'] == 7
    assert seen['modelplane_router_requests_total{caller="dev",model="qwen",code="200"}'] == 2
    # An unknown name is never a label (a client could make up any number of them).
    assert seen['modelplane_router_requests_total{caller="dev",model="-",code="404"}'] == 1
    assert not [k for k in seen if "nope" in k]


def test_hung_backend_gets_a_504_within_the_timeout_after_one_retry(
    door: tuple[int, router.Usage],
) -> None:
    port, _ = door
    status, _, data = call(port, "POST", "/v1/chat/completions", {"model": "hangs"})
    # The stand-in front door would answer 200 after 5 s: a 504 is the timeout's answer.
    assert status == 504 and json.loads(data)["error"]["code"] == "timeout"
    assert FrontDoor.hangs == 2  # tried again while nothing was sent


def test_a_silent_stream_is_ended_with_an_error_event(door: tuple[int, router.Usage]) -> None:
    port, _ = door
    status, _, data = call(
        port, "POST", "/v1/chat/completions", {"model": "stalls", "stream": True}
    )
    assert status == 200
    assert b'"content": "a"' in data
    assert b"event: error" in data and b"stream_idle_timeout" in data


def test_a_refused_post_never_leaves_its_body_on_a_kept_connection(
    door: tuple[int, router.Usage],
) -> None:
    """A 401 answers before the body is read: the connection closes, so the next request on
    it is never parsed from the unread body."""
    port, _ = door
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = json.dumps({"model": "qwen", "messages": []})
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Authorization": "Bearer x"})
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 401 and resp.getheader("Connection") == "close"
    conn.close()
    # Answered after reading the body: the connection stays open for the next request.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": "Bearer key-dev"}
    conn.request(
        "POST", "/v1/chat/completions", body=json.dumps({"model": "nope"}), headers=headers
    )
    first = conn.getresponse()
    first.read()
    conn.request("GET", "/v1/models", headers=headers)
    second = conn.getresponse()
    assert (first.status, second.status) == (404, 200)
    assert json.loads(second.read())["object"] == "list"
    conn.close()


@pytest.mark.parametrize("trusted", [True, False], ids=["its-certificate", "another"])
def test_openai_router_reaches_a_tls_front_door_pinned_to_its_certificate(
    tmp_path: Path, trusted: bool
) -> None:
    import ssl

    from modelplane.devcluster.certs import generate_ca, generate_serving_cert

    ca = generate_ca("front-door-ca")
    cert = generate_serving_cert(ca, hosts=("front.example",), common_name="front.example")
    (tmp_path / "tls.crt").write_bytes(cert.cert_pem)
    (tmp_path / "tls.key").write_bytes(cert.key_pem)
    other = generate_serving_cert(generate_ca("other"), hosts=("x",), common_name="x")
    (tmp_path / "other.crt").write_bytes(other.cert_pem)
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), FrontDoor)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    upstream.socket = context.wrap_socket(upstream.socket, server_side=True)
    threading.Thread(target=upstream.serve_forever, args=(0.05,), daemon=True).start()
    (tmp_path / "models.json").write_text(json.dumps(TABLE))
    server, _ = router.serve(
        tmp_path / "models.json",
        None,
        f"https://127.0.0.1:{upstream.server_address[1]}",
        "127.0.0.1",
        0,
        # The leaf alone is trusted (no CA): the front door's own certificate, pinned.
        front_door_ca=tmp_path / ("tls.crt" if trusted else "other.crt"),
    )
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    FrontDoor.seen = []
    try:
        status, _, data = call(
            server.server_address[1], "POST", "/v1/chat/completions", {"model": "qwen"}, key=None
        )
    finally:
        server.shutdown()
        upstream.shutdown()
    if trusted:
        assert status == 200, data
        assert FrontDoor.seen[0][0] == "/demo/chat/v1/chat/completions"
    else:
        assert status == 502 and FrontDoor.seen == []


class _Stream:
    """What sse_events reads: readline(limit) over bytes."""

    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)

    def readline(self, limit: int = -1) -> bytes:
        return self.buffer.readline(limit)


USAGE = {"prompt_tokens": 5, "completion_tokens": 2}


@pytest.mark.parametrize(
    ("data", "line_limit", "events", "usages"),
    [
        (b'data: {"choices": [1]}\n\ndata: [DONE]\n\n', None, 2, [None, None]),
        (
            b"data: " + json.dumps({"choices": [], "usage": USAGE}).encode() + b"\n\n",
            None,
            1,
            [USAGE],
        ),
        (  # the Responses API: usage on response.completed
            b"event: response.completed\ndata: "
            + json.dumps({"type": "response.completed", "response": {"usage": USAGE}}).encode()
            + b"\n\n",
            None,
            1,
            [USAGE],
        ),
        # a line longer than one read arrives in pieces and is still one event
        (b"data: " + b"x" * 50 + b"\n\ndata: y\n\n", 16, 2, [None, None]),
        # a piece that happens to be a lone newline is no event boundary
        (b"data: " + b"x" * 10 + b"\n\n", 16, 1, [None]),
        # the last event without its blank line is still passed on
        (b"data: a\n\ndata: b\n", None, 2, [None, None]),
    ],
)
def test_sse_events_are_passed_on_whole_with_their_usage(
    monkeypatch: pytest.MonkeyPatch,
    data: bytes,
    line_limit: int | None,
    events: int,
    usages: list[Any],
) -> None:
    if line_limit:
        monkeypatch.setattr(router, "MAX_LINE", line_limit)
    got = list(router.sse_events(_Stream(data)))  # type: ignore[arg-type]
    assert b"".join(e for e, _ in got) == data  # nothing lost, nothing added
    assert len(got) == events
    assert [u for _, u in got] == usages


def test_sse_events_never_hold_an_oversized_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router, "MAX_LINE", 64)
    monkeypatch.setattr(router, "MAX_EVENT", 256)
    data = b"data: " + b"z" * 1000 + b"\n\n"
    got = list(router.sse_events(_Stream(data)))  # type: ignore[arg-type]
    assert b"".join(e for e, _ in got) == data
    assert max(len(e) for e, _ in got) <= 256 + 64


def test_session_pinning_is_stable_spreads_by_weight_and_moves_only_when_needed() -> None:
    three = [["a", 1], ["b", 1], ["c", 1]]
    keys = [f"dev\0session-{i}" for i in range(3000)]
    first = {k: router.pinned_endpoint(k, three) for k in keys}
    assert first == {k: router.pinned_endpoint(k, three) for k in keys}  # deterministic
    share = {e: sum(1 for v in first.values() if v == e) / len(keys) for e in "abc"}
    assert all(0.28 < s < 0.39 for s in share.values()), share
    # b leaves: only its sessions move.
    moved = {k: router.pinned_endpoint(k, [["a", 1], ["c", 1]]) for k in keys}
    assert all(moved[k] == first[k] for k in keys if first[k] != "b")
    # weights: 3:1
    weighted = [router.pinned_endpoint(k, [["a", 3], ["b", 1]]) for k in keys]
    assert 0.70 < weighted.count("a") / len(keys) < 0.80
    assert router.pinned_endpoint(None, three) is None
    assert router.pinned_endpoint("k", []) is None


@pytest.mark.parametrize(
    ("headers", "body", "key"),
    [
        ({"x-session-id": "s1"}, {"user": "u"}, "dev\0s1"),
        ({"x-modelplane-session": "s2"}, {}, "dev\0s2"),
        ({}, {"prompt_cache_key": "p", "user": "u"}, "dev\0p"),
        ({}, {"user": "u"}, "dev\0u"),
        ({}, {"user": 7}, None),
        ({}, {}, None),
    ],
)
def test_session_key_precedence(headers: dict[str, str], body: dict[str, Any], key: str) -> None:
    assert router.session_key("dev", headers, body) == key


def test_session_requests_carry_the_pin_and_fall_back_when_it_refuses(
    door: tuple[int, router.Usage],
) -> None:
    port, _ = door
    endpoints = TABLE["models"]["qwen"]["endpoints"]  # type: ignore[index]
    sessions = {f"s{i}": router.pinned_endpoint(f"dev\0s{i}", endpoints) for i in range(40)}
    for session, pin in sessions.items():
        FrontDoor.seen = []
        body = {"model": "qwen", "messages": [], "user": session}
        status, _, data = call(port, "POST", "/v1/chat/completions", body)
        assert status == 200, data
        pins = [h.get("x-modelplane-pin") for _, h, _ in FrontDoor.seen]
        # demo/down answers 503: the same request again without a pin
        assert pins == ([pin, None] if pin == "demo/down" else [pin])
    assert {p for p in sessions.values()} == {"demo/down", "demo/r1", "demo/r2"}
    # No session: no pin; a client's own pin header is dropped.
    FrontDoor.seen = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps({"model": "qwen", "messages": []}),
        headers={"Authorization": "Bearer key-dev", "x-modelplane-pin": "demo/r2"},
    )
    assert conn.getresponse().status == 200
    assert FrontDoor.seen[0][1].get("x-modelplane-pin") is None


@pytest.mark.parametrize(
    ("model", "tiers_sent"),
    [
        ("overflows", [None, "2"]),  # tier 1 refused before answering: tier 2, once
        ("tiered", [None]),  # tier 1 answered: tier 2 gets nothing
    ],
)
def test_tiers_overflow_only_when_the_first_tier_refuses(
    door: tuple[int, router.Usage], model: str, tiers_sent: list[str | None]
) -> None:
    port, _ = door
    status, _, data = call(port, "POST", "/v1/chat/completions", {"model": model})
    assert status == 200, data
    assert [h.get("x-modelplane-tier") for _, h, _ in FrontDoor.seen] == tiers_sent


@pytest.mark.parametrize(
    ("plan", "at", "then"),
    [
        ([{"x-modelplane-pin": "a"}, {}], 0, 1),
        ([{"x-modelplane-pin": "a"}, {}, {"x-modelplane-tier": "2"}], 1, 2),
        ([{}, {}], 0, None),  # no tier: the refusal is the answer
        ([{}, {}, {"x-modelplane-tier": "2"}, {"x-modelplane-tier": "3"}], 0, 2),
        ([{}, {}, {"x-modelplane-tier": "2"}, {"x-modelplane-tier": "3"}], 2, 3),
        ([{}, {}, {"x-modelplane-tier": "2"}], 2, None),
    ],
)
def test_tiers_a_refusal_moves_to_the_next_kind_of_endpoint(
    plan: list[dict[str, str]], at: int, then: int | None
) -> None:
    assert router.move_on(plan, at) == then


@pytest.mark.parametrize(
    ("key", "allowed", "kind", "what"),
    [
        ("key-rpm", 2, "requests", "requests per minute"),  # its share: 4 / 2 replicas
        # 10 tokens a minute, shared: 5 here; the first answer spends 10 (7 + 3)
        ("key-tpm", 1, "tokens", "tokens per minute"),
    ],
)
def test_limits_answer_429_with_retry_after_before_any_backend(
    door: tuple[int, router.Usage], key: str, allowed: int, kind: str, what: str
) -> None:
    port, _ = door
    ask = {"model": "qwen", "messages": []}
    for _ in range(allowed):
        assert call(port, "POST", "/v1/chat/completions", ask, key=key)[0] == 200
    sent = len(FrontDoor.seen)
    status, headers, data = call(port, "POST", "/v1/chat/completions", ask, key=key)
    assert status == 429
    error = json.loads(data)["error"]
    assert (error["type"], error["code"]) == (kind, "rate_limit_exceeded")
    assert what in error["message"]
    assert 1 <= int(headers["retry-after"]) <= 60
    assert len(FrontDoor.seen) == sent  # refused before anything was sent on
    # Another caller is not limited by it.
    assert call(port, "POST", "/v1/chat/completions", ask, key="key-dev")[0] == 200


def test_limits_budgets_free_up_as_the_window_moves() -> None:
    budgets = router.Budgets()
    limits = {"requestsPerMinute": 2, "tokensPerDay": 100}
    assert budgets.refused("c", limits, 1, 1000.0) is None
    budgets.spend("c", "requestsPerMinute", 1, 1000.0)
    budgets.spend("c", "requestsPerMinute", 1, 1030.5)
    what, wait = budgets.refused("c", limits, 1, 1031.0)  # type: ignore[misc]
    assert what == "requests per minute" and wait == pytest.approx(29.0)
    assert budgets.refused("c", limits, 1, 1060.0) is None  # the first left the window
    budgets.spend("c", "tokensPerDay", 100, 2000.0)
    what, wait = budgets.refused("c", limits, 1, 3000.0)  # type: ignore[misc]
    # a day's window counts in minutes: the 100 tokens sit in the minute from 1980 s
    assert what == "tokens per day" and wait == pytest.approx(1980.0 + 86400 - 3000.0)
    assert budgets.refused("c", limits, 1, 1980.0 + 86400) is None


@pytest.mark.parametrize(
    "headers",
    [{"Content-Length": "abc"}, {"Content-Length": "-4"}, {"Transfer-Encoding": "chunked"}],
)
def test_openai_a_malformed_body_length_is_a_400_not_a_crash(
    door: tuple[int, router.Usage], headers: dict[str, str]
) -> None:
    import socket

    port, _ = door
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    raw = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-dev\r\n"
        f"{head}\r\n" + ("zz\r\n" if "Transfer-Encoding" in headers else "")
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw.encode())
        got = b""
        while chunk := sock.recv(65536):  # the answer closes the connection
            got += chunk
    answer = got.decode()
    assert answer.startswith("HTTP/1.1 400"), answer
    assert "bad_request" in answer


def test_openai_router_keeps_its_connections_to_the_front_door(
    door: tuple[int, router.Usage],
) -> None:
    """Answers read whole leave their connection for the next request (no new TCP and TLS
    handshake per request)."""
    port, _ = door
    FrontDoor.peers = []
    for _ in range(5):
        assert call(port, "POST", "/v1/chat/completions", {"model": "qwen"})[0] == 200
    assert len(FrontDoor.peers) == 5 and len(set(FrontDoor.peers)) == 1, FrontDoor.peers


# -- wake on request (api.md, "Scale to zero") ----------------------------------------------


def until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``check`` until it holds (True) or ``timeout`` passes (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()


def held(port: int) -> dict[str, float]:
    _, _, data = call(port, "GET", "/metrics", key=None)
    out = {}
    for line in data.decode().splitlines():
        if line.startswith("modelplane_router_held{"):
            name, value = line.rsplit(" ", 1)
            out[name.split('"')[1]] = float(value)
    return out


def test_wake_a_request_for_a_model_at_zero_is_held_until_it_answers(
    door: tuple[int, router.Usage],
) -> None:
    port, _ = door
    FrontDoor.awake_at = time.monotonic() + 3.5
    answers: list[tuple[int, bytes]] = []

    def ask() -> None:
        status, _, data = call(port, "POST", "/v1/chat/completions", {"model": "sleepy"})
        answers.append((status, data))

    client = threading.Thread(target=ask)
    client.start()
    assert until(lambda: held(port) == {"sleepy": 1.0})  # what reconcile's probe reads
    client.join(timeout=15)
    assert [s for s, _ in answers] == [200]
    assert json.loads(answers[0][1])["object"] == "chat.completion"
    assert FrontDoor.sleepy_tries >= 3  # 404 (no route), 503 (loading), then the engine
    assert held(port) == {"sleepy": 0.0}


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("asleep", 503, "model_waking"),  # past the deadline
        ("unrouted", 404, None),  # no `wake`: the front door's answer, at once
        ("engine-404", 404, None),  # the engine's own answer is never held
    ],
)
def test_wake_answers_when_nothing_wakes(
    door: tuple[int, router.Usage], model: str, status: int, code: str | None
) -> None:
    port, _ = door
    started = time.monotonic()
    got, headers, data = call(port, "POST", "/v1/chat/completions", {"model": model})
    assert got == status
    if code:
        assert json.loads(data)["error"]["code"] == code
        assert headers["retry-after"] == str(router.WAKE_RETRY_AFTER)
        assert time.monotonic() - started >= 1.5  # held to its deadline
    else:
        assert FrontDoor.sleepy_tries <= 1 and held(port).get(model, 0) == 0


def test_wake_a_full_queue_answers_429(door: tuple[int, router.Usage]) -> None:
    port, _ = door
    statuses: list[int] = []
    waiting = [
        threading.Thread(
            target=lambda: statuses.append(
                call(port, "POST", "/v1/chat/completions", {"model": "asleep"})[0]
            )
        )
        for _ in range(2)
    ]
    for t in waiting:
        t.start()
    assert until(lambda: held(port) == {"asleep": 2.0})
    status, headers, data = call(port, "POST", "/v1/chat/completions", {"model": "asleep"})
    assert status == 429 and headers["retry-after"] == str(router.WAKE_RETRY_AFTER)
    assert json.loads(data)["error"]["code"] == "model_waking_queue_full"
    for t in waiting:
        t.join(timeout=10)
    assert statuses == [503, 503]
