"""The driver's pure parts: stacks and tiers, skip logic, events, markdown, secrets, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import modelplane.driver.workspace as workspace_module
from modelplane.api.placement_lock import LockedDeployment, LockedReplica, PlacementLock
from modelplane.driver import fingerprint as fp
from modelplane.driver.errors import DriverError, PassphraseMissing
from modelplane.driver.events import StackProgress, events_from_json, urn_type_and_name
from modelplane.driver.fleet import Fleet
from modelplane.driver.markdown import MARKER, preview_markdown
from modelplane.driver.operations import error_text, locked_message
from modelplane.driver.placement_diff import placement_diff
from modelplane.driver.plan import Plan
from modelplane.driver.results import Outcome, ResourceChange, RunResult, StackResult
from modelplane.driver.runner import run_tiers, tier_of_stack_name
from modelplane.driver.settings import (
    default_backend,
    engine_environment,
    resolve_backend,
    resolve_secrets,
)
from modelplane.driver.workspace import ENTRY_POINT, entry_dir, prepare_work_dir
from modelplane.scheduler import DeploymentReport, ScheduleResult
from modelplane.stacks import StackUnit, Tier

REPO = Path(__file__).resolve().parents[2]

DATA = Path(__file__).parents[1] / "data"
TWO_CLUSTERS = DATA / "driver" / "two-clusters"
RECORDED = DATA / "preview_events.json"


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    target = tmp_path / "fleet"
    shutil.copytree(TWO_CLUSTERS, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


# --- stacks and tiers ---------------------------------------------------------------------


def test_stacks_follow_the_plan_in_tier_order(fleet_dir: Path) -> None:
    fleet = Fleet.load(fleet_dir, env={})
    units = fleet.stacks(fleet.plan())
    assert [(u.name, u.tier) for u in units] == [
        ("cluster-a", Tier.CLUSTERS),
        ("cluster-b", Tier.CLUSTERS),
        ("deploy-demo-east", Tier.DEPLOYMENTS),
        ("deploy-demo-west", Tier.DEPLOYMENTS),
        ("gateway", Tier.GATEWAY),
    ]
    by_name = {u.name: u for u in units}
    assert by_name["deploy-demo-east"].depends_on == ("cluster-a",)
    assert set(by_name["gateway"].depends_on) == {
        "cluster-a",
        "deploy-demo-east",
        "deploy-demo-west",
    }


def test_unknown_stack_names_list_the_valid_ones(fleet_dir: Path) -> None:
    fleet = Fleet.load(fleet_dir, env={})
    with pytest.raises(DriverError, match="no stack named cluster-z.*cluster-a, cluster-b"):
        fleet._select(fleet.stacks(fleet.plan()), ["cluster-z"])


def test_tier_of_orphan_stacks_from_their_names() -> None:
    assert tier_of_stack_name("cluster-x") is Tier.CLUSTERS
    assert tier_of_stack_name("cache-ns-x") is Tier.CACHES
    assert tier_of_stack_name("deploy-ns-x") is Tier.DEPLOYMENTS
    assert tier_of_stack_name("gateway") is Tier.GATEWAY


def _units() -> list[StackUnit]:
    return [
        StackUnit("cluster-a", Tier.CLUSTERS, "InferenceCluster", "a"),
        StackUnit("cluster-b", Tier.CLUSTERS, "InferenceCluster", "b"),
        StackUnit("deploy-x", Tier.DEPLOYMENTS, "ModelDeployment", "n/x", ("cluster-a",)),
        StackUnit("deploy-y", Tier.DEPLOYMENTS, "ModelDeployment", "n/y", ("cluster-b",)),
        StackUnit("gateway", Tier.GATEWAY, "InferenceGateway", "default", ("deploy-x", "deploy-y")),
    ]


def test_a_tier_runs_concurrently_and_tiers_in_order() -> None:
    barrier = threading.Barrier(2, timeout=5)
    seen: list[str] = []

    def run(unit: StackUnit) -> StackResult:
        if unit.tier is Tier.CLUSTERS:
            barrier.wait()  # both cluster stacks must be running at the same time
        seen.append(unit.name)
        return StackResult(unit.name, unit.tier, Outcome.SUCCEEDED)

    results = run_tiers(_units(), run, parallel=4)
    assert all(r.ok for r in results)
    assert set(seen[:2]) == {"cluster-a", "cluster-b"}
    assert set(seen[2:4]) == {"deploy-x", "deploy-y"}
    assert seen[4] == "gateway"


def test_parallel_bounds_the_tier() -> None:
    running, peak = 0, 0
    lock = threading.Lock()

    def run(unit: StackUnit) -> StackResult:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return StackResult(unit.name, unit.tier, Outcome.SUCCEEDED)

    units = [StackUnit(f"cluster-{i}", Tier.CLUSTERS, "InferenceCluster", str(i)) for i in range(6)]
    run_tiers(units, run, parallel=2)
    assert peak == 2


def test_a_failure_does_not_stop_siblings_and_skips_dependants() -> None:
    def run(unit: StackUnit) -> StackResult:
        if unit.name == "cluster-a":
            raise RuntimeError("boom")  # a bug in one stack
        return StackResult(unit.name, unit.tier, Outcome.SUCCEEDED)

    results = {r.stack: r for r in run_tiers(_units(), run, parallel=4)}
    assert results["cluster-a"].outcome is Outcome.FAILED
    assert "boom" in (results["cluster-a"].error or "")
    assert results["cluster-b"].outcome is Outcome.SUCCEEDED
    assert results["deploy-y"].outcome is Outcome.SUCCEEDED
    assert results["deploy-x"].outcome is Outcome.SKIPPED
    assert "cluster-a" in (results["deploy-x"].note or "")
    assert results["gateway"].outcome is Outcome.SKIPPED  # transitively
    assert "deploy-x" in (results["gateway"].note or "")


def test_locked_stacks_block_dependants_too() -> None:
    def run(unit: StackUnit) -> StackResult:
        outcome = Outcome.LOCKED if unit.name == "deploy-y" else Outcome.SUCCEEDED
        return StackResult(unit.name, unit.tier, outcome)

    results = {r.stack: r for r in run_tiers(_units(), run)}
    assert results["gateway"].outcome is Outcome.SKIPPED


def test_destroy_runs_in_reverse_and_keeps_used_clusters() -> None:
    order: list[str] = []

    def run(unit: StackUnit) -> StackResult:
        order.append(unit.name)
        outcome = Outcome.FAILED if unit.name == "deploy-x" else Outcome.SUCCEEDED
        return StackResult(unit.name, unit.tier, outcome)

    results = {r.stack: r for r in run_tiers(_units(), run, reverse=True)}
    assert order[0] == "gateway"
    assert results["cluster-a"].outcome is Outcome.SKIPPED  # deploy-x still uses it
    assert "is still used by deploy-x" in (results["cluster-a"].note or "")
    assert results["cluster-b"].outcome is Outcome.SUCCEEDED


def test_unchanged_stacks_do_not_block() -> None:
    def run(unit: StackUnit) -> StackResult:
        return StackResult(unit.name, unit.tier, Outcome.UNCHANGED)

    assert all(r.outcome is Outcome.UNCHANGED for r in run_tiers(_units(), run))


# --- fingerprints and skipping ------------------------------------------------------------


def _fingerprints(fleet_dir: Path, outputs: dict | None = None, environ: dict | None = None):
    fleet = Fleet.load(fleet_dir, env={})
    plan = fleet.plan()
    return {
        u.name: fp.stack_fingerprint(
            fleet.spec, plan.lock, u, outputs or {}, environ=environ or {}, program="p"
        )
        for u in fleet.stacks(plan)
    }


def test_fingerprints_are_stable(fleet_dir: Path) -> None:
    assert _fingerprints(fleet_dir) == _fingerprints(fleet_dir)


def test_editing_replicas_changes_only_that_deployment_and_the_gateway(fleet_dir: Path) -> None:
    before = _fingerprints(fleet_dir)
    edit(
        fleet_dir / "fleet.yaml",
        "name: west\n  namespace: demo\nspec:\n  replicas: 1",
        "name: west\n  namespace: demo\nspec:\n  replicas: 2",
    )
    after = _fingerprints(fleet_dir)
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"deploy-demo-west", "gateway"}


def test_editing_the_image_changes_only_that_deployment(fleet_dir: Path) -> None:
    before = _fingerprints(fleet_dir)
    text = (fleet_dir / "fleet.yaml").read_text()
    head, tail = text.split("name: west", 1)
    tail = tail.replace("vllm/vllm-openai:v0.11.0", "vllm/vllm-openai:v0.12.0", 1)
    (fleet_dir / "fleet.yaml").write_text(head + "name: west" + tail)
    after = _fingerprints(fleet_dir)
    assert {n for n in before if before[n] != after[n]} == {"deploy-demo-west"}


def test_upstream_outputs_are_inputs(fleet_dir: Path) -> None:
    before = _fingerprints(fleet_dir, {"cluster-a": {"renderTo": "/x"}})
    after = _fingerprints(fleet_dir, {"cluster-a": {"renderTo": "/y"}})
    assert {n for n in before if before[n] != after[n]} == {"deploy-demo-east", "gateway"}


def test_secret_values_are_inputs_but_only_hashed(fleet_dir: Path) -> None:
    edit(
        fleet_dir / "fleet.yaml",
        "existing: {renderTo: rendered/b}",
        "existing: {secretRef: {name: b-kube}}",
    )
    one = _fingerprints(fleet_dir, environ={"MODELPLANE_SECRET_B_KUBE_KUBECONFIG": "sekrit-1"})
    two = _fingerprints(fleet_dir, environ={"MODELPLANE_SECRET_B_KUBE_KUBECONFIG": "sekrit-2"})
    assert {n for n in one if one[n] != two[n]} == {"cluster-b"}
    fleet = Fleet.load(fleet_dir, env={})
    unit = next(u for u in fleet.stacks() if u.name == "cluster-b")
    data = fp.secret_digests(fleet.spec, unit, {"MODELPLANE_SECRET_B_KUBE_KUBECONFIG": "sekrit-1"})
    assert "sekrit" not in json.dumps(data)


def test_secret_env_names() -> None:
    assert fp.secret_env_name("onprem-east.kube", "kubeconfig") == (
        "MODELPLANE_SECRET_ONPREM_EAST_KUBE_KUBECONFIG"
    )


@pytest.mark.parametrize(
    ("subject", "message"),
    [
        (None, "modelplane-inputs: " + "ab" * 32),
        ("Add qwen x4", "Add qwen x4 (modelplane-inputs: " + "ab" * 32 + ")"),
        # A subject quoting another fingerprint: the recorded one is the last.
        (
            "Revert modelplane-inputs: " + "cd" * 32,
            "Revert modelplane-inputs: " + "cd" * 32 + " (modelplane-inputs: " + "ab" * 32 + ")",
        ),
    ],
    ids=["no git", "commit subject kept", "subject quoting a fingerprint"],
)
def test_the_update_message_keeps_the_commit_subject(subject: str | None, message: str) -> None:
    assert fp.update_message("ab" * 32, subject) == message
    assert fp.recorded_fingerprint(message) == "ab" * 32


def test_the_commit_subject_of_a_fleet_folder(tmp_path: Path) -> None:
    from modelplane.driver.operations import commit_subject

    assert commit_subject(tmp_path) is None  # not a git work tree
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    env |= {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "fleet.yaml").write_text("x: 1\n")
    for argv in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "Add qwen x4\n\nbody"]):
        subprocess.run(["git", "-C", str(tmp_path), *argv], env=env, check=True)
    assert commit_subject(tmp_path / "fleet") == "Add qwen x4"


def test_skip_only_after_a_successful_update_with_the_same_inputs() -> None:
    message = fp.update_message("ab" * 32)
    assert fp.recorded_fingerprint(message) == "ab" * 32
    assert fp.can_skip("ab" * 32, "update", "succeeded", message)
    assert not fp.can_skip("cd" * 32, "update", "succeeded", message)
    assert not fp.can_skip("ab" * 32, "update", "failed", message)
    assert not fp.can_skip("ab" * 32, "refresh", "succeeded", message)
    assert not fp.can_skip("ab" * 32, "destroy", "succeeded", message)
    assert not fp.can_skip("ab" * 32, "update", "succeeded", "manual pulumi up")
    assert not fp.can_skip("ab" * 32, None, None, None)


@pytest.mark.parametrize(
    ("stack_file", "environments"),
    [
        (None, []),
        ("config: {a:b: c}\n", []),
        ("environment:\n  - team/aws-prod\n  - team/gcp\n", ["team/aws-prod", "team/gcp"]),
        ("environment:\n  imports:\n    - team/aws-prod\n", ["team/aws-prod"]),
        ("environment:\n  - team/base: {merge: false}\n  - team/x\n", ["team/base", "team/x"]),
        ("environment: team/not-a-list\n", []),
    ],
    ids=["no file", "no environment", "list", "imports (older form)", "import options", "bad"],
)
def test_esc_environments_a_stack_config_imports(
    tmp_path: Path, stack_file: str | None, environments: list[str]
) -> None:
    from modelplane.driver.workspace import read_stack_environments

    if stack_file is not None:
        (tmp_path / "Pulumi.gateway.yaml").write_text(stack_file)
    assert read_stack_environments(tmp_path, "gateway") == environments


def test_esc_a_stack_importing_environments_is_never_skipped(fleet_dir: Path) -> None:
    """Its ESC values are the engine's to read: the same inputs still run it (and a changed
    import list is a changed fingerprint)."""
    fleet = Fleet.load(fleet_dir, env={})
    plan = fleet.plan()
    unit = next(u for u in fleet.stacks(plan) if u.name == "gateway")

    def fingerprint(environments: tuple[str, ...]) -> str:
        return fp.stack_fingerprint(
            fleet.spec, plan.lock, unit, {}, environ={}, program="p", environments=environments
        )

    plain, imported = fingerprint(()), fingerprint(("team/aws-prod",))
    assert plain != imported != fingerprint(("team/aws-prod", "team/gcp"))
    message = fp.update_message(imported)
    assert fp.can_skip(imported, "update", "succeeded", message)
    assert not fp.can_skip(imported, "update", "succeeded", message, ["team/aws-prod"])


# --- backend, passphrase, environment -----------------------------------------------------


def test_backend_precedence(tmp_path: Path) -> None:
    default = default_backend(tmp_path)
    assert default == (tmp_path.resolve() / ".modelplane" / "state").as_uri()
    assert resolve_backend(tmp_path, None, {}) == default
    assert resolve_backend(tmp_path, None, {"PULUMI_BACKEND_URL": "s3://b"}) == "s3://b"
    assert resolve_backend(tmp_path, "gs://x", {"PULUMI_BACKEND_URL": "s3://b"}) == "gs://x"
    with pytest.raises(DriverError, match="not a URL"):
        resolve_backend(tmp_path, "some/dir", {})


def test_missing_passphrase_is_a_clear_error() -> None:
    with pytest.raises(PassphraseMissing) as info:
        resolve_secrets("file:///tmp/state", None, {})
    message = str(info.value)
    assert "PULUMI_CONFIG_PASSPHRASE" in message and "PULUMI_CONFIG_PASSPHRASE_FILE" in message
    assert "modelplane-local" in message  # the documented local passphrase


def test_passphrase_sources(tmp_path: Path) -> None:
    assert resolve_secrets("file:///s", None, {"PULUMI_CONFIG_PASSPHRASE": ""}).uses_passphrase
    file = tmp_path / "pass"
    file.write_text("x")
    env = {"PULUMI_CONFIG_PASSPHRASE_FILE": str(file)}
    assert resolve_secrets("s3://bucket", None, env).provider == "passphrase"
    with pytest.raises(PassphraseMissing, match="not a readable file"):
        resolve_secrets("file:///s", None, {"PULUMI_CONFIG_PASSPHRASE_FILE": str(tmp_path / "no")})


def test_no_passphrase_needed_for_cloud_or_kms() -> None:
    assert resolve_secrets("https://api.pulumi.com", None, {}).provider is None
    assert resolve_secrets("s3://b", "awskms://alias/x", {}).provider == "awskms://alias/x"


def test_engine_environment_never_downloads_or_checks_updates() -> None:
    env = engine_environment(
        {"PATH": "/engine/bin"}, "file:///s", {"PULUMI_CONFIG_PASSPHRASE": "p"}
    )
    assert env["PULUMI_SKIP_UPDATE_CHECK"] == "true"
    assert env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == "true"
    assert env["PULUMI_BACKEND_URL"] == "file:///s"
    assert env["PULUMI_CONFIG_PASSPHRASE"] == "p"
    assert env["PATH"] == "/engine/bin"


@pytest.mark.parametrize(
    ("backend", "environ", "parallel"),
    [
        ("postgres://u@db/state", {}, "1"),  # one lister: the engine's pool cannot deadlock
        ("postgresql://u@db/state", {}, "1"),
        ("postgres://u@db/state", {"PULUMI_DIY_BACKEND_PARALLEL": "3"}, "3"),  # the user's
        ("file:///s", {}, None),
        ("s3://bucket", {}, None),
    ],
)
def test_backend_postgres_engine_lists_stacks_with_one_worker(
    backend: str, environ: dict[str, str], parallel: str | None
) -> None:
    env = engine_environment({}, backend, {"PULUMI_CONFIG_PASSPHRASE": "p", **environ})
    assert env.get("PULUMI_DIY_BACKEND_PARALLEL") == parallel


def test_cli_refuses_to_run_without_a_passphrase(fleet_dir: Path) -> None:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    result = CliRunner().invoke(
        app,
        ["up", str(fleet_dir), "--yes"],
        env={
            "PULUMI_CONFIG_PASSPHRASE": None,
            "PULUMI_CONFIG_PASSPHRASE_FILE": None,
            "PULUMI_BACKEND_URL": None,
        },
    )
    assert result.exit_code == 1
    assert "PULUMI_CONFIG_PASSPHRASE" in result.output
    assert "Traceback" not in result.output
    assert not (fleet_dir / "modelplane.lock.yaml").exists()  # nothing written before the check


def test_cli_invalid_fleet_exits_2_without_traceback(fleet_dir: Path) -> None:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    edit(fleet_dir / "fleet.yaml", "className: l4, nodeCount: 2}", "className: nope, nodeCount: 2}")
    result = CliRunner().invoke(app, ["preview", str(fleet_dir)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_stacks_verb_is_pure(fleet_dir: Path) -> None:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    result = CliRunner().invoke(app, ["stacks", str(fleet_dir), "--planned", "-o", "json"])
    assert result.exit_code == 0, result.output
    names = [s["name"] for s in json.loads(result.output)]
    assert names == ["cluster-a", "cluster-b", "deploy-demo-east", "deploy-demo-west", "gateway"]


# --- workspaces ---------------------------------------------------------------------------


def test_work_dir_names_the_program_folder_relative_to_itself(tmp_path: Path) -> None:
    program = tmp_path / "stacks"
    program.mkdir()
    work = tmp_path / "ws" / "cluster-a"
    (work / "program").parent.mkdir(parents=True)
    (work / "program").symlink_to(program)  # an older driver's link: removed
    prepare_work_dir(work, program, project="modelplane-a")
    prepare_work_dir(work, program, project="modelplane-a")  # idempotent
    assert not (work / "program").is_symlink()
    settings = yaml.safe_load((work / "Pulumi.yaml").read_text())
    assert settings["name"] == "modelplane-a" and settings["main"] == "../../stacks"
    assert (work / settings["main"]).resolve() == program.resolve()
    assert settings["runtime"]["name"] == "python"


def test_the_program_folder_is_the_checkouts_stacks_else_a_real_folder_in_the_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In this checkout: the repository's stacks/, the folder hand-run projects name.
    assert entry_dir(tmp_path / "ws") == REPO / "stacks"
    assert not (tmp_path / "ws").exists()
    # Installed (no checkout around the package): a real folder with a generated entry point.
    package = tmp_path / "site-packages" / "modelplane" / "program"
    package.mkdir(parents=True)
    (package / "__main__.py").write_text("")
    monkeypatch.setattr(workspace_module, "program_dir", lambda: package)
    entry = entry_dir(tmp_path / "ws")
    assert entry == tmp_path / "ws" / "program" and not entry.is_symlink()
    assert (entry / "__main__.py").read_text() == ENTRY_POINT
    assert 'run_module("modelplane.program"' in ENTRY_POINT


# --- error messages -----------------------------------------------------------------------


def test_locked_message_names_the_stack_and_the_lock() -> None:
    text = locked_message("cluster-a", "file:///fleet/.modelplane/state", "modelplane-fleet")
    assert "cluster-a is locked by another update" in text
    assert "/fleet/.modelplane/state/.pulumi/locks/organization/modelplane-fleet/cluster-a" in text


def test_error_text_prefers_engine_diagnostics() -> None:
    progress = StackProgress("s")
    progress.errors.append("error: stack cluster-a has no output kubeconfig: run cluster-a first")
    assert "run cluster-a first" in error_text(Exception("noise"), progress)
    raw = Exception("code: 255\n stdout: \n stderr: warning: x\nerror: something broke\n")
    assert error_text(raw, None) == "error: something broke"


# --- placement diff -----------------------------------------------------------------------


def _replica(name: str, cluster: str, index: int = 0, pool: str = "gpu") -> LockedReplica:
    return LockedReplica(name=name, cluster=cluster, index=index, pools={"unified": pool})


def _lock(**deps: list[LockedReplica]) -> PlacementLock:
    return PlacementLock(
        deployments={k.replace("__", "/"): LockedDeployment(replicas=v) for k, v in deps.items()}
    )


def test_placement_diff_added_removed_moved() -> None:
    before = _lock(ns__m=[_replica("m-1", "a"), _replica("m-2", "b")], ns__g=[_replica("g-1", "a")])
    after = _lock(ns__m=[_replica("m-1", "a"), _replica("m-3", "c")], ns__g=[])
    report = {
        "ns/m": DeploymentReport(desired=2, replicas=after.replicas_of("ns/m")),
        "ns/g": DeploymentReport(desired=1, unplaced=1, reasons=["a: pool gpu has 0 free nodes"]),
    }
    diffs = {d.key: d for d in placement_diff(before, after, report)}
    m = diffs["ns/m"]
    assert [(s.name, d.name) for s, d in m.moved] == [("m-2", "m-3")]
    assert not m.added and not m.removed and [r.name for r in m.kept] == ["m-1"]
    g = diffs["ns/g"]
    assert [r.name for r in g.removed] == ["g-1"] and g.unplaced == 1


def test_placement_diff_added_on_same_cluster_is_not_a_move() -> None:
    before = _lock(ns__m=[_replica("m-1", "a")])
    after = _lock(ns__m=[_replica("m-1", "a"), _replica("m-2", "a", 1)])
    (d,) = placement_diff(before, after, {})
    assert [r.name for r in d.added] == ["m-2"] and not d.moved


# --- events and markdown from a recorded real preview -------------------------------------


def test_urn_parsing() -> None:
    urn = (
        "urn:pulumi:deploy-demo-qwen::modelplane::modelplane:workload:ModelDeployment$"
        "kubernetes:apps/v1:Deployment::qwen-63ecf-unified"
    )
    assert urn_type_and_name(urn) == ("kubernetes:apps/v1:Deployment", "qwen-63ecf-unified")


@pytest.mark.parametrize(
    ("level", "kind"),
    [("mandatory", "errors"), ("advisory", "warnings"), ("remediate", "warnings")],
)
def test_policy_events_are_the_stacks_errors_or_warnings(level: str, kind: str) -> None:
    """A policy pack's verdict as the engine's event log carries it (`policyEvent`)."""
    urn = "urn:pulumi:s::p::modelplane:cluster:InferenceCluster$kubernetes:gateway.networking.k8s.io/v1:Gateway::local-gateway"
    event = {
        "sequence": 1,
        "timestamp": 1,
        "policyEvent": {
            "resourceUrn": urn,
            "message": "A workload Gateway is internal.\nworkload Gateway inference-gateway is public",
            "color": "never",
            "policyName": "workload-gateways-private",
            "policyPackName": "modelplane",
            "policyPackVersion": "0.0.1",
            "policyPackVersionTag": "0.0.1",
            "enforcementLevel": level,
        },
    }
    progress = StackProgress("cluster-local")
    for item in events_from_json([event, event]):  # said once
        progress.feed(item)
    said = {"errors": progress.errors, "warnings": progress.warnings}
    assert said[kind] == [
        f"policy modelplane/workload-gateways-private ({level}) on "
        "kubernetes:gateway.networking.k8s.io/v1:Gateway local-gateway: "
        "A workload Gateway is internal. workload Gateway inference-gateway is public"
    ]
    assert said["errors" if kind == "warnings" else "warnings"] == []


def _recorded() -> dict:
    return json.loads(RECORDED.read_text())


def test_recorded_preview_folds_into_changes() -> None:
    recording = _recorded()
    for stack, events in recording["stacks"].items():
        progress = StackProgress(stack)
        for event in events_from_json(events):
            progress.feed(event)
        assert progress.change_counts() == recording["counts"][stack]
    progress = StackProgress("deploy")
    for event in events_from_json(recording["stacks"][recording["changed_stack"]]):
        progress.feed(event)
    updates = [c for c in progress.changes() if c.op == "update"]
    assert updates, "the recorded preview updates a workload"
    assert any(p.path.startswith("spec") for c in updates for p in c.properties)


def test_markdown_from_a_recorded_preview() -> None:
    recording = _recorded()
    results = []
    for stack, events in recording["stacks"].items():
        progress = StackProgress(stack)
        for event in events_from_json(events):
            progress.feed(event)
        results.append(
            StackResult(
                stack,
                tier_of_stack_name(stack),
                Outcome.SUCCEEDED,
                changes=progress.change_counts(),
                resources=progress.changes(),
            )
        )
    previous = PlacementLock.model_validate(recording["previous_lock"])
    lock = PlacementLock.model_validate(recording["lock"])
    report = {
        k: DeploymentReport(
            desired=v["desired"],
            replicas=lock.replicas_of(k),
            unplaced=v["unplaced"],
            reasons=v["reasons"],
        )
        for k, v in recording["report"].items()
    }
    plan = Plan(previous, ScheduleResult(lock, report))
    text = preview_markdown(plan, RunResult("preview", "file:///x", results))
    assert text.startswith(MARKER)
    assert "### Placement" in text and "### Stacks" in text
    assert "| added |" in text  # the recorded change scales the deployment up
    changed = recording["changed_stack"]
    assert f"<code>{changed}</code>" in text
    assert "~ update" in text or "+ create" in text
    for prop in recording["expected_properties"]:
        assert f"`{prop}`" in text


def test_markdown_reports_failures_and_shortfalls() -> None:
    previous = _lock(ns__m=[_replica("m-1", "a")])
    lock = _lock(ns__m=[_replica("m-1", "a")])
    report = {
        "ns/m": DeploymentReport(
            desired=3,
            replicas=lock.replicas_of("ns/m"),
            unplaced=2,
            reasons=["a: pool gpu has 0 free nodes, unified needs 1"],
        )
    }
    run = RunResult(
        "preview",
        "file:///x",
        [
            StackResult("cluster-a", Tier.CLUSTERS, Outcome.FAILED, error="error: boom"),
            StackResult("deploy-ns-m", Tier.DEPLOYMENTS, Outcome.SUCCEEDED, changes={"same": 3}),
        ],
    )
    text = preview_markdown(Plan(previous, ScheduleResult(lock, report)), run)
    assert "No placement changes" in text
    assert "2 of 3 replica(s) not placed" in text and "pool gpu has 0 free nodes" in text
    assert "did not preview**: cluster-a" in text and "error: boom" in text


def test_markdown_says_which_stacks_come_from_the_offline_render() -> None:
    """The comment says, per stack, when its resources are the offline render's (issue 34)."""
    lock = _lock(ns__m=[_replica("m-1", "a")])
    created = ResourceChange("create", "urn:x", "kubernetes:apps/v1:Deployment", "m-1")
    run = RunResult(
        "preview",
        "file:///x",
        [
            StackResult("cluster-a", Tier.CLUSTERS, Outcome.SUCCEEDED, changes={"same": 4}),
            StackResult(
                "deploy-ns-m",
                Tier.DEPLOYMENTS,
                Outcome.NEW,
                changes={"create": 7},
                resources=[created],
                note="new stack (not in the backend yet): resources from the offline render",
            ),
            StackResult(
                "cache-ns-c",
                Tier.CACHES,
                Outcome.RENDERED,
                changes={"create": 2},
                note="needs new cluster stack(s) cluster-b, which do not exist yet: "
                "resources from the offline render",
            ),
        ],
    )
    text = preview_markdown(Plan(lock, ScheduleResult(lock, {})), run)
    assert "9 to create" in text and "2 stack(s) shown from the offline render" in text
    assert "**2 stack(s) shown from the offline render**, not previewed by the engine" in text
    assert "- `deploy-ns-m`: shown from the offline render (no stack in the backend yet)" in text
    assert (
        "- `cache-ns-c`: shown from the offline render (needs new cluster stack(s) cluster-b, "
        "which do not exist yet)" in text
    )
    assert "| `deploy-ns-m` | new (offline render): 7 to create | 7 | 0 | 0 | 0 |" in text
    assert "<code>deploy-ns-m</code>: new (offline render): 7 to create" in text
    assert "`cluster-a`: shown" not in text and "```" not in text  # not shown as an error


