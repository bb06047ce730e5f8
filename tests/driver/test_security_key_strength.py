"""Security review L8 (docs/architecture.md, "Security"; api.md "Keys"): the callers table
holds unsalted SHA-256 hashes, so a caller's key shorter than 32 characters is refused -- by
the driver before any stack runs (one line naming every such caller, where its key text is and
the line, never the key) and by the gateway stack's program (a hand-run `pulumi up -s
gateway`). The rule is one pure function, modelplane/caller_keys.py `short_key_lines`.
Select with `pytest -k "keys or security"`.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from modelplane.caller_keys import (
    MIN_KEY_LENGTH,
    KeyFormatError,
    new_key,
    parse_keys,
    short_key_lines,
)

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STRONG = "sk-mp-" + "S" * 43  # the length `new_key` makes
WEAK = "team-a-key"
WEAK_31 = "w" * 31
TLS_ENV = {
    "MODELPLANE_SECRET_FRONT_DOOR_TLS_CRT": "-----BEGIN CERTIFICATE-----\n",
    "MODELPLANE_SECRET_FRONT_DOOR_TLS_KEY": "-----BEGIN PRIVATE KEY-----\n",
}


# --- the rule -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        pytest.param(STRONG, [], id="new-key-length"),
        pytest.param("x" * MIN_KEY_LENGTH, [], id="exactly-32"),
        pytest.param(WEAK_31, [1], id="31"),
        pytest.param(WEAK, [1], id="team-a-key"),
        pytest.param(f"  {WEAK_31}  \n", [1], id="after-strip"),
        pytest.param(f"# old\n\n{WEAK}\n{STRONG}\n", [3], id="line-of-the-text"),
        pytest.param(f"{WEAK}\n{STRONG}\n{WEAK_31}\n", [1, 3], id="every-short-line"),
        pytest.param(f"{WEAK} notAfter=2026-11-29T11:59:59Z\n{STRONG}\n", [], id="ended-not-read"),
        pytest.param(f"{WEAK} notAfter=2026-11-29T12:00:00Z\n", [], id="ends-now"),
        pytest.param(f"{WEAK} notAfter=2026-11-30T12:00:00Z\n{STRONG}\n", [1], id="in-grace"),
    ],
)
def test_security_key_strength_rule(text: str, lines: list[int]) -> None:
    assert short_key_lines(text, NOW) == lines


def test_security_key_strength_rule_keeps_what_keys_create_makes() -> None:
    assert MIN_KEY_LENGTH == 32
    assert short_key_lines(new_key(), NOW) == []


@pytest.mark.parametrize("text", ["", "# nothing\n", f"{WEAK} bogus\n"])
def test_security_key_strength_rule_malformed_as_parse_keys(text: str) -> None:
    with pytest.raises(KeyFormatError) as parsed:
        parse_keys(text, where="x")
    with pytest.raises(KeyFormatError) as checked:
        short_key_lines(text, NOW, where="x")
    assert str(checked.value) == str(parsed.value)


# --- the driver, before any stack runs -------------------------------------------------------


def _quickstart(tmp_path: Path, keys: dict[str, str]) -> Path:
    """specs/quickstart (callers app and ops, keys kept in `.modelplane/callers/`) with the
    given key files."""
    target = tmp_path / "quickstart"
    shutil.copytree(
        ROOT / "specs" / "quickstart", target, ignore=shutil.ignore_patterns(".modelplane")
    )
    folder = target / ".modelplane" / "callers"
    folder.mkdir(parents=True)
    for caller, text in keys.items():
        (folder / caller).write_text(text)
    return target


def _own_sources(tmp_path: Path) -> Path:
    """A fleet whose callers' keys are the user's: a file in the fleet folder (team-a), the
    environment (batch), stack config (ops)."""
    from tests.components.test_gateway_auth import gateway_fleet

    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n"
        "    - {name: team-a, secretRef: {name: 'file:team-a.key', key: k}}\n"
        "    - {name: batch, secretRef: {name: keys, key: batch}}\n"
        "    - {name: ops, secretRef: {name: keys, key: ops}}\n",
    )
    (target / "Pulumi.gateway.yaml").write_text(
        "config:\n  modelplane:secrets.keys.ops:\n    secure: v1:abc\n"
    )
    return target


@pytest.mark.parametrize(
    ("files", "env", "says"),
    [
        pytest.param(
            {"team-a.key": f"{WEAK}\n"},
            {"MODELPLANE_SECRET_KEYS_BATCH": STRONG},
            [
                "1 caller(s)",
                "caller team-a (file {dir}/team-a.key, line 1)",
                "caller team-a: put a key of 32 characters or more in its source",
            ],
            id="file",
        ),
        pytest.param(
            {"team-a.key": f"# rotated\n{STRONG}\n{WEAK_31}\n"},
            {"MODELPLANE_SECRET_KEYS_BATCH": f"{WEAK}\n{STRONG}"},
            [
                "2 caller(s)",
                "caller team-a (file {dir}/team-a.key, line 3)",
                "caller batch (environment variable MODELPLANE_SECRET_KEYS_BATCH, line 1)",
                "caller team-a, batch: put a key of 32 characters or more in their source",
            ],
            id="every-caller-in-one-line",
        ),
    ],
)
def test_security_key_strength_driver_refuses_short_keys_before_any_stack(
    tmp_path: Path, files: dict[str, str], env: dict[str, str], says: list[str]
) -> None:
    from modelplane.driver.fleet import Fleet
    from modelplane.secrets import CallerKeysTooShort

    target = _own_sources(tmp_path)
    for name, text in files.items():
        (target / name).write_text(text)
    with pytest.raises(CallerKeysTooShort) as refused:
        Fleet.load(target, env=env).check_gateway_secrets()
    message = str(refused.value)
    assert "\n" not in message
    for part in [*says, "a caller's key needs at least 32 characters"]:
        assert part.format(dir=target.resolve()) in message, message
    assert "ops" not in message  # stack config: encrypted, the gateway program's to check
    assert WEAK not in message and WEAK_31 not in message and STRONG not in message
    assert "--grace 0" not in message  # no file modelplane keeps


@pytest.mark.parametrize(
    ("keys", "refused"),
    [
        pytest.param({"app": STRONG, "ops": STRONG}, [], id="strong"),
        pytest.param({"app": f"{WEAK}\n", "ops": STRONG}, ["app"], id="one"),
        pytest.param({"app": WEAK, "ops": f"{STRONG}\n{WEAK_31}"}, ["app", "ops"], id="both"),
        pytest.param(
            {"app": f"{WEAK} notAfter=2020-01-01T00:00:00Z\n{STRONG}\n", "ops": STRONG},
            [],
            id="ended",
        ),
    ],
)
def test_security_key_strength_kept_files_name_keys_rotate(
    tmp_path: Path, keys: dict[str, str], refused: list[str]
) -> None:
    from modelplane.driver.fleet import Fleet
    from modelplane.secrets import CallerKeysTooShort

    target = _quickstart(tmp_path, keys)
    fleet = Fleet.load(target, env=TLS_ENV)
    if not refused:
        assert fleet.check_gateway_secrets() == []
        return
    with pytest.raises(CallerKeysTooShort) as raised:
        fleet.check_gateway_secrets()
    message = str(raised.value)
    folder = target.resolve() / ".modelplane" / "callers"
    for caller in refused:
        assert f"caller {caller} (file {folder / caller}, line " in message
    callers = " ".join(f"--caller {c}" for c in refused)
    assert f"`modelplane keys rotate {target} {callers} --grace 0`" in message
    assert "in its source" not in message and "in their source" not in message
    assert WEAK not in message and WEAK_31 not in message


def test_security_key_strength_non_interactive_up_says_one_line_and_writes_nothing(
    tmp_path: Path,
) -> None:
    from modelplane.cli import app, commands  # noqa: F401  (registers every verb)

    target = _quickstart(tmp_path, {"app": f"{WEAK}\n", "ops": STRONG})
    lock = target / "modelplane.lock.yaml"
    before = lock.read_text() if lock.exists() else None
    result = CliRunner().invoke(
        app,
        ["up", str(target), "--yes"],
        env={
            "PULUMI_CONFIG_PASSPHRASE": "x",
            "COLUMNS": "2000",
            "PULUMI_BACKEND_URL": None,
            **TLS_ENV,
        },
    )
    assert result.exit_code == 2, result.output
    [line] = [x for x in result.output.splitlines() if x.strip()]
    assert line.startswith("error: 1 caller(s) with a key shorter than 32 characters: caller app")
    assert "Traceback" not in result.output and WEAK not in result.output
    assert (lock.read_text() if lock.exists() else None) == before
    assert not (target / ".modelplane" / "state").exists()  # no engine, no backend


def test_security_key_strength_reconcile_round_says_it_each_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelplane.driver.fleet import Fleet
    from modelplane.driver.reconcile import Reconciler

    target = _quickstart(tmp_path, {"app": STRONG, "ops": f"{WEAK}\n"})
    env = {"PULUMI_CONFIG_PASSPHRASE": "x", **TLS_ENV}

    def up_only(self: Reconciler, current: object) -> None:
        Fleet.load(self.fleet_dir, env=self.env).check_gateway_secrets()

    monkeypatch.setattr(Reconciler, "_round", up_only)
    reconciler = Reconciler(target, env=env)
    for _ in range(2):
        done = reconciler.round()
        assert done.error is not None and "caller ops (file " in done.error
        assert WEAK not in done.error


# --- the gateway stack's program ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch_file", "team_a_env", "says"),
    [
        pytest.param(STRONG, STRONG, None, id="strong"),
        pytest.param(
            f"{STRONG}\n{WEAK}\n",
            STRONG,
            "spec.auth caller batch: file {dir}/batch.key, line 2: a caller's key needs at "
            "least 32 characters",
            id="file",
        ),
        pytest.param(
            STRONG,
            WEAK_31,
            "spec.auth caller team-a: environment variable MODELPLANE_SECRET_KEYS_TEAM_A, "
            "line 1: a caller's key needs at least 32 characters",
            id="environment",
        ),
        pytest.param(
            f"{STRONG} bogus\n",
            STRONG,
            "spec.auth caller batch: file {dir}/batch.key, line 1: unknown attribute 'bogus'",
            id="malformed",
        ),
    ],
)
def test_security_key_strength_gateway_program_refuses_short_keys(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    batch_file: str,
    team_a_env: str,
    says: str | None,
) -> None:
    """What a hand-run `pulumi up -s gateway` runs (rendered here under mocks): a short key in
    any source fails the program, naming caller, source and line, never the key."""
    from modelplane.render import render_fleet
    from modelplane.render.runner import RenderError
    from tests.components.test_gateway_auth import local_fleet

    target = local_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n"
        "    - {name: team-a, secretRef: {name: keys, key: team-a}}\n"
        "    - {name: batch, secretRef: {name: 'file:batch.key', key: k}}\n",
    )
    (target / "batch.key").write_text(batch_file)
    monkeypatch.setenv("MODELPLANE_SECRET_KEYS_TEAM_A", team_a_env)

    def render() -> Any:
        return render_fleet(target, tmp_path / "out", stacks=["gateway"])

    if says is None:
        assert render().stacks
        return
    with pytest.raises(RenderError) as failed:
        render()
    message = str(failed.value)
    assert says.format(dir=target.resolve()) in message, message
    assert WEAK not in message and WEAK_31 not in message and STRONG not in message
