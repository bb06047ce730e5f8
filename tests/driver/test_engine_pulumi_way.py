"""Working the Pulumi way with the real engine (issue 10): honest previews that create no
stack, refresh of renderTo stacks, committed stack config shared with the plain CLI, provider
inputs the environment cannot change, a clear error for a missing cloud plugin, and `up`
that previews and asks in a terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from modelplane.driver.fleet import Fleet
from modelplane.driver.results import Outcome
from tests.fixtures.engine import (
    LOCAL,
    REPO,
    check,
    copy_fleet,
    fleet_project,
    outcomes,
    plain_cli,
)

pytestmark = pytest.mark.engine


def backend_stacks(fleet_dir: Path) -> list[str]:
    root = fleet_dir / ".modelplane" / "state" / ".pulumi" / "stacks"
    return sorted(p.name for p in root.rglob("*.json")) if root.exists() else []


def scale(fleet_dir: Path, replicas: int) -> None:
    qwen = fleet_dir / "qwen.yaml"
    qwen.write_text(qwen.read_text().replace("replicas: 1", f"replicas: {replicas}", 1))


def test_a_preview_of_a_new_fleet_shows_new_stacks_and_creates_none(
    tmp_path: Path, env: dict[str, str]
) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    run = check(Fleet.load(fleet_dir, env=env).preview())
    assert set(outcomes(run).values()) == {Outcome.NEW}
    for r in run.results:
        assert r.count("create") > 0 and "new stack" in (r.note or "")
    assert backend_stacks(fleet_dir) == []
    assert not (fleet_dir / "Pulumi.gateway.yaml").exists()


def test_downstream_stacks_preview_what_up_will_change(tmp_path: Path, env: dict[str, str]) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    check(Fleet.load(fleet_dir, env=env).up())
    scale(fleet_dir, 2)
    fleet = Fleet.load(fleet_dir, env=env)
    preview = check(fleet.preview())
    deploy, gateway = preview.result("deploy-demo-qwen"), preview.result("gateway")
    assert deploy.changed, deploy.changes
    assert gateway.changed, (gateway.changes, gateway.note)
    assert "deploy-demo-qwen" in (gateway.note or "")
    up = check(fleet.up())
    assert up.result("gateway").changed
    # What the preview said the gateway would change is what `up` changed.
    planned = {(c.type, c.name, c.op) for c in gateway.resources}
    applied = {(c.type, c.name, c.op) for c in up.result("gateway").resources}
    assert planned == applied


def test_refresh_of_render_only_stacks_is_skipped_with_the_reason(
    tmp_path: Path, env: dict[str, str]
) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    fleet = Fleet.load(fleet_dir, env=env)
    up = check(fleet.up())
    # The replicas sit on the gateway's own cluster, which routes them through their Services:
    # no warning that they are left out of routes.
    assert not [w for r in up.results for w in r.warnings if "no gateway address" in w]
    run = fleet.refresh()
    assert run.ok
    assert set(outcomes(run).values()) == {Outcome.UNCHANGED}
    assert all("renderTo" in (r.note or "") for r in run.results)


def test_the_cli_and_the_driver_share_config_and_agree(
    tmp_path: Path, env: dict[str, str], engine_root: Path
) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    check(Fleet.load(fleet_dir, env=env).up())
    fleet_project(fleet_dir)
    # A user with a kubeconfig and provider settings exported sees no change either.
    run = plain_cli(
        fleet_dir,
        env,
        engine_root,
        KUBECONFIG=str(tmp_path / "someone" / "kubeconfig"),
        PULUMI_K8S_ENABLE_SERVER_SIDE_APPLY="false",
    )
    for stack in ("cluster-local", "deploy-demo-qwen", "gateway"):
        done = run("preview", "-s", stack, "--expect-no-changes", "--diff", ok=False)
        assert done.returncode == 0, f"{stack}:\n{done.stdout}\n{done.stderr}"
    # `pulumi config set` where the docs say lands in the fleet's committed file ...
    run("config", "set", "-s", "gateway", "modelplane:note", "hello")
    committed = yaml.safe_load((fleet_dir / "Pulumi.gateway.yaml").read_text())
    assert committed["config"]["modelplane:note"] == "hello"
    assert str(tmp_path) not in (fleet_dir / "Pulumi.gateway.yaml").read_text()
    # ... and the driver sees it: the gateway's inputs changed, so `up` runs it again.
    status = Fleet.load(fleet_dir, env=env).status()
    assert status.stack("gateway").in_sync is False
    assert status.stack("deploy-demo-qwen").in_sync is True


def test_a_cloud_stack_without_its_plugin_fails_at_preview_clearly(
    tmp_path: Path, env: dict[str, str]
) -> None:
    fleet_dir = copy_fleet(REPO / "specs" / "quickstart", tmp_path / "quickstart")
    fleet = Fleet.load(fleet_dir, env=env)  # a private, empty PULUMI_HOME: no gcp plugin
    (cluster,) = [u.name for u in fleet.stacks() if u.name.startswith("cluster-")]
    run = fleet.preview()
    result = run.result(cluster)
    assert result.outcome is Outcome.FAILED
    assert result.error.startswith(f"stack {cluster} needs the Pulumi resource plugin(s) gcp ")
    assert "pulumi plugin install resource gcp" in result.error
    assert "Traceback" not in result.error
    # The rest of the fleet still shows what it would create, from the offline render.
    others = [r for r in run.results if r.stack != cluster]
    assert others and all(r.outcome is Outcome.NEW for r in others)
    assert backend_stacks(fleet_dir) == []


def _tty_run(args: list[str], env: dict[str, str], answer: str, timeout: float = 600) -> str:
    """Run the CLI on a pseudo-terminal, answer its question, return what it printed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        args, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True
    )
    os.close(follower)
    output = b""
    answered = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
            if not answered and b"[y/N]" in output:
                os.write(leader, answer.encode() + b"\n")
                answered = True
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(leader)
    return output.decode(errors="replace")


def test_up_in_a_terminal_previews_and_asks(
    tmp_path: Path, env: dict[str, str], engine_root: Path
) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    cli = [sys.executable, "-m", "modelplane", "up", str(fleet_dir)]
    run_env = {**env, "COLUMNS": "200", "TERM": "dumb"}
    refused = _tty_run(cli, run_env, "n")
    assert "Apply these changes" in refused and "not confirmed; nothing was changed" in refused
    assert backend_stacks(fleet_dir) == []
    applied = _tty_run(cli, run_env, "y")
    assert "Apply these changes" in applied
    assert len(backend_stacks(fleet_dir)) == 3
