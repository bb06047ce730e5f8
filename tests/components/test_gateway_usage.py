"""Per-caller counts from access-log lines (issue 26 item 4; modelplane/observe/usage.py) and
`modelplane usage`. Select with `pytest -k auth`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelplane.observe.usage import Counts, count_usage, service_of


def line(path: str, status: int, caller: str | None = None, **extra: object) -> str:
    entry: dict[str, object] = {"RequestPath": path, "DownstreamStatus": status, **extra}
    if caller is not None:
        entry["request_X-Modelplane-Caller"] = caller
    return json.dumps(entry)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([line("/demo/chat/v1/chat/completions", 200, "dev")], {("dev", "demo/chat"): Counts(1)}),
        ([line("/demo/chat/v1/x", 502, "dev")], {("dev", "demo/chat"): Counts(1, errors=1)}),
        ([line("/demo/chat/v1/x", 0, "dev")], {("dev", "demo/chat"): Counts(1, errors=1)}),
        ([line("/demo/chat/v1/x", 429, "dev")], {("dev", "demo/chat"): Counts(1)}),
        ([line("/demo/chat/v1/x", 401)], {("-", "demo/chat"): Counts(1, refused=1)}),
        ([line("/demo/ops/v1/x", 403, "b")], {("b", "demo/ops"): Counts(1, refused=1)}),
        # Traefik's own log lines, broken lines and paths that are no service are skipped.
        (['time="..." level=error msg="x"', "{not json", line("/", 404)], {}),
        ([json.dumps({"level": "error", "msg": "x"})], {}),
    ],
    ids=["ok", "5xx", "no-answer", "429", "no-key", "not-listed", "noise", "own-log"],
)
def test_auth_usage_counts(lines: list[str], expected: dict) -> None:
    assert count_usage(lines) == expected


def test_auth_usage_service_of_paths() -> None:
    assert service_of("/demo/chat/v1/chat/completions?x=1") == "demo/chat"
    assert service_of("/demo/chat/") == "demo/chat"
    assert service_of("/demo") is None


def test_auth_usage_command_reads_the_dev_fleets_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from modelplane.cli import app, commands  # noqa: F401  (registers every verb)

    root = Path(__file__).resolve().parents[2]
    state = tmp_path / "state"
    log = state / "dev-1" / "logs" / "front-door-access.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "\n".join(
            [
                line("/demo/chat/v1/x", 200, "dev"),
                line("/demo/chat/v1/x", 200, "dev"),
                line("/demo/chat/v1/x", 503, "batch"),
                line("/demo/chat/v1/x", 401),
            ]
        )
        + "\n"
    )
    monkeypatch.setenv("MODELPLANE_DEV_FLEET_STATE", str(state))
    runner = CliRunner()
    result = runner.invoke(app, ["usage", str(root / "specs" / "dev"), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["usage"] == [
        {"caller": "-", "service": "demo/chat", "requests": 1, "errors": 0, "refused": 1},
        {"caller": "batch", "service": "demo/chat", "requests": 1, "errors": 1, "refused": 0},
        {"caller": "dev", "service": "demo/chat", "requests": 2, "errors": 0, "refused": 0},
    ]
    monkeypatch.setenv("MODELPLANE_DEV_FLEET_STATE", str(tmp_path / "nowhere"))
    missing = runner.invoke(app, ["usage", str(root / "specs" / "dev")])
    assert missing.exit_code != 0 and "--access-log" in missing.output
