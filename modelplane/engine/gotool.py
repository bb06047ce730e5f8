"""Running the Go tool for the engine build: fixed environment, logs, progress and clear errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]

#: How often a long Go command reports that it is still running.
HEARTBEAT_SECONDS = 30.0


class GoError(RuntimeError):
    """A Go command failed; the message names the step and ends with the tail of its output."""


def go_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every Go command: local toolchain only, no cgo, module mode.

    GOMODCACHE, GOCACHE, GOPROXY and the rest stay the user's, so repeated builds reuse them.
    """
    env = dict(os.environ if base is None else base)
    env["GOTOOLCHAIN"] = "local"
    env["CGO_ENABLED"] = "0"
    env["GOWORK"] = "off"
    flags = [f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod=")]
    env["GOFLAGS"] = " ".join([*flags, "-mod=mod"])
    return env


def format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass
class GoTool:
    """`go` with the engine build's environment; every command's output goes to `log`."""

    log: Path
    progress: Progress = print
    go: str = "go"

    def __post_init__(self) -> None:
        found = shutil.which(self.go)
        if not found:
            raise GoError(
                "the Go toolchain (`go`) is not on PATH; the engine build needs Go >= 1.26 "
                "(https://go.dev/doc/install, or the golang-go package of a recent distribution)"
            )
        self.go = found
        self.env = go_env()
        self.log.parent.mkdir(parents=True, exist_ok=True)

    def version(self) -> str:
        """The local Go release, e.g. `1.26.8`."""
        out = self.output(["env", "GOVERSION"], cwd=self.log.parent, what="go env GOVERSION")
        return out.strip().removeprefix("go")

    def output(self, args: list[str], cwd: Path, what: str) -> str:
        proc = subprocess.run(
            [self.go, *args], cwd=cwd, env=self.env, capture_output=True, text=True, check=False
        )
        self._append_log(args, proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise GoError(f"{what} failed:\n{_tail(proc.stderr or proc.stdout)}")
        return proc.stdout

    def try_json(self, args: list[str], cwd: Path) -> dict[str, Any] | None:
        """Run a `-json` command; None if it fails or reports an Error (e.g. a refused version)."""
        proc = subprocess.run(
            [self.go, *args], cwd=cwd, env=self.env, capture_output=True, text=True, check=False
        )
        self._append_log(args, proc.stdout + proc.stderr)
        try:
            data = json.loads(proc.stdout) if proc.stdout.strip() else None
        except json.JSONDecodeError:
            return None
        if proc.returncode != 0 or not isinstance(data, dict) or data.get("Error"):
            return None
        return data

    def download(self, module: str, version: str, cwd: Path) -> dict[str, Any]:
        """`go mod download -json module@version`: the module's Dir, GoMod, Origin and sums."""
        data = self.try_json(["mod", "download", "-json", f"{module}@{version}"], cwd)
        if data is None:
            raise GoError(f"the Go module proxy did not serve {module}@{version} (see {self.log})")
        return data

    def run(self, args: list[str], cwd: Path, what: str) -> None:
        """Run a long Go command, printing a heartbeat with the elapsed time."""
        start = time.monotonic()
        with open(self.log, "a") as log:
            log.write(f"\n$ go {' '.join(args)}  (in {cwd})\n")
            log.flush()
            proc = subprocess.Popen(
                [self.go, *args], cwd=cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
            next_beat = start + HEARTBEAT_SECONDS
            while True:
                try:
                    code = proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    now = time.monotonic()
                    if now >= next_beat:
                        self.progress(
                            f"    ... {what}: still running ({format_elapsed(now - start)})"
                        )
                        next_beat = now + HEARTBEAT_SECONDS
                except BaseException:
                    proc.kill()
                    proc.wait()
                    raise
        if code != 0:
            raise GoError(f"{what} failed (exit {code}):\n{_tail(self.log.read_text())}")

    def _append_log(self, args: list[str], text: str) -> None:
        with open(self.log, "a") as log:
            log.write(f"\n$ go {' '.join(args)}\n{text}")


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
