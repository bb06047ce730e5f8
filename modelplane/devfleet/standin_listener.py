"""One stand-in listener: lifecycle, routing, readiness, misbehaviour and who answered."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from modelplane.devfleet.standin_generation import BadRequest, StandinGeneration
from modelplane.devfleet.standin_metrics import TTFT_BUCKETS, StandinMetrics
from modelplane.devfleet.standin_types import StandinConfig, StandinIdentity, StandinStats


class StandinListener(StandinGeneration, StandinMetrics):
    """One listener: its identity, configuration, queue and counters."""

    def __init__(self, identity: StandinIdentity, config: StandinConfig) -> None:
        self.identity = identity
        self.config = config
        self.held_ready = config.ready
        self._loaded_at = float("inf")  # set when the listener starts
        self._error_debt = 0.0
        self.ttft_buckets = [0] * len(TTFT_BUCKETS)
        self.ttft_count = 0
        self.ttft_sum = 0.0
        self.http: dict[tuple[str, str, str], int] = {}
        self.draining = False
        self.running = 0
        self.waiting = 0
        self.success = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.host = ""
        self.port = 0
        self._ids = itertools.count(1)
        self._slots = asyncio.Semaphore(config.concurrency) if config.concurrency else None
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._started = asyncio.Event()
        self._runner: web.ServerRunner | None = None
        self._site: web.TCPSite | None = None
        self._headers = {
            "x-modelplane-replica": identity.replica,
            "x-modelplane-role": identity.role,
            "x-modelplane-cluster": identity.cluster,
        }
        if identity.pod:
            self._headers["x-modelplane-pod"] = identity.pod
        if config.revision:
            self._headers["x-modelplane-revision"] = config.revision
        get, post = "GET", "POST"
        self._routes: dict[str, tuple[str, Callable[[web.BaseRequest], Awaitable[Any]]]] = {
            "/health": (get, self._health),
            "/metrics": (get, self._metrics),
            "/v1/models": (get, self._models),
            "/v1/chat/completions": (post, self._chat),
            "/v1/completions": (post, self._completions),
            "/v1/messages": (post, self._messages),
        }

    # lifecycle

    async def start(self, host: str, port: int) -> int:
        try:
            server = web.Server(self._handle, access_log=None)
            runner = web.ServerRunner(server, shutdown_timeout=0.5)
            await runner.setup()
            site = web.TCPSite(runner, host, port)
            try:
                await site.start()
            except BaseException:
                await runner.cleanup()
                raise
            self._runner, self._site = runner, site
            self.host, self.port = host, runner.addresses[0][1]
            self._loaded_at = time.monotonic() + self.config.load_time
            return self.port
        finally:
            self._started.set()

    async def stop(self, grace: float) -> None:
        """Stop listening, let in-flight requests finish within ``grace``, then close."""
        self.draining = True
        await self._started.wait()
        if self._runner is None:
            return
        if self._site is not None:
            await self._site.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout=grace)
        await self._runner.cleanup()
        self._runner = self._site = None

    @property
    def ready(self) -> bool:
        """Ready: not held unready, and the model has loaded."""
        return self.held_ready and time.monotonic() >= self._loaded_at

    def stats(self) -> StandinStats:
        return StandinStats(
            running=self.running,
            waiting=self.waiting,
            success=self.success,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            ready=self.ready,
        )

    # dispatch

    def _route(self, path: str) -> tuple[str, Callable[[web.BaseRequest], Awaitable[Any]]] | None:
        if path in self._routes:
            return self._routes[path]
        if self.config.prefix_tolerant:
            for known, route in self._routes.items():
                if path.endswith(known):
                    return route
        return None

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        self._inflight += 1
        self._idle.clear()
        response: web.StreamResponse | None = None
        try:
            response = await self._dispatch(request)
            return response
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()
            self._count(request, response)

    def _misbehave(self) -> bool:
        """True for ``error_ratio`` of the calls, spread evenly (0.25: every fourth)."""
        ratio = self.config.error_ratio
        if ratio <= 0:
            return False
        self._error_debt += ratio
        if self._error_debt >= 1 - 1e-9:
            self._error_debt -= 1
            return True
        return False

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        route = self._route(request.path)
        kind = "messages" if request.path.endswith("/v1/messages") else "openai"
        if route is None:
            return self._error(kind, 404, f"no route for {request.path}")
        method, handler = route
        if request.method != method:
            return self._error(kind, 405, f"{request.method} not allowed on {request.path}")
        if not self.ready and handler != self._metrics:
            return self._error(kind, 503, "not ready")
        if handler in (self._chat, self._completions, self._messages) and self._misbehave():
            return self._error(kind, 500, "stand-in failure (error_ratio)")
        try:
            return await handler(request)
        except BadRequest as bad:
            return self._error(kind, bad.status, bad.message)

    def _json(self, request: web.BaseRequest, body: dict[str, Any], status: int = 200) -> Any:
        body["modelplane"] = self._who(request)
        return web.json_response(body, status=status, headers=self._headers)

    def _who(self, request: web.BaseRequest) -> dict[str, str]:
        i = self.identity
        who = {
            "replica": i.replica,
            "role": i.role,
            "cluster": i.cluster,
            "pod": i.pod,
            "namespace": i.namespace,
            "model": i.model,
            "path": request.path,
        } | ({"revision": self.config.revision} if self.config.revision else {})
        # What the front door told us about the caller (issue 26), and whether a key header
        # got this far (it should not: the front door removes it).
        if "x-modelplane-caller" in request.headers:
            who["caller"] = request.headers["x-modelplane-caller"]
        keys = [h for h in ("authorization", "x-api-key") if h in request.headers]
        if keys:
            who["keyHeaders"] = ",".join(keys)
        return who

    def _error(self, kind: str, status: int, message: str) -> web.Response:
        if kind == "messages":
            kinds = {400: "invalid_request_error", 404: "not_found_error"}
            err = {"type": kinds.get(status, "api_error"), "message": message}
            body: dict[str, Any] = {"type": "error", "error": err}
        else:
            body = {"error": {"message": message, "type": "error", "param": None, "code": status}}
        return web.json_response(body, status=status, headers=self._headers)

    # small endpoints

    async def _health(self, request: web.BaseRequest) -> web.Response:
        if self.draining:
            return web.Response(status=503, text="draining", headers=self._headers)
        return web.Response(status=200, headers=self._headers)

    async def _models(self, request: web.BaseRequest) -> web.Response:
        model = {"id": self.identity.model, "object": "model", "created": int(time.time())}
        model["owned_by"] = "modelplane-standin"
        return self._json(request, {"object": "list", "data": [model]})
