"""Security L2 (docs/api.md "Callers"; docs/architecture.md "Reconcile as a service"): the
authorization service and the reconcile service's `--listen` hold no thread for a client that
says nothing, serve a bounded number of connections, and bound headers (431). Hostile clients
on 127.0.0.1; outcomes asserted, the waits generous."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modelplane import authz


def _authz(tmp_path: Path, **limits: Any) -> Any:
    keys = tmp_path / "callers.json"
    keys.write_text('{"callers": {}, "open": false}')
    server = authz.serve(keys, "127.0.0.1", 0, **limits)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def _metrics(monkeypatch: pytest.MonkeyPatch, **limits: Any) -> Any:
    from modelplane.driver import service

    for name, value in limits.items():
        monkeypatch.setattr(service, name, value)
    port = _free_port()
    return service.serve(f"127.0.0.1:{port}", service.Metrics())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SERVERS: dict[str, Callable[..., Any]] = {
    "authz": lambda tmp_path, mp, timeout, cap: _authz(
        tmp_path, timeout=timeout, max_connections=cap
    ),
    "reconcile --listen": lambda tmp_path, mp, timeout, cap: _metrics(
        mp, LISTEN_TIMEOUT=timeout, LISTEN_CONNECTIONS=cap
    ),
}


@pytest.fixture(params=sorted(SERVERS))
def server(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    made = SERVERS[request.param](tmp_path, monkeypatch, 0.5, 2)
    yield made
    made.shutdown()
    made.server_close()


def _connect(server: Any) -> socket.socket:
    conn = socket.create_connection(server.server_address[:2], timeout=10)
    return conn


def _closed(conn: socket.socket) -> bool:
    """The server closed the connection (an empty read), within the socket's timeout."""
    try:
        return conn.recv(1024) == b""
    except (TimeoutError, OSError):
        return False


def _answers(server: Any) -> bytes:
    with _connect(server) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return conn.recv(1024)


def test_security_silent_client_is_dropped(server: Any) -> None:
    """Slowloris: a connection that sends nothing (or half a request) is closed by the server."""
    with _connect(server) as silent, _connect(server) as half:
        half.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finished
        assert _closed(silent) and _closed(half)
    assert _answers(server).startswith(b"HTTP/1.")


def test_security_connections_are_capped(server: Any) -> None:
    """Two connections held open (the cap): a third is closed unanswered; once one goes,
    a request is served again."""
    held = [_connect(server), _connect(server)]
    time.sleep(0.1)  # both accepted and holding their slots
    with _connect(server) as third:
        third.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _closed(third)
    for conn in held:
        conn.close()
    deadline = time.monotonic() + 10
    while True:
        try:
            if _answers(server).startswith(b"HTTP/1."):
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "no request served after the held connections closed"
        time.sleep(0.05)


def test_security_huge_headers_are_refused(server: Any) -> None:
    with _connect(server) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n")
        assert conn.recv(1024).split(b"\r\n")[0].split(b" ")[1] == b"431"
