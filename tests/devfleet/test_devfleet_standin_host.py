"""The stand-in host: listeners added and removed at runtime, graceful stop, the command line
(on 127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from modelplane.devfleet.standin import (
    StandinConfig,
    StandinHost,
    StandinHostThread,
)
from tests.devfleet import standin_helpers as sh


@pytest.fixture
def host():
    yield from sh.standin_host()


# --- many listeners, added and removed at runtime -----------------------------------------------


def test_add_remove_at_runtime(host):
    a = host.add("a", sh.LOOPBACK, 0, sh.ident("ra"))
    b = host.add("b", sh.LOOPBACK, 0, sh.ident("rb", cluster="west"))
    assert host.keys() == ["a", "b"]
    assert host.address("a") == (sh.LOOPBACK, a)
    for port, replica, cluster in ((a, "ra", "east"), (b, "rb", "west")):
        _, headers, _ = sh.call(port, "POST", "/v1/chat/completions", sh.CHAT)
        assert (headers["x-modelplane-replica"], headers["x-modelplane-cluster"]) == (
            replica,
            cluster,
        )

    assert host.remove("a", grace=1.0) is True
    assert host.keys() == ["b"]
    assert sh.refuses(a)
    assert sh.call(b, "GET", "/health")[0] == 200
    assert host.remove("a") is False

    # The same key and port can be used again (a pod restarted on the same IP and port).
    assert host.add("a", sh.LOOPBACK, a, sh.ident("ra2")) == a
    assert sh.call(a, "GET", "/health")[1]["x-modelplane-replica"] == "ra2"
    assert host.keys() == ["a", "b"]


def test_add_rejects_taken_key_and_address(host):
    port = host.add("a", sh.LOOPBACK, 0, sh.ident("ra"))
    with pytest.raises(ValueError, match="'a' already exists"):
        host.add("a", sh.LOOPBACK, 0, sh.ident("other"))
    with pytest.raises(OSError):
        host.add("b", sh.LOOPBACK, port, sh.ident("rb"))
    assert host.keys() == ["a"]
    assert sh.call(port, "GET", "/health")[1]["x-modelplane-replica"] == "ra"


def test_sync_wrapper_from_many_threads(host):
    def add_and_call(i):
        port = host.add(f"k{i}", sh.LOOPBACK, 0, sh.ident(f"r{i}"))
        return port, sh.call(port, "GET", "/health")[1]["x-modelplane-replica"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(add_and_call, range(8)))
    assert [r for _, r in results] == [f"r{i}" for i in range(8)]
    assert len({p for p, _ in results}) == 8
    assert host.keys() == sorted(f"k{i}" for i in range(8))
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda i: host.remove(f"k{i}", grace=1.0), range(8))) == [True] * 8
    assert host.keys() == []
    assert all(sh.refuses(p) for p, _ in results)


# --- graceful stop ---------------------------------------------------------------------------


def test_remove_lets_in_flight_requests_finish(host):
    grace = 120.0  # far beyond the two requests (2 s): returning before it is their doing
    port = sh.serve(host, StandinConfig(service_time=1.0, concurrency=1))
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(sh.call, port, "POST", "/v1/chat/completions", sh.CHAT) for _ in range(2)
        ]
        sh.wait_for(lambda: host.stats("s").waiting == 1, what="one running, one waiting")
        start = time.monotonic()
        assert host.remove("s", grace=grace) is True
        took = time.monotonic() - start
        results = [f.result() for f in futures]
    print(f"\nremove with two requests in flight (1 s each, one slot): {took:.2f}s")
    # Both the running and the queued request were answered (remove waited for them: at
    # least the queued one's service time), and remove waited only for them, not the grace.
    assert [r[0] for r in results] == [200, 200]
    assert all(r[1]["x-modelplane-replica"] == "r-east-0" for r in results)
    assert took >= 1.0, took
    assert took < grace, f"remove waited out its {grace:g} s grace ({took:.1f}s)"
    assert sh.refuses(port)


def test_draining_health_is_503_on_open_connections(host):
    port = sh.serve(host, StandinConfig(service_time=5.0))  # draining outlasts a loaded machine
    idle = http.client.HTTPConnection(sh.LOOPBACK, port, timeout=10)
    assert sh.call(port, "GET", "/health", conn=idle)[0] == 200
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(sh.call, port, "POST", "/v1/completions", sh.COMPLETION)
        sh.wait_for(lambda: host.stats("s").running == 1, what="a running request")
        removing = pool.submit(host.remove, "s", 10.0)
        sh.wait_for(lambda: sh.refuses(port), what="the port to refuse")
        assert sh.call(port, "GET", "/health", conn=idle)[0] == 503
        assert slow.result()[0] == 200
        assert removing.result() is True
    idle.close()


def test_grace_bounds_the_wait(host):
    port = sh.serve(host, StandinConfig(service_time=30.0))
    with ThreadPoolExecutor(1) as pool:
        stuck = pool.submit(sh.call, port, "POST", "/v1/chat/completions", sh.CHAT)
        sh.wait_for(lambda: host.stats("s").running == 1, what="a running request")
        host.remove("s", grace=0.3)
        # Cut, not answered: remove did not wait for the 30 s request (waiting for it, the
        # request would have been answered with a 200).
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            stuck.result()
    assert sh.refuses(port)


def test_thread_stop_drains_every_listener():
    host = StandinHostThread(grace=10.0).start()
    ports = [
        host.add(k, sh.LOOPBACK, 0, sh.ident(k), StandinConfig(service_time=1.0))
        for k in ("a", "b")
    ]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(sh.call, p, "POST", "/v1/messages", sh.MESSAGES) for p in ports]
        sh.wait_for(
            lambda: all(host.stats(k).running == 1 for k in ("a", "b")), what="both running"
        )
        host.stop()
        assert [f.result()[0] for f in futures] == [200, 200]
    assert all(sh.refuses(p) for p in ports)
    with pytest.raises(RuntimeError, match="not running"):
        host.keys()


def test_async_host_context():
    async def scenario():
        async with StandinHost(grace=1.0) as host:
            port = await host.add("x", sh.LOOPBACK, 0, sh.ident("rx"))
            reader, writer = await asyncio.open_connection(sh.LOOPBACK, port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head = (await reader.read()).decode()
            writer.close()
            assert head.startswith("HTTP/1.1 200")
            assert "x-modelplane-replica: rx" in head
            assert host.keys() == ["x"]
        return port

    port = asyncio.run(scenario())
    assert sh.refuses(port)


# --- CLI -------------------------------------------------------------------------------------


def run_cli(*args):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "modelplane.devfleet.standin", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_cli_serves_and_stops_on_sigterm():
    proc = run_cli(
        "--host",
        sh.LOOPBACK,
        "--port",
        "0",
        "--replica",
        "r",
        "--role",
        "decode",
        "--cluster",
        "c",
        "--model",
        "m",
        "--concurrency",
        "2",
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("stand-in r listening on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        status, headers, raw = sh.call(port, "POST", "/v1/chat/completions", sh.CHAT)
        assert status == 200 and headers["x-modelplane-role"] == "decode"
        assert json.loads(raw)["model"] == "m"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert sh.refuses(port)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


CLI_ERRORS = [
    ("negative-concurrency", ["--concurrency", "-1"], "concurrency must be >= 0"),
    ("port-not-a-number", ["--port", "eighty"], "--port: invalid int value"),
]


@pytest.mark.parametrize(
    ("args", "message"), [c[1:] for c in CLI_ERRORS], ids=[c[0] for c in CLI_ERRORS]
)
def test_cli_bad_input_exits_2(args, message):
    proc = run_cli("--port", "0", *args)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert message in err
    assert "Traceback" not in err


def test_cli_port_taken_exits_1():
    with socket.socket() as sock:
        sock.bind((sh.LOOPBACK, 0))
        sock.listen()
        proc = run_cli("--port", str(sock.getsockname()[1]))
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "cannot listen on 127.0.0.1:" in err and "Traceback" not in err


def test_no_listener_threads_leak():
    before = {t.name for t in threading.enumerate()}
    with StandinHostThread(grace=0.5) as h:
        h.add("a", sh.LOOPBACK, 0, sh.ident("ra"))
        assert "standin-host" in {t.name for t in threading.enumerate()}
    assert {t.name for t in threading.enumerate()} <= before
