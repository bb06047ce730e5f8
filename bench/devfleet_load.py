"""Load through the fleet's front door on the dev fleet, against calling a stand-in directly.

Starts a 3-cluster dev fleet, deploys specs/dev, then from inside the fleet's network namespace
(so the host bridge is not measured) runs C concurrent keep-alive clients for T seconds:

1. directly against one qwen pod's stand-in (pod IP:8000) -- the baseline;
2. through the front door: front-door Traefik -> ModelService route -> the replica's cluster
   gateway (another Traefik, or the Service on the gateway's own cluster) -> the stand-in.

Reports throughput, p50/p99 latency of each and the p50/p99 the two gateway hops add, and the
errors. Goal (issue 16): p99 added < 5 ms on loopback, zero errors. Needs root and the engine.
Run: `python bench/devfleet_load.py [--clients 200] [--seconds 30]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})


async def _client(url: str, stop: float, latencies: list[float], errors: list[str]) -> None:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < stop:
            started = time.perf_counter()
            try:
                async with session.post(
                    url, data=BODY, headers={"Content-Type": "application/json"}
                ) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors.append(str(resp.status))
                        continue
            except (TimeoutError, aiohttp.ClientError) as exc:
                errors.append(type(exc).__name__)
                continue
            latencies.append(time.perf_counter() - started)


async def _load(url: str, clients: int, seconds: float) -> tuple[list[float], list[str], float]:
    latencies: list[float] = []
    errors: list[str] = []
    started = time.monotonic()
    stop = started + seconds
    await asyncio.gather(*(_client(url, stop, latencies, errors) for _ in range(clients)))
    return latencies, errors, time.monotonic() - started


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def measure_in_namespace(ns: str, direct: str, front: str, clients: int, seconds: float) -> dict:
    """Fork a child that enters the namespace and runs both loads; return its numbers."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        from modelplane.devfleet import netns

        netns.enter(ns)
        result = {}
        for name, url in (("direct", direct), ("front door", front)):
            asyncio.run(_load(url, 20, 3))  # warm-up
            lat, err, took = asyncio.run(_load(url, clients, seconds))
            result[name] = {
                "requests": len(lat),
                "errors": len(err),
                "rps": len(lat) / took,
                "p50": _pct(lat, 0.50) if lat else None,
                "p99": _pct(lat, 0.99) if lat else None,
                "mean": statistics.fmean(lat) * 1000 if lat else None,
            }
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


def main() -> int:
    from modelplane.devfleet import fleet as devfleet
    from modelplane.driver.fleet import Fleet

    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        os.environ[devfleet.STATE_ENV] = str(state)
        fleet = devfleet.up(state, clusters=3, specs=ROOT / "specs" / "dev")
        try:
            specs = Path(tmp) / "dev"
            shutil.copytree(
                ROOT / "specs" / "dev",
                specs,
                ignore=shutil.ignore_patterns(".modelplane", "*.lock.yaml"),
            )
            env = {
                **os.environ,
                "PULUMI_CONFIG_PASSPHRASE": "bench",
                "KUBECONFIG": "",
                "PULUMI_HOME": str(Path(tmp) / "pulumi-home"),
            }
            f = Fleet.load(specs, env=env)
            run = f.up()
            assert all(r.ok for r in run.results), [(r.stack, r.error) for r in run.results]
            url = (f.status().gateway.get("services") or {})["demo/chat"]
            front = url.replace(":80/", "/").rstrip("/")
            host = front.split("//", 1)[1].split("/", 1)[0]
            front = front.replace(host, f"{host}:8000", 1) + "/v1/chat/completions"
            rest = fleet.cluster("dev-1").rest()
            pods = rest.get(
                "/api/v1/namespaces/demo/pods?labelSelector=modelplane.ai/deployment=qwen"
            )
            ip = pods["items"][0]["status"]["podIP"]
            direct = f"http://{ip}:8000/v1/chat/completions"
            time.sleep(2)
            result = measure_in_namespace(fleet.netns, direct, front, args.clients, args.seconds)
        finally:
            devfleet.down(state)
    d, g = result["direct"], result["front door"]
    print(f"{args.clients} clients x {args.seconds:.0f} s, inside the fleet's network namespace")
    for name, r in result.items():
        print(
            f"  {name:10} {r['rps']:8.0f} req/s  p50 {r['p50']:.2f} ms  p99 {r['p99']:.2f} ms"
            f"  errors {r['errors']} of {r['requests'] + r['errors']}"
        )
    print(
        f"  added by the two gateway hops: p50 {g['p50'] - d['p50']:.2f} ms, "
        f"p99 {g['p99'] - d['p99']:.2f} ms (goal p99 < 5 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
