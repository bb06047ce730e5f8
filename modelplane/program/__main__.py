"""Entry point of the Pulumi program: the directory the driver's projects name as `main`
(the repository's own Pulumi.yaml files name `stacks/`, whose `__main__.py` runs this one).

The Python language host runs this directory; the repository root is put on the path so
`modelplane` imports whether or not it is installed into the virtualenv.

With ``MODELPLANE_PROGRAM_PHASES`` naming a file, the program appends one JSON line with the
times (Unix seconds) of its phases: ``process`` (the Python process started, Linux),
``start`` (this file runs, after the language host's exec shim), ``imported`` (the
program's modules are loaded) and ``done`` (the program exits: every resource registered);
``bench/engine_phases.py`` reads them.
"""

from __future__ import annotations

import time

_STARTED = time.time()

import atexit  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pulumi  # noqa: E402

from modelplane.program import main  # noqa: E402

_IMPORTED = time.time()


def _process_started() -> float | None:
    """When this process started (Unix seconds), from /proc (None elsewhere)."""
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _write_phases(path: str) -> None:
    # At exit: the entry point runs after this module, and the process ends once every
    # registration is done.
    with open(path, "a", encoding="utf-8") as out:
        out.write(
            json.dumps(
                {
                    "stack": pulumi.get_stack(),
                    "process": _process_started(),
                    "start": _STARTED,
                    "imported": _IMPORTED,
                    "done": time.time(),
                }
            )
            + "\n"
        )


if _PHASES := os.environ.get("MODELPLANE_PROGRAM_PHASES"):
    atexit.register(_write_phases, _PHASES)
pulumi.run(main)
