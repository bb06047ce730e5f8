"""Security review M3 (docs/architecture.md, "Security"; api.md "Keys"): callers' keys are
never made silently by `up`, `preview` or `reconcile`; a caller has several keys, each with an
optional end (`notAfter`), so a rotation overlaps; the callers table carries every unexpired
key's hash and end, and authz and the OpenAI router refuse an ended key by their clock.
Select with `pytest -k "keys or security"`.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from modelplane import authz, router
from modelplane.caller_keys import CallerKey, KeyFormatError, format_keys, parse_keys, rfc3339
from modelplane.components.gateway import callers_table

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
# The release before keys could end: its authz must read the new table during a roll.
OLD_RELEASE = "fb5735e9d93b769c2e76dd0c8658a0cbd5bbf16c"


def _cli() -> Any:
    from modelplane.cli import app, commands  # noqa: F401  (registers every verb)

    return app


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(ROOT / "specs" / name, target, ignore=shutil.ignore_patterns(".modelplane"))
    return target


# --- the key text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sk-one\n", [CallerKey("sk-one")]),  # what modelplane wrote before: one key
        ("  sk-one  ", [CallerKey("sk-one")]),
        (
            "# rotated\nsk-old notAfter=2026-11-29T12:00:00Z\n\nsk-new\n",
            [CallerKey("sk-old", T0), CallerKey("sk-new")],
        ),
        ("sk-old notAfter=2026-11-29T13:00:00+01:00", [CallerKey("sk-old", T0)]),
    ],
)
def test_keys_text_is_one_key_a_line_with_an_optional_end(
    text: str, expected: list[CallerKey]
) -> None:
    assert parse_keys(text) == expected
    assert parse_keys(format_keys(expected)) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "holds no key"),
        ("# only a comment\n", "holds no key"),
        ("sk-a expires=2026-11-29T12:00:00Z", "unknown attribute 'expires'"),
        ("sk-a notAfter=tomorrow", "not an RFC 3339 time"),
        ("sk-a notAfter=2026-11-29T12:00:00", "not an RFC 3339 time"),  # no zone
        ("sk-a sk-b", "unknown attribute 'sk-b'"),
    ],
)
def test_keys_text_malformed_is_refused_without_the_key(text: str, says: str) -> None:
    with pytest.raises(KeyFormatError) as raised:
        parse_keys(text, where="the keys of x")
    assert says in str(raised.value) and "the keys of x" in str(raised.value)
    assert "sk-a" not in str(raised.value)


# --- the callers table ----------------------------------------------------------------------


def _h(key: str) -> str:
    return authz.key_hash(key)


END = "2026-11-30T12:00:00Z"


@pytest.mark.parametrize(
    ("keys", "callers", "not_after"),
    [
        # One key without an end: the table is what it always was (no `notAfter`).
        ({"dev": "sk-dev\n"}, {_h("sk-dev"): "dev"}, None),
        # A rotation: both keys, the old one with its end.
        (
            {"dev": f"sk-old notAfter={END}\nsk-new\n", "ops": "sk-ops"},
            {_h("sk-old"): "dev", _h("sk-new"): "dev", _h("sk-ops"): "ops"},
            {_h("sk-old"): END},
        ),
        # A key already ended when `up` runs is left out.
        (
            {"dev": "sk-gone notAfter=2026-11-29T11:59:59Z\nsk-new\n"},
            {_h("sk-new"): "dev"},
            None,
        ),
    ],
)
def test_keys_callers_table_format(
    keys: dict[str, str], callers: dict[str, str], not_after: dict[str, str] | None
) -> None:
    table = json.loads(callers_table(keys, now=T0))
    assert table["callers"] == callers and table["open"] is False
    assert table.get("notAfter") == not_after
    text = callers_table(keys, now=T0)
    assert not any(k in text for k in ("sk-dev", "sk-old", "sk-new", "sk-ops"))


def _old_authz(tmp_path: Path) -> ModuleType:
    """modelplane/authz.py of the release before keys could end (from git history)."""
    import importlib.util

    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{OLD_RELEASE}:modelplane/authz.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"git history without {OLD_RELEASE} (a shallow checkout)")
    assert "notAfter" not in source
    path = tmp_path / "old_authz.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_authz", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_keys_table_is_read_by_the_previous_authz_during_a_roll(tmp_path: Path) -> None:
    """The previous release's authz (still running while its pods are replaced) reads the new
    table: every published key lets its caller in (the end is not enforced until the new authz
    runs, never a key refused that the new one lets in)."""
    old = _old_authz(tmp_path)
    path = tmp_path / "callers.json"
    path.write_text(callers_table({"dev": f"sk-old notAfter={END}\nsk-new\n"}, "hop", now=T0))
    keys = old.Keys(path)
    assert keys.caller("sk-old") == "dev" and keys.caller("sk-new") == "dev"
    assert keys.caller("sk-other") is None
    assert keys.front_door is not None and keys.open is False


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at.timestamp()


@pytest.mark.parametrize(
    ("at", "key", "caller"),
    [
        (T0, "sk-old", "dev"),  # in the grace period: old and new
        (T0, "sk-new", "dev"),
        (T0 + timedelta(hours=23, minutes=59), "sk-old", "dev"),
        (T0 + timedelta(hours=24), "sk-old", None),  # ended, with no new table
        (T0 + timedelta(hours=24), "sk-new", "dev"),
        (T0 + timedelta(days=400), "sk-new", "dev"),
        (T0, "sk-other", None),
    ],
)
def test_keys_authz_accepts_old_and_new_during_the_grace_and_refuses_after(
    tmp_path: Path, at: datetime, key: str, caller: str | None
) -> None:
    path = tmp_path / "callers.json"
    end = rfc3339(T0 + timedelta(hours=24))
    path.write_text(callers_table({"dev": f"sk-old notAfter={end}\nsk-new\n"}, now=T0))
    keys = authz.Keys(path, clock=Clock(at))
    assert keys.caller(key) == caller


def test_keys_authz_refuses_a_key_whose_end_does_not_parse(tmp_path: Path) -> None:
    path = tmp_path / "callers.json"
    table = {
        "callers": {_h("sk-a"): "a", _h("sk-b"): "b"},
        "notAfter": {_h("sk-a"): "soon"},
        "open": False,
    }
    path.write_text(json.dumps(table))
    keys = authz.Keys(path, clock=Clock(T0))
    assert keys.caller("sk-a") is None and keys.caller("sk-b") == "b"  # fail closed


# --- the OpenAI router reads the same table ----------------------------------------------------


@pytest.fixture
def openai_router(tmp_path: Path) -> Iterator[tuple[int, Clock]]:
    """router.py with a fake clock in front of nothing (GET /v1/models needs no upstream)."""
    clock = Clock(T0)
    end = rfc3339(T0 + timedelta(hours=1))
    (tmp_path / "callers.json").write_text(
        callers_table({"dev": f"sk-old notAfter={end}\nsk-new\n"}, now=T0)
    )
    models = {"models": {"qwen": {"service": "demo/chat", "path": "/demo/chat", "ready": True}}}
    (tmp_path / "models.json").write_text(json.dumps(models))
    keys = authz.Keys(tmp_path / "callers.json", clock=clock)
    handler = router.make_handler(
        keys,
        router.Table(tmp_path / "models.json"),
        router.Upstream("http://127.0.0.1:9", None),
        router.Usage(),
    )
    server = authz.BoundedServer(("127.0.0.1", 0), handler, 16)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server.server_address[1], clock
    finally:
        server.shutdown()


def _models(port: int, key: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("later", "old", "new"),
    [(timedelta(0), 200, 200), (timedelta(minutes=59), 200, 200), (timedelta(hours=1), 401, 200)],
)
def test_keys_router_accepts_old_and_new_during_the_grace_and_refuses_after(
    openai_router: tuple[int, Clock], later: timedelta, old: int, new: int
) -> None:
    port, clock = openai_router
    clock.at = T0 + later
    assert (_models(port, "sk-old"), _models(port, "sk-new")) == (old, new)


# --- `up`, `preview`, `reconcile` make no key ---------------------------------------------------


@pytest.mark.parametrize("fleet", ["quickstart", "multicloud", "frontier"])
def test_security_keys_missing_in_a_non_interactive_up_are_an_error_listing_all(
    tmp_path: Path, fleet: str
) -> None:
    target = _copy(fleet, tmp_path)
    lock = target / "modelplane.lock.yaml"
    before = lock.read_text() if lock.exists() else None
    result = CliRunner().invoke(
        _cli(),
        ["up", str(target), "--yes"],
        env={"PULUMI_CONFIG_PASSPHRASE": "x", "COLUMNS": "2000", "PULUMI_BACKEND_URL": None},
    )
    assert result.exit_code == 2, result.output
    [line] = [x for x in result.output.splitlines() if x.strip()]  # one line
    assert line.startswith("error: 2 caller key(s) missing")
    for caller in ("app", "ops"):
        assert f"caller {caller} (file {target.resolve()}/.modelplane/callers/{caller})" in line
    assert f"`modelplane keys create {target} --caller app --caller ops`" in line
    assert "Traceback" not in result.output
    assert not (target / ".modelplane" / "callers").exists()  # nothing made
    assert (lock.read_text() if lock.exists() else None) == before  # refused before anything


def test_security_keys_first_interactive_up_on_a_local_backend_makes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one exception: the first `up` in a terminal on a local backend (no gateway stack in
    it yet) makes the missing keys and says so; once the gateway stack exists it does not."""
    from modelplane.cli import engine_verbs
    from modelplane.driver.fleet import Fleet
    from modelplane.errors import UserError

    class Stop(UserError):
        pass

    def stop(self: Fleet, *args: object, **kwargs: object) -> None:
        raise Stop("stopped before the engine")

    target = _copy("quickstart", tmp_path)
    monkeypatch.setattr(engine_verbs, "_interactive", lambda: True)
    monkeypatch.setattr(Fleet, "plan", stop)
    env = {
        "PULUMI_CONFIG_PASSPHRASE": "x",
        "COLUMNS": "2000",
        "PULUMI_BACKEND_URL": None,
        # Its front door's certificate (security review M5) comes from the environment here.
        "MODELPLANE_SECRET_FRONT_DOOR_TLS_CRT": "-----BEGIN CERTIFICATE-----\n",
        "MODELPLANE_SECRET_FRONT_DOOR_TLS_KEY": "-----BEGIN PRIVATE KEY-----\n",
    }
    without_tls = {k: (None if "TLS" in k else v) for k, v in env.items()}
    wrong = CliRunner().invoke(_cli(), ["up", str(target)], env=without_tls)
    assert wrong.exit_code == 2 and "spec.tls.certificate" in wrong.output
    assert not (target / ".modelplane" / "callers").exists()  # nothing made while invalid
    made = CliRunner().invoke(_cli(), ["up", str(target)], env=env)
    assert "stopped before the engine" in made.output, made.output
    for caller in ("app", "ops"):
        path = target.resolve() / ".modelplane" / "callers" / caller
        assert path.stat().st_mode & 0o777 == 0o600
        assert f"created caller key {path}" in made.output
        assert path.read_text().strip() not in made.output
    # A later interactive `up` whose key went missing: the gateway stack exists, no new key.
    stacks = target / ".modelplane" / "state" / ".pulumi" / "stacks" / "modelplane-quickstart"
    stacks.mkdir(parents=True)
    (stacks / "gateway.json").write_text("{}")
    (target / ".modelplane" / "callers" / "ops").unlink()
    refused = CliRunner().invoke(_cli(), ["up", str(target)], env=env)
    assert refused.exit_code == 2 and "1 caller key(s) missing: caller ops" in refused.output
    assert not (target / ".modelplane" / "callers" / "ops").exists()


