"""The front door's OpenAI endpoint: one base URL for the whole fleet, routed by `model`.

Traefik routes on paths and headers, never on a request body, and reads no response body, so
`/v1/` at the fleet's base URL goes to this small proxy (the Deployment
`modelplane-system/modelplane-router`, run from a ConfigMap by a stock Python image, like
`modelplane-authz`). Per request it:

1. checks the caller's key against the same keys file as `modelplane-authz` (hashes only);
2. `GET /v1/models`: lists the models that caller may use, in OpenAI's shape;
3. `POST /v1/chat/completions`, `/v1/completions`, `/v1/embeddings`, `/v1/responses`: reads
   the body's `model`, finds the ModelService that answers to it (`spec.models`), and sends
   the request to the front door itself at that service's path (`/<ns>/<service>/v1/...`),
   where the service's own route does what it always does (key check, caller list, weights,
   retries); an unknown model, or one whose service the caller may not use, is a `404`
   (`model_not_found`, the same answer for both: a caller does not learn what exists);
4. bounds the wait: no first byte within the service's `timeouts.firstByte` (half of it per
   try, the request tried twice while nothing was sent) is a `504`; a started stream silent
   for `timeouts.idle` is ended with an error event;
5. counts per caller and model the requests, errors, refused requests and the prompt and
   completion tokens of each answer's `usage` (a stream is asked for its usage in the final
   chunk, `stream_options.include_usage`, which is dropped again when the client did not ask
   for it), served as Prometheus metrics at `/metrics`.

The routing table (``models.json``, the ConfigMap the gateway stack writes) and the keys file
are re-read when they change. Standard library only.

    python -m modelplane.router --models models.json --keys callers.json \\
        --front-door http://mp-traefik.traefik-system.svc.cluster.local --listen 127.0.0.1:8098

With the front door's `spec.tls`, requests go on over https to its `websecure` port, trusting
exactly the front door's certificate (`--front-door-ca`: the TLS Secret's `tls.crt`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import http.client
import ipaddress
import json
import math
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

try:
    from modelplane import authz
except ImportError:  # run from the ConfigMap, beside authz.py
    import authz  # type: ignore[no-redef]

ROUTED = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
MAX_BODY = 32 * 2**20  # a request body larger than this is refused (413)
MAX_LINE = 2**20  # an event-stream line is read at most this much at a time
MAX_EVENT = 16 * 2**20  # an event larger than this is passed on unparsed
MAX_IDLE = 64  # kept connections to the front door (per server name)
RELOAD_EVERY = 1.0
DEFAULT_FIRST_BYTE = 300.0
DEFAULT_IDLE = 60.0
# Hop-by-hop headers (RFC 9110 7.6.1) and what this proxy sets itself.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "host",
        "expect",  # answered here (100 Continue): the body goes on whole
    }
)


def error_body(message: str, kind: str, code: str, param: str | None = None) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": param, "code": code}}
    ).encode()


def not_found(model: str) -> bytes:
    # OpenAI's own wording: the same for a model that does not exist and one the caller
    # may not use.
    shown = model if len(model) <= 256 else model[:256] + "..."
    return error_body(
        f"The model `{shown}` does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
        "model",
    )


class Table:
    """models.json: ``{"models": {name: {"service", "path", "owner", "callers", "ready",
    "firstByte", "idle", "endpoints", "tiers"}}, "limits": {caller: {...}}, "replicas": n}``,
    re-read when the file changes (a bad file keeps the last good table: routes do not
    vanish on a half-written file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.models: dict[str, dict[str, Any]] = {}
        self.limits: dict[str, dict[str, Any]] = {}
        self.replicas = 1
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
            data = json.loads(self.path.read_text())
            models = data.get("models") if isinstance(data, dict) else None
            if not isinstance(models, dict):
                raise ValueError("no `models` object")
        except (OSError, ValueError) as exc:
            print(f"router: cannot read {self.path}: {exc}; keeping the last table", flush=True)
            return
        self.models = {str(k): v for k, v in models.items() if isinstance(v, dict)}
        limits = data.get("limits")
        self.limits = (
            {str(k): v for k, v in limits.items() if isinstance(v, dict)}
            if isinstance(limits, dict)
            else {}
        )
        replicas = data.get("replicas")
        self.replicas = replicas if isinstance(replicas, int) and replicas >= 1 else 1
        self._stamp = stamp
        print(f"router: {len(self.models)} model name(s) loaded", flush=True)

    def current(self) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= RELOAD_EVERY:
                self._checked = now
                self.reload()
            return self.models


def may_use(entry: dict[str, Any], caller: str) -> bool:
    callers = entry.get("callers")
    return callers is None or caller in callers


class Usage:
    """Counters per (caller, model), served in Prometheus' text format."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, str], int] = {}
        self.tokens: dict[tuple[str, str, str], int] = {}
        self.held: dict[str, int] = {}  # model -> requests held now (waiting for a wake)

    def hold(self, model: str, queue: int) -> bool:
        """Count one more request held for ``model``; False when ``queue`` are already."""
        with self._lock:
            if self.held.get(model, 0) >= queue:
                return False
            self.held[model] = self.held.get(model, 0) + 1
            return True

    def unhold(self, model: str) -> None:
        with self._lock:
            self.held[model] = max(0, self.held.get(model, 0) - 1)

    def request(self, caller: str, model: str, code: int) -> None:
        key = (caller, model, str(code))
        with self._lock:
            self.requests[key] = self.requests.get(key, 0) + 1

    def add_tokens(self, caller: str, model: str, prompt: int, completion: int) -> None:
        with self._lock:
            for kind, n in (("prompt", prompt), ("completion", completion)):
                if n > 0:
                    key = (caller, model, kind)
                    self.tokens[key] = self.tokens.get(key, 0) + n

    def exposition(self) -> bytes:
        def label(value: str) -> str:
            return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        lines = [
            "# HELP modelplane_router_requests_total Requests by caller, model and status.",
            "# TYPE modelplane_router_requests_total counter",
        ]
        with self._lock:
            requests = sorted(self.requests.items())
            tokens = sorted(self.tokens.items())
            held = sorted(self.held.items())
        for (caller, model, code), n in requests:
            lines.append(
                f'modelplane_router_requests_total{{caller="{label(caller)}",'
                f'model="{label(model)}",code="{code}"}} {n}'
            )
        lines += [
            "# HELP modelplane_router_tokens_total Tokens by caller, model and kind, from"
            " each answer's usage.",
            "# TYPE modelplane_router_tokens_total counter",
        ]
        for (caller, model, kind), n in tokens:
            lines.append(
                f'modelplane_router_tokens_total{{caller="{label(caller)}",'
                f'model="{label(model)}",kind="{kind}"}} {n}'
            )
        lines += [
            "# HELP modelplane_router_held Requests held now while their model wakes from zero.",
            "# TYPE modelplane_router_held gauge",
        ]
        lines += [f'modelplane_router_held{{model="{label(m)}"}} {n}' for m, n in held]
        return ("\n".join(lines) + "\n").encode()


# (table key, window seconds, bucket seconds, what OpenAI's error calls it)
LIMITS = (
    ("requestsPerMinute", 60.0, 1.0, "requests per minute"),
    ("tokensPerMinute", 60.0, 1.0, "tokens per minute"),
    ("tokensPerDay", 86400.0, 60.0, "tokens per day"),
)


class Budgets:
    """Per caller, what it used in each limit's window (counts in buckets, so a day's
    window holds at most 1,440 of them). Each router replica enforces its share of a
    limit (the limit divided by the replicas, rounded up: the front door spreads requests
    over them), so the replicas together hold the limit without a shared counter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[tuple[str, str], collections.deque[list[float]]] = {}

    def _window(self, caller: str, key: str, now: float) -> collections.deque[list[float]]:
        window = next(w for k, w, _, _ in LIMITS if k == key)
        used = self._used.setdefault((caller, key), collections.deque())
        while used and used[0][0] <= now - window:
            used.popleft()
        return used

    def refused(
        self, caller: str, limits: dict[str, Any], share: int, now: float
    ) -> tuple[str, float] | None:
        """(what is exhausted, seconds until it frees up) or None: the request may go."""
        with self._lock:
            for key, window, _, what in LIMITS:
                limit = limits.get(key)
                if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                    continue
                allowed = -(-limit // max(1, share))
                used = self._window(caller, key, now)
                if sum(amount for _, amount in used) >= allowed:
                    return what, max(1.0, used[0][0] + window - now) if used else 1.0
        return None

    def spend(self, caller: str, key: str, amount: float, now: float) -> None:
        if amount <= 0:
            return
        bucket_size = next(b for k, _, b, _ in LIMITS if k == key)
        bucket = now - now % bucket_size
        with self._lock:
            used = self._window(caller, key, now)
            if used and used[-1][0] == bucket:
                used[-1][1] += amount
            else:
                used.append([bucket, amount])


def usage_counts(usage: Any) -> tuple[int, int]:
    """(prompt, completion) tokens of an OpenAI `usage` object (chat/completions/embeddings
    name them prompt/completion, the Responses API input/output)."""
    if not isinstance(usage, dict):
        return 0, 0

    def number(*names: str) -> int:
        for name in names:
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        return 0

    return number("prompt_tokens", "input_tokens"), number("completion_tokens", "output_tokens")


def stream_usage(event: Any) -> Any:
    """The usage an SSE event's JSON carries: a chat/completions chunk's `usage`, a
    Responses `response.completed` event's `response.usage`."""
    if not isinstance(event, dict):
        return None
    if event.get("usage"):
        return event["usage"]
    response = event.get("response")
    if isinstance(response, dict) and event.get("type") == "response.completed":
        return response.get("usage")
    return None


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to the front door's own Service: its certificate is the one trusted (the name
    the router dials is the Service's, not the certificate's), and the client's host goes
    as SNI so the front door presents the certificate the client saw."""

    def __init__(self, host: str, port: int, sni: str | None, **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self._sni = sni

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=self._sni
        )


def pinned_context(certificate: Path) -> ssl.SSLContext:
    """Trust exactly the front door's certificate (chain): verified, no name check."""
    context = ssl.create_default_context(cafile=str(certificate))
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the leaf itself is the anchor
    return context


