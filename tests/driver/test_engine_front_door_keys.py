"""The front-door key's rotation on the real engine (security review M2): `modelplane keys
rotate --front-door` writes the new keys into the config of every stack that reads them,
encrypted; a stack left on older keys (a rotation cut short) gets the newest at the next
`up`; a rotation that would switch after the old key ends, or a key given through the
environment, is refused with nothing written. The drill under load is on the dev fleet
(tests/devfleet/test_devfleet_auth.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from modelplane import front_door_keys as fdk
from modelplane.driver.fleet import Fleet
from modelplane.driver.front_door import CONFIG_KEY, ENV, SCHEDULE_CONFIG
from tests.fixtures.engine import LOCAL, check, copy_fleet, plain_cli

pytestmark = pytest.mark.engine

STACKS = ("deploy-demo-qwen", "gateway")


def test_keys_front_door_rotation_in_every_stack(
    tmp_path: Path, env: dict[str, str], engine_root: Path
) -> None:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    check(Fleet.load(fleet_dir, env=env).up())
    pulumi = plain_cli(fleet_dir, env, engine_root)

    def held(stack: str) -> str:
        return pulumi("config", "get", CONFIG_KEY, "--stack", stack).stdout.rstrip("\n")

    def stored(stack: str) -> dict[str, object]:
        return yaml.safe_load((fleet_dir / f"Pulumi.{stack}.yaml").read_text())["config"]

    first = {s: held(s) for s in STACKS}
    (old,) = set(first.values())
    assert len(fdk.parse(old)) == 1
    assert all(SCHEDULE_CONFIG not in stored(s) for s in STACKS)

    runner = CliRunner()
    cli_env = {**env, "COLUMNS": "200"}
    argv = ["keys", "rotate", str(fleet_dir), "--front-door", "--after", "10m", "--grace", "1h"]
    rotated = runner.invoke(app, argv, env=cli_env)
    assert rotated.exit_code == 0, rotated.output
    assert "rotated the front-door key in 2 stack(s)" in rotated.output, rotated.output
    texts = {s: held(s) for s in STACKS}
    (text,) = set(texts.values())
    keys = fdk.parse(text)
    assert [k.key for k in keys][0] == old.strip() and len(keys) == 2
    assert keys[0].not_after is not None and keys[1].not_before is not None
    for key in keys:
        assert key.key not in rotated.output
        for stack in STACKS:  # encrypted in the committed config; only the schedule is plain
            assert key.key not in (fleet_dir / f"Pulumi.{stack}.yaml").read_text()
    schedules = {s: stored(s)[SCHEDULE_CONFIG] for s in STACKS}
    (schedule,) = set(schedules.values())
    assert [r["id"] for r in json.loads(schedule)["keys"]] == [None, keys[1].id]
    assert json.loads(schedule)["keys"] == json.loads(fdk.schedule(keys))["keys"]

    # A rotation cut short: the deployment's stack still on the old key. The next `up`
    # gives it the newest keys (the newer schedule wins), and the stacks agree again.
    # On standard input, as the driver sets it: a key may begin with `-` (URL-safe base64),
    # which the CLI would read as a flag.
    pulumi("config", "set", "--secret", "--stack", "deploy-demo-qwen", CONFIG_KEY, input=old)
    pulumi("config", "rm", SCHEDULE_CONFIG, "--stack", "deploy-demo-qwen")
    check(Fleet.load(fleet_dir, env=env).up())
    assert {s: held(s) for s in STACKS} == texts
    assert stored("deploy-demo-qwen")[SCHEDULE_CONFIG] == schedules["gateway"]

    # `keys switch`: the new key is sent from now on (its notBefore moves to now) and the old
    # one ends 5 minutes later, in every stack; a second switch finds no key waiting.
    switched = runner.invoke(app, ["keys", "switch", str(fleet_dir), "--grace", "5m"], env=cli_env)
    assert switched.exit_code == 0, switched.output
    after_switch = {s: fdk.parse(held(s)) for s in STACKS}
    assert after_switch["gateway"] == after_switch["deploy-demo-qwen"]
    new = after_switch["gateway"][1]
    assert new.key == keys[1].key and new.not_before is not None
    assert new.not_before < keys[1].not_before  # type: ignore[operator]
    assert after_switch["gateway"][0].not_after < keys[0].not_after  # type: ignore[operator]
    again = runner.invoke(app, ["keys", "switch", str(fleet_dir)], env=cli_env)
    assert again.exit_code != 0 and "no front-door key waits" in again.output, again.output
    texts = {s: held(s) for s in STACKS}

    # Refused, nothing written: a switch after the end; a key from the environment.
    late = ["keys", "rotate", str(fleet_dir), "--front-door", "--after", "2h", "--grace", "1h"]
    refused = runner.invoke(app, late, env=cli_env)
    assert refused.exit_code != 0 and "must come before" in refused.output, refused.output
    from_env = runner.invoke(app, argv, env={**cli_env, ENV: old})
    assert from_env.exit_code != 0 and f"comes from {ENV}" in from_env.output, from_env.output
    assert old not in from_env.output
    assert {s: held(s) for s in STACKS} == texts
