"""Benchmark: a fleet rollout on the dev fleet against the sum of the replicas' load times, and
the failed requests with and without it.

Starts a 3-cluster dev fleet (specs/dev's pools), deploys `qwen` with N replicas (1 GPU, 1 CPU,
2Gi each; the stand-ins load their model for `--load-time` seconds) behind `demo/chat`, then,
with `--clients` clients sending chat completions back to back through the service:

1. changes the image with the rollout (spec.rollout defaults: one replica at a time):
   `up`'s duration, the rollout's own seconds and steps, failed requests;
2. changes it again all at once (`strategy="AllAtOnce"`): failed requests until every answer
   comes from the new image.

Run (needs root and the engine; take the heavy-test lock on a shared machine):
`flock /tmp/modelplane-heavy.lock python bench/rollout_scale.py --replicas 3 10 30`.
The dev fleet's pools bound N (specs/dev: 4 H100x8 nodes and 7 L4 nodes); a size that does not
fit is reported short and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPU = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("16Gi")) >= 0'


def models(replicas: int, image: str, load_time: float) -> str:
    engine = {
        "name": "engine",
        "image": image,
        "args": ["--model=Qwen/Qwen2.5-7B-Instruct", "--port=8000"],
        "env": [{"name": "MODELPLANE_STANDIN_LOAD_TIME", "value": str(load_time)}],
    }
    dep = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "qwen", "namespace": "demo"},
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
    svc = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": "chat", "namespace": "demo"},
        "spec": {
            "endpoints": [{"selector": {"matchLabels": {"modelplane.ai/deployment": "qwen"}}}]
        },
    }
    return yaml.safe_dump_all([dep, svc], sort_keys=False)


def _key() -> dict[str, str]:
    """Caller `dev`'s key: specs/dev lets only callers with a key in (the dev fleet wrote it)."""
    from bench.devfleet_common import dev_caller_key

    key = dev_caller_key()
    return {"Authorization": f"Bearer {key}"} if key else {}


def chat(url: str) -> tuple[int, str]:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
    req = urllib.request.Request(
        url + "v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", **_key()},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
            return resp.status, resp.headers.get("x-modelplane-revision", "")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


class Clients:
    def __init__(self, url: str, n: int) -> None:
        self.url, self.results = url, []  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.results.append(chat(self.url))

    def __enter__(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


def one_size(specs: Path, env: dict[str, str], n: int, load: float, clients: int) -> dict:
    from modelplane.driver.fleet import Fleet

    (specs / "models.yaml").write_text(models(n, f"vllm/vllm-openai:v1-{n}", load))
    f = Fleet.load(specs, env=env)
    plan = f.plan()
    if plan.short:
        return {"replicas": n, "short": True}
    run = f.up(plan, strategy="AllAtOnce")  # the starting point, not measured
    if not run.ok:  # reported, and the next size still runs
        return {"replicas": n, "error": [(r.stack, r.error) for r in run.results if not r.ok]}
    url = (Fleet.load(specs, env=env).status().gateway.get("services") or {})["demo/chat"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and chat(url)[0] != 200:
        time.sleep(1)
    out: dict[str, Any] = {"replicas": n, "loadTime": load, "sumOfLoadTimes": n * load}
    steps = (("Rolling", f"vllm/vllm-openai:v2-{n}"), ("AllAtOnce", f"vllm/vllm-openai:v3-{n}"))
    for strategy, image in steps:
        (specs / "models.yaml").write_text(models(n, image, load))
        with Clients(url, clients) as c:
            started = time.monotonic()
            run = Fleet.load(specs, env=env).up(strategy=strategy)
            took = time.monotonic() - started
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not all(
                chat(url) == (200, image) for _ in range(10)
            ):
                time.sleep(0.5)
        failed = Counter(s for s, _ in c.results if s != 200)
        out[strategy] = {
            "upSeconds": round(took, 1),
            "rollout": run.rollouts[0] if run.rollouts else None,
            "secondsPerStep": (
                round(float(run.rollouts[0]["seconds"]) / n, 1) if run.rollouts else None
            ),
            "requests": len(c.results),
            "failed": sum(failed.values()),
            "statuses": dict(failed),
        }
    return out


def main() -> int:
    from bench.devfleet_common import dev_fleet_with_specs

    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, nargs="+", default=[3])
    parser.add_argument("--load-time", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        dev_fleet_with_specs(Path(tmp), "fleet") as (_, specs, env),
    ):
        for n in args.replicas:
            result = one_size(specs, env, n, args.load_time, args.clients)
            results.append(result)
            print(json.dumps(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
