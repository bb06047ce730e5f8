"""`reconcile` as a service: ``/healthz``, ``/readyz`` and Prometheus ``/metrics`` on
``--listen``, and one JSON object per log line (``--log-format json``).

- ``/healthz``: 200 while the loop thread ticks (it stamps :meth:`Metrics.tick` at least
  every probe period), else 503: a stuck process is restarted by its kubelet.
- ``/readyz``: 200 once the process has either run a round or is a standby that reached the
  Lease; 503 before.
- ``/metrics``: the text exposition format (``modelplane_reconcile_*``).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

from modelplane.authz import BoundedServer
from modelplane.health.phases import durations

STALE_TICK = 120.0  # a loop that has not ticked for this long is not healthy


class Metrics:
    """Counters and gauges of one reconcile process (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rounds = 0
        self.rounds_failed = 0
        self.round_seconds_sum = 0.0
        self.last_round_seconds = 0.0
        self.stacks: dict[str, int] = {}  # outcome -> count (succeeded, failed, locked, ...)
        self.wanted: dict[str, int] = {}  # deployment -> replicas wanted
        self.placed: dict[str, int] = {}
        self.ready: dict[str, int] = {}
        self.leader = 0
        self.leader_changes = 0
        # (deployment, replica, phase) -> seconds after it was placed (health.phases)
        self.start: dict[tuple[str, str, str], float] = {}
        self.ready_to_serve = False
        self._tick = time.monotonic()

    def tick(self) -> None:
        with self._lock:
            self._tick = time.monotonic()

    def healthy(self) -> bool:
        with self._lock:
            return time.monotonic() - self._tick < STALE_TICK

    def mark_ready(self) -> None:
        with self._lock:
            self.ready_to_serve = True

    def set_leader(self, leader: bool) -> None:
        with self._lock:
            if int(leader) != self.leader:
                self.leader_changes += 1
            self.leader = int(leader)
            self.ready_to_serve = True

    def record_round(self, current: Any) -> None:
        """A :class:`~modelplane.driver.reconcile.Round`."""
        with self._lock:
            self.rounds += 1
            self.rounds_failed += 0 if current.ok else 1
            self.round_seconds_sum += current.duration
            self.last_round_seconds = current.duration
            self.ready_to_serve = True
            for run in (current.routes_first, current.run):
                for r in run.results if run is not None else []:
                    key = r.outcome.value
                    self.stacks[key] = self.stacks.get(key, 0) + 1
            if current.plan is not None:
                for key, rep in current.plan.report.items():
                    self.wanted[key] = rep.desired
                    self.placed[key] = rep.desired - rep.unplaced
            observation, plan = current.observation, current.plan
            if observation is not None and plan is not None:
                for key in self.wanted:
                    self.ready[key] = _ready(observation, plan.lock, key)
            if plan is not None:
                self.start = {
                    (key, r.name, phase): seconds
                    for key, dep in sorted(plan.lock.deployments.items())
                    for r in dep.replicas
                    for phase, seconds in durations(
                        getattr(current, "phases", {}).get(r.name, {})
                    ).items()
                }
        self.tick()

    def render(self) -> str:
        with self._lock:
            lines = [
                *_metric("rounds_total", "counter", "Reconcile rounds run.", {(): self.rounds}),
                *_metric(
                    "rounds_failed_total",
                    "counter",
                    "Rounds that failed.",
                    {(): self.rounds_failed},
                ),
                *_metric(
                    "round_duration_seconds_sum",
                    "counter",
                    "Seconds spent in rounds.",
                    {(): self.round_seconds_sum},
                ),
                *_metric(
                    "round_duration_seconds",
                    "gauge",
                    "Duration of the last round.",
                    {(): self.last_round_seconds},
                ),
                *_metric(
                    "stacks_total",
                    "counter",
                    "Stack runs by outcome.",
                    {(("outcome", k),): v for k, v in sorted(self.stacks.items())},
                ),
                *_replicas("replicas_wanted", "Replicas the specs want.", self.wanted),
                *_replicas("replicas_placed", "Replicas placed in the lock.", self.placed),
                *_replicas("replicas_ready", "Replicas observed Ready.", self.ready),
                *_metric(
                    "replica_start_seconds",
                    "gauge",
                    "Seconds from a replica's placement (else its pods' creation) to each start "
                    "phase: created, scheduled, started, ready, routed.",
                    {
                        (("deployment", d), ("replica", r), ("phase", p)): v
                        for (d, r, p), v in self.start.items()
                    },
                ),
                *_metric("leader", "gauge", "1 while this process leads.", {(): self.leader}),
                *_metric(
                    "leader_changes_total",
                    "counter",
                    "Times this process gained or lost the lead.",
                    {(): self.leader_changes},
                ),
            ]
        return "\n".join(lines) + "\n"


def _ready(observation: Any, lock: Any, key: str) -> int:
    """Replicas of ``key`` in ``lock`` whose pods (and groups) are all Ready."""
    count = 0
    for replica in lock.replicas_of(key):
        seen = observation.cluster(replica.cluster)
        r = seen.replicas.get(replica.name) if seen is not None else None
        if r is not None and r.pods > 0 and r.ready_pods == r.pods:
            count += 1 if r.groups == r.ready_groups else 0
    return count


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    if not pairs:
        return ""
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in pairs)  # JSON escapes as Prometheus
    return "{" + inner + "}"


def _metric(
    name: str, kind: str, help_: str, samples: Mapping[tuple[tuple[str, str], ...], float]
) -> list[str]:
    full = f"modelplane_reconcile_{name}"
    out = [f"# HELP {full} {help_}", f"# TYPE {full} {kind}"]
    out += [f"{full}{_labels(k)} {float(v):g}" for k, v in samples.items()]
    return out


def _replicas(name: str, help_: str, values: Mapping[str, int]) -> list[str]:
    return _metric(
        name, "gauge", help_, {(("deployment", k),): v for k, v in sorted(values.items())}
    )


LISTEN_TIMEOUT = 30.0  # seconds a connection may stay silent
LISTEN_CONNECTIONS = 64  # at most at once; one more is closed unanswered


def serve(listen: str, metrics: Metrics) -> ThreadingHTTPServer:
    """Serve ``/healthz``, ``/readyz`` and ``/metrics`` on ``host:port`` in a daemon thread."""
    host, _, port = listen.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.render(), "text/plain; version=0.0.4")
            elif path == "/healthz":
                ok = metrics.healthy()
                self._send(200 if ok else 503, "ok\n" if ok else "the loop is stuck\n")
            elif path == "/readyz":
                ok = metrics.ready_to_serve and metrics.healthy()
                self._send(200 if ok else 503, "ok\n" if ok else "not ready\n")
            else:
                self._send(404, "not found\n")

        def _send(self, code: int, body: str, kind: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return  # scrapes are not log lines

    Handler.timeout = LISTEN_TIMEOUT  # a silent connection holds no thread for good
    server = BoundedServer(
        (host.strip("[]") or "127.0.0.1", int(port)), Handler, LISTEN_CONNECTIONS
    )
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def log_json(event: str, stream: TextIO | None = None, **fields: Any) -> None:
    """One structured log line: ``{"ts": ..., "level": ..., "event": ..., ...}``."""
    level = fields.pop("level", "info")
    line = {"ts": round(time.time(), 3), "level": level, "event": event, **fields}
    print(json.dumps(line, default=str), file=stream or sys.stderr, flush=True)
