"""The stand-in model server: the dev fleet's stand-in for a kubelet + vLLM.

Pods scheduled on the dev fleet's simulated (kwok) nodes run no container. For each Running
serving pod, the dev fleet starts one stand-in listener on the pod's IP and container port, so
requests sent through the fleet's gateways reach something that answers like an inference
engine. Production pods run the user's image (vLLM, SGLang, ...); nothing here is deployed.

A stand-in speaks enough of the OpenAI and Anthropic HTTP APIs for clients and gateways:

- ``GET /health`` (200, or 503 while not ready or draining), ``GET /v1/models``;
- ``POST /v1/chat/completions``, ``POST /v1/completions`` (both with ``stream: true`` as
  server-sent events ``data: {...}`` ending with ``data: [DONE]``), ``POST /v1/messages``
  (Anthropic Messages, streamed as Anthropic's named events);
- ``GET /metrics`` in Prometheus text format with vLLM's metric names, labelled ``model_name``.

Every answer says who answered: ``x-modelplane-replica``/``-role``/``-cluster``/``-pod``
headers, a ``modelplane`` JSON object (with the path the request arrived on), and a sentence in
the generated text. The generated text is the identity sentence followed by filler words, one
word per token, up to ``output_tokens`` (capped by the request's ``max_tokens``; the identity
sentence is always sent whole).

Service time and concurrency make queues form under load: a request waits for one of
``concurrency`` slots (counted in ``vllm:num_requests_waiting``), then holds it (counted in
``vllm:num_requests_running``) for ``service_time`` seconds plus ``token_time`` per output
token. While not ready, every path but ``/metrics`` answers 503.

Day-2 behaviour (rollouts, analysis gates): a listener is not ready for ``load_time`` seconds
after it starts (a model loading its weights); it says which revision it serves in an
``x-modelplane-revision`` header (and the JSON object); and it can misbehave on request:
``error_ratio`` of its generation requests answer 500 (deterministically: with 0.25, every
fourth), and ``first_token_delay`` seconds are added before the first token. ``/metrics`` also
has vLLM's ``vllm:time_to_first_token_seconds`` histogram and the API server's
``http_requests_total{handler,method,status}`` (status ``2xx``/``4xx``/``5xx``), from which an
analysis gate reads TTFT and the error ratio.

``StandinHost`` runs many listeners in one asyncio loop and adds and removes them at runtime;
``StandinHostThread`` wraps it for non-async code. ``python -m modelplane.devfleet.standin``
runs one listener for people trying it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from modelplane.errors import UserError

__all__ = [
    "StandinConfig",
    "StandinHost",
    "StandinHostThread",
    "StandinIdentity",
    "StandinStats",
    "main",
]

T = TypeVar("T")

_FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor".split()


@dataclass(frozen=True)
class StandinIdentity:
    """Who answers: the pod a listener stands in for."""

    replica: str
    role: str = "worker"
    cluster: str = ""
    model: str = "standin"
    pod: str = ""
    namespace: str = ""

    def sentence(self) -> list[str]:
        words = [f"{self.model}", "stand-in:", "replica", self.replica, "role", self.role]
        words += ["cluster", self.cluster or "-"]
        if self.pod:
            words += ["pod", self.pod]
        return [*words, "answered."]


@dataclass(frozen=True)
class StandinConfig:
    """How a listener behaves.

    service_time: seconds a request holds a slot (for streams: before the first token).
    token_time: extra seconds per output token.
    concurrency: requests running at once; the rest wait in a FIFO queue. 0 means unlimited.
    output_tokens: tokens generated when the request asks for more (or does not say).
    ready: health answers 200 only when ready; while not ready every path but /metrics is 503.
      (``set_ready`` changes it at runtime.)
    prefix_tolerant: also serve ``/<anything>/v1/...`` (a request whose gateway did not rewrite).
    strict_model: answer 404 when the request names another model than the served one.
    load_time: seconds after the listener starts during which it is not ready (loading).
    revision: the revision served, sent as ``x-modelplane-revision`` ("" sends none).
    error_ratio: share of generation requests answered 500 (0..1, spread evenly).
    first_token_delay: extra seconds before the first token of every generation request.
    """

    service_time: float = 0.0
    token_time: float = 0.0
    concurrency: int = 0
    output_tokens: int = 16
    ready: bool = True
    prefix_tolerant: bool = False
    strict_model: bool = False
    load_time: float = 0.0
    revision: str = ""
    error_ratio: float = 0.0
    first_token_delay: float = 0.0

    def __post_init__(self) -> None:
        names = ("service_time", "token_time", "concurrency", "output_tokens", "load_time")
        names = (*names, "first_token_delay")
        problems = [
            f"{name} must be >= 0, got {getattr(self, name)!r}"
            for name in names
            if getattr(self, name) < 0
        ]
        if not 0 <= self.error_ratio <= 1:
            problems.append(f"error_ratio must be within 0..1, got {self.error_ratio!r}")
        if problems:
            raise ValueError("StandinConfig: " + "; ".join(problems))


@dataclass(frozen=True)
class StandinStats:
    """A snapshot of one listener's counters (the values /metrics reports)."""

    running: int
    waiting: int
    success: int
    prompt_tokens: int
    generation_tokens: int
    ready: bool


