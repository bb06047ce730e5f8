"""Load through the fleet's front door on the dev fleet, against calling the same replicas directly.

Starts a 3-cluster dev fleet, deploys specs/dev, then from inside the fleet's network namespace
(so the host bridge is not measured) runs C concurrent keep-alive clients for T seconds. Each
client alternates between the two paths, so both see the same machine at the same moment (on a
shared 2-core machine, two runs one after the other would compare two different machines):

1. direct: one of the ModelService's backend pods (pod IP:8000), drawn with the service's
   weights -- the same replicas the front door spreads over;
2. front door: front-door Traefik -> ModelService route -> the replica's cluster gateway
   (another Traefik, or the Service on the gateway's own cluster) -> the stand-in.

It runs twice: at the issue's 200 clients (the machine saturates: latency is mostly queueing)
and at a light load (the hops' own cost). Reports throughput, p50/p99 of each path, the p50/p99
the two gateway hops add, and the errors. Goal (issue 16): p99 added < 5 ms on loopback, zero
errors. Needs root and the engine.
Run: `python bench/devfleet_load.py [--clients 200] [--light 8] [--seconds 30]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
PATHS = ("direct", "front door")
# specs/dev lets only callers with a key in: the front-door path sends caller `dev`'s key
# (written into the dev fleet's state by `dev-fleet up`); set in the child before the loads.
FRONT_HEADERS = {"Content-Type": "application/json"}


class Sample:
    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = {p: [] for p in PATHS}
        self.errors: dict[str, list[str]] = {p: [] for p in PATHS}


async def _client(
    index: int,
    direct: list[tuple[str, float]],
    front: str,
    stop: float,
    sample: Sample,
) -> None:
    import aiohttp

    rng = random.Random(index)
    urls = [u for u, _ in direct]
    weights = [w for _, w in direct]
    timeout = aiohttp.ClientTimeout(total=10)
    turn = index % 2  # half the clients start with each path
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < stop:
            path = PATHS[turn]
            turn ^= 1
            url = rng.choices(urls, weights)[0] if path == "direct" else front
            started = time.perf_counter()
            try:
                headers = (
                    FRONT_HEADERS if path == "front door" else {"Content-Type": "application/json"}
                )
                async with session.post(url, data=BODY, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        sample.errors[path].append(f"{resp.status} {url}")
                        continue
            except (TimeoutError, aiohttp.ClientError) as exc:
                sample.errors[path].append(f"{type(exc).__name__} {url}")
                continue
            sample.latencies[path].append(time.perf_counter() - started)


async def _load(
    direct: list[tuple[str, float]], front: str, clients: int, seconds: float
) -> tuple[Sample, float]:
    sample = Sample()
    started = time.monotonic()
    stop = started + seconds
    await asyncio.gather(*(_client(i, direct, front, stop, sample) for i in range(clients)))
    return sample, time.monotonic() - started


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _summary(sample: Sample, took: float) -> dict[str, dict[str, float | int | None]]:
    out: dict[str, dict[str, float | int | None]] = {}
    for path in PATHS:
        lat = sample.latencies[path]
        out[path] = {
            "requests": len(lat),
            "errors": len(sample.errors[path]),
            "errorKinds": dict(Counter(sample.errors[path]).most_common(5)),
            "rps": len(lat) / took,
            "p50": _pct(lat, 0.50) if lat else None,
            "p99": _pct(lat, 0.99) if lat else None,
            "mean": statistics.fmean(lat) * 1000 if lat else None,
        }
    return out


def measure_in_namespace(
    ns: str, direct: list[tuple[str, float]], front: str, loads: list[int], seconds: float
) -> dict:
    """Fork a child that enters the namespace and runs the loads; return its numbers."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        from bench.devfleet_common import dev_caller_key
        from modelplane.devfleet import netns

        netns.enter(ns)
        FRONT_HEADERS["Authorization"] = f"Bearer {dev_caller_key()}"
        asyncio.run(_load(direct, front, 20, 3))  # warm-up: connections, Traefik's routers
        result = {str(c): _summary(*asyncio.run(_load(direct, front, c, seconds))) for c in loads}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


def service_backends(cluster: str, rest, deployments: dict[str, float]) -> list[tuple[str, float]]:
    """The serving pods behind the service, weighted as the route spreads them.

    Each deployment's weight is shared evenly by its serving pods (decode pods only for a
    prefill/decode deployment: the route goes to the decode Service), at the port named
    `http` where the pod agent runs the pod's stand-in."""
    from modelplane.devfleet.agent import pod_servers

    backends: list[tuple[str, float]] = []
    for name, weight in deployments.items():
        items = rest.get(
            f"/api/v1/namespaces/demo/pods?labelSelector=modelplane.ai/deployment={name}"
        )["items"]
        servers = [
            server
            for pod in items
            if (pod["metadata"].get("labels") or {}).get("modelplane.ai/role") != "prefill"
            for server in pod_servers(cluster, pod)
        ]
        for server in servers:
            url = f"http://{server.ip}:{server.port}/v1/chat/completions"
            backends.append((url, weight / len(servers)))
    return backends


def main() -> int:
    from bench.devfleet_common import dev_fleet_with_specs
    from modelplane.driver.fleet import Fleet

    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--light", type=int, default=8, help="clients of the light-load run")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        dev_fleet_with_specs(Path(tmp), "dev") as (fleet, specs, env),
    ):
        f = Fleet.load(specs, env=env)
        run = f.up()
        assert all(r.ok for r in run.results), [(r.stack, r.error) for r in run.results]
        url = (f.status().gateway.get("services") or {})["demo/chat"]
        front = url.replace(":80/", "/").rstrip("/")
        host = front.split("//", 1)[1].split("/", 1)[0]
        front = front.replace(host, f"{host}:8000", 1) + "/v1/chat/completions"
        # demo/chat: qwen (weight 3) and mistral-pd (weight 1), over every cluster.
        direct: list[tuple[str, float]] = []
        for cluster in fleet.clusters:
            direct += service_backends(
                cluster.name, cluster.rest(), {"qwen": 3.0, "mistral-pd": 1.0}
            )
        time.sleep(2)
        result = measure_in_namespace(
            fleet.netns, direct, front, [args.clients, args.light], args.seconds
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(f"{len(direct)} backends; clients alternate both paths; inside the fleet's namespace")
    for clients, paths in result.items():
        print(f"{clients} clients x {args.seconds:.0f} s")
        for name, r in paths.items():
            print(
                f"  {name:10} {r['rps']:8.0f} req/s  p50 {r['p50']:.2f} ms  p99 {r['p99']:.2f} ms"
                f"  errors {r['errors']} of {r['requests'] + r['errors']}"
            )
            for kind, count in r["errorKinds"].items():
                print(f"    {count} x {kind}")
        d, g = paths["direct"], paths["front door"]
        print(
            f"  added by the two gateway hops: p50 {g['p50'] - d['p50']:.2f} ms, "
            f"p99 {g['p99'] - d['p99']:.2f} ms (goal p99 < 5 ms)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
