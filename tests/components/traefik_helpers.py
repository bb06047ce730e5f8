"""The real Traefik (the dev fleet's cached build) for the gateway tests: its binary, a free
loopback port, loopback HTTP backends and Traefik itself on its file provider."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml


def traefik_binary() -> Path:
    from modelplane.gobuild.fleet import cached_fleet_binaries

    found = cached_fleet_binaries()
    if found is None:
        pytest.skip("no cached Traefik build (make setup)")
    return found.traefik


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 and no access log: the base of the backends' handlers."""

    protocol_version = "HTTP/1.1"

    def answer(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return


class HeadersEcho(QuietHandler):
    """A backend answering a POST with 200 and the caller and key headers it received (what
    an engine behind the gateways would see)."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        got = {
            h: self.headers.get(h) for h in ("x-modelplane-caller", "authorization", "x-api-key")
        }
        self.answer(200, json.dumps(got).encode())


def post_json(port: int, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """POST ``{}`` to ``path`` on the loopback ``port``: the status and the JSON body (``{}``
    when empty, ``{"raw": ...}`` when not JSON)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=b"{}", headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw) if raw else {}
        except ValueError:
            return resp.status, {"raw": raw.decode(errors="replace")}
    finally:
        conn.close()


def serve_http(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """``handler`` on a free loopback port, served by a daemon thread; the caller shuts it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def routes_to(service: str, *middlewares: str) -> dict[str, Any]:
    """Traefik's routers: every path on the entry point `web` through ``middlewares`` to
    ``service``."""
    router = {"rule": "PathPrefix(`/`)", "entryPoints": ["web"], "service": service}
    return {"chat": {**router, "middlewares": list(middlewares)}}


@contextlib.contextmanager
def running_traefik(
    workdir: Path,
    dynamic: dict[str, Any],
    started: Callable[[int], bool],
    *flags: str,
    name: str = "dynamic",
    port: int | None = None,
) -> Iterator[int]:
    """Traefik with the routers, middlewares and services ``dynamic`` (its file provider,
    ``<workdir>/<name>.yaml``) on the entry point `web` (``port``, or a free loopback port;
    yielded) once ``started(port)`` says so (30 s at most; an OSError counts as not yet);
    stopped when the block ends."""
    binary = traefik_binary()
    config = workdir / f"{name}.yaml"
    config.write_text(yaml.safe_dump(dynamic))
    port = port or free_port()
    process = subprocess.Popen(
        [
            str(binary),
            "--global.checkNewVersion=false",
            "--global.sendAnonymousUsage=false",
            f"--entryPoints.web.address=127.0.0.1:{port}",
            f"--providers.file.filename={config}",
            *flags,
            "--log.level=ERROR",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError):
                if started(port):
                    break
            assert time.monotonic() < deadline, "Traefik did not start"
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(10)
