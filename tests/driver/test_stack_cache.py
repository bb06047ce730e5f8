"""The stack cache (modelplane.driver.stack_cache) and the CLI call log
(modelplane.driver.engine_calls): pure tables; the real engine's use of them is in
tests/driver/test_engine_local.py."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from modelplane.driver.engine_calls import (
    Call,
    CallLog,
    describe,
    engine_command,
    read_log,
    short_call_env,
)
from modelplane.driver.stack_cache import (
    DOCUMENT,
    Entry,
    Marker,
    StackCache,
    outputs_digest,
)
from modelplane.driver.state import FileStore

T = 1_800_000_000.0


@pytest.mark.parametrize(
    ("entry", "now", "describes"),
    [
        # confirmed: exactly the recorded update
        (Entry("f", "o", {}, marker=Marker(T, 5)), Marker(T, 5), True),
        (Entry("f", "o", {}, marker=Marker(T, 5)), Marker(T + 0.001, 5), False),
        (Entry("f", "o", {}, marker=Marker(T, 5)), Marker(T, 6), False),
        # an update in progress, or a stack the backend lists without a last update
        (Entry("f", "o", {}, marker=Marker(T, 5)), Marker(T, 5, in_progress=True), False),
        (Entry("f", "o", {}, marker=Marker(T, 5)), Marker(None, 5), False),
        # pending: the backend's last update ended while our update ran
        (Entry("f", "o", {}, window=(T, T + 3)), Marker(T + 2.9, 7), True),
        (Entry("f", "o", {}, window=(T, T + 3)), Marker(T + 3.4, 7), True),  # slack
        (Entry("f", "o", {}, window=(T, T + 3)), Marker(T + 4, 7), False),  # someone after us
        (Entry("f", "o", {}, window=(T, T + 3)), Marker(T - 1, 7), False),  # before us
        # nothing recorded
        (Entry("f", "o", {}), Marker(T, 5), False),
    ],
)
def test_an_entry_describes_the_stack_only_at_its_own_update(
    entry: Entry, now: Marker, describes: bool
) -> None:
    assert entry.describes(now) is describes


def test_marker_from_a_stack_summary_in_utc_milliseconds() -> None:
    summary = SimpleNamespace(
        last_update=datetime(2026, 11, 28, 15, 35, 36, 358000),
        resource_count=5,
        update_in_progress=None,
    )
    marker = Marker.of(summary)
    assert marker == Marker(1795880136.358, 5, False)
    assert Marker.of(
        SimpleNamespace(last_update=None, resource_count=None, update_in_progress=True)
    ) == Marker(None, None, True)


def test_outputs_digest_hashes_values_and_never_holds_them() -> None:
    secret = {"kubeconfig": "token-abc", "address": "10.0.0.1"}
    digest = outputs_digest(secret)
    assert "token-abc" not in digest and len(digest) == 64
    assert digest == outputs_digest({"address": "10.0.0.1", "kubeconfig": "token-abc"})
    assert digest != outputs_digest({**secret, "kubeconfig": "token-abd"})
    assert outputs_digest(None) == outputs_digest({})


def _cache(tmp_path: Path, markers: dict[str, Marker]) -> StackCache:
    return StackCache(FileStore(tmp_path), markers)


def test_an_update_is_confirmed_by_the_next_runs_listing_and_survives_a_reload(
    tmp_path: Path,
) -> None:
    first = _cache(tmp_path, {})
    assert first.updated_here("deploy-a") is None
    first.updated("deploy-a", "fp1", {"k": "secret-v"}, {"k": "[secret]"}, (T, T + 2))
    assert first.valid("deploy-a") is None  # this run has no listing of that update yet
    assert first.updated_here("deploy-a") == "fp1"  # but knows its own inputs
    first.save()
    stored = json.loads((tmp_path / f"{DOCUMENT}.json").read_text())
    assert "secret-v" not in json.dumps(stored)  # masked and hashed only

    second = _cache(tmp_path, {"deploy-a": Marker(T + 1.5, 9)})
    assert second.updated_here("deploy-a") is None  # another process
    entry = second.valid("deploy-a")
    assert entry is not None and entry.fingerprint == "fp1" and entry.marker == Marker(T + 1.5, 9)
    second.save()
    third = _cache(tmp_path, {"deploy-a": Marker(T + 1.5, 9)})
    assert third.valid("deploy-a") == entry
    # Anyone's later update (a hand-run `pulumi up -s`, a refresh) invalidates it.
    fourth = _cache(tmp_path, {"deploy-a": Marker(T + 60, 9)})
    assert fourth.valid("deploy-a") is None


def test_seen_records_the_listing_of_this_run_and_forget_drops_the_entry(
    tmp_path: Path,
) -> None:
    cache = _cache(tmp_path, {"gateway": Marker(T, 3), "busy": Marker(T, 3, in_progress=True)})
    cache.seen("gateway", "fp", {"a": 1}, {"a": 1})
    cache.seen("busy", "fp", {}, {})
    cache.seen("unlisted", "fp", {}, {})
    entry = cache.valid("gateway")
    assert entry is not None and entry.outputs == outputs_digest({"a": 1})
    assert cache.valid("busy") is None and cache.valid("unlisted") is None
    cache.forget("gateway")
    assert cache.valid("gateway") is None
    cache.save()
    assert json.loads((tmp_path / f"{DOCUMENT}.json").read_text()) == {}


@pytest.mark.parametrize("document", ["not json", '{"x": {"fingerprint": 1}}', "[]", '{"x": 3}'])
def test_an_unreadable_document_is_an_empty_cache(tmp_path: Path, document: str) -> None:
    (tmp_path / f"{DOCUMENT}.json").write_text(document)
    cache = _cache(tmp_path, {"x": Marker(T, 1)})
    assert cache.valid("x") is None


@pytest.mark.parametrize(
    ("args", "verb", "stack"),
    [
        (["--non-interactive", "up", "--yes", "--stack", "gateway"], "up", "gateway"),
        (["stack", "output", "--json", "--show-secrets", "--stack", "a"], "stack output", "a"),
        (["--non-interactive", "stack", "ls", "--json"], "stack ls", None),
        (["config", "set", "--stack=s1", "--secret", "k", "v"], "config set", "s1"),
        (["preview", "--color", "never", "-s", "x"], "preview", "x"),
        (["version"], "version", None),
    ],
)
def test_a_cli_call_is_named_by_its_verb_and_stack(
    args: list[str], verb: str, stack: str | None
) -> None:
    assert describe(args) == (verb, stack)


def test_the_call_log_counts_engine_runs_apart_and_mirrors_to_its_file(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    log = CallLog(path)
    calls = [
        Call("stack ls", None, 0.1, True),
        Call("up", "gateway", 2.0, True),
        Call("stack output", "gateway", 0.3, True),
        Call("destroy", "deploy-a", 1.5, False),
    ]
    for call in calls:
        log.add(call)
    summary: dict[str, Any] = log.summary()
    assert summary["engineRuns"] == 2 and summary["otherCalls"] == 2
    assert summary["engineSeconds"] == 3.5
    assert [c.verb for c in log.engine_runs()] == ["up", "destroy"]
    path.write_text(path.read_text() + '{"verb": "up", "sec')  # a line cut by a kill
    assert read_log(path) == calls
    assert read_log(tmp_path / "missing.jsonl") == []


@pytest.mark.parametrize(
    ("args", "env", "collected"),
    [
        (["stack", "ls", "--json"], {}, False),  # a short call: no collection below 1 GiB
        (["stack", "output", "--show-secrets", "--stack", "a"], {}, False),
        (["up", "--yes", "--stack", "a"], {}, True),  # an engine run keeps Go's default
        (["destroy", "--yes", "--stack", "a"], {}, True),
        (["stack", "ls", "--json"], {"GOGC": "50"}, True),  # the user's own setting wins
        (["stack", "ls", "--json"], {"GOMEMLIMIT": "200MiB"}, True),
    ],
)
def test_short_cli_calls_run_without_go_garbage_collection(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    collected: bool,
) -> None:
    """The environment each call really gets, from a `pulumi` that prints it."""
    for key in ("GOGC", "GOMEMLIMIT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cli = tmp_path / "bin" / "pulumi"
    cli.parent.mkdir()
    cli.write_text('#!/bin/sh\necho "GOGC=${GOGC:-} GOMEMLIMIT=${GOMEMLIMIT:-}"\n')
    cli.chmod(0o755)
    command = engine_command(tmp_path, "3.274.1", CallLog(None))
    printed = command.run(list(args), str(tmp_path), {}).stdout
    expected = "GOGC=off GOMEMLIMIT=1GiB"
    assert (printed != expected) == collected, printed
    assert short_call_env({}) == ({} if env else {"GOGC": "off", "GOMEMLIMIT": "1GiB"})
