"""Where an engine run's time goes, per phase, on the dev fleet (issue 32).

Starts the dev fleet (3 clusters, needs root), deploys a copy of specs/dev, then measures:

- **whole process**: `modelplane up` as a user runs it -- a no-op `up` (no stack changed), a
  forced no-op `up` of one deployment stack and of the gateway (`--all -s <stack>`: the
  engine runs and finds nothing to change), and a one-replica change (demo/qwen 3 -> 4 -> 3:
  its deployment stack and the gateway's routes change);
- **per phase** of each engine run (`pulumi up` with `--verbose 7 --logtostderr --logflow`,
  run through the driver in this process): CLI start, language host start, plugin discovery,
  program start and imports, the program until its first resource, stack references,
  provider start and configuration, steps (check, diff, apply, checkpoints), program exit,
  and the CLI's finish (last checkpoint, exit); the program's own times come from
  `MODELPLANE_PROGRAM_PHASES`, the CLI process's from `MODELPLANE_ENGINE_LOG`.

    sudo .venv/bin/python bench/engine_phases.py [--repeat 3] [--json out.json]

Prints one table per scenario (medians over the repeats). The verbose log costs a little
itself; the whole-process rows are measured without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.devfleet_common import dev_fleet_with_specs  # noqa: E402

MODELPLANE = [sys.executable, "-m", "modelplane"]
QWEN = "deploy-demo-qwen"
PHASES = (
    "CLI start",
    "language host start",
    "plugin discovery",
    "program start + imports",
    "program until first resource",
    "stack references",
    "provider start + configure",
    "steps (check, diff, apply, checkpoints)",
    "program exit",
    "CLI finish (checkpoint, exit)",
)


def _log_times(stderr: str) -> list[tuple[float, str]]:
    out = []
    for line in stderr.splitlines():
        try:
            data = json.loads(line)
            stamp = datetime.fromisoformat(data["time"].replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        out.append((stamp, str(data.get("msg", ""))))
    return out


def _first(times: list[tuple[float, str]], *needles: str, after: float = 0.0) -> float | None:
    for stamp, msg in times:
        if stamp >= after and all(n in msg for n in needles):
            return stamp
    return None


def _last(times: list[tuple[float, str]], *needles: str) -> float | None:
    found = [stamp for stamp, msg in times if all(n in msg for n in needles)]
    return found[-1] if found else None


def phases_of(
    stderr: str, started: float, ended: float, program: dict[str, float] | None
) -> dict[str, float]:
    """Seconds per phase of one `pulumi up` process (see the module docstring)."""
    t = _log_times(stderr)
    if not t:
        return {}
    first_log = t[0][0]
    metadata = _first(t, "Waiting for language runtime metadata") or first_log
    grp_start = _first(t, "GetRequiredPackages(") or metadata
    grp_end = _last(t, "GetRequiredPackages(") or grp_start
    run_start = _first(t, "langhost[python].Run(") or grp_end
    # The program's first resource of its own (the SDK registers the Stack before it runs).
    first_resource = next(
        (
            stamp
            for stamp, msg in t
            if stamp >= run_start
            and msg.startswith(("registering resource:", "reading resource:"))
            and "ty=pulumi:pulumi:Stack," not in msg
        ),
        run_start,
    )
    imported = (program or {}).get("imported", first_resource)
    # Stack references: the wall time during which at least one was being read (they are
    # read concurrently since Upstream.prefetch).
    spans = []
    for stamp, msg in t:
        if "reading resource: ty=pulumi:pulumi:StackReference" in msg:
            name = msg.split("name=")[-1].split(",")[0]
            done = _first(t, "resource read successful", "StackReference", name, after=stamp)
            spans.append((stamp, done or stamp))
    refs, covered_to = 0.0, 0.0
    for begin, end in sorted(spans):
        begin = max(begin, covered_to)
        if end > begin:
            refs += end - begin
            covered_to = end
    provider_from = _first(t, "GetPluginPath(resource, kubernetes", after=run_start)
    provider_to = _first(t, "loaded provider", "pulumi:providers:kubernetes")
    provider = (provider_to - provider_from) if provider_from and provider_to else 0.0
    rpcs_done = _first(t, "RPCs successfully completed") or first_resource
    program_exit = _first(t, "Program exited") or rpcs_done
    return {
        "CLI start": first_log - started,
        "language host start": metadata - first_log,
        "plugin discovery": grp_end - grp_start,
        "program start + imports": max(0.0, imported - run_start),
        "program until first resource": max(0.0, first_resource - imported),
        "stack references": refs,
        "provider start + configure": provider,
        "steps (check, diff, apply, checkpoints)": max(
            0.0, rpcs_done - first_resource - refs - provider
        ),
        "program exit": program_exit - rpcs_done,
        "CLI finish (checkpoint, exit)": ended - program_exit,
        "total": ended - started,
    }


def verbose_up(fleet_dir: Path, env: dict[str, str], only: list[str], force: bool) -> dict:
    """One `Fleet.up` in this process with the engine's verbose log; phases per stack."""
    from modelplane.driver import operations as ops
    from modelplane.driver.engine_calls import read_log
    from modelplane.driver.fleet import Fleet

    tmp = Path(tempfile.mkdtemp(prefix="engine-phases-"))
    calls, program = tmp / "calls.jsonl", tmp / "program.jsonl"
    stderrs: dict[str, str] = {}
    options, done = ops.UpOp.options, ops.UpOp.done

    def verbose(self: Any) -> dict[str, Any]:
        return {**options(self), "log_verbosity": 7, "log_to_std_err": True, "log_flow": True}

    def keep(self: Any, stack: Any, outcome: Any, result: Any) -> None:
        stderrs[self.unit.name] = outcome.stderr
        done(self, stack, outcome, result)

    ops.UpOp.options, ops.UpOp.done = verbose, keep  # type: ignore[method-assign]
    saved = {k: os.environ.get(k) for k in ("MODELPLANE_ENGINE_LOG", "MODELPLANE_PROGRAM_PHASES")}
    os.environ["MODELPLANE_PROGRAM_PHASES"] = str(program)
    try:
        fleet = Fleet.load(fleet_dir, env={**env, "MODELPLANE_ENGINE_LOG": str(calls)})
        run = fleet.up(all_stacks=force, only=only or None)
        assert run.ok, [(r.stack, r.error) for r in run.results if not r.ok]
    finally:
        ops.UpOp.options, ops.UpOp.done = options, done  # type: ignore[method-assign]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    programs = {}
    if program.is_file():
        for line in program.read_text().splitlines():
            data = json.loads(line)
            programs[data["stack"]] = data
    out: dict[str, dict[str, float]] = {}
    lines = [json.loads(x) for x in calls.read_text().splitlines()] if calls.is_file() else []
    for call in read_log(calls):
        if call.verb != "up" or call.stack not in stderrs:
            continue
        at = next(x["at"] for x in lines if x["verb"] == "up" and x["stack"] == call.stack)
        out[call.stack] = phases_of(
            stderrs[call.stack], at - call.seconds, at, programs.get(call.stack)
        )
    return out


