"""Finding and running the Go tool: one environment, logs, a heartbeat and clear errors.

Every set modelplane builds runs `go` the same way: the toolchain found by `find_go`
(``$MODELPLANE_GO``, then PATH, then /usr/local/go/bin/go) with the environment of `go_env`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelplane.errors import EnvironmentProblem

Progress = Callable[[str], None]

#: How often a long Go command reports that it is still running.
HEARTBEAT_SECONDS = 30.0
GO_ENV = "MODELPLANE_GO"
"""The `go` command to use instead of the one on PATH."""
MINIMUM_GO = "1.25"
"""The oldest Go any set builds with (their go.mod files say ``go 1.25.x`` or newer)."""


class GoError(EnvironmentProblem, RuntimeError):
    """Finding Go or building a set failed; the message names the step and ends with the tail of
    its output."""


def find_go(environ: Mapping[str, str] | None = None) -> Path:
    """The ``go`` command: ``$MODELPLANE_GO``, then PATH, then /usr/local/go/bin/go."""
    env = os.environ if environ is None else environ
    candidates = [env.get(GO_ENV), shutil.which("go", path=env.get("PATH")), "/usr/local/go/bin/go"]
    for candidate in candidates:
        if candidate and _is_executable(Path(candidate)):
            return Path(candidate)
    raise GoError(
        f"building modelplane's Go binaries needs the Go toolchain (go >= {MINIMUM_GO}); none "
        f"found on PATH (set {GO_ENV}): https://go.dev/doc/install, or the golang-go package "
        "of a recent distribution"
    )


def go_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every Go command: local toolchain only, no cgo, module mode.

    GOFLAGS is replaced by ``-mod=mod``: a cache key records versions only, so a user's flags
    (``-mod=vendor``, ``-race``, ``-tags=...``) must not change what lands under it. GOMODCACHE,
    GOCACHE, GOPROXY and the rest stay the user's, so repeated builds reuse them.
    """
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "GOTOOLCHAIN": "local",  # never download a toolchain
            "CGO_ENABLED": "0",  # static binaries; kine uses pure-Go SQLite
            "GOWORK": "off",
            "GO111MODULE": "on",
            "GOFLAGS": "-mod=mod",
        }
    )
    return env


def format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


@dataclass
class GoTool:
    """`go` with the one environment; every command's output goes to `log`."""

    log: Path
    progress: Progress = print
    go: Path = field(default_factory=find_go)

    def __post_init__(self) -> None:
        self.env = go_env()
        self.log.parent.mkdir(parents=True, exist_ok=True)

    def version(self) -> str:
        """The local Go release, e.g. `1.26.8`."""
        out = self.output(["env", "GOVERSION"], cwd=self.log.parent, what="go env GOVERSION")
        return out.strip().removeprefix("go")

    def require(self, minimum: str, what: str) -> str:
        """The local Go release, or a GoError if it is older than ``minimum``."""
        have = self.version()
        if _version_key(have) < _version_key(minimum):
            raise GoError(
                f"{self.go} is go{have}; {what} needs go >= {minimum} "
                "(GOTOOLCHAIN=local forbids downloading one)"
            )
        return have

    def _capture(self, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        """Run a short Go command, its output captured and logged."""
        proc = subprocess.run(
            [str(self.go), *args], cwd=cwd, env=self.env, capture_output=True, text=True
        )
        self._append_log(args, proc.stdout + proc.stderr)
        return proc

    def output(self, args: list[str], cwd: Path, what: str) -> str:
        proc = self._capture(args, cwd)
        if proc.returncode != 0:
            raise GoError(f"{what} failed:\n{tail(proc.stderr or proc.stdout)}")
        return proc.stdout

    def try_json(self, args: list[str], cwd: Path) -> dict[str, Any] | None:
        """Run a `-json` command; None if it fails or reports an Error (e.g. a refused version)."""
        proc = self._capture(args, cwd)
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
                [str(self.go), *args],
                cwd=cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
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
            raise GoError(
                f"{what} failed (exit {code}); full log: {self.log}\n{tail(self.log.read_text())}"
            )

    def smoke_test(self, argv: Sequence[str], expected: str) -> None:
        """Run a built binary (e.g. ``--version``) and check its output names ``expected``."""
        proc = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, check=False, timeout=60
        )
        out = proc.stdout + proc.stderr
        self._append_log(argv, out, program="")
        if expected not in out:
            name = Path(argv[0]).name
            raise GoError(f"{name} {' '.join(argv[1:])} printed {out.strip()!r}, not {expected}")

    def _append_log(self, args: Sequence[str], text: str, program: str = "go ") -> None:
        with open(self.log, "a") as log:
            log.write(f"\n$ {program}{' '.join(args)}\n{text}")


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
