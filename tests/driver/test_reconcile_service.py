"""`reconcile` as a service without a cluster: /healthz, /readyz and /metrics served on
127.0.0.1 from a round's results, JSON log lines, the stale stack-lock rules."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from modelplane.driver import stacklock
from modelplane.driver.reconcile import Round
from modelplane.driver.results import Outcome, RunResult, StackResult
from modelplane.driver.service import Metrics, log_json, serve
from modelplane.stacks import Tier


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_service_endpoints_and_metrics_from_rounds() -> None:
    metrics = Metrics()
    port = _port()
    server = serve(f"127.0.0.1:{port}", metrics)
    try:
        assert _get(port, "/healthz")[0] == 200
        assert _get(port, "/readyz")[0] == 503  # no round, no lease yet
        assert _get(port, "/nope")[0] == 404
        current = Round(1, 0.0)
        current.run = RunResult(
            "up",
            "file:///x",
            [
                StackResult("deploy-a", Tier.DEPLOYMENTS, Outcome.SUCCEEDED),
                StackResult("deploy-b", Tier.DEPLOYMENTS, Outcome.FAILED, error="boom"),
                StackResult("gateway", Tier.GATEWAY, Outcome.SKIPPED),
            ],
        )
        current.duration = 2.5
        metrics.record_round(current)
        metrics.set_leader(True)
        assert _get(port, "/readyz")[0] == 200
        code, text = _get(port, "/metrics")
        assert code == 200
        samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#")
        assert samples["modelplane_reconcile_rounds_total"] == "1"
        assert samples["modelplane_reconcile_rounds_failed_total"] == "1"
        assert samples["modelplane_reconcile_round_duration_seconds"] == "2.5"
        assert samples['modelplane_reconcile_stacks_total{outcome="succeeded"}'] == "1"
        assert samples['modelplane_reconcile_stacks_total{outcome="failed"}'] == "1"
        assert samples["modelplane_reconcile_leader"] == "1"
        assert "# TYPE modelplane_reconcile_replicas_wanted gauge" in text
    finally:
        server.shutdown()


def test_service_json_log_lines() -> None:
    stream = io.StringIO()
    log_json("leader", stream, message="a leads", leader=True)
    log_json("round", stream, level="error", error="x")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["event"], x["level"]) for x in lines] == [("leader", "info"), ("round", "error")]
    assert lines[0]["leader"] is True and isinstance(lines[0]["ts"], float)


LOCKED = (
    "error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) "
    "to end or delete the lock file with `pulumi cancel`.\n"
    "  postgres://****:****@127.0.0.1:5/pulumi/.pulumi/locks/organization/modelplane/gateway/"
    "2b.json?sslmode=disable: created by root@{host} (pid {pid}) at 2026-11-26T00:05:27Z"
)


def test_crash_stale_lock_holders() -> None:
    here = socket.gethostname()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid no longer runs
    text = LOCKED.format(host=here, pid=dead.pid)
    (holder,) = stacklock.holders(text)
    assert (holder.user, holder.host, holder.pid) == ("root", here, dead.pid)
    assert "since 2026-11-26T00:05:27Z" in holder.describe()
    assert stacklock.all_stale(text) == [holder]
    # A live process of this host, or any process of another host: never broken.
    assert stacklock.all_stale(LOCKED.format(host=here, pid=os.getpid())) == []
    assert stacklock.all_stale(LOCKED.format(host="elsewhere", pid=dead.pid)) == []
    assert stacklock.all_stale("no holder named") == []


def test_crash_a_killed_unreaped_child_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not stacklock._process_gone(child.pid)
        child.kill()
        for _ in range(100):  # a zombie until reaped
            if stacklock._process_gone(child.pid):
                break
            import time

            time.sleep(0.05)
        assert stacklock._process_gone(child.pid)
    finally:
        child.wait()


@pytest.mark.parametrize("listen", ["127.0.0.1:0"])
def test_service_listens_on_loopback_only(listen: str) -> None:
    server = serve(listen, Metrics())
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
