"""The stand-in model server's behaviour: service time, queues and metrics, configuration
checks, day-2 behaviour (load time, revision, error ratio, first-token delay) and the caller it
reports (on 127.0.0.1 only)."""

from __future__ import annotations

import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from modelplane.devfleet.standin import (
    StandinConfig,
)
from modelplane.devfleet.standin_metrics import TTFT_BUCKETS
from tests.devfleet import standin_helpers as sh


@pytest.fixture
def host():
    yield from sh.standin_host()


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
    port = sh.serve(host, StandinConfig(service_time=service, concurrency=concurrency))
    label = '{model_name="m1"}'
    with ThreadPoolExecutor(n) as pool:
        futures = [
            pool.submit(sh.call, port, "POST", "/v1/chat/completions", sh.CHAT) for _ in range(n)
        ]
        values, types = sh.wait_for(
            lambda: (
                (m := sh.metrics(port))[0][f"vllm:num_requests_running{label}"]
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
    values, types = sh.metrics(port)
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
    port = sh.serve(host, StandinConfig(service_time=service, concurrency=1))

    def timed():
        start = time.monotonic()
        status = sh.call(port, "POST", "/v1/completions", sh.COMPLETION)[0]
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
    port = sh.serve(host, config)
    start = time.monotonic()
    status, _, _ = sh.call(port, "POST", "/v1/chat/completions", sh.CHAT | {"stream": stream})
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


# --------------------------------------------------------------------------- day 2 (issue 21)


def test_load_time_keeps_it_unready_until_loaded(host):
    """A model loading its weights: health 503 and requests refused for load_time, then 200."""
    started = time.monotonic()
    port = sh.serve(host, StandinConfig(load_time=1.0))
    assert sh.call(port, "GET", "/health")[0] == 503
    assert sh.call(port, "POST", "/v1/chat/completions", sh.CHAT)[0] == 503
    assert host.stats("s").ready is False
    sh.wait_for(lambda: sh.call(port, "GET", "/health")[0] == 200, what="loaded")
    assert time.monotonic() - started >= 1.0
    assert host.stats("s").ready is True
    assert sh.call(port, "POST", "/v1/chat/completions", sh.CHAT)[0] == 200
    host.set_ready("s", False)  # holding it unready still works after the load
    assert sh.call(port, "GET", "/health")[0] == 503


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/v1/chat/completions"])
def test_revision_header(host, path):
    port = sh.serve(host, StandinConfig(revision="abc123"))
    status, headers, raw = sh.call(
        port,
        "GET" if path != "/v1/chat/completions" else "POST",
        path,
        sh.CHAT if path == "/v1/chat/completions" else None,
    )
    assert status == 200
    assert headers["x-modelplane-revision"] == "abc123"
    if path != "/health":
        assert json.loads(raw)["modelplane"]["revision"] == "abc123"


def test_no_revision_header_by_default(host):
    port = sh.serve(host)
    assert "x-modelplane-revision" not in sh.call(port, "GET", "/health")[1]


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
    port = sh.serve(host, StandinConfig(error_ratio=ratio))
    got = [sh.call(port, "POST", "/v1/chat/completions", sh.CHAT)[0] for _ in range(n)]
    assert got == expected
    assert sh.call(port, "GET", "/health")[0] == 200  # readiness does not see it
    values, _ = sh.metrics(port)
    series = 'http_requests_total{handler="/v1/chat/completions",method="POST",status="%s"}'
    assert values.get(series % "5xx", 0) == expected.count(500)
    assert values.get(series % "2xx", 0) == expected.count(200)
    assert values['vllm:request_success_total{model_name="m1"}'] == expected.count(200)


@pytest.mark.parametrize("stream", [False, True])
def test_first_token_delay(host, stream):
    port = sh.serve(host, StandinConfig(first_token_delay=0.6))
    started = time.monotonic()
    status, _, _ = sh.call(port, "POST", "/v1/chat/completions", sh.CHAT | {"stream": stream})
    assert status == 200
    assert time.monotonic() - started >= 0.6
    values, _ = sh.metrics(port)
    ttft = "vllm:time_to_first_token_seconds"
    # The one observation is at least the delay and sits in the buckets its value falls in
    # (the measured value has no upper bound: a loaded machine adds to it).
    seen = values[f'{ttft}_sum{{model_name="m1"}}']
    assert seen >= 0.6 and values[f'{ttft}_count{{model_name="m1"}}'] == 1
    assert values[f'{ttft}_bucket{{model_name="m1",le="0.5"}}'] == 0
    buckets = {b: values[f'{ttft}_bucket{{model_name="m1",le="{b}"}}'] for b in TTFT_BUCKETS}
    assert buckets == {b: float(seen <= b) for b in TTFT_BUCKETS}, (seen, buckets)


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
    port = sh.serve(host)
    conn = http.client.HTTPConnection(sh.LOOPBACK, port, timeout=15)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(sh.CHAT).encode(),
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
