"""Security H1 (docs/architecture.md, "Security"): the backend URL's password never appears in
any output. One redaction (`settings.redact_url`) wherever a backend URL is shown; one scrub
(`settings.scrub`) of text modelplane did not write (the engine's errors quote the URL).

The canary: a password planted in a `postgres://` backend URL, then every output of the CLI
verbs that run without the engine (the engine's failure simulated, quoting the URL as
Pulumi's own errors do) searched for it; the same through a real `up` on the engine-marked
test at the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from modelplane.driver.errors import EngineUnavailable
from modelplane.driver.settings import MASK, redact_url, scrub, url_secrets
from tests.fixtures.engine import LOCAL, copy_fleet

PW = "pg-canary-5d1e9b7a"  # a fake password: must never appear in any output

REDACT = [
    (
        "postgres://mp:PW@db:5432/state?sslmode=disable",
        "postgres://mp:****@db:5432/state?sslmode=disable",
    ),
    ("postgresql://mp:PW@db/state", "postgresql://mp:****@db/state"),
    (
        "postgres://mp@db/state?password=PW&sslmode=require",
        "postgres://mp@db/state?password=****&sslmode=require",
    ),
    ("postgres://mp:PW@db/state?sslpassword=PW", "postgres://mp:****@db/state?sslpassword=****"),
    # Special characters, encoded and not: the password still ends at the host's @.
    ("postgres://mp:a%2Fb%40PW@db/s", "postgres://mp:****@db/s"),
    ("postgres://mp:a/b@PW@db/s", "postgres://mp:****@db/s"),
    ("postgres://mp:a?b#PW@db/s", "postgres://mp:****@db/s"),
    ("mp:PW@db/state", "mp:****@db/state"),  # not a URL: masked all the same
    # Nothing to hide: unchanged.
    ("postgres://mp@db/state", "postgres://mp@db/state"),
    ("file:///home/me@corp/state", "file:///home/me@corp/state"),
    ("s3://bucket/prefix?region=eu-west-1", "s3://bucket/prefix?region=eu-west-1"),
    ("https://api.pulumi.com", "https://api.pulumi.com"),
    ("azblob://c?sig=PW&sv=1", "azblob://c?sig=****&sv=1"),
]


@pytest.mark.parametrize(("url", "shown"), REDACT)
def test_security_backend_url_redacted(url: str, shown: str) -> None:
    url, shown = url.replace("PW", PW), shown.replace("PW", PW)
    assert redact_url(url) == shown
    assert redact_url(shown) == shown  # idempotent: redacting twice shows the same
    assert PW not in redact_url(url)
    if PW in url:
        assert any(PW in s for s in url_secrets(url))
        assert (
            scrub(f"error: unable to open bucket {url}: refused", url_secrets(url)).count(PW) == 0
        )


def test_security_scrub_leaves_other_text_and_short_secrets() -> None:
    secrets = url_secrets(f"postgres://u:{PW}@h/db")
    assert scrub("no secret here", secrets) == "no secret here"
    assert scrub(f"a{PW}b {PW}", secrets) == f"a{MASK}b {MASK}"
    # A one-letter password is masked in the URL, but not scrubbed from ordinary words.
    assert redact_url("postgres://u:a@h/db") == f"postgres://u:{MASK}@h/db"
    assert scrub("a database", url_secrets("postgres://u:a@h/db")) == "a database"
    assert url_secrets(None) == () and url_secrets("file:///x") == ()


# --- the canary through the CLI, without the engine -----------------------------------------


def _fails_quoting_the_url(self: Any) -> None:
    """The engine's start failing with a message that quotes the backend URL (Pulumi's own
    `unable to open bucket <url>`): what the session must scrub."""
    raise EngineUnavailable(f"error: unable to open bucket {self.backend}: connection refused")


def _outputs(result: Any) -> str:
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    if result.exception and not isinstance(result.exception, SystemExit):
        text += repr(result.exception)
    return text


# Every verb that runs without the engine, in each output form (`-o json`, tables, logs).
VERBS = [
    ["validate"],
    ["plan"],
    ["plan", "-o", "json"],
    ["stacks"],
    ["status"],
    ["status", "-o", "json"],
    ["up", "--yes"],
    ["up", "--yes", "-o", "json"],
    ["preview"],
    ["preview", "-o", "json", "--markdown", "{tmp}/preview.md"],
    ["refresh", "-o", "json"],
    ["destroy", "--yes", "-o", "json"],
    ["reconcile", "--once", "--log-format", "json"],
    ["reconcile", "--once", "-o", "json"],
    [
        "reconcile",
        "--once",
        "--leader-elect",
        "--log-format",
        "json",
        "--lease-kubeconfig",
        "{tmp}/nope",
    ],
]


PURE = ("validate", "plan", "stacks")  # no --backend option


@pytest.fixture
def canary_url(request: pytest.FixtureRequest) -> str:
    """A postgres:// backend URL with the canary password: a real PostgreSQL (trust
    authentication: the password is sent and ignored), or a closed port."""
    if request.param == "unreachable":
        return f"postgres://mp:{PW}@127.0.0.1:1/state?sslmode=disable"
    from tests.fixtures.postgres import new_database

    url = new_database(request.getfixturevalue("postgres_url"))
    return url.replace("postgres://modelplane@", f"postgres://modelplane:{PW}@")


@pytest.mark.parametrize("canary_url", ["reachable", "unreachable"], indirect=True)
def test_canary_backend_password_in_no_cli_output(
    tmp_path: Path, canary_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)
    from modelplane.driver.workspace import EngineSession

    monkeypatch.setattr(EngineSession, "start", _fails_quoting_the_url)
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    base = {"MODELPLANE_FLEET_ID": "canary", "COLUMNS": "200", "PULUMI_BACKEND_URL": None}
    seen: dict[str, str] = {}
    for passphrase in (None, "canary-passphrase"):
        for verb in VERBS:
            args = [verb[0], str(fleet_dir), *(a.replace("{tmp}", str(tmp_path)) for a in verb[1:])]
            # The URL from the environment, and from the flag where the verb has one.
            ways = ["env"] if verb[0] in PURE else ["env", "flag"]
            for how in ways:
                flag = ["--backend", canary_url] if how == "flag" else []
                env = {
                    **base,
                    "PULUMI_CONFIG_PASSPHRASE": passphrase,
                    "PULUMI_BACKEND_URL": canary_url if how == "env" else None,
                }
                result = CliRunner().invoke(app, [*args, *flag], env=env)
                seen[f"{' '.join(verb)} ({how}, passphrase: {bool(passphrase)})"] = _outputs(result)
    files = {
        str(p): p.read_text(errors="replace")
        for p in [*tmp_path.glob("*.md"), *(fleet_dir / ".modelplane").rglob("*")]
        if p.is_file()
    }
    leaks = [where for where, text in {**seen, **files}.items() if PW in text]
    assert not leaks, f"the password appears in: {leaks}"
    everything = "\n".join(seen.values())
    # The URL was shown (masked), the engine's message reached the output (scrubbed), and
    # the missing passphrase was reported: what would leak without the fixes.
    assert f":{MASK}@127.0.0.1" in everything
    assert "unable to open bucket" in everything
    assert "no passphrase for the secrets of backend" in everything


def test_canary_confirm_prompts_show_the_backend_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up` and `destroy` ask before changing anything, naming the backend."""
    from types import SimpleNamespace

    from modelplane.cli import app, commands, engine_verbs  # noqa: F401
    from modelplane.driver.fleet import Fleet
    from modelplane.driver.results import RunResult

    url = f"postgres://mp:{PW}@127.0.0.1:1/state?sslmode=disable"
    monkeypatch.setattr(engine_verbs, "_interactive", lambda: True)
    monkeypatch.setattr(
        engine_verbs, "sys", SimpleNamespace(stdin=SimpleNamespace(isatty=lambda: True))
    )
    monkeypatch.setattr(
        Fleet, "preview", lambda self, *a, **k: RunResult("preview", self.backend, [])
    )
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    env = {"PULUMI_CONFIG_PASSPHRASE": "p", "PULUMI_BACKEND_URL": url, "COLUMNS": "200"}
    for verb in (["up"], ["destroy"]):
        result = CliRunner().invoke(app, [*verb, str(fleet_dir)], env=env, input="n\n")
        assert f"on postgres://mp:{MASK}@127.0.0.1:1/state" in result.output, result.output
        assert PW not in _outputs(result)


