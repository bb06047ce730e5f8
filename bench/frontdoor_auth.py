"""What the front door's TLS + key check + the private hop add, at light load, real Traefik.

Two paths of two hops each (Traefik, the dev fleet's build) to one echo backend on 127.0.0.1,
as a request travels client -> front door -> cluster (workload) gateway -> engine:

- plain: a front door with the retry Middleware (as every ModelService route has) -> a
  workload gateway with a bare route;
- tls+auth: a front door over TLS with the key check (`<service>-auth` forwardAuth to
  modelplane/authz.py, which also answers the front door's credentials, `<service>-strip-key`,
  retry) -> a workload gateway whose route runs the replica's `basicAuth` check
  (api.md "Private workload gateways").

- sharded: tls+auth, then the second pass of a service over more than 16 endpoints (api.md
  "Large services"): the front door forwards to itself (its `web` entrypoint) with the path
  rewritten to the shard's prefix, where the shard's route runs the front-door check
  (`basicAuth`, credentials kept) and the retries, then the same workload gateway.

- mtls: tls+auth, then the second pass to a workload gateway over mutual TLS (api.md "Mutual
  TLS between the gateways"): the front door forwards to its own `web` entrypoint with the
  path under `/_gateways/<cluster>`, where the cluster's route runs the front-door check and
  takes the prefix off, and sends the request over https with a ServersTransport holding the
  client certificate (fleet_pki); the workload gateway requires it (its default TLS options:
  RequireAndVerifyClientCert) and runs the replica's check.

Each Middleware's spec is as modelplane renders it. C keep-alive clients alternate between the
three for T seconds, so all see the same machine at the same moment. Reports p50 and p99 of
each, what TLS + auth + the hop check add, what the shards' second pass adds, and what mutual
TLS on the hop adds over the plain-HTTP hop (its second pass included). Run:
`python bench/frontdoor_auth.py [--clients 4] [--seconds 20] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from modelplane import authz, fleet_pki  # noqa: E402
from modelplane.components.gateway import callers_table  # noqa: E402
from modelplane.components.workload import front_door  # noqa: E402
from modelplane.components.workload.routes import (  # noqa: E402
    traefik_auth_middleware,
    traefik_retry_middleware,
    traefik_strip_key_middleware,
)
from modelplane.devcluster.certs import generate_ca, generate_serving_cert  # noqa: E402
from modelplane.gobuild.fleet import cached_fleet_binaries  # noqa: E402

KEY = "sk-bench-3f9a"
HOP_KEY = "front-door-bench-7d21"
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def echo_backend() -> int:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms stall

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"choices": [{"message": {"content": "hi"}}]}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])


PROCESSES: list[subprocess.Popen] = []


def traefik(
    binary: Path,
    work: Path,
    name: str,
    dynamic: dict[str, Any],
    tls: bool,
    ports: dict[str, int] | None = None,
) -> int:
    """One Traefik on 127.0.0.1 (file provider); ``ports``: its entrypoints, when more than
    the one `web`/`websecure` it gets by default. Returns the default entrypoint's port."""
    import yaml

    port = free_port()
    entrypoints = {"websecure" if tls else "web": port, **(ports or {})}
    (work / f"{name}.yaml").write_text(yaml.safe_dump(dynamic))
    process = subprocess.Popen(
        [
            str(binary),
            "--global.checkNewVersion=false",
            "--global.sendAnonymousUsage=false",
            *(f"--entryPoints.{e}.address=127.0.0.1:{p}" for e, p in entrypoints.items()),
            f"--providers.file.filename={work / f'{name}.yaml'}",
            "--log.level=ERROR",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    PROCESSES.append(process)
    return port


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    found = cached_fleet_binaries()
    if found is None:
        print("no cached Traefik build: make setup", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="frontdoor-auth-"))
    keys = work / "callers.json"
    keys.write_text(callers_table({"bench": KEY}, HOP_KEY))
    service = authz.serve(keys, "127.0.0.1", 0)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    backend = f"http://127.0.0.1:{echo_backend()}"
    ca = generate_ca("bench-ca")
    cert = generate_serving_cert(ca, hosts=("127.0.0.1",), common_name="127.0.0.1")
    (work / "tls.crt").write_bytes(cert.cert_pem)
    (work / "tls.key").write_bytes(cert.key_pem)
    retry = traefik_retry_middleware("r", "ns", {})["spec"]
    auth = traefik_auth_middleware("a", "ns", {}, f"http://127.0.0.1:{service.server_address[1]}/")[
        "spec"
    ]
    strip = traefik_strip_key_middleware("s", "ns", {})["spec"]

    def config(
        entry: str, middlewares: dict[str, Any], tls: bool, upstream: str = backend
    ) -> dict[str, Any]:
        router: dict[str, Any] = {
            "rule": "PathPrefix(`/`)",
            "entryPoints": [entry],
            "middlewares": list(middlewares),
            "service": "chat",
        }
        if tls:
            router["tls"] = {}
        if not middlewares:
            router.pop("middlewares")  # Traefik's file provider drops an empty section
        out: dict[str, Any] = {
            "http": {
                "routers": {"chat": router},
                **({"middlewares": middlewares} if middlewares else {}),
                "services": {"chat": {"loadBalancer": {"servers": [{"url": upstream}]}}},
            }
        }
        if tls:
            out["tls"] = {
                "certificates": [
                    {"certFile": str(work / "tls.crt"), "keyFile": str(work / "tls.key")}
                ]
            }
        return out

    # The cluster gateways: a bare route, and one with the replica's front-door check.
    check = dict(front_door.traefik_check("c", "ns", {})["spec"]["basicAuth"])
    check.pop("secret")
    check["users"] = [front_door.htpasswd(HOP_KEY).strip()]
    plain_hop = traefik(found.traefik, work, "plain-hop", config("web", {}, False), False)
    secure_hop = traefik(
        found.traefik,
        work,
        "secure-hop",
        config("web", {"hop": {"basicAuth": check}}, False),
        False,
    )
    plain = traefik(
        found.traefik,
        work,
        "plain",
        config("web", {"retry": retry}, False, f"http://127.0.0.1:{plain_hop}"),
        False,
    )
    secure = traefik(
        found.traefik,
        work,
        "secure",
        config(
            "websecure",
            {"auth": auth, "strip": strip, "retry": retry},
            True,
            f"http://127.0.0.1:{secure_hop}",
        ),
        True,
    )
    # The sharded front door: the same first pass, to its own `web` entrypoint with the path
    # rewritten to the shard's prefix; there the shard route's check (credentials kept for
    # the workload gateway) and retries, the prefix stripped as the endpoint's rewrite does.
    second = free_port()
    first = config(
        "websecure",
        {
            "auth": auth,
            "strip": strip,
            "retry": retry,
            "shard": {"addPrefix": {"prefix": "/_shards/ns/chat/0"}},
        },
        True,
        f"http://127.0.0.1:{second}",
    )
    shard_check = {**check, "removeHeader": False}
    first["http"]["routers"]["shard-0"] = {
        "rule": "PathPrefix(`/_shards/ns/chat/0/`)",
        "entryPoints": ["web"],
        "middlewares": ["shard-check", "retry", "to-endpoint"],
        "service": "hop",
    }
    first["http"]["middlewares"]["shard-check"] = {"basicAuth": shard_check}
    first["http"]["middlewares"]["to-endpoint"] = {
        "stripPrefix": {"prefixes": ["/_shards/ns/chat/0"]}
    }
    first["http"]["services"]["hop"] = {
        "loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{secure_hop}"}]}
    }
    sharded = traefik(found.traefik, work, "sharded", first, True, {"web": second})
    # Mutual TLS to the workload gateway, as modelplane renders it on a Traefik front door.
    fleet = fleet_pki.parse_ca(fleet_pki.new_ca(datetime.now(UTC)))
    now = datetime.now(UTC)
    server_name = fleet_pki.server_name("bench")
    leaves = {
        "server": fleet_pki.leaf(
            fleet, name="bench", role="server", dns_names=[server_name], now=now
        ),
        "client": fleet_pki.leaf(fleet, name="front-door", role="client", now=now),
    }
    for role, made in leaves.items():
        (work / f"{role}.crt").write_text(made.cert_pem)
        (work / f"{role}.key").write_text(made.key_pem)
    (work / "fleet-ca.crt").write_text(fleet.cert_pem)
    mtls_hop_config = config("websecure", {"hop": {"basicAuth": check}}, True)
    mtls_hop_config["tls"] = {
        "certificates": [
            {"certFile": str(work / "server.crt"), "keyFile": str(work / "server.key")}
        ],
        "options": {
            "default": {
                "minVersion": "VersionTLS12",
                "clientAuth": {
                    "caFiles": [str(work / "fleet-ca.crt")],
                    "clientAuthType": "RequireAndVerifyClientCert",
                },
            }
        },
    }
    mtls_hop = traefik(found.traefik, work, "mtls-hop", mtls_hop_config, True)
    loop = free_port()
    prefix = "/_gateways/bench"
    door = config(
        "websecure",
        {
            "auth": auth,
            "strip": strip,
            "retry": retry,
            "to-gateway": {"addPrefix": {"prefix": prefix}},
        },
        True,
        f"http://127.0.0.1:{loop}",
    )
    door["http"]["routers"]["gateway-bench"] = {
        "rule": f"PathPrefix(`{prefix}/`)",
        "entryPoints": ["web"],
        "middlewares": ["hop-check", "hop-strip"],
        "service": "gateway-bench",
    }
    door["http"]["middlewares"]["hop-check"] = {"basicAuth": shard_check}
    door["http"]["middlewares"]["hop-strip"] = {"stripPrefix": {"prefixes": [prefix]}}
    door["http"]["services"]["gateway-bench"] = {
        "loadBalancer": {
            "servers": [{"url": f"https://127.0.0.1:{mtls_hop}"}],
            "serversTransport": "gateway-bench",
        }
    }
    door["http"]["serversTransports"] = {
        "gateway-bench": {
            "serverName": server_name,
            "rootCAs": [str(work / "fleet-ca.crt")],
            "certificates": [
                {"certFile": str(work / "client.crt"), "keyFile": str(work / "client.key")}
            ],
            "forwardingTimeouts": {"dialTimeout": "2s"},
        }
    }
    mtls = traefik(found.traefik, work, "mtls", door, True, {"web": loop})
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    ports = {"tls+auth": secure, "sharded": sharded, "mtls": mtls}

    def connect(which: str) -> http.client.HTTPConnection:
        if which == "plain":
            return http.client.HTTPConnection("127.0.0.1", plain, timeout=10)
        return http.client.HTTPSConnection("127.0.0.1", ports[which], timeout=10, context=context)

    secured = {"Authorization": f"Bearer {KEY}"}
    headers = {"plain": {}, "tls+auth": secured, "sharded": secured, "mtls": secured}
    time.sleep(2)
    for which in headers:  # wait for both, and warm them up
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = connect(which)
                conn.request("POST", "/v1/chat/completions", BODY, headers[which])
                got = conn.getresponse()
                got.read()
                if got.status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                print(
                    f"{which}: no 200 answer ({locals().get('got') and got.status})",
                    file=sys.stderr,
                )
                return 1
            time.sleep(0.2)
    latencies: dict[str, list[float]] = {k: [] for k in headers}
    errors: dict[str, int] = {k: 0 for k in headers}
    stop = time.monotonic() + args.seconds

    def client() -> None:
        conns = {k: connect(k) for k in headers}
        while time.monotonic() < stop:
            for which, conn in conns.items():
                started = time.perf_counter()
                try:
                    conn.request("POST", "/v1/chat/completions", BODY, headers[which])
                    resp = conn.getresponse()
                    resp.read()
                    ok = resp.status == 200
                except OSError:
                    ok = False
                    conns[which] = conn = connect(which)
                if ok:
                    latencies[which].append((time.perf_counter() - started) * 1000)
                else:
                    errors[which] += 1

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def pct(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else float("nan")

    report = {
        k: {
            "requests": len(v),
            "errors": errors[k],
            "p50_ms": round(pct(v, 50), 2),
            "p99_ms": round(pct(v, 99), 2),
        }
        for k, v in latencies.items()
    }
    report["added"] = {
        "p50_ms": round(report["tls+auth"]["p50_ms"] - report["plain"]["p50_ms"], 2),
        "p99_ms": round(report["tls+auth"]["p99_ms"] - report["plain"]["p99_ms"], 2),
    }
    report["second_pass_added"] = {
        "p50_ms": round(report["sharded"]["p50_ms"] - report["tls+auth"]["p50_ms"], 2),
        "p99_ms": round(report["sharded"]["p99_ms"] - report["tls+auth"]["p99_ms"], 2),
    }
    report["mtls_added"] = {
        "p50_ms": round(report["mtls"]["p50_ms"] - report["tls+auth"]["p50_ms"], 2),
        "p99_ms": round(report["mtls"]["p99_ms"] - report["tls+auth"]["p99_ms"], 2),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    for process in PROCESSES:
        process.terminate()
        process.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
