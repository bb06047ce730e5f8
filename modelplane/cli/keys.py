"""`modelplane keys create|rotate|list DIR`: the callers' keys modelplane keeps in files
(api.md "Keys"; security review M3).

A caller whose secretRef is a ``file:`` in the fleet's own `.modelplane/` (or, for specs/dev,
in the dev fleet's state) has its keys there, one a line, each optionally ending at
``notAfter=<RFC 3339>`` (modelplane/caller_keys.py). `create` makes the missing files (never
overwrites one), `rotate` appends a new key and ends the old ones after a grace period,
`list` shows each caller's keys by count and end. No verb prints a key unless `--show`.
`up` never makes a key silently (only the first `up` in a terminal on a local backend).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from modelplane.cli.engine_verbs import BackendOpt, SecretsOpt, _expected_failures, _load
from modelplane.cli.output import get_console, print_json

app = typer.Typer(
    help="The callers' API keys modelplane keeps in files: create, rotate, list (never shown "
    "unless --show); the front-door key: rotate --front-door, switch; the gateways' "
    "certificates: rotate --certificates.",
    no_args_is_help=True,
)

FleetArg = Annotated[Path, typer.Argument(help="The fleet directory.", show_default=False)]
ShowOpt = Annotated[
    bool, typer.Option("--show", help="Print the new key(s) on standard output (caller: key).")
]


def _fail(message: str, code: int = 1) -> typer.Exit:
    get_console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def _entries(fleet: Path, callers: list[str] | None) -> list[Any]:
    """The fleet's callers and where their keys are (only ``callers`` when given)."""
    from modelplane.api.errors import FleetInvalid
    from modelplane.api.loader import load_fleet
    from modelplane.secrets import caller_key_files

    if not fleet.is_dir():
        raise _fail(f"{fleet} is not a fleet directory", 2)
    result = load_fleet(fleet)
    if result.errors:
        raise FleetInvalid(result.errors)
    gateway = result.fleet.gateway
    if gateway is None or gateway.spec.auth is None:
        raise _fail(f"{fleet} has no InferenceGateway with spec.auth: no caller has a key", 2)
    entries = caller_key_files(result.fleet, fleet, os.environ)
    if callers:
        names = [e.caller for e in entries]
        unknown = [c for c in callers if c not in names]
        if unknown:
            raise _fail(
                f"no caller {', '.join(unknown)} in spec.auth (callers: {', '.join(names)})", 2
            )
        entries = [e for e in entries if e.caller in callers]
    return entries


def create(
    fleet: FleetArg,
    caller: Annotated[
        list[str] | None,
        typer.Option(
            "--caller", help="The caller (repeatable). Default: every caller whose file is missing."
        ),
    ] = None,
    show: ShowOpt = False,
) -> None:
    """Make a new random key for each caller whose key file (a `file:` in the fleet's
    `.modelplane/` or the dev fleet's state) does not exist: mode 0600 in a 0700 directory
    that git ignores. An existing key is never overwritten (`keys rotate` replaces one with
    an overlap); a named caller whose file exists is an error and nothing is written."""
    from modelplane.secrets import write_new_key_file

    entries = _entries(fleet, caller)
    console = get_console(stderr=True)
    if caller:
        kept_elsewhere = [e for e in entries if e.path is None]
        if kept_elsewhere:
            raise _fail(
                "modelplane keeps no file for "
                + "; ".join(f"caller {e.caller}: {e.why}" for e in kept_elsewhere),
                2,
            )
        existing = [e for e in entries if e.path is not None and e.path.exists()]
        if existing:
            raise _fail(
                "a key exists, not overwritten: "
                + ", ".join(f"caller {e.caller} ({e.path})" for e in existing)
                + f"; `modelplane keys rotate {fleet} --caller NAME` replaces one with an "
                "overlap. Nothing was written"
            )
    made: list[tuple[str, str]] = []
    for e in entries:
        if e.path is None:
            console.print(f"skipped caller {escape(e.caller)}: {escape(e.why)}", highlight=False)
            continue
        if e.path.exists():
            console.print(
                f"kept caller {escape(e.caller)}: {escape(str(e.path))} exists", highlight=False
            )
            continue
        assert e.home is not None
        made.append((e.caller, write_new_key_file(e.path, e.home)))
        console.print(
            f"created caller {escape(e.caller)}'s key: {escape(str(e.path))} (mode 0600)",
            highlight=False,
        )
    if show:
        for name, key in made:
            typer.echo(f"{name}: {key}")
    if made:
        console.print(f"`modelplane up {escape(str(fleet))}` publishes them", highlight=False)


