"""The CLI's view of a run: a live per-stack view (rich) and the final summary table."""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from modelplane.driver.events import StackProgress, urn_type_and_name
from modelplane.driver.observer import Observer
from modelplane.driver.results import Outcome, RunResult, StackResult
from modelplane.driver.settings import redact_url
from modelplane.stacks import StackUnit

STYLE = {
    Outcome.SUCCEEDED: "green",
    Outcome.UNCHANGED: "dim",
    Outcome.FAILED: "bold red",
    Outcome.LOCKED: "yellow",
    Outcome.SKIPPED: "yellow",
    Outcome.NEW: "cyan",
    Outcome.RENDERED: "cyan",
}
#: Outcomes whose change counts mean something.
RAN = (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.LOCKED, Outcome.NEW)
#: Without a terminal, a line per running stack at least this often (seconds).
HEARTBEAT = 30.0
VERB = {
    "create": "creating",
    "update": "updating",
    "replace": "replacing",
    "create-replacement": "creating replacement",
    "delete": "deleting",
    "delete-replaced": "deleting replaced",
    "read": "reading",
    "refresh": "refreshing",
    "import": "importing",
}


def counts_text(changes: dict[str, int]) -> str:
    parts = [
        f"{sign}{changes.get(kind, 0)}"
        for sign, kind in (("+", "create"), ("~", "update"), ("+-", "replace"), ("-", "delete"))
        if changes.get(kind, 0)
    ]
    return " ".join(parts) or "no changes"


class LiveProgress(Observer):
    """Observer that shows each stack's resource operations while they run.

    On a terminal it redraws a table in place; otherwise (CI logs, pipes) it prints a line
    when each stack starts, one per running stack every ``heartbeat`` seconds, and one when
    each stack ends. Everything goes to ``console`` (stderr in the CLI).
    """

    def __init__(
        self, console: Console, *, live: bool | None = None, heartbeat: float = HEARTBEAT
    ) -> None:
        self.console = console
        self.live_enabled = console.is_terminal if live is None else live
        self.heartbeat = heartbeat
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._lock = threading.Lock()
        self._operation = ""
        self._units: list[StackUnit] = []
        self._state: dict[str, str] = {}
        self._progress: dict[str, StackProgress] = {}
        self._results: dict[str, StackResult] = {}
        self._started: dict[str, float] = {}
        self._live: Live | None = None

    # -- Observer --------------------------------------------------------------------------

    def message(self, text: str) -> None:
        self.console.print(Text(text, style="dim"))

    def run_started(self, operation: str, units: list[StackUnit]) -> None:
        with self._lock:
            self._operation = operation
            self._units = list(units)
            self._state = {u.name: "waiting" for u in units}
        if self.live_enabled and units:
            self._live = Live(self, console=self.console, refresh_per_second=4, transient=True)
            self._live.start()
        elif units:
            self._stop.clear()
            self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="heartbeat")
            self._beat.start()

    def stack_queued(self, unit: StackUnit) -> None:
        with self._lock:
            self._state[unit.name] = "preparing"
            self._started[unit.name] = time.monotonic()
        if not self.live_enabled:
            self.console.print(f"{self._operation} {unit.name}: started", highlight=False)

    def stack_started(self, unit: StackUnit, progress: StackProgress) -> None:
        with self._lock:
            self._state[unit.name] = "running"
            self._progress[unit.name] = progress

    def stack_finished(self, result: StackResult) -> None:
        with self._lock:
            self._state[result.stack] = "done"
            self._results[result.stack] = result
        if not self.live_enabled:
            self.console.print(self._line(result), highlight=False)

    def run_finished(self, run: RunResult) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._beat is not None:
            self._stop.set()
            self._beat.join()
            self._beat = None

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            for line in self.running_lines():
                self.console.print(line, highlight=False)

    def running_lines(self) -> list[str]:
        """One line per stack that started and has not finished (for logs)."""
        now = time.monotonic()
        lines = []
        with self._lock:
            for unit in self._units:
                name = unit.name
                if name not in self._started or name in self._results:
                    continue
                line = f"{self._operation} {name}: running {now - self._started[name]:.0f}s"
                progress = self._progress.get(name)
                if progress is not None:
                    in_flight, done = progress.snapshot()
                    if done:
                        line += f", {len(done)} done"
                    now_doing = "; ".join(
                        f"{VERB.get(op, op)} {_short_urn(urn)}"
                        for urn, op in list(in_flight.items())[:3]
                    )
                    if now_doing:
                        line += f" ({now_doing})"
                lines.append(line)
        return lines

    # -- rendering -------------------------------------------------------------------------

    def _line(self, r: StackResult) -> Text:
        text = Text()
        text.append(f"{self._operation} {r.stack}: ", style="bold")
        text.append(r.outcome.value, style=STYLE[r.outcome])
        if r.outcome in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.NEW):
            text.append(f" ({counts_text(r.changes)}, {r.duration:.1f}s)")
        if r.note:
            text.append(f" - {r.note}", style="dim")
        return text

    def __rich__(self) -> RenderableType:
        table = Table(title=f"modelplane {self._operation}", title_justify="left", expand=False)
        for col in ("stack", "state", "changes", "now", "time"):
            table.add_column(col, overflow="fold")
        now = time.monotonic()
        with self._lock:
            for unit in self._units:
                name = unit.name
                state = self._state.get(name, "waiting")
                result = self._results.get(name)
                progress = self._progress.get(name)
                elapsed = f"{now - self._started[name]:.0f}s" if name in self._started else ""
                if result is not None:
                    state_text = Text(result.outcome.value, style=STYLE[result.outcome])
                    changes = counts_text(result.changes) if result.changes else ""
                    current = result.note or (result.error or "").splitlines()[0:1]
                    current_text = current if isinstance(current, str) else " ".join(current)
                    elapsed = f"{result.duration:.0f}s"
                else:
                    state_text = Text(state, style="cyan" if state == "running" else "dim")
                    changes, current_text = "", ""
                    if progress is not None:
                        in_flight, done = progress.snapshot()
                        changes = f"{len(done)} done" if done else ""
                        current_text = "; ".join(
                            f"{VERB.get(op, op)} {_short_urn(urn)}"
                            for urn, op in list(in_flight.items())[:3]
                        )
                table.add_row(name, state_text, changes, current_text, elapsed)
        return Group(table)