def test_canary_run_result_and_status_never_show_the_password(tmp_path: Path) -> None:
    """`up -o json`, the summary and `status` tables, `status -o json`: a RunResult and a
    FleetStatus built from the raw URL (a library caller's) are shown masked, and the
    engine's errors and warnings in them are scrubbed."""
    from rich.console import Console

    from modelplane.driver.fleet import Fleet, FleetStatus
    from modelplane.driver.observer import Observer
    from modelplane.driver.progress import status_tables, summary_table
    from modelplane.driver.results import Outcome, StackResult

    url = f"postgres://mp:{PW}@127.0.0.1:1/state?sslmode=disable"
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    f = Fleet.load(fleet_dir, backend=url, env={"MODELPLANE_FLEET_ID": "canary"})
    units = f.stacks()

    def engine_says(unit: Any) -> StackResult:
        r = StackResult(unit.name, unit.tier, Outcome.FAILED, error=f"cannot open {url}")
        r.warnings = [f"warning: retrying {url}"]
        return r

    run = f._run("up", units, engine_says, 1, Observer())
    status = FleetStatus(url, f.previous)
    console = Console(record=True, width=300)
    for table in [summary_table(run, wide=True), *status_tables(status, wide=True)]:
        console.print(table)
    shown = {
        "up -o json": json.dumps(run.as_json()),
        "status -o json": json.dumps(status.as_json()),
        "tables": console.export_text(),
    }
    assert not [k for k, v in shown.items() if PW in v]
    assert all(f"mp:{MASK}@127.0.0.1" in v for v in shown.values()), shown
    assert "cannot open postgres://mp:" in shown["up -o json"]  # the message, scrubbed


