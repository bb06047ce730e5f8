"""Benchmark: `modelplane plan DIR --output json` as a whole process on a fleet written as YAML.

Run: .venv/bin/python bench/load_scale.py [--clusters N] [--deployments N] [--replicas N]
Writes the plan_scale fleet (1,000 clusters x 4 pools, 500 deployments by default) as
spec files (one per cluster, one per deployment namespace), then times a fresh
`python -m modelplane plan DIR --output json` (interpreter start, imports, YAML loading,
validation, scheduling, JSON) and, in process, the loader alone. Wall time and the
child's CPU time (user+sys) are both reported: on a shared machine CPU time is the
steadier figure (wall time there mostly measures waiting for a core).

Then, in fresh processes that take the CLI's path (its GC thresholds, the pure verbs
only), the CPU time of each phase, best of --runs: interpreter start, imports,
`load_fleet`, the rest of `plan_fleet` but `schedule` (the lock), `schedule`, and the
JSON output (`as_json` and its text).
"""

from __future__ import annotations

import json
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
from plan_scale import build_fleet, fleet_arguments  # noqa: E402

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


PHASES = r"""
import gc, json, sys, time

start = time.process_time()  # the interpreter's own start-up
from modelplane import cli

gc.set_threshold(*cli.GC_THRESHOLDS)
gc.disable()  # as cli.main does for the pure verbs
cli.pure_only = True
from modelplane.cli import commands  # noqa: F401  (what `modelplane plan` imports)
from modelplane.cli.output import dump_json
import modelplane.planning as planning

imported = time.process_time()
spent = {"load_fleet": 0.0, "schedule": 0.0}


def timed(name, fn):
    def run(*args, **kwargs):
        t = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.process_time() - t

    return run


planning.load_fleet = timed("load_fleet", planning.load_fleet)
planning.schedule = timed("schedule", planning.schedule)
t = time.process_time()
outcome = planning.plan_fleet(sys.argv[1], sys.argv[2])
planned = time.process_time() - t
t = time.process_time()
text = dump_json(outcome.as_json())
output = time.process_time() - t
assert not outcome.errors, outcome.errors[:3]
print(json.dumps({
    "start-up": start,
    "imports": imported - start,
    "load_fleet": spent["load_fleet"],
    "lock and the rest": planned - spent["load_fleet"] - spent["schedule"],
    "schedule": spent["schedule"],
    "JSON output": output,
}))
"""


# The child processes run as a user's would: with the bytecode cache (a machine that sets
# PYTHONDONTWRITEBYTECODE, as this project's build machines do, would otherwise compile
# every modelplane module from source in every run: ~0.15 s), after one warm-up run.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def phases(root: Path, lock: Path, runs: int) -> dict[str, float]:
    """Each phase's CPU time, best of runs fresh processes."""
    best: dict[str, float] = {}
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, "-c", PHASES, str(root), str(lock)],
            capture_output=True,
            text=True,
            check=True,
            env=CHILD_ENV,
        )
        for name, seconds in json.loads(proc.stdout.splitlines()[-1]).items():
            best[name] = min(best.get(name, seconds), seconds)
    return best


def time_processes(
    argv: list[str], runs: int, exits: tuple[int, ...] = (0,)
) -> tuple[list[float], list[float], str]:
    """Wall and CPU (user+sys) seconds of ``runs`` fresh processes of ``argv`` (each must exit
    with one of ``exits``), and the last one's output."""
    walls, cpus, out = [], [], ""
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=CHILD_ENV)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        assert proc.returncode in exits, proc.stderr[-2000:]
        out = proc.stdout
    return walls, cpus, out


def main() -> None:
    args = fleet_arguments(__doc__).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fleet"
        root.mkdir()
        size = write_fleet(root, args.clusters, args.deployments, args.replicas)
        t0 = time.perf_counter()
        loaded = load_fleet(root)
        load = time.perf_counter() - t0
        assert loaded.ok, loaded.errors[:5]
        subprocess.run(  # warm-up: writes the bytecode cache
            [sys.executable, "-m", "modelplane", "validate", str(root), "--output", "json"],
            capture_output=True,
            env=CHILD_ENV,
            check=False,
        )
        lock = str(Path(tmp) / "lock.yaml")
        argv = [sys.executable, "-m", "modelplane", "plan", str(root), "-o", "json", "--lock", lock]
        walls, cpus, _ = time_processes(argv, args.runs)
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
        best = phases(root, Path(tmp) / "lock.yaml", args.runs)
        print(f"phases, CPU time, best of {args.runs} processes each:")
        for name, seconds in best.items():
            print(f"  {name:<18} {seconds:6.2f} s")
        print(f"  {'all but schedule':<18} {sum(best.values()) - best['schedule']:6.2f} s")


if __name__ == "__main__":
    main()
