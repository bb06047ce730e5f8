"""Render a ModelDeployment with 100 replicas under the mock runtime and report the time.

Target: under 3 s for the deployment's stack (600+ resources). Run: `python bench/render_scale.py`.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

REPLICAS = 100
TARGET_SECONDS = 3.0

FLEET = f"""
apiVersion: modelplane.ai/v1alpha1
kind: InferenceClass
metadata: {{name: l4}}
spec:
  devices:
  - name: gpu
    driver: gpu.nvidia.com
    deviceClassName: gpu.nvidia.com
    count: 1
    capacity: {{memory: {{value: 24Gi}}}}
---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata: {{name: big, labels: {{modelplane.ai/region: bench}}}}
spec:
  cluster: {{source: Existing, existing: {{renderTo: rendered}}}}
  nodePools:
  - {{name: gpu, className: l4, nodeCount: {REPLICAS * 2}}}
---
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata: {{name: bench, namespace: bench}}
spec:
  replicas: {REPLICAS}
  nodeSelector:
    devices:
    - name: gpu
      selectors:
      - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("16Gi")) >= 0
  workers:
    topology: {{tensor: 1}}
    resources: {{cpu: "4", memory: 16Gi}}
    template:
      spec:
        shmSize: 2Gi
        containers:
        - {{name: engine, image: vllm/vllm-openai:v0.11.0, args: ["--model=Qwen/Qwen2.5-0.5B"]}}
"""


def main() -> int:
    from modelplane.render import render_fleet, render_stack  # noqa: F401  (import cost apart)

    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet"
        fleet.mkdir()
        (fleet / "fleet.yaml").write_text(FLEET)
        start = time.perf_counter()
        result = render_fleet(fleet, Path(tmp) / "out", stacks=["deploy-bench-bench"])
        total = time.perf_counter() - start
        deploy = next(s for s in result.stacks if s.name == "deploy-bench-bench")
        # Time the deployment's stack alone (the cluster stack is an upstream input).
        from modelplane.render.runner import StackOutputs

        produced = {
            "cluster-big": StackOutputs(
                {"renderTo": str(fleet / "rendered"), "gatewayAddress": "gw.bench"}, frozenset()
            )
        }
        start = time.perf_counter()
        run = render_stack(
            "deploy-bench-bench",
            fleet_dir=fleet,
            lock_path=result.lock_path,
            upstream=produced.get,
        )
        stack_seconds = time.perf_counter() - start
    replicas = sum(1 for r in run.registrations if r.type == "modelplane:deployment:ModelReplica")
    print(
        f"render: {replicas} replicas, {deploy.resources} resources, {len(deploy.manifests)} "
        f"manifests; deployment stack {stack_seconds:.2f} s (target < {TARGET_SECONDS:.0f} s), "
        f"fleet render incl. plan + cluster stack + files {total:.2f} s"
    )
    return 0 if stack_seconds < TARGET_SECONDS else 1


if __name__ == "__main__":
    raise SystemExit(main())