def test_canary_reconcile_round_error_is_scrubbed(tmp_path: Path) -> None:
    """A round that fails with a message quoting the URL (an engine error, a library's)
    logs it scrubbed (`reconcile --log-format json` prints `Round.as_json()`)."""
    from modelplane.driver.errors import DriverError
    from modelplane.driver.reconcile import Reconciler

    url = f"postgres://mp:{PW}@127.0.0.1:1/state"
    reconciler = Reconciler(tmp_path, backend=url, env={})

    def fails(current: Any) -> None:
        current.orphan_errors.append(f"dev-1: {url}")
        raise DriverError(f"cannot reach {url}")

    reconciler._round = fails  # type: ignore[method-assign]
    line = json.dumps(reconciler.round().as_json())
    assert PW not in line and "cannot reach postgres://mp:" in line


# --- the canary through a real `up` (the engine) --------------------------------------------


@pytest.mark.engine
def test_canary_backend_password_through_a_real_up(
    tmp_path: Path, engine_root: Path, postgres_url: str
) -> None:
    """`up -o json`, `status` in every format, `preview --markdown` and a reconcile round's
    JSON log of a real `up` on a postgres:// backend whose URL holds the canary password."""
    from modelplane.cli import app, commands  # noqa: F401
    from tests.fixtures.engine import engine_env
    from tests.fixtures.postgres import new_database

    url = new_database(postgres_url).replace(
        "postgres://modelplane@", f"postgres://modelplane:{PW}@"
    )
    env = engine_env(tmp_path, PULUMI_BACKEND_URL=url, MODELPLANE_FLEET_ID="canary", COLUMNS="200")
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    runs = {
        "up -o json": ["up", str(fleet_dir), "--yes", "-o", "json"],
        "up": ["up", str(fleet_dir), "--yes", "--all"],
        "status": ["status", str(fleet_dir)],
        "status -o wide": ["status", str(fleet_dir), "-o", "wide"],
        "status -o json": ["status", str(fleet_dir), "-o", "json"],
        "preview": ["preview", str(fleet_dir), "--markdown", str(tmp_path / "preview.md")],
        "reconcile": ["reconcile", str(fleet_dir), "--once", "--log-format", "json"],
    }
    seen = {}
    for name, args in runs.items():
        result = CliRunner().invoke(app, args, env=env)
        seen[name] = _outputs(result)
        assert result.exit_code == 0, (name, seen[name][-3000:])  # each ran, not an early error
        if name in ("up -o json", "status -o json"):
            shown = json.loads(result.stdout)["backend"]
            assert shown.startswith(f"postgres://modelplane:{MASK}@"), shown
    seen["preview.md"] = (tmp_path / "preview.md").read_text()
    leaks = [k for k, v in seen.items() if PW in v]
    assert not leaks, f"the password appears in: {leaks}"


@pytest.mark.engine
def test_canary_a_secret_config_value_never_on_a_command_line(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The front-door key goes into stack config through the CLI's standard input (review
    L1): no process the driver starts has it in its arguments, and the stack holds it,
    encrypted."""
    import subprocess

    from modelplane.driver.fleet import Fleet
    from modelplane.driver.front_door import CONFIG_KEY

    CANARY = "mp-canary-config-5d1e"
    argvs: list[list[str]] = []
    real_run, real_popen = subprocess.run, subprocess.Popen

    def run(argv: Any, *args: Any, **kwargs: Any) -> Any:
        argvs.append([str(a) for a in argv])
        return real_run(argv, *args, **kwargs)

    class Popen(real_popen):  # type: ignore[misc, valid-type]
        def __init__(self, argv: Any, *args: Any, **kwargs: Any) -> None:
            argvs.append([str(a) for a in argv])
            super().__init__(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(subprocess, "Popen", Popen)
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    with Fleet.load(fleet_dir, env=env).session() as session:
        session.stack("gateway")
        session.set_secret_config("gateway", CONFIG_KEY, CANARY)
        held = session.stack("gateway", exists=True).get_config(CONFIG_KEY)
    assert held.value == CANARY and held.secret
    assert any("config" in a and "set" in a for a in argvs), argvs  # it ran the CLI
    assert not [a for a in argvs if any(CANARY in part for part in a)]
    config = (fleet_dir / "Pulumi.gateway.yaml").read_text()
    assert CANARY not in config and "secure:" in config
