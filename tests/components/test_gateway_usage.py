"""Per-caller counts from access-log lines (issue 26 item 4; modelplane/observe/usage.py) and
`modelplane usage`. Select with `pytest -k auth`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelplane.observe.usage import Counts, count_usage, service_of


def line(path: str, status: int, caller: str | None = None, **extra: object) -> str:
    """An access-log line of a request the route `chat` took (``RouterName=None``: none)."""
    entry: dict[str, object] = {
        "RequestPath": path,
        "DownstreamStatus": status,
        "RouterName": "httproute-demo-chat-gw-modelplane-system-modelplane-ep-web-0@kubernetesgateway",
        **extra,
    }
    if caller is not None:
        entry["request_X-Modelplane-Caller"] = caller
    return json.dumps({k: v for k, v in entry.items() if v is not None})


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([line("/demo/chat/v1/chat/completions", 200, "dev")], {("dev", "demo/chat"): Counts(1)}),
        ([line("/demo/chat/v1/x", 502, "dev")], {("dev", "demo/chat"): Counts(1, errors=1)}),
        ([line("/demo/chat/v1/x", 0, "dev")], {("dev", "demo/chat"): Counts(1, errors=1)}),
        ([line("/demo/chat/v1/x", 429, "dev")], {("dev", "demo/chat"): Counts(1)}),
        ([line("/demo/chat/v1/x", 401)], {("-", "demo/chat"): Counts(1, refused=1)}),
        # Refused: the header is the client's (forwardAuth sets it only on its yes).
        ([line("/demo/ops/v1/x", 403, "b")], {("-", "demo/ops"): Counts(1, refused=1)}),
        # Traefik's own log lines, broken lines and paths that are no service are skipped.
        (['time="..." level=error msg="x"', "{not json", line("/", 404)], {}),
        ([json.dumps({"level": "error", "msg": "x"})], {}),
    ],
    ids=["ok", "5xx", "no-answer", "429", "no-key", "not-listed", "noise", "own-log"],
)
def test_auth_usage_counts(lines: list[str], expected: dict) -> None:
    assert count_usage(lines) == expected


# M1 (docs/architecture.md, "Security"): a caller name the client chose is never counted, and
# no crafted line crashes `usage` or reaches the terminal as markup.
FORGED = "team-a"
HOSTILE = [
    (
        "forged-no-key",
        [line("/demo/chat/v1/x", 401, FORGED)],
        {("-", "demo/chat"): Counts(1, refused=1)},
    ),
    (
        "forged-not-listed",
        [line("/demo/ops/v1/x", 403, FORGED)],
        {("-", "demo/ops"): Counts(1, refused=1)},
    ),
    # No route took it: neither the path nor the header is modelplane's.
    ("forged-unrouted", [line("/any/path", 404, FORGED, RouterName=None)], {}),
    ("forged-unrouted-service-path", [line("/demo/chat/v1/x", 404, FORGED, RouterName="")], {}),
    # The http->https redirect runs no key check; the client asks again over https.
    ("forged-redirect", [line("/demo/chat/v1/x", 301, FORGED)], {}),
    ("forged-redirect-308", [line("/demo/chat/v1/x", 308, FORGED)], {}),
    # Crafted values: wrong types, markup, control characters, a huge name, deep nesting.
    (
        "caller-not-text",
        [line("/demo/chat/v1/x", 200, None, **{"request_X-Modelplane-Caller": {"a": 1}})],
        {("-", "demo/chat"): Counts(1)},
    ),
    ("caller-huge", [line("/demo/chat/v1/x", 200, "a" * 10_000)], {("-", "demo/chat"): Counts(1)}),
    ("status-text", [line("/demo/chat/v1/x", "200", FORGED)], {}),  # type: ignore[arg-type]
    ("status-bool", [line("/demo/chat/v1/x", True, FORGED)], {}),  # type: ignore[arg-type]
    (
        "path-not-text",
        [json.dumps({"RequestPath": ["/demo/chat/"], "DownstreamStatus": 200, "RouterName": "r"})],
        {},
    ),
    ("nested", ["{" + '"a":{' * 100_000 + "}" * 100_001], {}),
    (
        "markup-kept-as-text",
        [line("/demo/chat/v1/x", 200, "[/]")],
        {("[/]", "demo/chat"): Counts(1)},
    ),
]


@pytest.mark.parametrize(
    ("lines", "expected"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE]
)
def test_hostile_usage_never_counts_a_forged_caller(lines: list[str], expected: dict) -> None:
    assert count_usage(lines) == expected


def test_hostile_usage_table_shows_names_as_text(tmp_path: Path) -> None:
    """A caller name or path of markup or terminal escapes is printed as text (it used to
    raise rich's MarkupError and fail the whole report)."""
    from typer.testing import CliRunner

    from modelplane.cli import app, commands  # noqa: F401  (registers every verb)

    root = Path(__file__).resolve().parents[2]
    log = tmp_path / "access.log"
    names = ["[/]", "[bold]x", "a\x1b]0;pwned\x07b"]
    log.write_text("".join(line(f"/demo/{n}/v1/x", 200, n) + "\n" for n in names))
    result = CliRunner().invoke(
        app,
        ["usage", str(root / "specs" / "dev"), "--access-log", str(log)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "[/]" in result.output and "[bold]x" in result.output
    assert "\x1b" not in result.output and "a\\x1b]0;pwned\\x07b" in result.output


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
