"""Where an engine run's CPU goes, by process (issue 32): the cores a `modelplane up` keeps
busy, which is what the test suite and a busy reconcile service pay for (on 2 cores, two
runs side by side each take twice as long).

Runs `modelplane up` on a fresh copy of specs/local (the local fleet: render only, no
cluster, so nothing else is measured): the first `up` (3 stacks created), then forced
no-ops (`--all`: the engine runs each stack and finds nothing to change), of the whole
fleet and of each stack alone. While each command runs, every process below it is read
from /proc every 20 ms; its user+system CPU is summed per kind: the `modelplane` process
(the driver), the `pulumi` CLI processes (engine runs and the other calls), the stack
programs (Python), the language hosts, the Kubernetes provider. CLI processes are also
counted per verb from `MODELPLANE_ENGINE_LOG`.

    .venv/bin/python bench/engine_cpu.py [--repeat 3] [--json out.json]

Prints one table (medians over the repeats). Linux only (/proc). A process that lives
less than 20 ms between two reads is missed; the short ones here live longer.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCAL = ROOT / "specs" / "local"
KINDS = ("driver", "pulumi CLI", "stack program", "language host", "provider", "other")
TICK = os.sysconf("SC_CLK_TCK")


def kind_of(argv: list[str]) -> str:
    exe = os.path.basename(argv[0]) if argv else ""
    text = " ".join(argv)
    if exe == "pulumi":
        return "pulumi CLI"
    if exe.startswith("pulumi-resource-"):
        return "provider"
    if exe.startswith("pulumi-language-"):
        return "language host"
    if exe.startswith("python"):
        if "-m modelplane" in text:
            return "driver"
        if "pulumi-language-python-exec" in text:
            return "stack program"
    return "other"


def _read(pid: int) -> tuple[int, float, list[str]] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK  # utime + stime, not the children's
    return int(fields[1]), cpu, [a.decode(errors="replace") for a in argv if a]


def measure(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``argv``; CPU seconds per process kind, the wall time and the CLI calls."""
    calls = Path(env["MODELPLANE_ENGINE_LOG"])
    calls.unlink(missing_ok=True)
    started = time.monotonic()
    root = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: dict[int, tuple[float, str]] = {}
    while root.poll() is None:
        table = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (read := _read(int(entry))) is not None:
                table[int(entry)] = read
        for pid, (_ppid, cpu, args) in table.items():
            ancestor = pid
            while ancestor not in (0, 1, root.pid) and ancestor in table:
                ancestor = table[ancestor][0]
            if ancestor == root.pid:
                old = seen.get(pid)
                # An exited process not yet reaped has no command line: keep its kind.
                kind = kind_of(args) if args or old is None else old[1]
                seen[pid] = (max(cpu, old[0] if old else 0.0), kind)
        time.sleep(0.02)
    wall = time.monotonic() - started
    if root.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{root.stderr.read().decode()[-2000:]}")
    cpu: dict[str, float] = collections.defaultdict(float)
    for value, kind in seen.values():
        cpu[kind] += value
    verbs = collections.Counter(
        json.loads(line)["verb"] for line in calls.read_text().splitlines() if line.strip()
    )
    return {"wall": wall, "cpu": dict(cpu), "calls": dict(verbs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    scenarios: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="engine-cpu-") as tmp:
            fleet = Path(tmp) / "local"
            shutil.copytree(
                LOCAL,
                fleet,
                ignore=shutil.ignore_patterns(".modelplane", "rendered", "Pulumi.*.yaml"),
            )
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")},
                "PULUMI_CONFIG_PASSPHRASE": "bench",
                "PULUMI_HOME": str(Path(tmp) / "pulumi-home"),
                "KUBECONFIG": "",
                "MODELPLANE_ENGINE_LOG": str(Path(tmp) / "calls.jsonl"),
            }
            up = [sys.executable, "-m", "modelplane", "up", str(fleet), "--yes"]
            scenarios["first up (3 stacks created)"].append(measure(up, env))
            scenarios["forced no-op of the fleet (3 engine runs)"].append(
                measure([*up, "--all"], env)
            )
            for stack in ("cluster-local", "deploy-demo-qwen", "gateway"):
                scenarios[f"forced no-op of {stack}"].append(
                    measure([*up, "--all", "-s", stack], env)
                )
    rows = {}
    print(f"| `modelplane up` on specs/local | wall | cpu | {' | '.join(KINDS)} | CLI calls |")
    print("| --- " * (len(KINDS) + 4) + "|")
    for name, runs in scenarios.items():
        med = {k: statistics.median(r["cpu"].get(k, 0.0) for r in runs) for k in KINDS}
        total = statistics.median(sum(r["cpu"].values()) for r in runs)
        wall = statistics.median(r["wall"] for r in runs)
        verbs = runs[-1]["calls"]
        listed = ", ".join(f"{v} {n}" for v, n in sorted(verbs.items()))
        rows[name] = {"wall": wall, "cpu": total, "byKind": med, "calls": verbs}
        cells = " | ".join(f"{med[k]:.2f}" for k in KINDS)
        print(f"| {name} | {wall:.2f} s | {total:.2f} s | {cells} | {listed} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
