"""Shared helpers of the stand-in model server's tests (modelplane.devfleet.standin).

The tests start stand-ins in-process on 127.0.0.1 only; no dev fleet.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator

from modelplane.devfleet.standin import StandinConfig, StandinHostThread, StandinIdentity

LOOPBACK = "127.0.0.1"
IDENT = StandinIdentity(replica="r-east-0", role="decode", cluster="east", model="m1", pod="p-0")
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "say hi to me"}]}
COMPLETION = {"model": "m1", "prompt": "once upon a time"}
MESSAGES = {
    "model": "m1",
    "max_tokens": 64,
    "system": "be brief",
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
}


def call(port, method, path, body=None, timeout=15.0, conn=None):
    """One HTTP request with the standard library; returns (status, headers, raw body)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        payload = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        if own:
            conn.close()


def sse(raw):
    """Server-sent events as (event or None, data string), in order."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        event, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        events.append((event, "\n".join(data)))
    return events


def metrics(port):
    status, headers, raw = call(port, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    values, types = {}, {}
    for line in raw.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            values[series] = float(value)
    return values, types


def wait_for(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def refuses(port):
    try:
        socket.create_connection((LOOPBACK, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def standin_host() -> Iterator[StandinHostThread]:
    """The body of each module's ``host`` fixture: a running StandinHostThread."""
    with StandinHostThread(grace=5.0) as h:
        yield h


def serve(host, config=None, identity=IDENT, key="s"):
    return host.add(key, LOOPBACK, 0, identity, config or StandinConfig())


def ident(replica, cluster="east"):
    return StandinIdentity(replica=replica, role="decode", cluster=cluster, model="m1")
