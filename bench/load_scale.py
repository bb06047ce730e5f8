"""Benchmark: `modelplane plan DIR --output json` as a whole process on a fleet written as YAML.

Run: .venv/bin/python bench/load_scale.py [--clusters N] [--deployments N] [--replicas N]
Writes the plan_scale fleet (1,000 clusters x 4 pools, 500 deployments by default) as
spec files (one per cluster, one per deployment namespace), then times a fresh
`python -m modelplane plan DIR --output json` (interpreter start, imports, YAML loading,
validation, scheduling, JSON) and, in process, the loader alone. Wall time and the
child's CPU time (user+sys) are both reported: on a shared machine CPU time is the
steadier figure (wall time there mostly measures waiting for a core).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_scale import build_fleet  # noqa: E402

from modelplane.api.loader import load_fleet  # noqa: E402


def write_fleet(root: Path, clusters: int, deployments: int, replicas: int) -> int:
    fleet = build_fleet(clusters, deployments, replicas)

    def doc(model) -> dict:
        return model.model_dump(mode="json", by_alias=True, exclude_unset=True)

    (root / "classes.yaml").write_text(
        yaml.safe_dump_all([doc(m) for m in fleet.classes.values()], sort_keys=False)
    )
    (root / "clusters").mkdir()
    for name, m in fleet.clusters.items():
        (root / "clusters" / f"{name}.yaml").write_text(yaml.safe_dump(doc(m), sort_keys=False))
    by_ns: dict[str, list[dict]] = defaultdict(list)
    for m in fleet.deployments.values():
        by_ns[m.metadata.namespace].append(doc(m))
    for ns, docs in by_ns.items():
        (root / f"deployments-{ns}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return sum(p.stat().st_size for p in root.rglob("*.yaml"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--deployments", type=int, default=500)
    parser.add_argument("--replicas", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fleet"
        root.mkdir()
        size = write_fleet(root, args.clusters, args.deployments, args.replicas)
        t0 = time.perf_counter()
        loaded = load_fleet(root)
        load = time.perf_counter() - t0
        assert loaded.ok, loaded.errors[:5]
        walls, cpus = [], []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "modelplane",
                    "plan",
                    str(root),
                    "--output",
                    "json",
                    "--lock",
                    str(Path(tmp) / "lock.yaml"),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            assert proc.returncode == 0, proc.stderr[-2000:]
        print(
            f"fleet: {args.clusters} clusters, {args.deployments} deployments, "
            f"{size / 2**20:.1f} MiB of YAML"
        )
        print(f"load_fleet (in process): {load:.2f} s")
        print(
            f"plan --output json (whole process): best {min(walls):.2f} s, "
            f"runs {', '.join(f'{w:.2f}' for w in walls)}"
        )
        print(
            f"plan --output json (whole process), CPU time (user+sys): best {min(cpus):.2f} s, "
            f"runs {', '.join(f'{c:.2f}' for c in cpus)}; load average "
            f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}"
        )


if __name__ == "__main__":
    main()
