"""`modelplane keys create|rotate|list DIR` (api.md "Keys"; security review M3): files made
0600 in a private `.modelplane/`, never overwritten, never printed without --show; rotation
appends a key and ends the old ones after the grace period."""

from __future__ import annotations

import json
import shutil
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from modelplane.caller_keys import parse_keys
from modelplane.secrets import GITIGNORE

ROOT = Path(__file__).resolve().parents[2]


def keys(*args: str, env: dict[str, str] | None = None) -> Result:
    from modelplane.cli import app, commands  # noqa: F401  (registers every verb)

    return CliRunner().invoke(app, ["keys", *args], env={"COLUMNS": "2000", **(env or {})})


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """specs/quickstart without its state: callers app and ops, keys in `.modelplane/callers/`."""
    target = tmp_path / "quickstart"
    shutil.copytree(
        ROOT / "specs" / "quickstart", target, ignore=shutil.ignore_patterns(".modelplane")
    )
    return target


def key_file(fleet: Path, caller: str) -> Path:
    return fleet / ".modelplane" / "callers" / caller


def all_keys(fleet: Path) -> str:
    """Every key text of the fleet's callers (to check that none is printed)."""
    folder = fleet / ".modelplane" / "callers"
    return "".join(p.read_text() for p in folder.iterdir()) if folder.is_dir() else ""


@pytest.mark.parametrize(
    ("args", "made", "code"),
    [
        ([], ["app", "ops"], 0),
        (["--caller", "ops"], ["ops"], 0),
        (["--caller", "app", "--caller", "ops"], ["app", "ops"], 0),
        (["--caller", "nobody"], [], 2),
    ],
)
def test_keys_create(fleet: Path, args: list[str], made: list[str], code: int) -> None:
    result = keys("create", str(fleet), *args)
    assert result.exit_code == code, result.output
    folder = fleet / ".modelplane" / "callers"
    assert sorted(p.name for p in folder.iterdir()) == made if made else not folder.exists()
    for caller in made:
        path = key_file(fleet, caller)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert f"created caller {caller}'s key: {path.resolve()}" in result.output
        [key] = parse_keys(path.read_text())
        assert key.key.startswith("sk-mp-") and len(key.key) > 40 and key.not_after is None
    if made:
        state = fleet / ".modelplane"
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert (state / ".gitignore").read_text() == GITIGNORE
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not all_keys(fleet) or all_keys(fleet).split()[0] not in result.output
    if code == 2:
        assert "no caller nobody in spec.auth (callers: app, ops)" in result.output


def test_keys_create_never_overwrites(fleet: Path) -> None:
    assert keys("create", str(fleet), "--caller", "app").exit_code == 0
    before = key_file(fleet, "app").read_text()
    # Every caller: the existing key is kept, the missing one made.
    result = keys("create", str(fleet))
    assert result.exit_code == 0, result.output
    assert "kept caller app" in result.output and "created caller ops's key" in result.output
    # Named: refused, nothing written.
    key_file(fleet, "ops").unlink()
    refused = keys("create", str(fleet), "--caller", "app", "--caller", "ops")
    assert refused.exit_code == 1
    assert "a key exists, not overwritten: caller app" in refused.output
    assert "keys rotate" in refused.output and "Nothing was written" in refused.output
    assert not key_file(fleet, "ops").exists()
    assert key_file(fleet, "app").read_text() == before


def test_keys_create_show_prints_the_new_keys_on_stdout(fleet: Path) -> None:
    result = keys("create", str(fleet), "--show")
    assert result.exit_code == 0, result.output
    for caller in ("app", "ops"):
        key = key_file(fleet, caller).read_text().strip()
        assert f"{caller}: {key}" in result.stdout


def test_keys_create_refuses_a_caller_whose_key_is_not_a_file_it_keeps(fleet: Path) -> None:
    spec = fleet / "fleet.yaml"
    spec.write_text(
        spec.read_text()
        .replace("file:.modelplane/callers/ops", "ops-keys")
        .replace("file:.modelplane/callers/app", "file:app.key")
    )
    for caller, why in (("ops", "MODELPLANE_SECRET_OPS_KEYS_KEY"), ("app", "outside .modelplane/")):
        result = keys("create", str(fleet), "--caller", caller)
        assert result.exit_code == 2 and why in result.output, result.output
    result = keys("create", str(fleet))
    assert result.exit_code == 0 and "skipped caller ops" in result.output
    assert not (fleet / "app.key").exists() and not (fleet / ".modelplane").exists()


