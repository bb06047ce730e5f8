"""The dev fleet's stand-in model server (modelplane.devfleet.standin), on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from modelplane.devfleet.standin import (
    StandinConfig,
    StandinHost,
    StandinHostThread,
    StandinIdentity,
)

LOOPBACK = "127.0.0.1"
IDENT = StandinIdentity(replica="r-east-0", role="decode", cluster="east", model="m1", pod="p-0")
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "say hi to me"}]}
COMPLETION = {"model": "m1", "prompt": "once upon a time"}
MESSAGES = {
    "model": "m1",
    "max_tokens": 64,
    "system": "be brief",
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
}


def call(port, method, path, body=None, timeout=15.0, conn=None):
    """One HTTP request with the standard library; returns (status, headers, raw body)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        payload = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        if own:
            conn.close()


def sse(raw):
    """Server-sent events as (event or None, data string), in order."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        event, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        events.append((event, "\n".join(data)))
    return events


def metrics(port):
    status, headers, raw = call(port, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    values, types = {}, {}
    for line in raw.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            values[series] = float(value)
    return values, types


def wait_for(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def refuses(port):
    try:
        socket.create_connection((LOOPBACK, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.fixture
def host():
    with StandinHostThread(grace=5.0) as h:
        yield h


def serve(host, config=None, identity=IDENT, key="s"):
    return host.add(key, LOOPBACK, 0, identity, config or StandinConfig())


# --- endpoints and shapes -------------------------------------------------------------------

ID_SENTENCE = "m1 stand-in: replica r-east-0 role decode cluster east pod p-0 answered."


def check_health(body):
    assert body == b""


def check_models(body):
    data = json.loads(body)
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == ["m1"]


def check_chat(body):
    data = json.loads(body)
    assert data["object"] == "chat.completion"
    assert data["model"] == "m1"
    (choice,) = data["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"].startswith(ID_SENTENCE)
    assert choice["finish_reason"] == "stop"
    assert data["usage"] == {"prompt_tokens": 4, "completion_tokens": 16, "total_tokens": 20}


def check_completion(body):
    data = json.loads(body)
    assert data["object"] == "text_completion"
    (choice,) = data["choices"]
    assert choice["text"].startswith(ID_SENTENCE)
    assert len(choice["text"].split()) == 16
    assert data["usage"] == {"prompt_tokens": 4, "completion_tokens": 16, "total_tokens": 20}


def check_messages(body):
    data = json.loads(body)
    assert (data["type"], data["role"], data["model"]) == ("message", "assistant", "m1")
    (block,) = data["content"]
    assert block["type"] == "text" and block["text"].startswith(ID_SENTENCE)
    assert data["stop_reason"] == "end_turn"
    assert data["usage"] == {"input_tokens": 4, "output_tokens": 16}


def openai_error(status):
    def check(body):
        err = json.loads(body)["error"]
        assert err["code"] == status and err["message"]

    return check


def anthropic_error(kind):
    def check(body):
        data = json.loads(body)
        assert data["type"] == "error" and data["error"]["type"] == kind

    return check


ENDPOINTS = [
    ("health", "GET", "/health", None, 200, check_health),
    ("models", "GET", "/v1/models", None, 200, check_models),
    ("chat", "POST", "/v1/chat/completions", CHAT, 200, check_chat),
    ("completions", "POST", "/v1/completions", COMPLETION, 200, check_completion),
    (
        "completions-prompt-list",
        "POST",
        "/v1/completions",
        {"prompt": ["a b", "c d"]},
        200,
        check_completion,
    ),
    ("messages", "POST", "/v1/messages", MESSAGES, 200, check_messages),
    ("unknown-path", "GET", "/v2/nothing", None, 404, openai_error(404)),
    ("chat-wrong-method", "GET", "/v1/chat/completions", None, 405, openai_error(405)),
    ("health-wrong-method", "POST", "/health", {}, 405, openai_error(405)),
    ("chat-not-json", "POST", "/v1/chat/completions", b"{nope", 400, openai_error(400)),
    ("chat-not-object", "POST", "/v1/chat/completions", [1, 2], 400, openai_error(400)),
    ("chat-no-messages", "POST", "/v1/chat/completions", {"model": "m1"}, 400, openai_error(400)),
    (
        "chat-empty-messages",
        "POST",
        "/v1/chat/completions",
        {"messages": []},
        400,
        openai_error(400),
    ),
    ("completions-no-prompt", "POST", "/v1/completions", {"model": "m1"}, 400, openai_error(400)),
    (
        "messages-no-messages",
        "POST",
        "/v1/messages",
        {"max_tokens": 5},
        400,
        anthropic_error("invalid_request_error"),
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "check"),
    [c[1:] for c in ENDPOINTS],
    ids=[c[0] for c in ENDPOINTS],
)
def test_endpoint_shapes(host, method, path, body, status, check):
    port = serve(host)
    got, headers, raw = call(port, method, path, body)
    assert got == status, raw
    check(raw)
    # Every answer, errors included, says who answered.
    assert headers["x-modelplane-replica"] == "r-east-0"
    assert headers["x-modelplane-role"] == "decode"
    assert headers["x-modelplane-cluster"] == "east"
    assert headers["x-modelplane-pod"] == "p-0"


@pytest.mark.parametrize(
    "path", ["/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/messages"]
)
def test_identity_in_json_body(host, path):
    ident = StandinIdentity(
        replica="rep-9", role="prefill", cluster="west", model="m1", pod="pod-a", namespace="team"
    )
    port = serve(host, identity=ident)
    body = {
        "/v1/chat/completions": CHAT,
        "/v1/completions": COMPLETION,
        "/v1/messages": MESSAGES,
    }.get(path)
    status, headers, raw = call(port, "POST" if body else "GET", path, body)
    assert status == 200
    assert json.loads(raw)["modelplane"] == {
        "replica": "rep-9",
        "role": "prefill",
        "cluster": "west",
        "pod": "pod-a",
        "namespace": "team",
        "model": "m1",
        "path": path,
    }
    assert (
        headers["x-modelplane-replica"],
        headers["x-modelplane-role"],
        headers["x-modelplane-cluster"],
    ) == ("rep-9", "prefill", "west")


def test_pod_header_absent_without_pod(host):
    port = serve(host, identity=StandinIdentity(replica="r", role="worker", cluster="c"))
    _, headers, raw = call(port, "POST", "/v1/chat/completions", CHAT)
    assert "x-modelplane-pod" not in headers
    assert (
        "replica r role worker cluster c answered."
        in json.loads(raw)["choices"][0]["message"]["content"]
    )


# --- output length ----------------------------------------------------------------------------

LENGTHS = [
    # (name, output_tokens config, request max_tokens, expected completion tokens, finish reason)
    ("default", 16, None, 16, "stop"),
    ("request-allows-more", 16, 100, 16, "stop"),
    ("request-caps", 30, 20, 20, "length"),
    ("identity-sentence-is-never-cut", 16, 2, 11, "length"),
]


@pytest.mark.parametrize(
    ("output_tokens", "max_tokens", "expected", "reason"),
    [c[1:] for c in LENGTHS],
    ids=[c[0] for c in LENGTHS],
)
def test_output_length(host, output_tokens, max_tokens, expected, reason):
    port = serve(host, StandinConfig(output_tokens=output_tokens))
    body = dict(CHAT) | ({"max_tokens": max_tokens} if max_tokens is not None else {})
    _, _, raw = call(port, "POST", "/v1/chat/completions", body)
    data = json.loads(raw)
    assert data["usage"]["completion_tokens"] == expected
    assert len(data["choices"][0]["message"]["content"].split()) == expected
    assert data["choices"][0]["finish_reason"] == reason
    _, _, raw = call(port, "POST", "/v1/messages", MESSAGES | {"max_tokens": max_tokens or 1000})
    assert json.loads(raw)["stop_reason"] == {"stop": "end_turn", "length": "max_tokens"}[reason]


# --- streaming -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "text_of"),
    [
        ("/v1/chat/completions", CHAT, lambda c: c["choices"][0]["delta"].get("content", "")),
        ("/v1/completions", COMPLETION, lambda c: c["choices"][0]["text"]),
    ],
    ids=["chat", "completions"],
)
def test_openai_stream(host, path, body, text_of):
    port = serve(host)
    status, headers, raw = call(port, "POST", path, body | {"stream": True})
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["x-modelplane-replica"] == "r-east-0"
    events = sse(raw)
    assert all(event is None for event, _ in events)
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["modelplane"]["replica"] == "r-east-0" for c in chunks)
    text = "".join(text_of(c) for c in chunks)
    assert text.startswith(ID_SENTENCE) and len(text.split()) == 16
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert reasons[-1] == "stop" and set(reasons[:-1]) == {None}
    if path == "/v1/chat/completions":
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}


def test_chat_stream_usage_chunk(host):
    port = serve(host)
    body = CHAT | {"stream": True, "stream_options": {"include_usage": True}}
    events = sse(call(port, "POST", "/v1/chat/completions", body)[2])
    assert events[-1][1] == "[DONE]"
    last = json.loads(events[-2][1])
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 4, "completion_tokens": 16, "total_tokens": 20}


def test_messages_stream(host):
    port = serve(host)
    status, headers, raw = call(port, "POST", "/v1/messages", MESSAGES | {"stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse(raw)
    names = [e for e, _ in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}
    datas = [json.loads(d) for _, d in events]
    assert [d["type"] for d in datas] == names
    assert datas[0]["modelplane"]["cluster"] == "east"
    text = "".join(d["delta"]["text"] for d in datas[2:-3])
    assert text.startswith(ID_SENTENCE)
    assert datas[-2]["usage"] == {"output_tokens": 16}
    assert datas[-2]["delta"]["stop_reason"] == "end_turn"


# --- readiness, prefixes, model names ----------------------------------------------------------

NOT_READY = [
    ("health", "GET", "/health", None, 503),
    ("models", "GET", "/v1/models", None, 503),
    ("chat", "POST", "/v1/chat/completions", CHAT, 503),
    ("messages", "POST", "/v1/messages", MESSAGES, 503),
    ("metrics-still-scrapable", "GET", "/metrics", None, 200),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"), [c[1:] for c in NOT_READY], ids=[c[0] for c in NOT_READY]
)
def test_not_ready(host, method, path, body, status):
    port = serve(host, StandinConfig(ready=False))
    assert call(port, method, path, body)[0] == status
    assert host.stats("s").ready is False
    host.set_ready("s", True)
    assert call(port, method, path, body)[0] == 200
    host.set_ready("s", False)
    assert call(port, "GET", "/health")[0] == 503


PREFIXES = [
    # (name, prefix_tolerant, path, expected status)
    ("plain", False, "/v1/chat/completions", 200),
    ("unrewritten-prefix-strict", False, "/team/r0/v1/chat/completions", 404),
    ("unrewritten-prefix-tolerant", True, "/team/r0/v1/chat/completions", 200),
    ("plain-tolerant", True, "/v1/chat/completions", 200),
    ("health-tolerant", True, "/team/r0/health", 200),
    ("not-a-suffix-boundary", True, "/xv1/chat/completions", 404),
]


@pytest.mark.parametrize(
    ("tolerant", "path", "status"), [c[1:] for c in PREFIXES], ids=[c[0] for c in PREFIXES]
)
def test_prefix_tolerance(host, tolerant, path, status):
    port = serve(host, StandinConfig(prefix_tolerant=tolerant))
    method, body = ("GET", None) if path.endswith("/health") else ("POST", CHAT)
    got, _, raw = call(port, method, path, body)
    assert got == status
    if got == 200 and body:
        assert json.loads(raw)["modelplane"]["path"] == path


MODELS = [
    ("lenient-other-model", False, "other", 200),
    ("strict-same-model", True, "m1", 200),
    ("strict-no-model", True, None, 200),
    ("strict-other-model", True, "other", 404),
]


@pytest.mark.parametrize(
    ("strict", "model", "status"), [c[1:] for c in MODELS], ids=[c[0] for c in MODELS]
)
def test_model_names(host, strict, model, status):
    port = serve(host, StandinConfig(strict_model=strict))
    body = {k: v for k, v in CHAT.items() if k != "model"} | ({"model": model} if model else {})
    got, _, raw = call(port, "POST", "/v1/chat/completions", body)
    assert got == status
    if got == 200:
        assert json.loads(raw)["model"] == "m1"
    msg = {k: v for k, v in MESSAGES.items() if k != "model"} | ({"model": model} if model else {})
    got, _, raw = call(port, "POST", "/v1/messages", msg)
    assert got == status
    if got == 404:
        assert json.loads(raw)["error"]["type"] == "not_found_error"


# --- service time, queues, metrics -------------------------------------------------------------

QUEUES = [
    # (name, concurrency, requests in flight, expected running, expected waiting)
    ("one-slot", 1, 3, 1, 2),
    ("two-slots", 2, 3, 2, 1),
    ("unlimited", 0, 3, 3, 0),
]


@pytest.mark.parametrize(
    ("concurrency", "n", "running", "waiting"), [c[1:] for c in QUEUES], ids=[c[0] for c in QUEUES]
)
def test_metrics_while_in_flight(host, concurrency, n, running, waiting):
    service = 1.5
    port = serve(host, StandinConfig(service_time=service, concurrency=concurrency))
    label = '{model_name="m1"}'
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(call, port, "POST", "/v1/chat/completions", CHAT) for _ in range(n)]
        values, types = wait_for(
            lambda: (
                (m := metrics(port))[0][f"vllm:num_requests_running{label}"]
                + m[0][f"vllm:num_requests_waiting{label}"]
                == n
                and m
            ),
            what=f"{n} requests in flight",
        )
        assert values[f"vllm:num_requests_running{label}"] == running
        assert values[f"vllm:num_requests_waiting{label}"] == waiting
        usage = values[f"vllm:gpu_cache_usage_perc{label}"]
        assert usage == (running / concurrency if concurrency else 0.0)
        assert values[f"vllm:request_success_total{label}"] == 0
        stats = host.stats("s")
        assert (stats.running, stats.waiting) == (running, waiting)
        assert [f.result()[0] for f in futures] == [200] * n
    values, types = metrics(port)
    ttft = "vllm:time_to_first_token_seconds"
    assert {k: v for k, v in values.items() if not k.startswith(ttft)} == {
        f"vllm:num_requests_running{label}": 0,
        f"vllm:num_requests_waiting{label}": 0,
        f"vllm:gpu_cache_usage_perc{label}": 0,
        f"vllm:request_success_total{label}": n,
        f"vllm:prompt_tokens_total{label}": 4 * n,
        f"vllm:generation_tokens_total{label}": 16 * n,
        'http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"}': n,
    }
    assert values[f"{ttft}_count{label}"] == n
    assert values[f'{ttft}_bucket{{model_name="m1",le="+Inf"}}'] == n
    assert values[f'{ttft}_bucket{{model_name="m1",le="1.0"}}'] == 0  # all waited >= 1.5 s
    assert values[f"{ttft}_sum{label}"] >= service * n
    assert types == {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:gpu_cache_usage_perc": "gauge",
        "vllm:request_success_total": "counter",
        "vllm:prompt_tokens_total": "counter",
        "vllm:generation_tokens_total": "counter",
        ttft: "histogram",
        "http_requests_total": "counter",
    }


def test_queue_serialises_requests(host):
    service, n = 0.3, 4
    port = serve(host, StandinConfig(service_time=service, concurrency=1))

    def timed():
        start = time.monotonic()
        status = call(port, "POST", "/v1/completions", COMPLETION)[0]
        return status, time.monotonic() - start

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda _: timed(), range(n)))
    assert [s for s, _ in results] == [200] * n
    # One slot: the last of n concurrent requests waits for the n-1 before it.
    assert max(t for _, t in results) >= n * service * 0.95
    assert min(t for _, t in results) >= service * 0.95


TIMINGS = [
    # (name, service_time, token_time, output_tokens, stream, minimum seconds)
    ("service-time", 0.4, 0.0, 16, False, 0.4),
    ("token-time", 0.0, 0.03, 20, False, 0.6),
    ("both-streamed", 0.2, 0.03, 20, True, 0.8),
]


@pytest.mark.parametrize(
    ("service", "token", "tokens", "stream", "minimum"),
    [c[1:] for c in TIMINGS],
    ids=[c[0] for c in TIMINGS],
)
def test_service_time(host, service, token, tokens, stream, minimum):
    config = StandinConfig(service_time=service, token_time=token, output_tokens=tokens)
    port = serve(host, config)
    start = time.monotonic()
    status, _, _ = call(port, "POST", "/v1/chat/completions", CHAT | {"stream": stream})
    assert status == 200
    assert time.monotonic() - start >= minimum * 0.95


CONFIG_ERRORS = [
    ("service_time", -1.0),
    ("token_time", -0.1),
    ("concurrency", -1),
    ("output_tokens", -5),
]


@pytest.mark.parametrize(("field", "value"), CONFIG_ERRORS, ids=[c[0] for c in CONFIG_ERRORS])
def test_config_rejects_negative(field, value):
    with pytest.raises(ValueError, match=f"{field} must be >= 0"):
        StandinConfig(**{field: value})


# --- many listeners, added and removed at runtime -----------------------------------------------


def ident(replica, cluster="east"):
    return StandinIdentity(replica=replica, role="decode", cluster=cluster, model="m1")


def test_add_remove_at_runtime(host):
    a = host.add("a", LOOPBACK, 0, ident("ra"))
    b = host.add("b", LOOPBACK, 0, ident("rb", cluster="west"))
    assert host.keys() == ["a", "b"]
    assert host.address("a") == (LOOPBACK, a)
    for port, replica, cluster in ((a, "ra", "east"), (b, "rb", "west")):
        _, headers, _ = call(port, "POST", "/v1/chat/completions", CHAT)
        assert (headers["x-modelplane-replica"], headers["x-modelplane-cluster"]) == (
            replica,
            cluster,
        )

    assert host.remove("a", grace=1.0) is True
    assert host.keys() == ["b"]
    assert refuses(a)
    assert call(b, "GET", "/health")[0] == 200
    assert host.remove("a") is False

    # The same key and port can be used again (a pod restarted on the same IP and port).
    assert host.add("a", LOOPBACK, a, ident("ra2")) == a
    assert call(a, "GET", "/health")[1]["x-modelplane-replica"] == "ra2"
    assert host.keys() == ["a", "b"]


def test_add_rejects_taken_key_and_address(host):
    port = host.add("a", LOOPBACK, 0, ident("ra"))
    with pytest.raises(ValueError, match="'a' already exists"):
        host.add("a", LOOPBACK, 0, ident("other"))
    with pytest.raises(OSError):
        host.add("b", LOOPBACK, port, ident("rb"))
    assert host.keys() == ["a"]
    assert call(port, "GET", "/health")[1]["x-modelplane-replica"] == "ra"


def test_sync_wrapper_from_many_threads(host):
    def add_and_call(i):
        port = host.add(f"k{i}", LOOPBACK, 0, ident(f"r{i}"))
        return port, call(port, "GET", "/health")[1]["x-modelplane-replica"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(add_and_call, range(8)))
    assert [r for _, r in results] == [f"r{i}" for i in range(8)]
    assert len({p for p, _ in results}) == 8
    assert host.keys() == sorted(f"k{i}" for i in range(8))
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda i: host.remove(f"k{i}", grace=1.0), range(8))) == [True] * 8
    assert host.keys() == []
    assert all(refuses(p) for p, _ in results)


# --- graceful stop ---------------------------------------------------------------------------


def test_remove_lets_in_flight_requests_finish(host):
    port = serve(host, StandinConfig(service_time=1.0, concurrency=1))
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(call, port, "POST", "/v1/chat/completions", CHAT) for _ in range(2)]
        wait_for(lambda: host.stats("s").waiting == 1, what="one running, one waiting")
        start = time.monotonic()
        assert host.remove("s", grace=10.0) is True
        took = time.monotonic() - start
        results = [f.result() for f in futures]
    # Both the running and the queued request were answered, and remove waited only for them.
    assert [r[0] for r in results] == [200, 200]
    assert all(r[1]["x-modelplane-replica"] == "r-east-0" for r in results)
    assert 1.0 <= took < 6.0
    assert refuses(port)


def test_draining_health_is_503_on_open_connections(host):
    port = serve(host, StandinConfig(service_time=5.0))  # draining outlasts a loaded machine
    idle = http.client.HTTPConnection(LOOPBACK, port, timeout=10)
    assert call(port, "GET", "/health", conn=idle)[0] == 200
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(call, port, "POST", "/v1/completions", COMPLETION)
        wait_for(lambda: host.stats("s").running == 1, what="a running request")
        removing = pool.submit(host.remove, "s", 10.0)
        wait_for(lambda: refuses(port), what="the port to refuse")
        assert call(port, "GET", "/health", conn=idle)[0] == 503
        assert slow.result()[0] == 200
        assert removing.result() is True
    idle.close()


def test_grace_bounds_the_wait(host):
    port = serve(host, StandinConfig(service_time=30.0))
    with ThreadPoolExecutor(1) as pool:
        stuck = pool.submit(call, port, "POST", "/v1/chat/completions", CHAT)
        wait_for(lambda: host.stats("s").running == 1, what="a running request")
        start = time.monotonic()
        host.remove("s", grace=0.3)
        assert time.monotonic() - start < 5.0
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            stuck.result()
    assert refuses(port)


def test_thread_stop_drains_every_listener():
    host = StandinHostThread(grace=10.0).start()
    ports = [
        host.add(k, LOOPBACK, 0, ident(k), StandinConfig(service_time=1.0)) for k in ("a", "b")
    ]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(call, p, "POST", "/v1/messages", MESSAGES) for p in ports]
        wait_for(lambda: all(host.stats(k).running == 1 for k in ("a", "b")), what="both running")
        host.stop()
        assert [f.result()[0] for f in futures] == [200, 200]
    assert all(refuses(p) for p in ports)
    with pytest.raises(RuntimeError, match="not running"):
        host.keys()


def test_async_host_context():
    async def scenario():
        async with StandinHost(grace=1.0) as host:
            port = await host.add("x", LOOPBACK, 0, ident("rx"))
            reader, writer = await asyncio.open_connection(LOOPBACK, port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head = (await reader.read()).decode()
            writer.close()
            assert head.startswith("HTTP/1.1 200")
            assert "x-modelplane-replica: rx" in head
            assert host.keys() == ["x"]
        return port

    port = asyncio.run(scenario())
    assert refuses(port)


# --- CLI -------------------------------------------------------------------------------------


def run_cli(*args):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "modelplane.devfleet.standin", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_cli_serves_and_stops_on_sigterm():
    proc = run_cli(
        "--host",
        LOOPBACK,
        "--port",
        "0",
        "--replica",
        "r",
        "--role",
        "decode",
        "--cluster",
        "c",
        "--model",
        "m",
        "--concurrency",
        "2",
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("stand-in r listening on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        status, headers, raw = call(port, "POST", "/v1/chat/completions", CHAT)
        assert status == 200 and headers["x-modelplane-role"] == "decode"
        assert json.loads(raw)["model"] == "m"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert refuses(port)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


CLI_ERRORS = [
    ("negative-concurrency", ["--concurrency", "-1"], "concurrency must be >= 0"),
    ("port-not-a-number", ["--port", "eighty"], "--port: invalid int value"),
]


@pytest.mark.parametrize(
    ("args", "message"), [c[1:] for c in CLI_ERRORS], ids=[c[0] for c in CLI_ERRORS]
)
def test_cli_bad_input_exits_2(args, message):
    proc = run_cli("--port", "0", *args)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert message in err
    assert "Traceback" not in err


def test_cli_port_taken_exits_1():
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        sock.listen()
        proc = run_cli("--port", str(sock.getsockname()[1]))
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "cannot listen on 127.0.0.1:" in err and "Traceback" not in err


def test_no_listener_threads_leak():
    before = {t.name for t in threading.enumerate()}
    with StandinHostThread(grace=0.5) as h:
        h.add("a", LOOPBACK, 0, ident("ra"))
        assert "standin-host" in {t.name for t in threading.enumerate()}
    assert {t.name for t in threading.enumerate()} <= before


# --------------------------------------------------------------------------- day 2 (issue 21)


def test_load_time_keeps_it_unready_until_loaded(host):
    """A model loading its weights: health 503 and requests refused for load_time, then 200."""
    started = time.monotonic()
    port = serve(host, StandinConfig(load_time=1.0))
    assert call(port, "GET", "/health")[0] == 503
    assert call(port, "POST", "/v1/chat/completions", CHAT)[0] == 503
    assert host.stats("s").ready is False
    wait_for(lambda: call(port, "GET", "/health")[0] == 200, what="loaded")
    assert time.monotonic() - started >= 1.0
    assert host.stats("s").ready is True
    assert call(port, "POST", "/v1/chat/completions", CHAT)[0] == 200
    host.set_ready("s", False)  # holding it unready still works after the load
    assert call(port, "GET", "/health")[0] == 503


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/v1/chat/completions"])
def test_revision_header(host, path):
    port = serve(host, StandinConfig(revision="abc123"))
    status, headers, raw = call(
        port,
        "GET" if path != "/v1/chat/completions" else "POST",
        path,
        CHAT if path == "/v1/chat/completions" else None,
    )
    assert status == 200
    assert headers["x-modelplane-revision"] == "abc123"
    if path != "/health":
        assert json.loads(raw)["modelplane"]["revision"] == "abc123"


def test_no_revision_header_by_default(host):
    port = serve(host)
    assert "x-modelplane-revision" not in call(port, "GET", "/health")[1]


ERROR_RATIOS = [
    # (name, error_ratio, requests, expected statuses in order)
    ("never", 0.0, 4, [200, 200, 200, 200]),
    ("always", 1.0, 3, [500, 500, 500]),
    ("every-fourth", 0.25, 8, [200, 200, 200, 500, 200, 200, 200, 500]),
    ("half", 0.5, 4, [200, 500, 200, 500]),
]


@pytest.mark.parametrize(
    ("ratio", "n", "expected"), [c[1:] for c in ERROR_RATIOS], ids=[c[0] for c in ERROR_RATIOS]
)
def test_error_ratio(host, ratio, n, expected):
    port = serve(host, StandinConfig(error_ratio=ratio))
    got = [call(port, "POST", "/v1/chat/completions", CHAT)[0] for _ in range(n)]
    assert got == expected
    assert call(port, "GET", "/health")[0] == 200  # readiness does not see it
    values, _ = metrics(port)
    series = 'http_requests_total{handler="/v1/chat/completions",method="POST",status="%s"}'
    assert values.get(series % "5xx", 0) == expected.count(500)
    assert values.get(series % "2xx", 0) == expected.count(200)
    assert values['vllm:request_success_total{model_name="m1"}'] == expected.count(200)


@pytest.mark.parametrize("stream", [False, True])
def test_first_token_delay(host, stream):
    port = serve(host, StandinConfig(first_token_delay=0.6))
    started = time.monotonic()
    status, _, _ = call(port, "POST", "/v1/chat/completions", CHAT | {"stream": stream})
    assert status == 200
    assert time.monotonic() - started >= 0.6
    values, _ = metrics(port)
    ttft = "vllm:time_to_first_token_seconds"
    assert values[f'{ttft}_bucket{{model_name="m1",le="0.5"}}'] == 0
    assert values[f'{ttft}_bucket{{model_name="m1",le="0.75"}}'] == 1
    assert 0.6 <= values[f'{ttft}_sum{{model_name="m1"}}'] < 0.75


DAY2_CONFIG_ERRORS = [
    ("load_time", -1.0, "load_time must be >= 0"),
    ("first_token_delay", -0.5, "first_token_delay must be >= 0"),
    ("error_ratio", 1.5, "error_ratio must be within 0..1"),
    ("error_ratio", -0.1, "error_ratio must be within 0..1"),
]


@pytest.mark.parametrize(("field", "value", "message"), DAY2_CONFIG_ERRORS)
def test_day2_config_rejects_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        StandinConfig(**{field: value})


@pytest.mark.parametrize(
    ("sent", "caller", "keys"),
    [
        ({}, None, None),
        ({"x-modelplane-caller": "team-a"}, "team-a", None),
        ({"x-modelplane-caller": "b", "x-api-key": "k"}, "b", "x-api-key"),
    ],
)
def test_auth_standin_reports_the_caller_header_it_got(host, sent, caller, keys):
    port = serve(host)
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=15)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(CHAT).encode(),
            headers={"Content-Type": "application/json", **sent},
        )
        resp = conn.getresponse()
        status, raw = resp.status, resp.read()
    finally:
        conn.close()
    assert status == 200
    who = json.loads(raw)["modelplane"]
    assert who.get("caller") == caller
    assert who.get("keyHeaders") == keys
