"""The stand-in's ``/metrics``: vLLM's metric names, the TTFT histogram and the API server's
``http_requests_total``, in Prometheus text format."""

from __future__ import annotations

import time

from aiohttp import web

from modelplane.devfleet.standin_types import StandinCounters


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


class StandinMetrics(StandinCounters):
    """The listener's counters as /metrics reports them (a mixin of ``StandinListener``)."""

    ttft_buckets: list[int]
    ttft_count: int
    ttft_sum: float
    http: dict[tuple[str, str, str], int]

    def _count(self, request: web.BaseRequest, response: web.StreamResponse | None) -> None:
        """``http_requests_total`` as vLLM's API server counts it (generation paths only)."""
        handler = next((p for p in GENERATION_PATHS if request.path.endswith(p)), None)
        if handler is None:
            return
        status = f"{(response.status if response is not None else 500) // 100}xx"
        key = (handler, request.method, status)
        self.http[key] = self.http.get(key, 0) + 1

    def _first_token(self, arrived: float) -> None:
        elapsed = time.monotonic() - arrived
        self.ttft_count += 1
        self.ttft_sum += elapsed
        for i, bound in enumerate(TTFT_BUCKETS):
            if elapsed <= bound:
                self.ttft_buckets[i] += 1

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
