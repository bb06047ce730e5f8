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

The parts: ``standin_types`` (identity, configuration, counters), ``standin_listener`` (one
listener: lifecycle, routing, readiness), ``standin_generation`` (the OpenAI and Anthropic
endpoints, SSE), ``standin_metrics`` (``/metrics``) and ``standin_host`` (many listeners). This
module re-exports their public names and holds the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from modelplane.devfleet.standin_host import StandinHost, StandinHostThread
from modelplane.devfleet.standin_metrics import GENERATION_PATHS, TTFT_BUCKETS
from modelplane.devfleet.standin_types import StandinConfig, StandinIdentity, StandinStats

__all__ = [
    "GENERATION_PATHS",
    "TTFT_BUCKETS",
    "StandinConfig",
    "StandinHost",
    "StandinHostThread",
    "StandinIdentity",
    "StandinStats",
    "main",
]


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
    identity = StandinIdentity.of(args)
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
