"""Benchmark: `modelplane plan DIR --survive 1 --output json` as a whole process.

Run: .venv/bin/python bench/survive_scale.py [--clusters N] [--deployments N] [--replicas N]
Writes the plan_scale fleet as YAML (bench/load_scale.py), then times fresh processes of
`plan --survive 1` (interpreter, imports, loading, the plan, every single-cluster loss
re-planned by failover's rules, headroom, JSON): wall and CPU (user+sys), best of --runs.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_scale import time_processes, write_fleet  # noqa: E402
from plan_scale import fleet_arguments  # noqa: E402


def main() -> None:
    parser = fleet_arguments(__doc__)
    parser.add_argument("--losses", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fleet"
        root.mkdir()
        write_fleet(root, args.clusters, args.deployments, args.replicas)
        argv = [sys.executable, "-m", "modelplane", "plan", str(root), "--output", "json",
                "--lock", str(Path(tmp) / "lock.yaml"), "--survive", str(args.losses)]  # fmt: skip
        walls, cpus, stdout = time_processes(argv, args.runs, exits=(0, 1))
        out = json.loads(stdout)["survive"]
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