def test_markdown_without_offline_stacks_says_nothing_of_it() -> None:
    lock = _lock(ns__m=[_replica("m-1", "a")])
    run = RunResult(
        "preview",
        "file:///x",
        [StackResult("cluster-a", Tier.CLUSTERS, Outcome.SUCCEEDED, changes={"update": 1})],
    )
    assert "offline render" not in preview_markdown(Plan(lock, ScheduleResult(lock, {})), run)


@pytest.mark.parametrize(("environments", "skipped"), [([], True), (["team/aws-prod"], False)])
def test_esc_up_runs_a_stack_importing_environments_whatever_its_cache_says(
    fleet_dir: Path, environments: list[str], skipped: bool
) -> None:
    """`up`'s skip decision (UpOp.prepare) with the stack cache holding this very fingerprint:
    skipped without ESC imports, run with them."""
    from types import SimpleNamespace

    from modelplane.driver.operations import UpOp, fingerprint_of

    fleet = Fleet.load(fleet_dir, env={})
    plan = fleet.plan()
    unit = next(u for u in fleet.stacks(plan) if u.name == "gateway")
    session = SimpleNamespace(
        extra_config=lambda _s: {},
        hold_config=lambda _s: {},
        environments=lambda _s: environments,
        env={},
        project="modelplane-test",
    )
    ctx = SimpleNamespace(
        fleet=fleet.spec,
        lock=plan.lock,
        fleet_dir=fleet_dir,
        session=session,
        unroutable=(),
        up_options={},
        masked={},
        digests={},
        exists=lambda _s: False,
        output_digest=lambda _s: None,
        commit_subject=lambda: None,
    )
    recorded = fingerprint_of(ctx, unit)  # type: ignore[arg-type]
    entry = SimpleNamespace(fingerprint=recorded, masked={}, outputs="digest")
    ctx.cache = SimpleNamespace(updated_here=lambda _s: None, valid=lambda _s: entry)
    result = UpOp(ctx, unit, force=False).prepare()  # type: ignore[arg-type]
    assert (result is not None and result.outcome == Outcome.UNCHANGED) is skipped