@pytest.mark.parametrize(
    ("backend", "gateway_stack", "first"),
    [
        (None, False, True),
        (None, True, False),
        ("s3://bucket/state", False, False),
        ("postgres://u@db/state", False, False),
    ],
)
def test_security_keys_first_local_up_is_a_file_backend_without_a_gateway_stack(
    tmp_path: Path, backend: str | None, gateway_stack: bool, first: bool
) -> None:
    from modelplane.driver.fleet import Fleet

    target = _copy("quickstart", tmp_path)
    if gateway_stack:
        stacks = target / ".modelplane" / "state" / ".pulumi" / "stacks" / "p"
        stacks.mkdir(parents=True)
        (stacks / "gateway.json.gz").write_bytes(b"")
    fleet = Fleet.load(target, backend=backend, env={"PULUMI_CONFIG_PASSPHRASE": "x"})
    assert fleet.first_local_up() is first


def test_security_keys_preview_makes_none_and_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelplane.driver.fleet import Fleet
    from modelplane.errors import UserError

    def stop(self: Fleet, *args: object, **kwargs: object) -> None:
        raise UserError("stopped before the engine")

    target = _copy("quickstart", tmp_path)
    monkeypatch.setattr(Fleet, "plan", stop)
    result = CliRunner().invoke(
        _cli(),
        ["preview", str(target)],
        env={"PULUMI_CONFIG_PASSPHRASE": "x", "COLUMNS": "2000", "PULUMI_BACKEND_URL": None},
    )
    assert "warning: 2 caller key(s) missing" in result.output
    assert not (target / ".modelplane" / "callers").exists()


