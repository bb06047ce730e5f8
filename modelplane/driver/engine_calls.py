"""Every Pulumi CLI process the driver starts, counted and timed.

The Automation API starts one ``pulumi`` process per call (``stack select``, ``stack
history``, ``stack output``, ``up`` ...), and each costs a process start, a read of the
stack from the backend and, for a passphrase stack, a key derivation (1,000,000 rounds of
PBKDF2). :class:`EngineCommand` is the ``PulumiCommand`` every workspace of a session
shares: it records each call in a :class:`CallLog` so a run can say how many engine runs
(``up``, ``preview``, ``refresh``, ``destroy``, ``import``) and how many other CLI calls it
took, and how long each took (``bench/engine_phases.py``, the test that guards the count).

``MODELPLANE_ENGINE_LOG`` names a file every call is also appended to as one JSON line
(``{"verb": "up", "stack": "gateway", "seconds": 4.1, "ok": true, "pid": ...}``), so a
test suite or a benchmark can count the calls of processes it started.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG_ENV = "MODELPLANE_ENGINE_LOG"
#: The CLI verbs that run the engine (deployments), as opposed to reading the backend.
ENGINE_VERBS = frozenset({"up", "preview", "refresh", "destroy", "import"})
_FLAGS_WITH_VALUE = frozenset({"--stack", "-s", "--cwd", "-C", "--color"})


@dataclass(frozen=True)
class Call:
    """One CLI process: its verb (``up``, ``stack output`` ...), stack, seconds and outcome."""

    verb: str
    stack: str | None
    seconds: float
    ok: bool

    @property
    def engine_run(self) -> bool:
        return self.verb in ENGINE_VERBS

    def as_json(self) -> dict[str, Any]:
        return {
            "verb": self.verb,
            "stack": self.stack,
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
        }


def describe(args: Sequence[str]) -> tuple[str, str | None]:
    """The verb (one or two words: ``up``, ``stack output``) and the ``--stack`` of a CLI call."""
    words: list[str] = []
    stack: str | None = None
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--":
            break
        if arg in ("--stack", "-s"):
            stack = args[i + 1] if i + 1 < len(args) else None
            skip = True
            continue
        if arg.startswith("--stack="):
            stack = arg.split("=", 1)[1]
            continue
        if arg.startswith("-"):
            skip = arg in _FLAGS_WITH_VALUE
            continue
        if len(words) < 2:
            words.append(arg)
    verb = words[0] if words else ""
    if verb in ("stack", "config", "plugin", "state") and len(words) > 1:
        verb = f"{verb} {words[1]}"
    return verb, stack


@dataclass
class CallLog:
    """The calls of one session (thread-safe), mirrored to ``MODELPLANE_ENGINE_LOG`` if set."""

    path: Path | None = None
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CallLog:
        environ = os.environ if environ is None else environ
        path = environ.get(LOG_ENV)
        return cls(Path(path) if path else None)

    def add(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)
            if self.path is not None:
                line = json.dumps({**call.as_json(), "pid": os.getpid(), "at": time.time()})
                with self.path.open("a", encoding="utf-8") as out:
                    out.write(line + "\n")

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def engine_runs(self) -> list[Call]:
        return [c for c in self.snapshot() if c.engine_run]

    def summary(self) -> dict[str, Any]:
        """Counts and seconds per verb, engine runs and other calls apart."""
        calls = self.snapshot()
        verbs: dict[str, dict[str, float]] = {}
        for call in calls:
            entry = verbs.setdefault(call.verb, {"count": 0, "seconds": 0.0})
            entry["count"] += 1
            entry["seconds"] = round(entry["seconds"] + call.seconds, 3)
        runs = [c for c in calls if c.engine_run]
        return {
            "engineRuns": len(runs),
            "engineSeconds": round(sum(c.seconds for c in runs), 3),
            "otherCalls": len(calls) - len(runs),
            "otherSeconds": round(sum(c.seconds for c in calls if not c.engine_run), 3),
            "verbs": verbs,
        }


def read_log(path: Path) -> list[Call]:
    """The calls recorded in a ``MODELPLANE_ENGINE_LOG`` file (missing file: none)."""
    if not path.is_file():
        return []
    calls: list[Call] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            calls.append(Call(data["verb"], data.get("stack"), float(data["seconds"]), data["ok"]))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a killed process
    return calls


def short_call_env(env: Mapping[str, str]) -> dict[str, str]:
    """What a CLI call that is not an engine run (`stack ls`, `config set`, `stack output`...)
    adds to its environment: no Go garbage collection below 1 GiB of heap. Such a call lives a
    fraction of a second; collecting the 10-20 MB its start-up allocates was about a fifth
    of its CPU (issue 32). Left alone when the user's environment sets GOGC or GOMEMLIMIT."""
    if any(k in env or k in os.environ for k in ("GOGC", "GOMEMLIMIT")):
        return {}
    return {"GOGC": "off", "GOMEMLIMIT": "1GiB"}


def engine_command(root: Path, version: str | None, log: CallLog) -> Any:
    """A ``PulumiCommand`` for ``<root>/bin/pulumi`` that records every call in ``log``.

    ``version``: the CLI's version when the engine cache already knows it (its manifest); the
    Automation API otherwise starts ``pulumi version`` once to learn it.
    """
    from pulumi.automation import PulumiCommand
    from semver import VersionInfo

    class EngineCommand(PulumiCommand):
        def __init__(self) -> None:
            if version is None:
                super().__init__(root=str(root))
            else:
                # The bootstrap checked this binary's version when it cached it.
                self.command = str(root / "bin" / "pulumi")
                self.version = VersionInfo.parse(version.removeprefix("v"))

        def run(
            self,
            args: list[str],
            cwd: str,
            additional_env: Mapping[str, str],
            on_output: Any = None,
            on_error: Any = None,
        ) -> Any:
            verb, stack = describe(args)
            if verb not in ENGINE_VERBS:
                additional_env = {**short_call_env(additional_env), **additional_env}
            started = time.monotonic()
            ok = False
            try:
                result = super().run(args, cwd, additional_env, on_output, on_error)
                ok = True
                return result
            finally:
                log.add(Call(verb, stack, time.monotonic() - started, ok))

    return EngineCommand()
