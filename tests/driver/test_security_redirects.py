"""Security H2 and L6 (docs/architecture.md, "Security"): a credential goes to the server it
is meant for and nowhere else. Every modelplane HTTP client that sends one -- the API-server
reader (cluster observation, a pod's `/metrics` through the pod proxy, Prometheus through the
service proxy), the Lease client, the orphan deleter and `modelplane call` -- is pointed at a
127.0.0.1 server that answers every request with a redirect to a second 127.0.0.1 server,
which must never see the credential (nor any request at all)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from modelplane.observe.kube import KubeError, KubeReader, KubeTarget

TOKEN = "kube-token-canary-91c2"
KEY = "sk-mp-caller-canary-4be0"


@dataclass
class Recorder:
    """A local HTTP server: each request's method, path and Authorization header."""

    answer: Callable[[BaseHTTPRequestHandler], None]
    seen: list[tuple[str, str, str]] = field(default_factory=list)
    server: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def _serve(answer: Callable[[BaseHTTPRequestHandler], None]) -> Recorder:
    rec = Recorder(answer)

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            rec.seen.append((self.command, self.path, str(self.headers.get("Authorization") or "")))
            rec.answer(self)

        do_GET = do_POST = do_PUT = do_DELETE = _any  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

    rec.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=rec.server.serve_forever, args=(0.05,), daemon=True).start()
    return rec


def _ok(h: BaseHTTPRequestHandler) -> None:
    body = b'{"items": [], "resources": [], "data": [{"id": "m"}]}'
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Recorder, Recorder]]:
    """(the server the client is meant for, which redirects every request; the other one),
    shared by the module's tests (each sets the status and starts with no requests seen)."""
    elsewhere = _serve(_ok)
    status = {"code": 302}

    def redirect(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status["code"])
        h.send_header("Location", f"{elsewhere.url}/stolen{h.path}")
        h.send_header("Content-Length", "0")
        h.end_headers()

    meant = _serve(redirect)
    meant.status = status  # type: ignore[attr-defined]
    yield meant, elsewhere
    for rec in (meant, elsewhere):
        rec.server.shutdown()
        rec.server.server_close()


@pytest.fixture(params=[301, 302, 303, 307, 308])
def servers(
    pair: tuple[Recorder, Recorder], request: pytest.FixtureRequest
) -> tuple[Recorder, Recorder]:
    meant, elsewhere = pair
    meant.status["code"] = request.param  # type: ignore[attr-defined]
    meant.seen.clear()
    elsewhere.seen.clear()
    return pair


def _reader(url: str) -> KubeReader:
    return KubeReader(KubeTarget(server=url, token=TOKEN), timeout=5)


def _pod_metrics(url: str) -> Any:
    from modelplane.observe.cluster import ClusterReader

    pod = {"metadata": {"namespace": "demo", "name": "qwen-0"}, "spec": {"containers": []}}
    return ClusterReader(_reader(url)).pod_metrics(pod)


def _lease(url: str) -> Any:
    from modelplane.driver.lease import LeaseClient

    client = LeaseClient(KubeTarget(server=url, token=TOKEN), timeout=5)
    return client.request("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l", {})


def _orphan(url: str) -> Any:
    from modelplane.driver.orphans import KubeDeleter
    from modelplane.driver.state import Orphan

    deleter = KubeDeleter(_reader(url))
    deleter._plural[("v1", "Service")] = ("services", True)  # discovery answered
    return deleter.delete(Orphan("c", "v1", "Service", "demo", "svc", "uid-1", "deploy-x"))


KUBE_CLIENTS: dict[str, Callable[[str], Any]] = {
    "reader.get": lambda url: _reader(url).get("/api/v1/nodes"),
    "reader.get_text": lambda url: _reader(url).get_text(
        "/api/v1/namespaces/m/pods/p:8000/proxy/metrics"
    ),
    "pod /metrics (autoscaling)": _pod_metrics,
    "lease": _lease,
    "orphan delete": _orphan,
}


@pytest.mark.parametrize("client", sorted(KUBE_CLIENTS))
def test_security_kube_token_never_follows_a_redirect(
    servers: tuple[Recorder, Recorder], client: str
) -> None:
    meant, elsewhere = servers
    with pytest.raises(KubeError) as caught:
        KUBE_CLIENTS[client](meant.url)
    assert 300 <= caught.value.status < 400
    assert "redirect: not followed" in str(caught.value)
    assert elsewhere.url not in str(caught.value)  # the answering side's text is not quoted
    assert [auth for _m, _p, auth in meant.seen] == [f"Bearer {TOKEN}"]  # the token was sent
    assert elsewhere.seen == []  # ... to the API server only


def test_security_call_key_never_follows_a_redirect(servers: tuple[Recorder, Recorder]) -> None:
    """L6: `modelplane call` sends the caller's key to the service's URL only; the redirect
    is reported with its status and Location."""
    from modelplane.cli.call import chat_completion

    meant, elsewhere = servers
    result = chat_completion(meant.url + "/team/chat/", "hi", model="m", key=KEY, timeout=5)
    assert 300 <= result.status < 400 and not result.ok
    assert "not followed" in result.body and f"{elsewhere.url}/stolen" in result.body
    assert [auth for _m, _p, auth in meant.seen] == [f"Bearer {KEY}"]
    assert elsewhere.seen == []


def test_security_clients_still_read_a_plain_answer() -> None:
    """Without a redirect, each client works (the refusal is of redirects, not of answers)."""
    plain = _serve(_ok)
    try:
        assert _reader(plain.url).get("/api/v1/nodes") == {
            "items": [],
            "resources": [],
            "data": [{"id": "m"}],
        }
        from modelplane.cli.call import chat_completion

        assert chat_completion(plain.url + "/s/", "hi", key=KEY, timeout=5).ok
        assert {auth for _m, _p, auth in plain.seen} == {f"Bearer {TOKEN}", f"Bearer {KEY}"}
    finally:
        plain.server.shutdown()
        plain.server.server_close()
