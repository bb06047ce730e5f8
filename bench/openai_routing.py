"""Benchmark: what routing by model name adds, and the hung-backend answer, on the dev fleet.

Starts a 3-cluster dev fleet (specs/dev's pools), deploys `qwen` x2 behind `demo/chat`
(`spec.models: [qwen]`) and a stand-in that waits 60 s for its first token behind
`demo/sleepy` (`models: [sleepy]`, `timeouts.firstByte: 2s`), then:

1. with `--clients` clients, `--requests` chat completions each, alternating between the
   service's path URL (`/demo/chat/v1/chat/completions`) and the base URL by model name
   (`/v1/chat/completions`, `"model": "qwen"`): p50/p90/p99 of both and their difference,
   the second pass through the front door and the router included;
2. `--hung` requests to `sleepy`: the status and time of each answer (504 expected within
   the 2 s first-byte budget), none left without an answer.

Run (needs root and the engine; take the heavy-test lock on a shared machine):
`flock /tmp/modelplane-heavy.lock python bench/openai_routing.py --clients 4 --requests 250`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPU = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("16Gi")) >= 0'


def deployment(name: str, replicas: int, env: dict[str, str]) -> dict[str, Any]:
    engine = {
        "name": "engine",
        "image": "vllm/vllm-openai:v0.11.0",
        "args": ["--model=Qwen/Qwen2.5-0.5B-Instruct", "--port=8000"],
        "env": [{"name": k, "value": v} for k, v in env.items()],
    }
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {
            "replicas": replicas,
            "nodeSelector": {"devices": [{"name": "gpu", "selectors": [{"cel": GPU}]}]},
            "workers": {
                "topology": {"tensor": 1},
                "resources": {"cpu": "1", "memory": "2Gi"},
                "template": {"spec": {"containers": [engine]}},
            },
        },
    }


def service(name: str, deployment: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {
            "endpoints": [{"selector": {"matchLabels": {"modelplane.ai/deployment": deployment}}}],
            **spec,
        },
    }


def post(url: str, key: str, model: str, timeout: float = 30) -> tuple[int, float]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "x"}]}).encode()
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", f"Bearer {key}")
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
            return resp.status, time.perf_counter() - started
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code, time.perf_counter() - started
    except OSError:
        return 0, time.perf_counter() - started


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50": round(cuts[49] * 1000, 2),
        "p90": round(cuts[89] * 1000, 2),
        "p99": round(cuts[98] * 1000, 2),
    }


def measure(base: str, path_url: str, key: str, clients: int, requests: int) -> dict[str, Any]:
    by_path: list[float] = []
    by_model: list[float] = []
    failed: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        for i in range(requests):
            via_model = i % 2 == 1
            url = base + "chat/completions" if via_model else path_url + "v1/chat/completions"
            status, took = post(url, key, "qwen")
            with lock:
                if status != 200:
                    failed.append(status)
                (by_model if via_model else by_path).append(took)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    path_p, model_p = percentiles(by_path), percentiles(by_model)
    return {
        "clients": clients,
        "requests": len(by_path) + len(by_model),
        "failed": len(failed),
        "byPathMs": path_p,
        "byModelMs": model_p,
        "addedMs": {k: round(model_p[k] - path_p[k], 2) for k in path_p},
    }


def hung(base: str, key: str, n: int) -> dict[str, Any]:
    answers = [post(base + "chat/completions", key, "sleepy", timeout=60) for _ in range(n)]
    return {
        "requests": n,
        "statuses": sorted({s for s, _ in answers}),
        "unanswered": sum(1 for s, _ in answers if s == 0),
        "secondsMax": round(max(t for _, t in answers), 2),
        "secondsMin": round(min(t for _, t in answers), 2),
    }


def main() -> int:
    from bench.devfleet_common import dev_caller_key, dev_fleet_with_specs
    from modelplane.driver.fleet import Fleet

    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=250, help="per client")
    parser.add_argument("--hung", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    docs = [
        deployment("qwen", 2, {}),
        deployment("sleepy", 1, {"MODELPLANE_STANDIN_FIRST_TOKEN_DELAY": "60"}),
        service("chat", "qwen", models=["qwen"]),
        service("sleepy", "sleepy", models=["sleepy"], timeouts={"firstByte": "2s"}),
    ]
    with (
        tempfile.TemporaryDirectory() as tmp,
        dev_fleet_with_specs(Path(tmp), "fleet") as (_, specs, env),
    ):
        (specs / "models.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
        fleet = Fleet.load(specs, env=env)
        run = fleet.up(fleet.plan())
        if not run.ok:
            print(json.dumps([(r.stack, r.error) for r in run.results if not r.ok]))
            return 1
        gateway = Fleet.load(specs, env=env).status().gateway
        base, path_url = gateway["openai"], gateway["services"]["demo/chat"]
        key = dev_caller_key() or ""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (
            post(base + "chat/completions", key, "qwen")[0] == 200
            and post(path_url + "v1/chat/completions", key, "qwen")[0] == 200
        ):
            time.sleep(1)
        measure(base, path_url, key, args.clients, 10)  # warm the connections
        result = {
            "routing": measure(base, path_url, key, args.clients, args.requests),
            "hung": hung(base, key, args.hung),
        }
        print(json.dumps(result, indent=2), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
