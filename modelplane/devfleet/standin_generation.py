"""The stand-in's generation endpoints: OpenAI chat and completions, Anthropic messages, each
whole or streamed as server-sent events, holding a slot of the listener's queue."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from modelplane.devfleet.standin_types import StandinCounters
from modelplane.errors import UserError

_FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor".split()


PREFIX_CACHE_ENTRIES = 10_000


class BadRequest(UserError):
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


class StandinGeneration(StandinCounters):
    """The generation endpoints of ``StandinListener`` (a mixin)."""

    _ids: itertools.count[int]
    _slots: asyncio.Semaphore | None

    if TYPE_CHECKING:

        def _json(
            self, request: web.BaseRequest, body: dict[str, Any], status: int = 200
        ) -> Any: ...

        def _who(self, request: web.BaseRequest) -> dict[str, str]: ...

        def _first_token(self, arrived: float) -> None: ...

    async def _body(self, request: web.BaseRequest, field: str) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as exc:
            raise BadRequest(400, f"request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest(400, "request body must be a JSON object")
        value = body.get(field)
        if field == "messages" and (not isinstance(value, list) or not value):
            raise BadRequest(400, "field 'messages' must be a non-empty list")
        if field == "prompt" and not isinstance(value, str | list):
            raise BadRequest(400, "field 'prompt' must be a string or a list")
        model = body.get("model")
        if self.config.strict_model and model is not None and model != self.identity.model:
            raise BadRequest(404, f"The model `{model}` does not exist.")
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

    def _prefix_cache(self, messages: list[Any]) -> int:
        """A simulated prefix cache: the prompt tokens of the longest earlier conversation on
        this stand-in that this one continues (0: a miss); this conversation is remembered
        (the most recent PREFIX_CACHE_ENTRIES)."""
        seen: collections.OrderedDict[str, None] = self.__dict__.setdefault(
            "_prefixes", collections.OrderedDict()
        )

        def digest(part: list[Any]) -> str:
            return hashlib.sha256(json.dumps(part, sort_keys=True).encode()).hexdigest()

        cached = 0
        for k in range(len(messages) - 1, 0, -1):
            if digest(messages[:k]) in seen:
                cached = _count_words(messages[:k])
                break
        seen[digest(messages)] = None
        seen.move_to_end(digest(messages))
        while len(seen) > PREFIX_CACHE_ENTRIES:
            seen.popitem(last=False)
        return cached

    async def _chat(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await self._body(request, "messages")
        plan = self._plan(body, body["messages"])
        cached = self._prefix_cache(body["messages"])
        rid = f"chatcmpl-{self.identity.replica}-{next(self._ids)}"
        who = self._who(request)
        finish = "length" if plan.truncated else "stop"
        base = {"id": rid, "created": int(time.time()), "model": self.identity.model}

        def whole(text: str) -> dict[str, Any]:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            # OpenAI's field for the prompt tokens a prefix cache served.
            usage = {**self._usage(plan), "prompt_tokens_details": {"cached_tokens": cached}}
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
