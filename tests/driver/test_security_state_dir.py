"""Security L9 (docs/architecture.md, "Runtime state"): a fleet's `.modelplane/` (callers' keys,
state, workspaces) is made mode 0700 with a `.gitignore` of `*`, whoever makes it first, so
`git add .` in a user's fleet repository never commits a key."""

from __future__ import annotations

import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from modelplane.secrets import GITIGNORE, private_dir

ROOT = Path(__file__).resolve().parents[2]


def _runtime_store(fleet: Path) -> None:
    from modelplane.driver.state import RuntimeState

    assert RuntimeState.at(fleet / ".modelplane").cordon("c1", 1.0)


def _caller_keys(fleet: Path) -> None:
    from typer.testing import CliRunner

    from modelplane.cli import app, commands  # noqa: F401  (registers every verb)

    made = CliRunner().invoke(app, ["keys", "create", str(fleet)])  # security review M3
    assert made.exit_code == 0, made.output
    assert list((fleet / ".modelplane" / "callers").iterdir())  # keys were written


MAKERS: dict[str, Callable[[Path], None]] = {
    "runtime state": _runtime_store,
    "caller keys": _caller_keys,
}


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_security_state_dir_is_private_and_never_committed(tmp_path: Path, maker: str) -> None:
    fleet = tmp_path / "fleet"
    shutil.copytree(
        ROOT / "specs" / "quickstart", fleet, ignore=shutil.ignore_patterns(".modelplane")
    )
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(fleet)], check=True)
    MAKERS[maker](fleet)
    state = fleet / ".modelplane"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert (state / ".gitignore").read_text() == GITIGNORE
    added = subprocess.run(
        ["git", "-C", str(fleet), "add", "--dry-run", "."],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ".modelplane" not in added and "fleet.yaml" in added


def test_security_private_dir_narrows_and_keeps_an_existing_gitignore(tmp_path: Path) -> None:
    state = tmp_path / ".modelplane"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    (state / ".gitignore").write_text("# mine\n*\n")
    private_dir(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert (state / ".gitignore").read_text() == "# mine\n*\n"