def _short_urn(urn: str) -> str:
    rtype, name = urn_type_and_name(urn)
    return f"{rtype.rsplit(':', 1)[-1]} {name}"


def summary_table(
    run: RunResult, *, wide: bool = False, headers: bool = True, note_width: int | None = 80
) -> Table:
    """stack, result, creates/updates/replaces/deletes, duration, error or note.

    ``wide`` adds the tier, the unchanged count and the warnings, and never wraps the
    error/note column (nor does ``note_width=None``, for logs); ``headers=False`` drops the
    title and the header row (for scripts). Stack names are never wrapped or cut.
    """
    table = Table(
        title=f"{run.operation}: {len(run.results)} stack(s) in {run.duration:.1f}s"
        if headers
        else None,
        title_justify="left",
        show_header=headers,
    )
    table.add_column("stack", no_wrap=True)
    if wide:
        table.add_column("tier", no_wrap=True)
    table.add_column("result", no_wrap=True)
    kinds = ("create", "update", "replace", "delete", *(("same",) if wide else ()))
    for col in kinds:
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("error / note", max_width=None if wide else note_width)
    if wide:
        table.add_column("warnings")
    for r in run.results:
        ran = r.outcome in RAN
        row: list[Any] = [r.stack]
        if wide:
            row.append(r.tier.name.lower())
        row.append(Text(r.outcome.value, style=STYLE[r.outcome]))
        row += [str(r.count(k)) if ran else "" for k in kinds]
        row.append(f"{r.duration:.1f}s")
        row.append(Text(r.error or r.note or "", style="red" if r.error else "dim"))
        if wide:
            row.append("\n".join(r.warnings))
        table.add_row(*row)
    for name in run.orphans:
        row = [name] + ([""] if wide else []) + [Text("orphaned", style="yellow")]
        row += [""] * (len(kinds) + 1)
        row.append(
            Text("in the backend but no longer in the fleet: run `up --prune` or destroy it")
        )
        if wide:
            row.append("")
        table.add_row(*row)
    return table


def _table(title: str, headers: bool) -> Table:
    return Table(title=title if headers else None, title_justify="left", show_header=headers)


def status_tables(status: Any, *, wide: bool = False, headers: bool = True) -> list[Table]:
    """``modelplane status``: placement, stacks, endpoints (``wide``: output values too)."""
    placement = _table("placement", headers)
    for col in ("deployment", "replica", "cluster", "pools"):
        placement.add_column(col)
    for key, dep in status.lock.deployments.items():
        for i, r in enumerate(dep.replicas):
            pools = ", ".join(f"{k}={v}" for k, v in r.pools.items())
            placement.add_row(key if i == 0 else "", r.name, r.cluster, pools)
    stacks = _table(f"stacks ({redact_url(status.backend)})", headers)
    for col in ("stack", "last operation", "result", "when", "in sync", "outputs"):
        stacks.add_column(col)
    for s in status.stacks:
        if not s.exists:
            stacks.add_row(s.stack, Text("not created", style="dim"), "", "", "", "")
            continue
        sync = "" if s.in_sync is None else ("yes" if s.in_sync else "changes pending")
        if wide:
            outputs = "\n".join(f"{k}: {_fmt(v)}" for k, v in sorted(s.outputs.items()))
        else:
            outputs = ", ".join(sorted(s.outputs)) if s.outputs else ""
        stacks.add_row(
            s.stack,
            s.last_kind or "",
            s.last_result or s.error or "",
            s.last_time or "",
            sync,
            outputs,
        )
    for name in status.orphans:
        stacks.add_row(
            name, Text("orphaned (no longer in the fleet)", style="yellow"), "", "", "", ""
        )
    tables = [placement, stacks]
    endpoints = _table("endpoints (replicas)", headers)
    for col in ("stack", "endpoint", "cluster", "url", "path"):
        endpoints.add_column(col)
    for stack, value in status.endpoints.items():
        for ep in value if isinstance(value, list) else [value]:
            if isinstance(ep, dict):
                endpoints.add_row(
                    stack,
                    str(ep.get("name", "")),
                    str(ep.get("cluster", "")),
                    str(ep.get("url") or "(no gateway address yet)"),
                    str(ep.get("rewritePath", "")),
                )
            else:
                endpoints.add_row(stack, _fmt(ep), "", "", "")
    if endpoints.row_count:
        tables.append(endpoints)
    gateway = status.gateway
    services = _table("model services", headers)
    services.add_column("service")
    services.add_column("address")
    if isinstance(gateway.get("services"), dict):
        for key, address in sorted(gateway["services"].items()):
            services.add_row(key, _fmt(address) if address else "(no gateway address yet)")
    if "address" in gateway:
        services.add_row("(gateway)", _fmt(gateway["address"]) if gateway["address"] else "-")
    if services.row_count:
        tables.append(services)
    return tables


def _fmt(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True)
