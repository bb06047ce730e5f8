"""The stand-in model server's API: endpoints and shapes, output length, streaming, readiness,
path prefixes and model names (on 127.0.0.1 only)."""

from __future__ import annotations

import json

import pytest

from modelplane.devfleet.standin import (
    StandinConfig,
    StandinIdentity,
)
from tests.devfleet import standin_helpers as sh


@pytest.fixture
def host():
    yield from sh.standin_host()


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
    # One message: no earlier conversation it continues, so no prefix-cache hit.
    assert data["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 16,
        "total_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


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
    ("chat", "POST", "/v1/chat/completions", sh.CHAT, 200, check_chat),
    ("completions", "POST", "/v1/completions", sh.COMPLETION, 200, check_completion),
    (
        "completions-prompt-list",
        "POST",
        "/v1/completions",
        {"prompt": ["a b", "c d"]},
        200,
        check_completion,
    ),
    ("messages", "POST", "/v1/messages", sh.MESSAGES, 200, check_messages),
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
    port = sh.serve(host)
    got, headers, raw = sh.call(port, method, path, body)
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
    port = sh.serve(host, identity=ident)
    body = {
        "/v1/chat/completions": sh.CHAT,
        "/v1/completions": sh.COMPLETION,
        "/v1/messages": sh.MESSAGES,
    }.get(path)
    status, headers, raw = sh.call(port, "POST" if body else "GET", path, body)
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
    port = sh.serve(host, identity=StandinIdentity(replica="r", role="worker", cluster="c"))
    _, headers, raw = sh.call(port, "POST", "/v1/chat/completions", sh.CHAT)
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
    port = sh.serve(host, StandinConfig(output_tokens=output_tokens))
    body = dict(sh.CHAT) | ({"max_tokens": max_tokens} if max_tokens is not None else {})
    _, _, raw = sh.call(port, "POST", "/v1/chat/completions", body)
    data = json.loads(raw)
    assert data["usage"]["completion_tokens"] == expected
    assert len(data["choices"][0]["message"]["content"].split()) == expected
    assert data["choices"][0]["finish_reason"] == reason
    _, _, raw = sh.call(
        port, "POST", "/v1/messages", sh.MESSAGES | {"max_tokens": max_tokens or 1000}
    )
    assert json.loads(raw)["stop_reason"] == {"stop": "end_turn", "length": "max_tokens"}[reason]


# --- streaming -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "text_of"),
    [
        ("/v1/chat/completions", sh.CHAT, lambda c: c["choices"][0]["delta"].get("content", "")),
        ("/v1/completions", sh.COMPLETION, lambda c: c["choices"][0]["text"]),
    ],
    ids=["chat", "completions"],
)
def test_openai_stream(host, path, body, text_of):
    port = sh.serve(host)
    status, headers, raw = sh.call(port, "POST", path, body | {"stream": True})
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["x-modelplane-replica"] == "r-east-0"
    events = sh.sse(raw)
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
    port = sh.serve(host)
    body = sh.CHAT | {"stream": True, "stream_options": {"include_usage": True}}
    events = sh.sse(sh.call(port, "POST", "/v1/chat/completions", body)[2])
    assert events[-1][1] == "[DONE]"
    last = json.loads(events[-2][1])
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 4, "completion_tokens": 16, "total_tokens": 20}


def test_messages_stream(host):
    port = sh.serve(host)
    status, headers, raw = sh.call(port, "POST", "/v1/messages", sh.MESSAGES | {"stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sh.sse(raw)
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
    ("chat", "POST", "/v1/chat/completions", sh.CHAT, 503),
    ("messages", "POST", "/v1/messages", sh.MESSAGES, 503),
    ("metrics-still-scrapable", "GET", "/metrics", None, 200),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"), [c[1:] for c in NOT_READY], ids=[c[0] for c in NOT_READY]
)
def test_not_ready(host, method, path, body, status):
    port = sh.serve(host, StandinConfig(ready=False))
    assert sh.call(port, method, path, body)[0] == status
    assert host.stats("s").ready is False
    host.set_ready("s", True)
    assert sh.call(port, method, path, body)[0] == 200
    host.set_ready("s", False)
    assert sh.call(port, "GET", "/health")[0] == 503


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
    port = sh.serve(host, StandinConfig(prefix_tolerant=tolerant))
    method, body = ("GET", None) if path.endswith("/health") else ("POST", sh.CHAT)
    got, _, raw = sh.call(port, method, path, body)
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
    port = sh.serve(host, StandinConfig(strict_model=strict))
    body = {k: v for k, v in sh.CHAT.items() if k != "model"} | ({"model": model} if model else {})
    got, _, raw = sh.call(port, "POST", "/v1/chat/completions", body)
    assert got == status
    if got == 200:
        assert json.loads(raw)["model"] == "m1"
    msg = {k: v for k, v in sh.MESSAGES.items() if k != "model"} | (
        {"model": model} if model else {}
    )
    got, _, raw = sh.call(port, "POST", "/v1/messages", msg)
    assert got == status
    if got == 404:
        assert json.loads(raw)["error"]["type"] == "not_found_error"


def test_chat_session_turns_hit_the_simulated_prefix_cache(host):
    """A later turn that continues a conversation this stand-in served reports its earlier
    messages as cached prompt tokens; a conversation it never saw reports none."""
    port = sh.serve(host)
    first = sh.CHAT["messages"]
    answer = json.loads(sh.call(port, "POST", "/v1/chat/completions", sh.CHAT)[2])
    turn = [*first, answer["choices"][0]["message"], {"role": "user", "content": "and again"}]
    later = json.loads(
        sh.call(port, "POST", "/v1/chat/completions", sh.CHAT | {"messages": turn})[2]
    )
    assert later["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    other = [{"role": "user", "content": "something else"}, *turn[1:]]
    fresh = json.loads(
        sh.call(port, "POST", "/v1/chat/completions", sh.CHAT | {"messages": other})[2]
    )
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
