"""The front door's API-key check: a small authorization service behind Traefik's forwardAuth.

Traefik (v3.7) has no API-key middleware, so each ModelService route runs Traefik's
`forwardAuth` against this service (api.md, "Callers"): Traefik sends it the request's
headers; it answers 200 with ``x-modelplane-caller: <caller>`` (Traefik replaces any
client-sent header of that name with it: `authResponseHeaders`), or 401 with an
OpenAI-shaped error body, which Traefik returns to the client as is. It never sees a
request body and never proxies anything.

Keys: a JSON file ``{"callers": {"<sha256 of the key, hex>": "<caller>"}, "frontDoor":
"Basic ...", "open": false}`` (the gateway's Secret, mounted; only hashes, never a caller's
key), re-read when it changes, so rotating a key is editing the Secret with no restart.
``frontDoor``: the credentials the workload gateways require of the front door (api.md
"Private workload gateways"); a 200 carries them as ``Authorization`` (Traefik's
`authResponseHeaders` puts them on the forwarded request, replacing the caller's key).
``open``: a fleet without `spec.auth` lets every request in (as caller ``anonymous``), still
with the front door's credentials. ``notAfter`` (optional): ``{"<hash>": "<RFC 3339 time>"}``,
the end of each key that has one (a caller has several keys while one is rotated, api.md
"Keys"): from that time on, by this service's clock, the key is refused, with no new table;
an end that does not parse refuses its key. The older flat ``{hash: caller}`` file is still
read; an authz without ``notAfter`` (the previous release) reads this one and ignores it.
Standard library only: the gateway cluster runs it from a ConfigMap with a stock Python image.

    python -m modelplane.authz --keys callers.json --listen 127.0.0.1:8099
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

CALLER_HEADER = "x-modelplane-caller"
ANONYMOUS = "anonymous"
RELOAD_EVERY = 1.0  # seconds between checks of the keys file
# A connection silent this long is closed (a slow client holds no thread for good); longer
# than Go's idle keep-alive (90 s), so Traefik drops an idle connection before it is closed
# under it. At most MAX_CONNECTIONS at once: another is closed at once, never queued.
REQUEST_TIMEOUT = 120.0
MAX_CONNECTIONS = 512


def key_hash(key: str) -> str:
    """What the keys file holds for a key (keys are long random tokens: a plain hash)."""
    return hashlib.sha256(key.encode()).hexdigest()


def presented_key(headers: dict[str, str]) -> str | None:
    """The key of `Authorization: Bearer <key>` (OpenAI) or `x-api-key: <key>` (Anthropic)."""
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    key = headers.get("x-api-key", "").strip()
    return key or None


def error_body(
    message: str, kind: str = "invalid_request_error", code: str = "invalid_api_key"
) -> bytes:
    """OpenAI's error shape (what its SDKs parse)."""
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}
    ).encode()


def allowed_callers(path: str) -> frozenset[str] | None:
    """The callers a route lets in (`?callers=a,b` on the forwardAuth address of a
    ModelService with `spec.callers`); None: every caller with a key."""
    query = parse_qs(urlsplit(path).query)
    if "callers" not in query:
        return None
    return frozenset(c for value in query["callers"] for c in value.split(",") if c)


def _end(value: object) -> float:
    """A key's end (RFC 3339, with a zone) as a POSIX time; one that does not parse is the
    distant past (fail closed: its key is refused)."""
    try:
        when = datetime.fromisoformat(str(value).strip())
    except ValueError:
        return float("-inf")
    return when.timestamp() if when.tzinfo is not None else float("-inf")


class Keys:
    """The hash -> caller table, re-read when the file's mtime or size changes. ``clock``:
    the time keys' ends are checked against (POSIX seconds)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._table: dict[str, str] = {}
        self._ends: dict[str, float] = {}
        self.front_door: str | None = None
        self.open = False
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        self.reload()

    def reload(self) -> None:
        try:
            info = self.path.stat()
            stamp = (info.st_mtime_ns, info.st_size)
            if stamp == self._stamp:
                return
            table = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            # Fail closed: an unreadable table lets nobody in (and says so once).
            if self._table or self._stamp is None:
                print(f"authz: cannot read {self.path}: {exc}; refusing every key", flush=True)
            self._table, self._stamp, self.front_door, self.open = {}, None, None, False
            self._ends = {}
            return
        if isinstance(table, dict):
            callers = table.get("callers") if "callers" in table else table
            self._table = (
                {str(k): str(v) for k, v in callers.items()} if isinstance(callers, dict) else {}
            )
            front_door = table.get("frontDoor") if "callers" in table else None
            self.front_door = str(front_door) if front_door else None
            self.open = table.get("open") is True if "callers" in table else False
            ends = table.get("notAfter") if "callers" in table else None
            self._ends = (
                {str(k): _end(v) for k, v in ends.items()} if isinstance(ends, dict) else {}
            )
            self._stamp = stamp
            print(f"authz: {len(self._table)} caller key(s) loaded", flush=True)

    def caller(self, key: str | None) -> str | None:
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= RELOAD_EVERY:
                self._checked = now
                self.reload()
            table, ends = self._table, self._ends
            if self.open:
                return ANONYMOUS
        if key is None:
            return None
        digest = key_hash(key)
        for known, caller in table.items():
            if hmac.compare_digest(known, digest):
                end = ends.get(known)
                return caller if end is None or self.clock() < end else None
        return None


def make_handler(keys: Keys, timeout: float = REQUEST_TIMEOUT) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms stall

        def _answer(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            key = presented_key(headers)
            caller = keys.caller(key)
            allowed = allowed_callers(self.path)
            if caller is None:
                message = (
                    "Incorrect API key provided."
                    if key
                    else "Missing API key: send `Authorization: Bearer <key>` or `x-api-key`."
                )
                body = error_body(message)
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("WWW-Authenticate", 'Bearer realm="modelplane"')
            elif allowed is not None and caller not in allowed:
                body = error_body(
                    f"Caller {caller!r} is not allowed to use this service.",
                    kind="permission_error",
                    code="caller_not_allowed",
                )
                self.send_response(403)
                self.send_header("Content-Type", "application/json")
            else:
                body = b""
                self.send_response(200)
                self.send_header(CALLER_HEADER, caller)
                if keys.front_door:
                    self.send_header("Authorization", keys.front_door)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _answer  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return  # no access log: the gateway has one (and headers hold keys)

    Handler.timeout = timeout  # the socket's: every read and write of a connection
    return Handler


class BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most ``limit`` at once: one more is closed unanswered."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, limit: int) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(limit)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def serve(
    keys_path: Path,
    host: str,
    port: int,
    *,
    timeout: float = REQUEST_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> ThreadingHTTPServer:
    handler = make_handler(Keys(keys_path), timeout)
    return BoundedServer((host, port), handler, max_connections)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="modelplane-authz", description=__doc__.split("\n")[0])
    parser.add_argument("--keys", required=True, type=Path, help="the hash -> caller JSON file")
    parser.add_argument("--listen", default="0.0.0.0:8080", help="host:port")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = serve(args.keys, host or "0.0.0.0", int(port))
    print(f"authz ready on {host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