class Upstream:
    """Where requests go: the front door itself (its own Service), at the service's path;
    over https (``certificate``: the front door's, pinned) when the front door has TLS."""

    def __init__(self, url: str, certificate: Path | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"front door {url!r}: an http:// or https:// URL")
        if parts.scheme == "https" and certificate is None:
            raise ValueError("an https:// front door needs its certificate (--front-door-ca)")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.certificate = certificate if parts.scheme == "https" else None
        self._context: ssl.SSLContext | None = None
        self._stamp: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._idle: dict[str | None, list[http.client.HTTPConnection]] = {}

    def context(self) -> ssl.SSLContext:
        assert self.certificate is not None
        info = self.certificate.stat()
        stamp = (info.st_mtime_ns, info.st_size)
        if self._context is None or stamp != self._stamp:  # a renewed certificate
            self._context, self._stamp = pinned_context(self.certificate), stamp
        return self._context

    def connect(
        self, timeout: float, sni: str | None = None
    ) -> tuple[http.client.HTTPConnection, bool]:
        """A connection to the front door -- a kept one when there is (True), else new."""
        key = sni if self.certificate is not None else None
        with self._lock:
            idle = self._idle.get(key)
            while idle:
                kept = idle.pop()
                if kept.sock is not None:
                    kept.timeout = timeout
                    kept.sock.settimeout(timeout)
                    return kept, True
        if self.certificate is None:
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout), False
        pinned = _PinnedHTTPS(self.host, self.port, sni, timeout=timeout, context=self.context())
        return pinned, False

    def release(self, connection: http.client.HTTPConnection, sni: str | None) -> None:
        """Keep a connection whose last answer was read whole, for the next request (the
        front door closes one it no longer wants: that request goes again on a new one)."""
        key = sni if self.certificate is not None else None
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if connection.sock is not None and len(idle) < MAX_IDLE:
                idle.append(connection)
                return
        connection.close()


