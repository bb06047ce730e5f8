"""The design card's root Pulumi.yaml with the real engine: `pulumi up -s <stack>` at the
repository root deploys the embedded default fleet (specs/local) exactly as `modelplane up
specs/local` does.

Each test works on a copy of the repository (its Pulumi.yaml, program, components, package
and specs/local with its committed lock) in ``tmp_path``, so the checkout is never
dirtied; the copy's `.venv` is a link to this one's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelplane.driver.results import CHANGE_KINDS
from modelplane.driver.settings import default_backend
from tests.fixtures.engine import LOCAL, REPO, manifests

pytestmark = pytest.mark.engine

STACKS = ("cluster-local", "deploy-demo-qwen", "gateway")  # tier order
SOURCES = ("Pulumi.yaml", "stacks", "modelplane")


def repo_copy(target: Path) -> Path:
    """What the plain CLI at the root reads: the project, the code and the default fleet as
    committed (no state, no renders, no stack config salted with another passphrase)."""
    ignore = shutil.ignore_patterns(
        "__pycache__", "*.pyc", ".modelplane", "rendered", "Pulumi.*.yaml"
    )
    target.mkdir(parents=True)
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, target / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, target / name)
    shutil.copytree(LOCAL, target / "specs" / "local", ignore=ignore)
    (target / ".venv").symlink_to(REPO / ".venv", target_is_directory=True)
    return target


def root_env(root: Path, env: dict[str, str]) -> dict[str, str]:
    """The fixture's environment (passphrase, private PULUMI_HOME, no PULUMI_BACKEND_URL), the
    engine on PATH, and the copy's own code first on the Python path."""
    from modelplane.engine import engine_env

    assert "PULUMI_BACKEND_URL" not in env
    return {**env, **engine_env(), "PYTHONPATH": str(root)}


def run(
    args: list[str], root: Path, env: dict[str, str], ok: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if ok:
        assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def pulumi(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run(["pulumi", *args, "--non-interactive"], root, env)


def modelplane_up(root: Path, env: dict[str, str]) -> dict[str, Any]:
    """`modelplane up specs/local --yes` at the root of the copy, as a user runs it."""
    done = run(
        [sys.executable, "-m", "modelplane", "up", "specs/local", "--yes", "-o", "json"], root, env
    )
    return json.loads(done.stdout)


def test_pulumi_up_at_the_root_deploys_the_embedded_default_fleet(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root = repo_copy(tmp_path / "repo")
    fleet = root / "specs" / "local"
    lock = (fleet / "modelplane.lock.yaml").read_text()
    cli_env = root_env(root, env)
    for stack in STACKS:
        pulumi(root, cli_env, "stack", "select", "--create", stack)
        pulumi(root, cli_env, "up", "-s", stack, "--yes", "--skip-preview")
    # The project's backend: the state `modelplane up specs/local` uses by default.
    state = fleet / ".modelplane" / "state"
    stored = sorted(
        p.stem for p in (state / ".pulumi" / "stacks" / "modelplane-local").glob("*.json")
    )
    assert stored == sorted(STACKS)
    assert default_backend(fleet) == state.resolve().as_uri()
    # Its stack config: the fleet's own files (stackConfigDir), with no path in them.
    for stack in STACKS:
        config = fleet / f"Pulumi.{stack}.yaml"
        assert config.is_file() and str(tmp_path) not in config.read_text()
    assert not list(root.glob("Pulumi.*.yaml"))
    # The program ran on specs/local: its renderTo, its placement.
    outputs = json.loads(pulumi(root, cli_env, "stack", "output", "-s", STACKS[0], "--json").stdout)
    # Recorded relative to the program's folder (stacks/, where the engine starts the program
    # and the provider): no machine path in the state.
    assert outputs["renderTo"] == "../specs/local/rendered"
    by_plain = manifests(fleet / "rendered")
    (replica,) = yaml.safe_load(lock)["deployments"]["demo/qwen"]["replicas"]
    assert any(replica["name"] in name for name in by_plain), sorted(by_plain)

    # `modelplane up specs/local` on the same state: every stack runs (the driver has not
    # seen them) and the engine finds nothing to change; lock and manifests stay as they are.
    result = modelplane_up(root, cli_env)
    assert {s["stack"]: s["result"] for s in result["stacks"]} == dict.fromkeys(STACKS, "succeeded")
    for s in result["stacks"]:
        assert not any(s["changes"][k] for k in CHANGE_KINDS), (s["stack"], s["changes"])
    assert (fleet / "modelplane.lock.yaml").read_text() == lock
    assert manifests(fleet / "rendered") == by_plain
    assert not (root / "rendered").exists() and not (root / ".modelplane").exists()

    # A fresh `modelplane up specs/local` elsewhere renders the very same manifests.
    other = repo_copy(tmp_path / "other")
    fresh = modelplane_up(other, root_env(other, env))
    assert {s["stack"]: s["result"] for s in fresh["stacks"]} == dict.fromkeys(STACKS, "succeeded")
    assert manifests(other / "specs" / "local" / "rendered") == by_plain

    # What reconcile decides is stack config: once a round took the cluster out of the
    # routes, a hand-run `pulumi preview -s gateway` at the root reads the same decision
    # from Pulumi.gateway.yaml and changes nothing; once it is back, the key goes.
    from modelplane.driver.fleet import Fleet

    state_of = Fleet.load(fleet, env=cli_env).runtime
    gateway_config = fleet / "Pulumi.gateway.yaml"
    for unroutable, listed in (({"local": "unreachable (test)"}, '["local"]'), ({}, None)):
        state_of.set_routing(unroutable)
        result = modelplane_up(root, cli_env)
        gateway = next(s for s in result["stacks"] if s["stack"] == "gateway")
        # routes to the cluster's replica go, then come back
        assert gateway["result"] == "succeeded" and any(gateway["changes"].values()), gateway
        config = yaml.safe_load(gateway_config.read_text()).get("config") or {}
        assert config.get("modelplane:unroutable") == listed, config
        pulumi(root, cli_env, "preview", "-s", "gateway", "--expect-no-changes")

    # The checkout moved (or another machine's CI on this state): nothing in the state names
    # a path of this machine, so neither the plain CLI nor `modelplane up` changes anything.
    checkpoints = state / ".pulumi" / "stacks" / "modelplane-local"
    for checkpoint in checkpoints.glob("*.json"):
        assert str(tmp_path) not in checkpoint.read_text(), checkpoint.name
    moved = tmp_path / "moved" / "repo"
    moved.parent.mkdir()
    root.rename(moved)
    moved_env = root_env(moved, env)
    for stack in STACKS:
        pulumi(moved, moved_env, "preview", "-s", stack, "--expect-no-changes")
    again = modelplane_up(moved, moved_env)
    for s in again["stacks"]:
        assert s["result"] in ("succeeded", "unchanged"), s
        assert not any(s["changes"][k] for k in CHANGE_KINDS), (s["stack"], s["changes"])
    assert manifests(moved / "specs" / "local" / "rendered") == by_plain