def rotate(
    fleet: FleetArg,
    caller: Annotated[
        list[str] | None,
        typer.Option("--caller", help="The caller whose key to replace (repeatable)."),
    ] = None,
    grace: Annotated[
        str,
        typer.Option(
            "--grace",
            help="How long the old key(s) keep working (e.g. 24h, 30m; 0: stop at once for "
            "a caller).",
        ),
    ] = "24h",
    front_door: Annotated[
        bool,
        typer.Option(
            "--front-door",
            help="Rotate the fleet's front-door key (kept in the stacks' config) instead.",
        ),
    ] = False,
    certificates: Annotated[
        bool,
        typer.Option(
            "--certificates",
            help="New certificates for the front door and the workload gateways at the next "
            "`up` (mutual TLS; the fleet CA stays).",
        ),
    ] = False,
    after: Annotated[
        str,
        typer.Option(
            "--after",
            help="--front-door: when the front door starts sending the new key (after an "
            "`up` made the workload gateways accept it); before --grace ends.",
        ),
    ] = "10m",
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
    show: ShowOpt = False,
) -> None:
    """Append a new key to each caller's key file and end its older keys `--grace` from now
    (`notAfter=`; an earlier end is kept, keys already ended are dropped). Then run `up`: it
    publishes old and new; clients move to the new key within the grace period; after it
    the authorization service refuses the old one by its clock, with no further `up`.

    `--front-door`: the same for the key the front door shows the workload gateways, in
    every stack's config: the next `up` makes every workload gateway accept the new key, the
    first `up` after `--after` makes the front door send it, the first after `--grace` drops
    the old one (a reconcile service's rounds do these `up`s).

    `--certificates`: the next `up` gives the front door and every workload gateway a new
    certificate of the fleet CA (each period's first `up` does so anyway); the old ones stay
    valid until they expire, so the stacks may run in any order."""
    if certificates:
        if caller or front_door:
            raise _fail("--certificates with --caller or --front-door: rotate one at a time", 2)
        _rotate_certificates(fleet, backend, secrets_provider)
        return
    if front_door:
        if caller:
            raise _fail("--front-door and --caller: rotate one at a time", 2)
        _rotate_front_door(fleet, after, grace, backend, secrets_provider)
        return
    if not caller:
        raise _fail("name a --caller (repeatable), or --front-door", 2)
    from modelplane.caller_keys import CallerKey, format_keys, new_key, parse_keys, rfc3339
    from modelplane.cli.health import parse_duration
    from modelplane.secrets import replace_key_file

    seconds = parse_duration(grace)
    entries = _entries(fleet, caller)
    problems = [f"caller {e.caller}: {e.why}" for e in entries if e.path is None]
    problems += [
        f"caller {e.caller}: {e.path} does not exist (`modelplane keys create {fleet} "
        f"--caller {e.caller}`)"
        for e in entries
        if e.path is not None and not e.path.exists()
    ]
    if problems:
        raise _fail("cannot rotate: " + "; ".join(problems), 2)
    now = datetime.now(UTC)
    end = now + timedelta(seconds=seconds)
    console = get_console(stderr=True)
    made: list[tuple[str, str]] = []
    for e in entries:
        assert e.path is not None
        keys = parse_keys(e.path.read_text(encoding="utf-8"), where=str(e.path))
        dropped = [k for k in keys if k.expired(now)]
        kept = [
            CallerKey(k.key, min(k.not_after, end) if k.not_after is not None else end)
            for k in keys
            if not k.expired(now)
        ]
        key = new_key()
        replace_key_file(e.path, format_keys([*kept, CallerKey(key)]))
        made.append((e.caller, key))
        note = f"; dropped {len(dropped)} expired" if dropped else ""
        console.print(
            f"rotated caller {escape(e.caller)}: new key appended to {escape(str(e.path))}; "
            f"{len(kept)} older key(s) end by {rfc3339(end)}{note}",
            highlight=False,
        )
    if show:
        for name, key in made:
            typer.echo(f"{name}: {key}")
    console.print(
        f"`modelplane up {escape(str(fleet))}` publishes old and new; give clients the new key "
        f"before {rfc3339(end)}",
        highlight=False,
    )


def _rotate_certificates(fleet: Path, backend: str | None, secrets: str | None) -> None:
    if not fleet.is_dir():
        raise _fail(f"{fleet} is not a fleet directory", 2)
    with _expected_failures():
        done = _load(fleet, None, backend, secrets).rotate_certificates()
    get_console(stderr=True).print(
        f"certificates: generation {done.generation} in {len(done.stacks)} stack(s). Run "
        f"`modelplane up {escape(str(fleet))}`: the front door and the workload gateways get "
        "new certificates of the fleet CA",
        highlight=False,
    )


