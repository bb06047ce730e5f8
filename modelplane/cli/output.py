"""Printing helpers shared by the CLI verbs: error tables, JSON, exits without tracebacks."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from modelplane.api.errors import FleetInvalid, SpecError
from modelplane.errors import ModelplaneError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    console: Console
    err_console: Console

EXIT_INVALID = 2
#: Without a terminal (CI logs, pipes) the engine verbs' consoles cut nothing to 80 columns:
#: rows are as wide as their content, so stack names and messages are never truncated.
LOG_WIDTH = 1000
_log_consoles: dict[bool, Console] = {}


def get_console(*, stderr: bool = False) -> Console:
    """The stdout (or stderr) console, made when first used: rich costs ~0.07 s to import,
    which `plan --output json` and `validate --output json` do without."""
    name = "err_console" if stderr else "console"
    made = globals().get(name)
    if made is None:
        from rich.console import Console

        made = globals()[name] = Console(stderr=stderr)
    return made


def log_console(*, stderr: bool) -> Console:
    """The engine verbs' stdout (or stderr) console: as wide as a terminal, else unbounded
    (``LOG_WIDTH``). One of each per process, shared by every verb module."""
    made = _log_consoles.get(stderr)
    if made is None:
        from rich.console import Console

        made = Console(stderr=stderr)
        if not made.is_terminal:
            made = Console(stderr=stderr, width=LOG_WIDTH)
        _log_consoles[stderr] = made
    return made


def report_error(exc: ModelplaneError) -> int:
    """Print an expected failure for people (every spec error as a table, else one line;
    never a traceback) and return its exit code: the CLI's one handler
    (``modelplane.cli.Verbs``)."""
    from rich.markup import escape

    err = log_console(stderr=True)
    if isinstance(exc, FleetInvalid):
        err.print(error_table(exc.errors))
    else:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    return exc.exit_code


def __getattr__(name: str) -> Any:
    """`output.console` and `output.err_console` (PEP 562): made when first used."""
    if name in ("console", "err_console"):
        return get_console(stderr=name == "err_console")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dump_json(data: Any) -> str:
    """data as JSON indented by two spaces, keys in insertion order, non-ASCII escaped:
    the text of `json.dumps(data, indent=2)`.

    orjson writes it (~20x faster: the json module's C encoder is bypassed when indenting,
    ~0.2 s for a 10,000-replica plan). What orjson would write differently goes through
    the json module: non-ASCII text (orjson does not escape it) and what orjson cannot
    encode (an integer beyond 64 bits). Floats may be spelt differently (`0.00001` for
    `1e-05`), never with another value.
    """
    import orjson

    try:
        text = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        return json.dumps(data, indent=2)
    if not text.isascii():
        return json.dumps(data, indent=2)
    return text.decode("ascii")


def print_json(data: Any) -> None:
    sys.stdout.write(dump_json(data) + "\n")


def where(e: SpecError) -> str:
    """`file:line:col` (or just the file when the position is unknown)."""
    return f"{e.file}:{e.line}:{e.column}" if e.line else e.file


def error_table(errors: list[SpecError], title: str = "error(s)", style: str = "") -> Table:
    """Every user-controlled cell is escaped: a `[/red]` in a name is text, not markup."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title=f"{len(errors)} {title}",
        title_justify="left",
        title_style=style or None,
        expand=False,
    )
    for col in ("file", "doc", "object", "field", "message"):
        table.add_column(col, overflow="fold")
    for e in errors:
        table.add_row(
            *(escape(c) for c in (where(e), str(e.document), e.object, e.path, e.message))
        )
    return table


def warning_table(warnings: list[SpecError]) -> Table:
    """Warnings (valid, almost surely unintended), laid out like errors."""
    return error_table(warnings, "warning(s)", style="yellow")


def _annotation_value(text: str, *, prop: bool) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def github_annotations(errors: list[SpecError], level: str = "error") -> str:
    """GitHub Actions workflow commands (`::error file=...,line=...,col=...::message`)."""
    lines = []
    for e in errors:
        props = [f"file={_annotation_value(e.file, prop=True)}"]
        if e.line:
            props += [f"line={e.line}", f"col={e.column}"]
        what = " ".join(p for p in (e.object, e.path) if p)
        title = _annotation_value(what or "modelplane", prop=True)
        props.append(f"title={title}")
        message = _annotation_value(f"{what}: {e.message}" if what else e.message, prop=False)
        lines.append(f"::{level} {','.join(props)}::{message}")
    return "\n".join(lines) + ("\n" if lines else "")


def fail(message: str, code: int = 1) -> NoReturn:
    from rich.markup import escape

    get_console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)