@pytest.mark.parametrize(
    ("grace", "old_end"),
    [("24h", timedelta(hours=24)), ("30m", timedelta(minutes=30)), ("0", timedelta(0))],
)
def test_keys_rotate_appends_a_key_and_ends_the_old_after_the_grace(
    fleet: Path, grace: str, old_end: timedelta
) -> None:
    assert keys("create", str(fleet)).exit_code == 0
    [old] = parse_keys(key_file(fleet, "app").read_text())
    ops = key_file(fleet, "ops").read_text()
    before = datetime.now(UTC).replace(microsecond=0)
    result = keys("rotate", str(fleet), "--caller", "app", "--grace", grace)
    after = datetime.now(UTC)
    assert result.exit_code == 0, result.output
    first, new = parse_keys(key_file(fleet, "app").read_text())
    assert first.key == old.key and new.key != old.key and new.not_after is None
    assert first.not_after is not None and before + old_end <= first.not_after <= after + old_end
    assert stat.S_IMODE(key_file(fleet, "app").stat().st_mode) == 0o600
    assert key_file(fleet, "ops").read_text() == ops  # another caller untouched
    assert old.key not in result.output and new.key not in result.output
    assert "modelplane up" in result.output
    assert sorted(p.name for p in key_file(fleet, "app").parent.iterdir()) == ["app", "ops"]


def test_keys_rotate_twice_keeps_the_earlier_end_and_drops_ended_keys(fleet: Path) -> None:
    path = key_file(fleet, "app")
    path.parent.mkdir(parents=True)
    path.write_text(
        "sk-gone notAfter=2020-01-01T00:00:00Z\nsk-soon notAfter=2999-01-01T00:00:00Z\n"
    )
    # `soon` ends in 2999 unless the grace ends earlier; `gone` has ended: dropped.
    result = keys("rotate", str(fleet), "--caller", "app", "--grace", "1h", "--show")
    assert result.exit_code == 0, result.output
    soon, new = parse_keys(path.read_text())
    assert soon.key == "sk-soon" and soon.not_after is not None
    assert soon.not_after < datetime.now(UTC) + timedelta(hours=1, minutes=1)
    assert f"app: {new.key}" in result.stdout and "dropped 1 expired" in result.output
    again = keys("rotate", str(fleet), "--caller", "app", "--grace", "24h")
    assert again.exit_code == 0
    soon2, new2, newest = parse_keys(path.read_text())
    assert soon2 == soon  # an earlier end is never pushed later
    assert new2.key == new.key and new2.not_after is not None and newest.not_after is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--caller", "app"], "does not exist (`modelplane keys create"),
        (["--caller", "nobody"], "no caller nobody"),
        (["--caller", "app", "--grace", "soon"], "is not a duration"),
    ],
)
def test_keys_rotate_refuses(fleet: Path, args: list[str], says: str) -> None:
    result = keys("rotate", str(fleet), *args)
    assert result.exit_code == 2 and says in result.output, result.output


def test_keys_list_shows_callers_counts_and_ends_never_keys(fleet: Path) -> None:
    missing = keys("list", str(fleet), "-o", "json")
    assert missing.exit_code == 0
    rows = {r["caller"]: r for r in json.loads(missing.stdout)["callers"]}
    assert rows["app"]["keys"] == 0 and "keys create" in rows["app"]["problem"]
    assert keys("create", str(fleet)).exit_code == 0
    assert keys("rotate", str(fleet), "--caller", "app", "--grace", "2h").exit_code == 0
    listed = keys("list", str(fleet), "-o", "json")
    rows = {r["caller"]: r for r in json.loads(listed.stdout)["callers"]}
    app: dict[str, Any] = rows["app"]
    assert app["keys"] == 2 and app["notAfter"][1] is None and app["notAfter"][0].endswith("Z")
    assert rows["ops"]["keys"] == 1 and rows["ops"]["notAfter"] == [None]
    assert app["source"] == str(key_file(fleet, "app").resolve())
    table = keys("list", str(fleet))
    assert table.exit_code == 0 and "never" in table.output and app["notAfter"][0] in table.output
    for text in (listed.output, table.output):
        assert not any(k.split()[0] in text for k in all_keys(fleet).splitlines())


def test_keys_list_reads_keys_given_by_the_environment(fleet: Path) -> None:
    env = {
        "MODELPLANE_SECRET_FILE__MODELPLANE_CALLERS_APP_KEY": "sk-x notAfter=2020-01-01T00:00:00Z"
    }
    listed = keys("list", str(fleet), "-o", "json", env=env)
    [app] = [r for r in json.loads(listed.stdout)["callers"] if r["caller"] == "app"]
    assert app["source"].startswith("environment MODELPLANE_SECRET_")
    assert app["keys"] == 0 and app["expired"] == 1 and app["problem"] == "every key has expired"
    assert "sk-x" not in listed.output


def test_keys_on_a_fleet_without_auth(tmp_path: Path) -> None:
    target = tmp_path / "local"
    shutil.copytree(ROOT / "specs" / "local", target, ignore=shutil.ignore_patterns(".modelplane"))
    result = keys("create", str(target))
    assert result.exit_code == 2 and "no InferenceGateway with spec.auth" in result.output