class _BadRequest(UserError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class _Plan:
    prompt_tokens: int
    words: list[str]
    truncated: bool


def _count_words(value: Any) -> int:
    """Prompt tokens: words of every text in a prompt, message list or content-block list."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, int):
        return 1
    if isinstance(value, list):
        return sum(_count_words(v) for v in value)
    if isinstance(value, dict):
        return _count_words(value.get("content", "")) + _count_words(value.get("text", ""))
    return 0


def _sse(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_METRICS = (
    ("vllm:num_requests_running", "gauge", "Requests running (holding a slot)."),
    ("vllm:num_requests_waiting", "gauge", "Requests waiting for a slot."),
    ("vllm:gpu_cache_usage_perc", "gauge", "Share of slots in use, 0..1 (stand-in)."),
    ("vllm:request_success_total", "counter", "Requests finished successfully."),
    ("vllm:prompt_tokens_total", "counter", "Prompt tokens processed."),
    ("vllm:generation_tokens_total", "counter", "Generation tokens produced."),
)
# vLLM's buckets for vllm:time_to_first_token_seconds.
TTFT_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25)
TTFT_BUCKETS += (0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/messages")


class _Standin:
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

    def _count(self, request: web.BaseRequest, response: web.StreamResponse | None) -> None:
        """``http_requests_total`` as vLLM's API server counts it (generation paths only)."""
        handler = next((p for p in GENERATION_PATHS if request.path.endswith(p)), None)
        if handler is None:
            return
        status = f"{(response.status if response is not None else 500) // 100}xx"
        key = (handler, request.method, status)
        self.http[key] = self.http.get(key, 0) + 1

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

    def _first_token(self, arrived: float) -> None:
        elapsed = time.monotonic() - arrived
        self.ttft_count += 1
        self.ttft_sum += elapsed
        for i, bound in enumerate(TTFT_BUCKETS):
            if elapsed <= bound:
                self.ttft_buckets[i] += 1

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
        except _BadRequest as bad:
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

    async def _metrics(self, request: web.BaseRequest) -> web.Response:
        c = self.config
        usage = min(1.0, self.running / c.concurrency) if c.concurrency else 0.0
        values = (
            self.running,
            self.waiting,
            usage,
            self.success,
            self.prompt_tokens,
            self.generation_tokens,
        )
        label = f'{{model_name="{_label(self.identity.model)}"}}'
        lines = []
        for (name, kind, help_text), value in zip(_METRICS, values, strict=True):
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            lines.append(f"{name}{label} {float(value)}")
        lines += self._ttft_lines() + self._http_lines()
        return web.Response(
            text="\n".join(lines) + "\n",
            content_type="text/plain",
            charset="utf-8",
            headers={**self._headers, "Cache-Control": "no-cache"},
        )

    def _ttft_lines(self) -> list[str]:
        name = "vllm:time_to_first_token_seconds"
        lines = [f"# HELP {name} Time to first token.", f"# TYPE {name} histogram"]
        model = f'model_name="{_label(self.identity.model)}"'
        for bound, count in zip(TTFT_BUCKETS, self.ttft_buckets, strict=True):
            lines.append(f'{name}_bucket{{{model},le="{bound}"}} {float(count)}')
        lines.append(f'{name}_bucket{{{model},le="+Inf"}} {float(self.ttft_count)}')
        lines.append(f"{name}_count{{{model}}} {float(self.ttft_count)}")
        lines.append(f"{name}_sum{{{model}}} {self.ttft_sum}")
        return lines

    def _http_lines(self) -> list[str]:
        name = "http_requests_total"
        lines = [f"# HELP {name} Requests by handler, method and status class."]
        lines.append(f"# TYPE {name} counter")
        for (handler, method, status), count in sorted(self.http.items()):
            labels = f'handler="{handler}",method="{method}",status="{status}"'
            lines.append(f"{name}{{{labels}}} {float(count)}")
        return lines

    # generation

    async def _body(self, request: web.BaseRequest, field: str) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as exc:
            raise _BadRequest(400, f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _BadRequest(400, "request body must be a JSON object")
        value = body.get(field)
        if field == "messages" and (not isinstance(value, list) or not value):
            raise _BadRequest(400, "field 'messages' must be a non-empty list")
        if field == "prompt" and not isinstance(value, str | list):
            raise _BadRequest(400, "field 'prompt' must be a string or a list")
        model = body.get("model")
        if self.config.strict_model and model is not None and model != self.identity.model:
            raise _BadRequest(404, f"The model `{model}` does not exist.")
        return body

    def _plan(self, body: dict[str, Any], prompt: Any) -> _Plan:
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        wanted = self.config.output_tokens
        if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
            wanted = min(wanted, limit)
        words = self.identity.sentence()
        filler = max(0, wanted - len(words))
        words += [_FILLER[i % len(_FILLER)] for i in range(filler)]
        return _Plan(_count_words(prompt), words, truncated=wanted < self.config.output_tokens)

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        self.waiting += 1
        try:
            if self._slots is not None:
                await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            if self._slots is not None:
                self._slots.release()

    def _done(self, plan: _Plan) -> None:
        self.success += 1
        self.prompt_tokens += plan.prompt_tokens
        self.generation_tokens += len(plan.words)

    async def _generate(
        self,
        request: web.BaseRequest,
        plan: _Plan,
        stream: bool,
        whole: Callable[[str], dict[str, Any]],
        events: Callable[[], list[tuple[str | None, Any]]],
        piece: Callable[[str], tuple[str | None, Any]],
        tail: Callable[[], list[tuple[str | None, Any]]],
    ) -> web.StreamResponse:
        c = self.config
        arrived = time.monotonic()
        async with self._slot():
            await asyncio.sleep(c.service_time + c.first_token_delay)
            self._first_token(arrived)
            if not stream:
                await asyncio.sleep(c.token_time * len(plan.words))
            else:
                resp = web.StreamResponse(
                    headers={
                        **self._headers,
                        "Content-Type": "text/event-stream",
                        "Cache-Control": "no-cache",
                    }
                )
                await resp.prepare(request)
                for event, data in events():
                    await resp.write(_sse(data, event))
                for i, word in enumerate(plan.words):
                    if c.token_time:
                        await asyncio.sleep(c.token_time)
                    event, data = piece(word if i == 0 else " " + word)
                    await resp.write(_sse(data, event))
                for event, data in tail():
                    await resp.write(_sse(data, event))
                await resp.write_eof()
        self._done(plan)
        if stream:
            return resp
        return self._json(request, whole(" ".join(plan.words)))

    def _usage(self, plan: _Plan) -> dict[str, int]:
        n = len(plan.words)
        return {
            "prompt_tokens": plan.prompt_tokens,
            "completion_tokens": n,
            "total_tokens": plan.prompt_tokens + n,
        }

    async def _chat(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await self._body(request, "messages")
        plan = self._plan(body, body["messages"])
        rid = f"chatcmpl-{self.identity.replica}-{next(self._ids)}"
        who = self._who(request)
        finish = "length" if plan.truncated else "stop"
        base = {"id": rid, "created": int(time.time()), "model": self.identity.model}

        def whole(text: str) -> dict[str, Any]:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            usage = self._usage(plan)
            return {**base, "object": "chat.completion", "choices": [choice], "usage": usage}

        def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            obj = "chat.completion.chunk"
            return {**base, "object": obj, "choices": [choice], "modelplane": who}

        def tail() -> list[tuple[str | None, Any]]:
            out: list[tuple[str | None, Any]] = [(None, chunk({}, finish))]
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {**base, "object": "chat.completion.chunk", "choices": []}
                out.append((None, usage | {"usage": self._usage(plan), "modelplane": who}))
            return [*out, (None, "[DONE]")]

        return await self._generate(
            request,
            plan,
            bool(body.get("stream")),
            whole,
            lambda: [(None, chunk({"role": "assistant", "content": ""}))],
            lambda text: (None, chunk({"content": text})),
            tail,
        )

    async def _completions(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await self._body(request, "prompt")
        plan = self._plan(body, body["prompt"])
        rid = f"cmpl-{self.identity.replica}-{next(self._ids)}"
        who = self._who(request)
        finish = "length" if plan.truncated else "stop"
        base = {"id": rid, "object": "text_completion", "created": int(time.time())}
        base["model"] = self.identity.model

        def choice(text: str, reason: str | None) -> dict[str, Any]:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}

        def whole(text: str) -> dict[str, Any]:
            return {**base, "choices": [choice(text, finish)], "usage": self._usage(plan)}

        def chunk(text: str, reason: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [choice(text, reason)], "modelplane": who}

        return await self._generate(
            request,
            plan,
            bool(body.get("stream")),
            whole,
            lambda: [],
            lambda text: (None, chunk(text)),
            lambda: [(None, chunk("", finish)), (None, "[DONE]")],
        )

    async def _messages(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await self._body(request, "messages")
        plan = self._plan(body, [body.get("system", ""), body["messages"]])
        rid = f"msg_{self.identity.replica}_{next(self._ids)}"
        who = self._who(request)
        stop = "max_tokens" if plan.truncated else "end_turn"
        n = len(plan.words)
        base = {"id": rid, "type": "message", "role": "assistant", "model": self.identity.model}

        def whole(text: str) -> dict[str, Any]:
            usage = {"input_tokens": plan.prompt_tokens, "output_tokens": n}
            content = [{"type": "text", "text": text}]
            ends = {"stop_reason": stop, "stop_sequence": None}
            return {**base, "content": content, **ends, "usage": usage}

        def head() -> list[tuple[str | None, Any]]:
            usage = {"input_tokens": plan.prompt_tokens, "output_tokens": 0}
            message = {**base, "content": [], "stop_reason": None, "stop_sequence": None}
            start = {"type": "message_start", "message": message | {"usage": usage}}
            block = {"type": "text", "text": ""}
            block_start = {"type": "content_block_start", "index": 0, "content_block": block}
            start["modelplane"] = who
            return [("message_start", start), ("content_block_start", block_start)]

        def piece(text: str) -> tuple[str | None, Any]:
            delta = {"type": "text_delta", "text": text}
            event = "content_block_delta"
            return event, {"type": event, "index": 0, "delta": delta}

        def tail() -> list[tuple[str | None, Any]]:
            delta = {"stop_reason": stop, "stop_sequence": None}
            message_delta = {"type": "message_delta", "delta": delta, "usage": {"output_tokens": n}}
            return [
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", message_delta),
                ("message_stop", {"type": "message_stop"}),
            ]

        return await self._generate(
            request, plan, bool(body.get("stream")), whole, head, piece, tail
        )


class StandinHost:
    """Many stand-in listeners in one asyncio loop, added and removed at runtime.

    All methods run on the loop that owns the host (use ``StandinHostThread`` from other
    threads). ``grace`` is the default time in-flight requests get to finish on remove/stop.
    """

    def __init__(self, *, grace: float = 5.0) -> None:
        self.grace = grace
        self._servers: dict[str, _Standin] = {}

    async def add(
        self,
        key: str,
        host: str,
        port: int,
        identity: StandinIdentity,
        config: StandinConfig | None = None,
    ) -> int:
        """Start a listener on host:port (0 picks a free port); return the bound port.

        Raises ValueError when ``key`` is taken and OSError when the address cannot be bound.
        """
        if key in self._servers:
            raise ValueError(f"stand-in {key!r} already exists")
        server = _Standin(identity, config or StandinConfig())
        self._servers[key] = server
        try:
            return await server.start(host, port)
        except BaseException:
            if self._servers.get(key) is server:
                del self._servers[key]
            raise

    async def remove(self, key: str, grace: float | None = None) -> bool:
        """Stop a listener gracefully; False when there is none under ``key``.

        The port refuses new connections at once; health answers 503 from then on; requests in
        flight (running or waiting) get ``grace`` seconds to finish, then are cut.
        """
        server = self._servers.pop(key, None)
        if server is None:
            return False
        await server.stop(self.grace if grace is None else grace)
        return True

    def keys(self) -> list[str]:
        return sorted(self._servers)

    def address(self, key: str) -> tuple[str, int]:
        server = self._servers[key]
        return server.host, server.port

    def stats(self, key: str) -> StandinStats:
        return self._servers[key].stats()

    def set_ready(self, key: str, ready: bool) -> None:
        """Hold a listener unready (False) or let it be ready once loaded (True)."""
        self._servers[key].held_ready = ready

    async def stop(self, grace: float | None = None) -> None:
        """Remove every listener, all draining at once within ``grace``."""
        await asyncio.gather(*(self.remove(key, grace) for key in list(self._servers)))

    async def __aenter__(self) -> StandinHost:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class StandinHostThread:
    """A ``StandinHost`` on its own event loop in a daemon thread, callable from any thread."""

    def __init__(self, *, grace: float = 5.0, timeout: float = 30.0) -> None:
        self.grace = grace
        self.timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._host: StandinHost | None = None

    def start(self) -> StandinHostThread:
        if self._loop is not None:
            raise RuntimeError("StandinHostThread already started")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="standin-host", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        self._host = StandinHost(grace=self.grace)
        return self

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._loop is None:
            coro.close()
            raise RuntimeError("StandinHostThread is not running")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(self.timeout if timeout is None else timeout)

    def _host_(self) -> StandinHost:
        if self._host is None:
            raise RuntimeError("StandinHostThread is not running")
        return self._host

    def add(
        self,
        key: str,
        host: str,
        port: int,
        identity: StandinIdentity,
        config: StandinConfig | None = None,
    ) -> int:
        return self._call(self._host_().add(key, host, port, identity, config))

    def remove(self, key: str, grace: float | None = None) -> bool:
        wait = (self.grace if grace is None else grace) + self.timeout
        return self._call(self._host_().remove(key, grace), timeout=wait)

    def keys(self) -> list[str]:
        return self._on_loop(lambda h: h.keys())

    def address(self, key: str) -> tuple[str, int]:
        return self._on_loop(lambda h: h.address(key))

    def stats(self, key: str) -> StandinStats:
        return self._on_loop(lambda h: h.stats(key))

    def set_ready(self, key: str, ready: bool) -> None:
        self._on_loop(lambda h: h.set_ready(key, ready))

    def _on_loop(self, fn: Callable[[StandinHost], T]) -> T:
        host = self._host_()

        async def run() -> T:
            return fn(host)

        return self._call(run())

    def stop(self, grace: float | None = None) -> None:
        """Drain every listener (within ``grace``), then stop the loop and join the thread."""
        if self._loop is None or self._thread is None:
            return
        wait = (self.grace if grace is None else grace) + self.timeout
        try:
            self._call(self._host_().stop(grace), timeout=wait)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self.timeout)
            self._loop.close()
            self._loop = self._thread = self._host = None

    def __enter__(self) -> StandinHostThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m modelplane.devfleet.standin",
        description="Run one stand-in model server (the dev fleet's stand-in for a vLLM pod).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--replica", default="standin-0")
    p.add_argument("--role", default="worker")
    p.add_argument("--cluster", default="local")
    p.add_argument("--model", default="standin")
    p.add_argument("--pod", default="")
    p.add_argument("--namespace", default="")
    p.add_argument("--service-time", type=float, default=0.0, help="seconds per request")
    p.add_argument("--token-time", type=float, default=0.0, help="seconds per output token")
    p.add_argument("--concurrency", type=int, default=0, help="max running; 0 = unlimited")
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--prefix-tolerant", action="store_true")
    p.add_argument("--load-time", type=float, default=0.0, help="seconds before it is ready")
    p.add_argument("--revision", default="", help="sent as x-modelplane-revision")
    p.add_argument("--error-ratio", type=float, default=0.0, help="share answered 500, 0..1")
    p.add_argument("--first-token-delay", type=float, default=0.0, help="extra seconds to TTFT")
    p.add_argument("--grace", type=float, default=5.0, help="drain time on SIGTERM/SIGINT")
    return p


async def _serve(args: argparse.Namespace, identity: StandinIdentity, config: StandinConfig) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    async with StandinHost(grace=args.grace) as host:
        try:
            port = await host.add("main", args.host, args.port, identity, config)
        except OSError as exc:
            print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        print(f"stand-in {identity.replica} listening on http://{args.host}:{port}", flush=True)
        await stopping.wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    identity = StandinIdentity(
        replica=args.replica,
        role=args.role,
        cluster=args.cluster,
        model=args.model,
        pod=args.pod,
        namespace=args.namespace,
    )
    try:
        config = StandinConfig(
            service_time=args.service_time,
            token_time=args.token_time,
            concurrency=args.concurrency,
            output_tokens=args.output_tokens,
            prefix_tolerant=args.prefix_tolerant,
            load_time=args.load_time,
            revision=args.revision,
            error_ratio=args.error_ratio,
            first_token_delay=args.first_token_delay,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(args, identity, config))


if __name__ == "__main__":
    sys.exit(main())