def whole(fleet_dir: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    """One `modelplane up` process: wall seconds, engine runs and other CLI calls."""
    from modelplane.driver.engine_calls import read_log

    log = Path(tempfile.mkstemp(suffix=".jsonl")[1])
    started = time.monotonic()
    done = subprocess.run(
        [*MODELPLANE, "up", str(fleet_dir), "--yes", *args],
        env={**env, "MODELPLANE_ENGINE_LOG": str(log)},
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"modelplane up {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    calls = read_log(log)
    log.unlink()
    return {
        "seconds": seconds,
        "engineRuns": sum(c.engine_run for c in calls),
        "otherCalls": sum(not c.engine_run for c in calls),
        "engineSeconds": sum(c.seconds for c in calls if c.engine_run),
    }


def set_replicas(fleet_dir: Path, count: int) -> None:
    models = fleet_dir / "models.yaml"
    lines = models.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):  # qwen is the first deployment in specs/dev
        if line.strip().startswith("replicas:"):
            lines[i] = line.split("replicas:")[0] + f"replicas: {count}\n"
            break
    models.write_text("".join(lines))


def median(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for r in rows for k in r}
    return {k: statistics.median(r.get(k, 0.0) for r in rows) for k in keys}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    results: dict[str, Any] = {"whole": {}, "phases": {}}
    with tempfile.TemporaryDirectory(prefix="engine-phases-") as tmp:
        with dev_fleet_with_specs(Path(tmp), "fleet") as (_fleet, specs, env):
            whole(specs, env)  # the first deployment
            runs: dict[str, list[Any]] = {}
            phase_runs: dict[str, list[dict[str, float]]] = {}
            replicas = 3
            for _ in range(args.repeat):
                runs.setdefault("no-op up (nothing changed)", []).append(whole(specs, env))
                runs.setdefault(f"forced no-op up -s {QWEN}", []).append(
                    whole(specs, env, "--all", "-s", QWEN)
                )
                runs.setdefault("forced no-op up -s gateway", []).append(
                    whole(specs, env, "--all", "-s", "gateway")
                )
                replicas = 7 - replicas  # 3 -> 4 -> 3 ...
                set_replicas(specs, replicas)
                runs.setdefault("one replica more or less (qwen)", []).append(whole(specs, env))
                for stack, row in verbose_up(specs, env, [QWEN], True).items():
                    phase_runs.setdefault(f"{stack}: no-op", []).append(row)
                for stack, row in verbose_up(specs, env, ["gateway"], True).items():
                    phase_runs.setdefault(f"{stack}: no-op", []).append(row)
                replicas = 7 - replicas
                set_replicas(specs, replicas)
                for stack, row in verbose_up(specs, env, [], False).items():
                    phase_runs.setdefault(f"{stack}: one replica", []).append(row)
            set_replicas(specs, 3)
            for name, rows in runs.items():
                results["whole"][name] = median(rows)
            for name, rows in phase_runs.items():
                results["phases"][name] = median(rows)
    print("| `modelplane up` (whole process) | seconds | engine runs | other CLI calls |")
    print("| --- | --- | --- | --- |")
    for name, row in results["whole"].items():
        print(
            f"| {name} | {row['seconds']:.2f} | {row['engineRuns']:.0f} | {row['otherCalls']:.0f} |"
        )
    names = list(results["phases"])
    print()
    print("| phase (s) | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    for phase in (*PHASES, "total"):
        cells = " | ".join(f"{results['phases'][n].get(phase, 0.0):.2f}" for n in names)
        print(f"| {phase} | {cells} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
