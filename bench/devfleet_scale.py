"""The dev fleet's resource budget: warm start time of N clusters and their total RSS.

Goals (issue 15): a 3-cluster dev fleet starts in under 20 s with the binaries cached, and 3
clusters with 16 fake nodes each use under 3 GiB RSS in all. Needs root (network namespace).
Run: `python bench/devfleet_scale.py [--clusters 3] [--nodes 16]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CLASS = """apiVersion: modelplane.ai/v1alpha1
kind: InferenceClass
metadata: {name: h100-8x}
spec:
  devices:
  - name: gpu
    driver: gpu.nvidia.com
    deviceClassName: gpu.nvidia.com
    count: 8
    attributes: {productName: {string: NVIDIA H100}}
    capacity: {memory: {value: 80Gi}}
"""


def cluster(index: int, nodes: int) -> str:
    # one system node is added by the dev fleet; the pool takes the rest
    return f"""---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata: {{name: dev-{index}}}
spec:
  cluster:
    source: Existing
    existing: {{secretRef: {{name: "file:${{MODELPLANE_DEV_FLEET_STATE}}/dev-{index}/kubeconfig"}}}}
  servingStack: {{install: false, gateway: {{className: modelplane-dev}}}}
  nodePools:
  - {{name: gpu, className: h100-8x, nodeCount: {nodes - 1}}}
"""


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def main() -> int:
    from modelplane.devfleet import fleet as devfleet
    from modelplane.gobuild.fleet import ensure_fleet_binaries
    from modelplane.gobuild.kube import ensure_kube_binaries

    parser = argparse.ArgumentParser()
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=16, help="nodes per cluster")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds before measuring RSS")
    args = parser.parse_args()
    kube, fleet_bins = ensure_kube_binaries(), ensure_fleet_binaries()
    with tempfile.TemporaryDirectory() as tmp:
        specs = Path(tmp) / "specs"
        specs.mkdir()
        text = CLASS + "".join(cluster(i, args.nodes) for i in range(1, args.clusters + 1))
        (specs / "fleet.yaml").write_text(text)
        state = Path(tmp) / "state"
        started = time.monotonic()
        fleet = devfleet.up(
            state, clusters=args.clusters, specs=specs, kube=kube, fleet_binaries=fleet_bins
        )
        start_seconds = time.monotonic() - started
        try:
            time.sleep(args.settle)  # nodes Ready, controllers synced
            report = devfleet.status(fleet)
            per_process: dict[str, int] = {}
            for process in fleet.all_processes():
                per_process[process.name] = per_process.get(process.name, 0) + rss_bytes(
                    process.pid
                )
            total = sum(per_process.values())
        finally:
            devfleet.down(state)
    nodes = sum(c["nodes"] for c in report["clusters"])
    ready = sum(c["nodesReady"] for c in report["clusters"])
    print(f"clusters: {args.clusters}, nodes ready: {ready}/{nodes}")
    print(f"warm start: {start_seconds:.1f} s (goal < 20 s)")
    print(f"total RSS: {total / 2**30:.2f} GiB (goal < 3 GiB)")
    for name, size in sorted(per_process.items(), key=lambda kv: -kv[1]):
        print(f"  {name:26} {size / 2**20:8.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