def _rotate_front_door(
    fleet: Path, after: str, grace: str, backend: str | None, secrets: str | None
) -> None:
    from modelplane.cli.health import parse_duration

    switch, end = timedelta(seconds=parse_duration(after)), timedelta(seconds=parse_duration(grace))
    if not fleet.is_dir():
        raise _fail(f"{fleet} is not a fleet directory", 2)
    with _expected_failures():
        done = _load(fleet, None, backend, secrets).rotate_front_door_key(after=switch, grace=end)
    get_console(stderr=True).print(
        f"rotated the front-door key in {len(done.stacks)} stack(s): new key "
        f"modelplane-{escape(done.id)}, sent from {done.switch}; older keys end by {done.end}. "
        f"Run `modelplane up {escape(str(fleet))}` now (the workload gateways accept it), and "
        f"again after {done.switch} and after {done.end} (or let reconcile do it)",
        highlight=False,
    )


def switch(
    fleet: FleetArg,
    grace: Annotated[
        str,
        typer.Option("--grace", help="How long the older front-door keys keep working."),
    ] = "10m",
    backend: BackendOpt = None,
    secrets_provider: SecretsOpt = None,
) -> None:
    """Send the front-door key a `keys rotate --front-door` added from now on instead of
    from its `--after`, and end the older keys `--grace` from now. Run it after the `up`
    that made every workload gateway accept the new key, then `up` again (the front door
    switches), and once more after the grace (the old key goes)."""
    from modelplane.cli.health import parse_duration

    end = timedelta(seconds=parse_duration(grace))
    if not fleet.is_dir():
        raise _fail(f"{fleet} is not a fleet directory", 2)
    with _expected_failures():
        done = _load(fleet, None, backend, secrets_provider).switch_front_door_key(grace=end)
    get_console(stderr=True).print(
        f"switched the front-door key in {len(done.stacks)} stack(s): modelplane-"
        f"{escape(done.id)} is sent from now on; older keys end by {done.end}. Run "
        f"`modelplane up {escape(str(fleet))}` now, and again after {done.end}",
        highlight=False,
    )


def list_keys(
    fleet: FleetArg,
    output: Annotated[
        str, typer.Option("--output", "-o", help="table for people, json for machines.")
    ] = "table",
) -> None:
    """Each caller, where its keys are, how many are live and when each ends (never a key).
    Keys kept in stack config are not read here (they are encrypted)."""
    from rich.table import Table

    from modelplane.caller_keys import KeyFormatError, parse_keys, rfc3339
    from modelplane.secrets import SecretNotFound, resolve_secret

    if output not in ("table", "json"):
        raise _fail(f"--output {output!r}: table or json", 2)
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    for e in _entries(fleet, None):
        row: dict[str, Any] = {"caller": e.caller, "source": e.source, "keys": 0}
        try:
            found = resolve_secret(
                e.ref, e.ref_key, config=lambda _k: None, env=os.environ, base_dir=fleet
            )
        except SecretNotFound:
            row["problem"] = "missing" + (
                f" (`modelplane keys create {fleet} --caller {e.caller}`)" if e.path else ""
            )
            rows.append(row)
            continue
        if found.source == "env":
            row["source"] = f"environment {e.env_var}"
        try:
            keys = parse_keys(found.value, where=row["source"])
        except KeyFormatError as exc:
            row["problem"] = str(exc)
            rows.append(row)
            continue
        live = [k for k in keys if not k.expired(now)]
        row["keys"] = len(live)
        row["expired"] = len(keys) - len(live)
        row["notAfter"] = [rfc3339(k.not_after) if k.not_after else None for k in live]
        if not live:
            row["problem"] = "every key has expired"
        rows.append(row)
    if output == "json":
        print_json({"callers": rows})
        return
    table = Table(title=f"caller keys of {fleet}", title_justify="left")
    for col in ("caller", "keys", "ends", "where"):
        table.add_column(col, overflow="fold")
    for row in rows:
        ends = ", ".join(t or "never" for t in row.get("notAfter", []))
        if row.get("expired"):
            ends += f" ({row['expired']} expired)"
        if row.get("problem"):
            ends = f"[red]{escape(row['problem'])}[/]" + (f"; {escape(ends)}" if ends else "")
        else:
            ends = escape(ends)
        table.add_row(escape(row["caller"]), str(row["keys"]), ends, escape(row["source"]))
    get_console().print(table)


app.command("create")(create)
app.command("rotate")(rotate)
app.command("switch")(switch)
app.command("list")(list_keys)