def test_security_keys_missing_in_the_reconcile_pod_is_said_each_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconcile Deployment copies the fleet into an emptyDir: a missing key is the round's
    error (the loop goes on), never a new key."""
    from modelplane.driver.fleet import Fleet
    from modelplane.driver.reconcile import Reconciler

    target = _copy("quickstart", tmp_path)
    env = {"PULUMI_CONFIG_PASSPHRASE": "x"}

    def up_only(self: Reconciler, current: object) -> None:
        Fleet.load(self.fleet_dir, env=self.env).check_gateway_secrets()

    monkeypatch.setattr(Reconciler, "_round", up_only)
    done = Reconciler(target, env=env).round()
    assert done.error is not None and "2 caller key(s) missing" in done.error
    assert "modelplane keys create" in done.error
    assert not (target / ".modelplane" / "callers").exists()


# --- what `up` checks and publishes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("sk-a bogus\n", "unknown attribute 'bogus'"),
        ("sk-a notAfter=2020-01-01T00:00:00Z\n", "every key of 'file:team-a.key' has expired"),
        ("sk-a notAfter=2020-01-01T00:00:00Z\nsk-b\n", None),
    ],
)
def test_keys_malformed_or_all_ended_are_reported_before_up(
    tmp_path: Path, text: str, says: str | None
) -> None:
    from modelplane.api.loader import load_fleet
    from modelplane.secrets import gateway_secret_errors
    from tests.components.test_gateway_auth import gateway_fleet

    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n"
        "    - {name: team-a, secretRef: {name: 'file:team-a.key', key: k}}\n",
    )
    (target / "team-a.key").write_text(text)
    errors = gateway_secret_errors(load_fleet(target).fleet, target, {})
    if says is None:
        assert errors == []
    else:
        [error] = errors
        assert says in error.message and error.path == "spec.auth.callers[0].secretRef"
        assert "sk-a" not in error.message


def test_keys_an_ended_key_changes_the_gateways_fingerprint(tmp_path: Path) -> None:
    """After a key's end the next `up` runs the gateway stack again and leaves its hash out of
    the table (authz refuses it already); a key file without an ended key hashes as before."""
    import hashlib

    from modelplane.api.loader import load_fleet
    from modelplane.driver.fingerprint import secret_digests
    from modelplane.stacks import stack_units
    from tests.components.test_gateway_auth import gateway_fleet

    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n"
        "    - {name: team-a, secretRef: {name: 'file:team-a.key', key: k}}\n",
    )
    fleet = load_fleet(target).fleet
    from modelplane.api.placement_lock import PlacementLock

    [unit] = [u for u in stack_units(fleet, PlacementLock()) if u.name == "gateway"]
    text = "sk-b\n"
    (target / "team-a.key").write_text(text)
    digest = secret_digests(fleet, unit, {}, target)["file:team-a.key/k"]
    assert digest == hashlib.sha256(text.encode()).hexdigest()
    text = "sk-a notAfter=2020-01-01T00:00:00Z\nsk-b\n"
    (target / "team-a.key").write_text(text)
    digest = secret_digests(fleet, unit, {}, target)["file:team-a.key/k"]
    assert digest != hashlib.sha256(text.encode()).hexdigest()


def test_keys_call_sends_the_newest_unexpired_key(tmp_path: Path) -> None:
    from modelplane.api.loader import load_fleet
    from modelplane.cli.call import caller_key
    from tests.components.test_gateway_auth import gateway_fleet

    target = gateway_fleet(
        tmp_path,
        "  auth:\n    allowInsecure: true\n    callers:\n"
        "    - {name: team-a, secretRef: {name: 'file:team-a.key', key: k}}\n",
    )
    gateway = load_fleet(target).fleet.gateway
    (target / "team-a.key").write_text("sk-old notAfter=2999-01-01T00:00:00Z\nsk-new\n")
    assert caller_key(gateway, None, env={}, base_dir=target) == ("team-a", "sk-new", "")
    (target / "team-a.key").write_text("sk-new\nsk-gone notAfter=2020-01-01T00:00:00Z\n")
    assert caller_key(gateway, None, env={}, base_dir=target) == ("team-a", "sk-new", "")
    (target / "team-a.key").write_text("sk-gone notAfter=2020-01-01T00:00:00Z\n")
    assert "every key has expired" in caller_key(gateway, None, env={}, base_dir=target)[2]