def make_handler(
    keys: authz.Keys, table: Table, upstream: Upstream, usage: Usage
) -> type[BaseHTTPRequestHandler]:
    budgets = Budgets()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        _body_read = False

        # -- answers of its own ---------------------------------------------------------
        def _send(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if self.command == "POST" and not self._body_read:
                # A body left unread would be taken for the next request on the connection.
                self.send_header("Connection", "close")
                self.close_connection = True
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _caller(self) -> str | None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            key = authz.presented_key(headers)
            caller = keys.caller(key)
            if caller is None:
                message = (
                    "Incorrect API key provided."
                    if key
                    else "Missing API key: send `Authorization: Bearer <key>` or `x-api-key`."
                )
                self._send(
                    401,
                    authz.error_body(message),
                    {"WWW-Authenticate": 'Bearer realm="modelplane"'},
                )
            return caller

        def do_GET(self) -> None:  # noqa: N802
            path = urlsplit(self.path).path
            if path == "/healthz":
                self._send(200, b'{"status":"ok"}')
                return
            if path == "/metrics":
                body = usage.exposition()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if not (path == "/v1/models" or path.startswith("/v1/models/")):
                self._send(404, error_body("No such route.", "invalid_request_error", "not_found"))
                return
            caller = self._caller()
            if caller is None:
                return
            models = table.current()
            visible = {n: e for n, e in sorted(models.items()) if may_use(e, caller)}
            if path == "/v1/models":
                data = [model_object(n, e) for n, e in visible.items()]
                self._send(200, json.dumps({"object": "list", "data": data}).encode())
                return
            name = path[len("/v1/models/") :]
            if name in visible:
                self._send(200, json.dumps(model_object(name, visible[name])).encode())
            else:
                self._send(404, not_found(name))

        def do_POST(self) -> None:  # noqa: N802
            self._body_read = False
            path = urlsplit(self.path).path
            if path not in ROUTED:
                self._send(404, error_body("No such route.", "invalid_request_error", "not_found"))
                return
            caller = self._caller()
            if caller is None:
                return
            body = self._read_body()
            if body is None:
                return
            try:
                request = json.loads(body)
            except ValueError:
                request = None
            model = request.get("model") if isinstance(request, dict) else None
            if not isinstance(model, str) or not model:
                self._send(
                    400,
                    error_body(
                        "The request body must be JSON with a `model` field.",
                        "invalid_request_error",
                        "missing_model",
                        "model",
                    ),
                )
                return
            entry = table.current().get(model)
            if entry is None or not may_use(entry, caller):
                # Counted under "-": a name the client made up is never a metric label.
                usage.request(caller, "-", 404)
                self._send(404, not_found(model))
                return
            assert isinstance(request, dict)
            now = time.time()
            limits = table.limits.get(caller)
            if limits:
                over = budgets.refused(caller, limits, table.replicas, now)
                if over is not None:
                    what, wait = over
                    usage.request(caller, model, 429)
                    self._send(
                        429,
                        error_body(
                            f"Rate limit reached for caller {caller!r}: {what}. "
                            f"Try again in {wait:.0f}s.",
                            "tokens" if "token" in what else "requests",
                            "rate_limit_exceeded",
                        ),
                        {"Retry-After": str(int(math.ceil(wait)))},
                    )
                    return
                budgets.spend(caller, "requestsPerMinute", 1, now)
            self._forward(caller, model, entry, request, body)

        # -- the forwarded request ------------------------------------------------------
        def _read_body(self) -> bytes | None:
            try:
                body = self._read_body_bounded()
            except ValueError:  # a malformed length or chunk size
                self.close_connection = True
                self._send(
                    400,
                    error_body(
                        "The request body's length is malformed.",
                        "invalid_request_error",
                        "bad_request",
                    ),
                )
                return None
            self._body_read = body is not None
            return body

        def _read_body_bounded(self) -> bytes | None:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(out)
                    if len(out) + size > MAX_BODY:
                        break
                    out += self.rfile.read(size)
                    self.rfile.readline()
            else:
                length = int(self.headers.get("Content-Length") or 0)
                if length < 0:
                    raise ValueError("negative Content-Length")
                if length <= MAX_BODY:
                    return self.rfile.read(length)
            self.close_connection = True
            self._send(
                413,
                error_body(
                    f"The request body is larger than {MAX_BODY} bytes.",
                    "invalid_request_error",
                    "request_too_large",
                ),
            )
            return None

        def _forward(
            self,
            caller: str,
            model: str,
            entry: dict[str, Any],
            request: dict[str, Any],
            body: bytes,
        ) -> None:
            streaming = request.get("stream") is True
            options = request.get("stream_options")
            asked = isinstance(options, dict) and options.get("include_usage") is True
            added = False
            if streaming and not asked and self.path.split("?")[0] != "/v1/responses":
                # Ask for the usage chunk; it is dropped again on the way back.
                request = dict(request)
                request["stream_options"] = {**(options or {}), "include_usage": True}
                body = json.dumps(request).encode()
                added = True
            first_byte = float(entry.get("firstByte") or DEFAULT_FIRST_BYTE)
            idle = float(entry.get("idle") or DEFAULT_IDLE)
            target = str(entry["path"]).rstrip("/") + self.path
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            headers["Content-Length"] = str(len(body))
            headers["Host"] = self.headers.get("Host") or upstream.host
            # A conversation's turns go to one endpoint (its prefix cache) while the route
            # has it; the client's own pin header never reaches the front door.
            headers = {k: v for k, v in headers.items() if k.lower() != PIN_HEADER}
            pin = pinned_endpoint(
                session_key(caller, self.headers, request), entry.get("endpoints") or []
            )
            # The tries: the pinned endpoint (or the service), the service once more (a
            # timeout: the rotation's next endpoint), then each overflow tier in order.
            plan: list[dict[str, str]] = [{PIN_HEADER: pin} if pin else {}, {}]
            plan += [
                {TIER_HEADER: str(t)}
                for t in entry.get("tiers") or []
                if isinstance(t, int) and not isinstance(t, bool)
            ]
            sni = sni_of(headers["Host"])
            wake = entry.get("wake") if isinstance(entry.get("wake"), dict) else None
            deadline_s = float(wake["deadline"]) if wake else 0.0
            deadline = time.monotonic() + deadline_s if wake else None
            held = False
            try:
                while True:
                    response, connection, sock, unreachable = self._try(
                        plan, target, body, headers, first_byte, sni
                    )
                    if deadline is None or not not_answering(response, unreachable):
                        break
                    # No endpoint answers (the model is at zero, or its replica is loading):
                    # hold the request and ask again until the wake deadline.
                    if response is not None and connection is not None:
                        response.read()
                        connection.close()
                    if not held:
                        assert wake is not None
                        if not usage.hold(model, int(wake.get("queue") or 1)):
                            usage.request(caller, model, 429)
                            self._send(
                                429,
                                error_body(
                                    f"Too many requests are waiting for model {model!r} to "
                                    "start. Try again later.",
                                    "requests",
                                    "model_waking_queue_full",
                                ),
                                {"Retry-After": str(WAKE_RETRY_AFTER)},
                            )
                            return
                        held = True
                    left = deadline - time.monotonic()
                    if left <= 0:
                        usage.request(caller, model, 503)
                        self._send(
                            503,
                            error_body(
                                f"Model {model!r} is starting and did not answer within "
                                f"{deadline_s:g}s. Try again later.",
                                "api_error",
                                "model_waking",
                            ),
                            {"Retry-After": str(WAKE_RETRY_AFTER)},
                        )
                        return
                    time.sleep(min(WAKE_POLL, left))
            finally:
                if held:
                    usage.unhold(model)
            if unreachable:
                usage.request(caller, model, 502)
                self._send(
                    502,
                    error_body(
                        "The model's service could not be reached.",
                        "api_error",
                        "upstream_unreachable",
                    ),
                )
                return
            if response is None or connection is None:
                usage.request(caller, model, 504)
                self._send(
                    504,
                    error_body(
                        f"No answer from the model within {first_byte:g}s.",
                        "api_error",
                        "timeout",
                    ),
                )
                return
            released = [False]
            answered, link = response, connection

            def keep() -> None:
                """The answer was read whole: its connection serves the next request
                (released before the client sees the answer, so that request finds it)."""
                if not answered.will_close:
                    upstream.release(link, sni)
                    released[0] = True

            try:
                if sock is not None:
                    sock.settimeout(idle)  # from now on: silence between reads
                self._relay(caller, model, response, added, keep)
            finally:
                if not released[0]:
                    connection.close()

        def _try(
            self,
            plan: list[dict[str, str]],
            target: str,
            body: bytes,
            headers: dict[str, str],
            first_byte: float,
            sni: str | None,
        ) -> tuple[
            http.client.HTTPResponse | None,
            http.client.HTTPConnection | None,
            socket.socket | None,
            bool,
        ]:
            """Send the request through the plan's tries within the first-byte budget: the
            answer, its connection and socket, and whether the front door was unreachable."""
            end = time.monotonic() + first_byte
            response = None
            connection = None
            sock = None
            i = 0
            while i < len(plan):
                left = end - time.monotonic()
                wait = left if i == len(plan) - 1 else left / (len(plan) - i)
                connection, kept = upstream.connect(max(wait, 0.001), sni)
                try:
                    connection.request("POST", target, body=body, headers={**headers, **plan[i]})
                    sock = connection.sock  # getresponse() drops it when the answer closes
                    response = connection.getresponse()
                except TimeoutError:
                    connection.close()
                    i += 1
                    continue
                except (OSError, http.client.HTTPException):
                    connection.close()
                    if kept:
                        continue  # the front door closed a kept connection: a new one
                    following = move_on(plan, i)
                    if following is not None:
                        i = following
                        continue
                    return None, None, None, True
                following = move_on(plan, i) if response.status in MOVE_ON else None
                if following is None:
                    break
                # Refused before answering: the next endpoint kind (unpinned, a lower tier).
                response.read()
                connection.close()
                response = None
                i = following
            if response is None:
                return None, None, None, False
            return response, connection, sock, False

        def _relay(
            self,
            caller: str,
            model: str,
            response: http.client.HTTPResponse,
            added: bool,
            keep: Callable[[], None],
        ) -> None:
            """Send the answer on; ``keep()`` once it was read whole from the front door."""
            usage.request(caller, model, response.status)
            self.send_response(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in _HOP:
                    self.send_header(name, value)
            kind = (response.getheader("Content-Type") or "").lower()
            if not kind.startswith("text/event-stream"):
                try:
                    data = response.read()
                except (TimeoutError, OSError, http.client.HTTPException):
                    data = None
                if data is None:
                    # Headers only so far: the answer cannot be sent whole.
                    self.send_header("Content-Length", "0")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    return
                keep()
                # Counted before the client sees the answer: its next request meets the
                # budget this one spent.
                if response.status == 200 and kind.startswith("application/json"):
                    try:
                        answer = json.loads(data)
                    except ValueError:
                        answer = None
                    if isinstance(answer, dict):
                        self._tokens(caller, model, answer.get("usage"))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event, counted in sse_events(response):
                    if counted is not None:
                        self._tokens(caller, model, counted)
                        if added and is_usage_only(event):
                            continue
                    self._chunk(event)
                keep()
            except TimeoutError:
                self._chunk(
                    b"event: error\ndata: "
                    + error_body(
                        "The model's stream went silent; it was ended.",
                        "api_error",
                        "stream_idle_timeout",
                    )
                    + b"\n\n"
                )
            except (OSError, http.client.HTTPException):
                pass  # the upstream cut the stream (or the client left): it ends here
            with contextlib.suppress(OSError):  # the client may be gone
                self._chunk(b"")

        def _tokens(self, caller: str, model: str, counted: Any) -> None:
            prompt, completion = usage_counts(counted)
            usage.add_tokens(caller, model, prompt, completion)
            now = time.time()
            for key in ("tokensPerMinute", "tokensPerDay"):
                budgets.spend(caller, key, prompt + completion, now)

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    Handler.timeout = authz.REQUEST_TIMEOUT
    return Handler


WAKE_POLL = 1.0  # seconds between a held request's tries
WAKE_RETRY_AFTER = 30  # the Retry-After of a wake past its deadline or a full queue


def not_answering(response: http.client.HTTPResponse | None, unreachable: bool) -> bool:
    """The front door has no endpoint that answers the service: no route (its own 404, not
    JSON: the model is at zero) or no server behind it (502, 503: a replica loading)."""
    if response is None or unreachable:
        return False
    if response.status in (502, 503):
        return True
    kind = (response.getheader("Content-Type") or "").lower()
    return response.status == 404 and "json" not in kind


PIN_HEADER = "x-modelplane-pin"  # modelplane.components.workload.routes
SESSION_HEADERS = ("x-session-id", "x-modelplane-session")
MOVE_ON = frozenset({429, 502, 503})  # a pinned endpoint's refusal: tried unpinned


TIER_HEADER = "x-modelplane-tier"  # modelplane.components.workload.routes


def move_on(plan: list[dict[str, str]], i: int) -> int | None:
    """Where a request refused by try ``i`` goes next: from a pinned endpoint to the service
    as a whole; from the service or a tier to the next tier; None: nowhere (the refusal is
    the answer)."""
    if PIN_HEADER in plan[i]:
        return i + 1
    return next((j for j in range(i + 1, len(plan)) if TIER_HEADER in plan[j]), None)


def session_key(caller: str, headers: Any, request: dict[str, Any]) -> str | None:
    """What keeps a conversation together: the `x-session-id` header, else OpenAI's
    `prompt_cache_key`, else its `user` field; per caller (None: no session)."""
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return f"{caller}\0{value}"
    for field in ("prompt_cache_key", "user"):
        value = request.get(field)
        if isinstance(value, str) and value:
            return f"{caller}\0{value}"
    return None


def pinned_endpoint(key: str | None, endpoints: list[Any]) -> str | None:
    """The endpoint a session stays on: weighted rendezvous hashing over the route's
    endpoints, so a session moves only when its endpoint leaves (or one is added that
    outscores it), and the sessions spread by weight."""
    if key is None:
        return None
    best, best_score = None, -math.inf
    for item in endpoints:
        try:
            name, weight = str(item[0]), float(item[1])
        except (TypeError, ValueError, IndexError):
            continue
        if weight <= 0:
            continue
        digest = hashlib.sha256(f"{name}\0{key}".encode()).digest()
        unit = (int.from_bytes(digest[:8], "big") + 1) / (2**64 + 1)  # in (0, 1)
        score = -weight / math.log(unit)
        if score > best_score:
            best, best_score = name, score
    return best


def sni_of(host: str) -> str | None:
    """The server name of a Host header (None for an IP address: no SNI)."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.strip("[]")
    try:
        ipaddress.ip_address(name)
        return None
    except ValueError:
        return name or None


def model_object(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": str(entry.get("owner") or "modelplane"),
        "modelplane": {"service": entry.get("service"), "ready": bool(entry.get("ready"))},
    }


def is_usage_only(event: bytes) -> bool:
    """The usage chunk `include_usage` adds: `choices` empty."""
    for line in event.splitlines():
        if line.startswith(b"data:"):
            try:
                data = json.loads(line[5:].strip())
            except ValueError:
                return False
            return isinstance(data, dict) and data.get("choices") == []
    return False


def sse_events(response: http.client.HTTPResponse) -> Iterator[tuple[bytes, Any]]:
    """Each server-sent event whole (its lines and the blank line ending it), with the usage
    it carries (None: none)."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = response.readline(MAX_LINE)  # a longer line arrives in pieces
        if not line:
            if lines:
                yield b"".join(lines), None
            return
        ended = not lines or lines[-1].endswith(b"\n")  # a blank line, not a piece's end
        lines.append(line)
        size += len(line)
        if size > MAX_EVENT:  # never held whole: passed on as it came
            yield b"".join(lines), None
            lines, size = [], 0
            continue
        if ended and line in (b"\n", b"\r\n"):
            event = b"".join(lines)
            lines, size = [], 0
            found = None
            for raw in event.splitlines():
                if raw.startswith(b"data:") and raw[5:].strip() not in (b"", b"[DONE]"):
                    try:
                        found = stream_usage(json.loads(raw[5:].strip()))
                    except ValueError:
                        found = None
            yield event, found


class OpenKeys(authz.Keys):
    """No `spec.auth`: every request is caller `anonymous`."""

    def __init__(self) -> None:
        self.open = True

    def caller(self, key: str | None) -> str | None:
        return authz.ANONYMOUS


def serve(
    models_path: Path,
    keys_path: Path | None,
    front_door: str,
    host: str,
    port: int,
    *,
    front_door_ca: Path | None = None,
    max_connections: int = authz.MAX_CONNECTIONS,
) -> tuple[authz.BoundedServer, Usage]:
    usage = Usage()
    keys = authz.Keys(keys_path) if keys_path is not None else OpenKeys()
    upstream = Upstream(front_door, front_door_ca)
    handler = make_handler(keys, Table(models_path), upstream, usage)
    return authz.BoundedServer((host, port), handler, max_connections), usage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="modelplane-router", description=__doc__.split("\n")[0])
    parser.add_argument("--models", required=True, type=Path, help="the routing table JSON")
    keys = parser.add_mutually_exclusive_group(required=True)
    keys.add_argument("--keys", type=Path, help="the hash -> caller JSON (modelplane-authz's)")
    keys.add_argument(
        "--open", action="store_true", help="no keys: every request in, as `anonymous`"
    )
    parser.add_argument("--front-door", required=True, help="http://<front door's Service>")
    parser.add_argument(
        "--front-door-ca", type=Path, help="the front door's certificate (an https:// one)"
    )
    parser.add_argument("--listen", default="0.0.0.0:8080", help="host:port")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server, _ = serve(
        args.models,
        args.keys,
        args.front_door,
        host or "0.0.0.0",
        int(port),
        front_door_ca=args.front_door_ca,
    )
    print(f"router ready on {host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
