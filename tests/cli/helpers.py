"""Running `python -m modelplane` as a user would, for the CLI tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`modelplane ARGS` in a fresh process (two minutes at most), its output captured, with
    no terminal on its input (as in CI: a question is refused, never waited on)."""
    return subprocess.run(
        [sys.executable, "-m", "modelplane", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
