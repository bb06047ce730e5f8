"""The retry middleware modelplane renders (api.md "Retries and ejection"), run by the real
Traefik (the dev fleet's build) in front of real HTTP backends on 127.0.0.1.

Traefik reads the middleware from its file provider here (the same `retry` options the
`traefik.io/v1alpha1` Middleware carries), over a weighted service of three backends as a
ModelService route has: one refuses connections (a dead cluster gateway), one answers 429 or
503 when told to, one is healthy. Select with `pytest -k retry`.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelplane.components.workload.routes import traefik_retry_middleware
from tests.components.traefik_helpers import (
    QuietHandler,
    free_port,
    routes_to,
    running_traefik,
    serve_http,
)

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()


class Backend:
    """An HTTP server on 127.0.0.1: ``mode`` says how it answers POSTs."""

    def __init__(self, name: str, mode: str = "ok") -> None:
        self.name, self.mode, self.calls = name, mode, 0
        backend = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                backend.calls += 1
                if backend.mode in ("429", "503"):
                    self.answer(int(backend.mode), b'{"error": "busy"}')
                    return
                if backend.mode == "cut":  # a stream that dies after its first chunk
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("x-backend", backend.name)
                    self.end_headers()
                    chunk = b"data: {}\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    time.sleep(0.3)
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                body = json.dumps({"backend": backend.name}).encode()
                self.answer(200, body, x_backend=backend.name)

        self.server = serve_http(Handler)
        self.port = int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(params=["dead", "live"])
def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[int, list[Backend]]]:
    """Three endpoints: `live`, `flaky` and a third that is `dead` (nothing listens:
    connection refused, as a dead cluster gateway) or `live` too (a second healthy one)."""
    live, flaky, other = Backend("live"), Backend("flaky"), Backend("live")
    retry = traefik_retry_middleware("r", "ns", {})["spec"]["retry"]
    third = free_port() if request.param == "dead" else other.port
    servers = {"live": live.port, "flaky": flaky.port, "third": third}
    dynamic = {
        "http": {
            "routers": routes_to("chat", "retry"),
            "middlewares": {"retry": {"retry": retry}},
            "services": {
                "chat": {"weighted": {"services": [{"name": n, "weight": 1} for n in servers]}},
                **{
                    n: {"loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{p}"}]}}
                    for n, p in servers.items()
                },
            },
        }
    }
    dial = "--serversTransport.forwardingTimeouts.dialTimeout=2s"
    try:
        with running_traefik(
            tmp_path, dynamic, lambda port: post(port)[0] in (200, 429, 503), dial
        ) as port:
            live.calls = flaky.calls = 0
            yield port, [live, flaky]
    finally:
        live.close()
        flaky.close()
        other.close()


def post(port: int) -> tuple[int, str, bool]:
    """(status, backend, complete): complete is False when the body was cut."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/v1/chat/completions", body=BODY)
        resp = conn.getresponse()
        try:
            resp.read()
            complete = True
        except (http.client.IncompleteRead, OSError):
            complete = False
        return resp.status, resp.headers.get("x-backend", ""), complete
    finally:
        conn.close()


@pytest.mark.parametrize("flaky_mode", ["ok", "503", "429"])
def test_retry_refused_and_rejected_requests_go_elsewhere(
    gateway: tuple[int, list[Backend]], flaky_mode: str, request: pytest.FixtureRequest
) -> None:
    port, (live, flaky) = gateway
    flaky.mode = flaky_mode
    results = [post(port) for _ in range(150)]
    answered = {r[1] for r in results if r[0] == 200}
    assert answered == ({"live", "flaky"} if flaky_mode == "ok" else {"live"}), answered
    failed = [r for r in results if r[0] != 200]
    if "dead" in request.node.callspec.id and flaky_mode != "ok":
        # Two of three endpoints failing is beyond the budget's promise; it still bounds
        # the load: at most 4 tries per request, and most requests get through.
        assert len(failed) < 150 / 2, len(failed)
    else:
        assert failed == []
    # Bounded: at most 4 tries per request, so the rejecting backend saw at most 2 tries
    # per request (it cannot come up more than twice in a row of the rotation).
    if flaky_mode != "ok":
        assert 150 / 3 <= flaky.calls <= 2 * 150, flaky.calls


def test_retry_a_started_stream_is_cut_not_replayed(gateway: tuple[int, list[Backend]]) -> None:
    port, (live, flaky) = gateway
    flaky.mode = "cut"
    results = [post(port) for _ in range(30)]
    cut = [r for r in results if r[1] == "flaky"]
    assert cut and all(r[0] == 200 and not r[2] for r in cut), results
    assert all(r[2] for r in results if r[1] == "live"), results
    assert flaky.calls == len(cut)  # each cut stream was sent once, never again
