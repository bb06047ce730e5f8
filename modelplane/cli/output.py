"""Printing helpers shared by the CLI verbs: error tables, JSON, exits without tracebacks."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from modelplane.api.errors import SpecError

console = Console()
err_console = Console(stderr=True)

EXIT_INVALID = 2


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def error_table(errors: list[SpecError]) -> Table:
    table = Table(title=f"{len(errors)} error(s)", title_justify="left", expand=False)
    for col in ("file", "doc", "object", "field", "message"):
        table.add_column(col, overflow="fold")
    for e in errors:
        table.add_row(e.file, str(e.document), e.object, e.path, e.message)
    return table


def fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)
