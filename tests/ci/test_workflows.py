"""The GitHub workflows (issue 34, "CI recipes that work"): actionlint finds nothing in any of
them, and they do what docs/preview.md says: a preview per pull request, `up --yes` on pushes to
main with the lock committed back and never two applies at once, a scheduled read-only drift
check, OIDC with `id-token: write`, secrets only through `env`.

actionlint is the upstream checker built from its Go module by `make setup`
(`python -m modelplane.toolchain install actionlint`); it runs offline. With `shellcheck` on
PATH it also checks every `run:` script (actionlint skips that when shellcheck is missing).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.y*ml"))


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    if True in data:  # YAML 1.1 reads the `on:` key as a boolean
        data["on"] = data.pop(True)
    return data


def _steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def _scripts(workflow: dict[str, Any]) -> str:
    return "\n".join(step["run"] for step in _steps(workflow) if "run" in step)


def _commands(script: str, verb: str) -> list[str]:
    """Every `modelplane <verb> ...` command line in a script, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", script)
    return [line for line in joined.splitlines() if re.search(rf"bin/modelplane {verb}\b", line)]


def _actionlint() -> Path:
    from modelplane.gobuild.actionlint import cached_actionlint

    found = cached_actionlint()
    if found is None:
        pytest.fail(
            "actionlint is not built: `make setup` (or `python -m modelplane.toolchain install "
            "actionlint`) builds it from its Go module"
        )
    return found


def test_there_are_the_three_workflows() -> None:
    assert [f.name for f in FILES] == ["apply.yml", "drift.yml", "preview.yml"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_actionlint_finds_nothing(path: Path) -> None:
    proc = subprocess.run(
        [str(_actionlint()), "-no-color", "-pyflakes=", str(path.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_apply_runs_up_on_pushes_to_main_one_at_a_time() -> None:
    apply = _load("apply.yml")
    assert apply["on"]["push"]["branches"] == ["main"]
    assert apply["concurrency"]["group"].startswith("modelplane-apply")
    assert apply["concurrency"]["cancel-in-progress"] is False  # a running up is never cut off
    assert apply["permissions"] == {"contents": "write", "id-token": "write"}
    (up,) = _commands(_scripts(apply), "up")
    assert "--yes" in up.split()
    assert not _commands(_scripts(apply), "preview")


def test_apply_commits_the_lock_back_and_only_the_lock() -> None:
    apply = _load("apply.yml")
    (commit,) = [s for s in _steps(apply) if "git push" in s.get("run", "")]
    assert commit["if"] == "always()"  # after a failed up too: the lock it wrote is deployed
    script = commit["run"]
    assert 'git add -- "${locks[@]}"' in script and "modelplane.lock.yaml" in script
    assert "git add -A" not in script and "git add ." not in script
    assert "[skip ci]" in script


def test_drift_is_a_scheduled_read_only_preview() -> None:
    drift = _load("drift.yml")
    assert drift["on"]["schedule"] and all("cron" in s for s in drift["on"]["schedule"])
    assert drift["permissions"] == {"contents": "read", "id-token": "write"}
    assert drift["concurrency"]["group"] != _load("apply.yml")["concurrency"]["group"]
    scripts = _scripts(drift)
    (preview,) = _commands(scripts, "preview")
    assert {"--refresh", "--expect-no-changes"} <= set(preview.split())
    assert not _commands(scripts, "up") and "git push" not in scripts


@pytest.mark.parametrize("name", ["apply.yml", "drift.yml", "preview.yml"])
def test_oidc_samples_and_id_token(name: str) -> None:
    workflow = _load(name)
    assert workflow["permissions"]["id-token"] == "write"
    uses = {s["uses"].split("@")[0]: s for s in _steps(workflow) if "uses" in s}
    aws = uses["aws-actions/configure-aws-credentials"]
    assert "role-to-assume" in aws["with"] and aws["if"].startswith("vars.")
    gcp = uses["google-github-actions/auth"]
    assert "workload_identity_provider" in gcp["with"] and gcp["if"].startswith("vars.")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_secrets_only_through_env_and_never_echoed(path: Path) -> None:
    workflow = _load(path.name)
    for step in _steps(workflow):
        assert not re.search(r"\$\{\{[^}]*secrets\.", step.get("run", "")), step.get("name")
    scripts = _scripts(workflow)
    for secret in ("PULUMI_CONFIG_PASSPHRASE", "MODELPLANE_BACKEND_URL", "PULUMI_ACCESS_TOKEN"):
        assert not re.search(rf"(echo|printf|cat)[^\n|>]*\${{?{secret}", scripts), secret
        assert workflow["env"][secret] == f"${{{{ secrets.{secret} }}}}"
    assert "set -x" not in scripts


def test_preview_workflow_posts_the_comment_that_names_offline_stacks() -> None:
    preview = _load("preview.yml")
    assert preview["on"] == {"pull_request": preview["on"]["pull_request"]}
    (command,) = _commands(_scripts(preview), "preview")
    assert "--markdown" in command and "--base-lock" in _scripts(preview)
    source = (ROOT / "modelplane" / "driver" / "markdown.py").read_text()
    assert "shown from the offline render" in source


def test_every_flag_the_workflows_pass_exists() -> None:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    for path in FILES:
        scripts = _scripts(_load(path.name))
        for verb in ("up", "preview"):
            flags = {f for line in _commands(scripts, verb) for f in re.findall(r"--[a-z-]+", line)}
            if not flags:
                continue
            help_text = CliRunner().invoke(app, [verb, "--help"], env={"COLUMNS": "300"}).output
            for flag in flags:
                assert flag in help_text, f"{path.name}: modelplane {verb} has no {flag}"
