"""Benchmark: `modelplane plan DIR --survive 1 --output json` as a whole process.

Run: .venv/bin/python bench/survive_scale.py [--clusters N] [--deployments N] [--replicas N]
Writes the plan_scale fleet as YAML (bench/load_scale.py), then times fresh processes of
`plan --survive 1` (interpreter, imports, loading, the plan, every single-cluster loss
re-planned by failover's rules, headroom, JSON): wall and CPU (user+sys), best of --runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_scale import CHILD_ENV, write_fleet  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--deployments", type=int, default=500)
    parser.add_argument("--replicas", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--losses", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fleet"
        root.mkdir()
        write_fleet(root, args.clusters, args.deployments, args.replicas)
        argv = [sys.executable, "-m", "modelplane", "plan", str(root), "--output", "json",
                "--lock", str(Path(tmp) / "lock.yaml"), "--survive", str(args.losses)]  # fmt: skip
        walls, cpus = [], []
        out = None
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, text=True, env=CHILD_ENV)
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            assert proc.returncode in (0, 1), proc.stderr[-2000:]
            out = json.loads(proc.stdout)["survive"]
        assert out is not None
        print(
            f"fleet: {args.clusters} clusters, {args.deployments} deployments, "
            f"{args.replicas} replicas wanted; --survive {args.losses}: {out['scenarios']} "
            f"scenarios, {len(out['failing'])} leave a deployment short"
        )
        print(
            f"whole process: wall best {min(walls):.2f} s ({', '.join(f'{w:.2f}' for w in walls)})"
        )
        print(f"whole process: CPU best {min(cpus):.2f} s ({', '.join(f'{c:.2f}' for c in cpus)})")
        print(f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
