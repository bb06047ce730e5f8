"""Working the Pulumi way without the engine: plugins, stack config, providers, refresh, `up`
confirmation, offline previews, output, schema and the library face (issue 10)."""

from __future__ import annotations

import io
import json
import shutil
import stat
from pathlib import Path

import jsonschema
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from modelplane.api.loader import fleet_files, load_fleet
from modelplane.driver.events import StackEvent, events_from_json, stack_event
from modelplane.driver.fleet import Fleet
from modelplane.driver.offline import OfflinePreview
from modelplane.driver.progress import LiveProgress, summary_table
from modelplane.driver.rendering import refresh_skip_reason
from modelplane.driver.results import Outcome, RunResult, StackResult
from modelplane.driver.settings import engine_environment
from modelplane.driver.workspace import prepare_work_dir
from modelplane.engine.plugins import (
    Plugin,
    acquisition_enabled,
    find_plugin,
    install_plugins,
    missing_for_stack,
    pinned_plugins,
    stack_plugins,
)
from modelplane.stacks import StackUnit, Tier

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"
RECORDED = Path(__file__).parents[1] / "data" / "preview_events.json"


def _cli():
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    return app


def _pins() -> dict[str, str]:
    """The provider SDKs' exact versions: constraints.txt, what `make` installs."""
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pins = dict(ln.split("==") for ln in lines if "==" in ln and not ln.startswith("#"))
    return {name: pins[f"pulumi-{name}"] for name in ("kubernetes", "gcp", "aws", "eks")}


def _fake_plugin(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / f"pulumi-resource-{name}"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def _copy(fleet: str, tmp_path: Path) -> Path:
    target = tmp_path / fleet
    shutil.copytree(
        SPECS / fleet,
        target,
        ignore=shutil.ignore_patterns(".modelplane", "rendered", "Pulumi.*.yaml"),
    )
    return target


# --- plugins --------------------------------------------------------------------------------


def test_pinned_plugins_are_the_pinned_sdks() -> None:
    pinned = pinned_plugins()
    assert {n: p.version for n, p in pinned.items()} == _pins()


@pytest.mark.parametrize(
    ("fleet", "stack", "plugins"),
    [
        ("quickstart", "cluster-gke-us-central", {"kubernetes", "gcp"}),
        ("multicloud", "cluster-eks-us-west", {"kubernetes", "aws", "eks"}),
        ("multicloud", "cluster-onprem-east", {"kubernetes"}),
        ("multicloud", "deploy-ml-team-llama-8b", {"kubernetes"}),
        ("local", "cluster-local", {"kubernetes"}),
        ("local", "gateway", {"kubernetes"}),
    ],
)
def test_stack_plugins_follow_the_cluster_source(fleet: str, stack: str, plugins: set) -> None:
    f = Fleet.load(SPECS / fleet)
    units = {u.name: u for u in f.stacks()}
    assert stack in units, sorted(units)
    assert stack_plugins(f.spec, units[stack]) == plugins


def test_find_plugin_in_the_cache_and_on_path(tmp_path: Path) -> None:
    gcp = Plugin("gcp", "10.2.0")
    home = tmp_path / "home"
    env = {"PULUMI_HOME": str(home), "PATH": ""}
    assert find_plugin(gcp, env) is None
    older = _fake_plugin(home / "plugins" / "resource-gcp-v9.0.0", "gcp")
    assert find_plugin(gcp, env).path == older and find_plugin(gcp, env).version == "9.0.0"
    exact = _fake_plugin(home / "plugins" / "resource-gcp-v10.2.0", "gcp")
    assert find_plugin(gcp, env).path == exact and find_plugin(gcp, env).version == "10.2.0"
    on_path = _fake_plugin(tmp_path / "bin", "aws")
    found = find_plugin(Plugin("aws", "7.51.1"), {**env, "PATH": str(tmp_path / "bin")})
    assert found is not None and found.path == on_path and found.version is None


def test_a_cloud_stack_without_its_plugin_fails_with_the_way_to_get_it(tmp_path: Path) -> None:
    f = Fleet.load(SPECS / "quickstart")
    env = {"PULUMI_HOME": str(tmp_path / "empty"), "PATH": ""}
    units = {u.name: u for u in f.stacks()}
    message = missing_for_stack(f.spec, units["cluster-gke-us-central"], env)
    version = _pins()["gcp"]
    assert message is not None
    assert message.startswith(
        f"stack cluster-gke-us-central needs the Pulumi resource plugin(s) gcp {version}"
    )
    assert "GKE clusters" in message
    assert f"pulumi plugin install resource gcp {version}" in message
    assert "python -m modelplane.engine install" in message
    assert "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=false" in message
    # With the plugin installed, or with automatic acquisition back on, nothing to say.
    _fake_plugin(tmp_path / "empty" / "plugins" / f"resource-gcp-v{version}", "gcp")
    _fake_plugin(tmp_path / "bin", "kubernetes")
    env_ok = {**env, "PATH": str(tmp_path / "bin")}
    assert missing_for_stack(f.spec, units["cluster-gke-us-central"], env_ok) is None
    again = {**env, "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "false"}
    assert missing_for_stack(f.spec, units["cluster-gke-us-central"], again) is None


@pytest.mark.parametrize(
    ("value", "enabled"), [(None, False), ("true", False), ("false", True), ("0", True)]
)
def test_automatic_acquisition_only_when_turned_back_on(value: str | None, enabled: bool) -> None:
    environ = {} if value is None else {"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": value}
    assert acquisition_enabled(environ) is enabled
    env = engine_environment(
        {"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true"}, "file:///s", environ
    )
    assert env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == (value or "true")


def test_install_reports_a_plugin_it_cannot_get(tmp_path: Path) -> None:
    # A `pulumi` that fails like the real one without network (the real install needs it).
    pulumi = tmp_path / "pulumi"
    pulumi.write_text(
        "#!/bin/sh\necho 'error: could not download plugin: no network' >&2\nexit 255\n"
    )
    pulumi.chmod(0o755)
    env = {"PULUMI_HOME": str(tmp_path / "home"), "PATH": ""}
    (result,) = install_plugins(pulumi, [Plugin("gcp", "10.2.0")], env, progress=lambda _m: None)
    assert not result.ok and "no network" in result.detail


# --- committed stack config -----------------------------------------------------------------


@pytest.mark.parametrize("fleet", ["local", "quickstart", "multicloud", "frontier", "dev"])
def test_each_fleet_is_a_pulumi_project_without_absolute_paths(fleet: str) -> None:
    project = yaml.safe_load((SPECS / fleet / "Pulumi.yaml").read_text())
    assert project["name"] == f"modelplane-{fleet}"  # a project of its own on any backend
    main = SPECS / fleet / project["main"]
    assert (main / "__main__.py").is_file()
    # Its own virtualenv (`pulumi install` in the fleet directory), not the repository's.
    assert project["runtime"]["options"]["virtualenv"] == ".venv"
    for path in (SPECS / fleet).glob("Pulumi*.yaml"):
        assert str(REPO) not in path.read_text() and "/home/" not in path.read_text()
    # The loader leaves the project and stack config files alone.
    assert not [p for p in fleet_files(SPECS / fleet) if p.name.startswith("Pulumi.")]


def test_stack_config_files_are_not_specs(tmp_path: Path) -> None:
    fleet = _copy("local", tmp_path)
    (fleet / "Pulumi.gateway.yaml").write_text(
        "encryptionsalt: v1:abc\nconfig:\n  modelplane:secrets.hf.token:\n    secure: v1:xyz\n"
    )
    assert not load_fleet(fleet).errors


def test_the_driver_reads_and_writes_the_fleets_own_stack_config(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    program = tmp_path / "stacks"
    program.mkdir()
    work = fleet / ".modelplane" / "workspaces" / "gateway"
    work.mkdir(parents=True)
    # A stack config an older driver kept in the work directory, with its absolute paths.
    (work / "Pulumi.gateway.yaml").write_text(
        yaml.safe_dump(
            {
                "encryptionsalt": "v1:salt",
                "config": {
                    "modelplane:specs": "/abs/fleet",
                    "modelplane:lock": "/abs/fleet/modelplane.lock.yaml",
                    "modelplane:secrets.hf.token": {"secure": "v1:xyz"},
                },
            }
        )
    )
    prepare_work_dir(work, program, fleet)
    prepare_work_dir(work, program, fleet)  # idempotent
    project = yaml.safe_load((work / "Pulumi.yaml").read_text())
    assert project["stackConfigDir"] == "../../.."
    assert (work / project["stackConfigDir"]).resolve() == fleet.resolve()
    moved = yaml.safe_load((fleet / "Pulumi.gateway.yaml").read_text())
    assert moved == {
        "encryptionsalt": "v1:salt",
        "config": {"modelplane:secrets.hf.token": {"secure": "v1:xyz"}},
    }
    assert not (work / "Pulumi.gateway.yaml").exists()


# --- providers: the environment never leaks in ----------------------------------------------


def _provider_inputs(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], **kwargs) -> dict:
    from modelplane.components.providers import cluster_provider
    from tests.pulumi_mocks import MockRun

    for key in (
        "KUBECONFIG",
        "PULUMI_K8S_ENABLE_SERVER_SIDE_APPLY",
        "PULUMI_K8S_DELETE_UNREACHABLE",
    ):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    run = MockRun.of(lambda: cluster_provider("c-k8s", opts=None, **kwargs))
    return dict(run.one("pulumi:providers:kubernetes").inputs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kubeconfig": None, "render_to": "/tmp/rendered"},
        {"kubeconfig": "apiVersion: v1\nkind: Config\n", "render_to": None},
    ],
)
def test_provider_inputs_do_not_depend_on_the_environment(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict
) -> None:
    clean = _provider_inputs(monkeypatch, {}, **kwargs)
    leaky = _provider_inputs(
        monkeypatch,
        {
            "KUBECONFIG": "/home/someone/.kube/config",
            "PULUMI_K8S_ENABLE_SERVER_SIDE_APPLY": "false",
            "PULUMI_K8S_DELETE_UNREACHABLE": "true",
        },
        **kwargs,
    )
    assert leaky == clean
    if kwargs["render_to"]:
        assert clean.get("kubeconfig", "") == ""


# --- refresh of renderTo stacks -------------------------------------------------------------


@pytest.mark.parametrize(
    ("fleet", "skipped", "refreshed"),
    [
        ("local", {"cluster-local", "deploy-demo-qwen", "gateway"}, set()),
        ("multicloud", set(), {"cluster-gke-us-central", "cluster-eks-us-west", "gateway"}),
    ],
)
def test_refresh_skips_stacks_that_only_render(fleet: str, skipped: set, refreshed: set) -> None:
    f = Fleet.load(SPECS / fleet)
    reasons = {u.name: refresh_skip_reason(f.spec, f.previous, u) for u in f.stacks()}
    assert {n for n, r in reasons.items() if r} >= skipped
    assert not {n for n, r in reasons.items() if r} & refreshed
    for name in skipped:
        assert "renderTo" in reasons[name] and "nothing to refresh" in reasons[name]


# --- `up` asks first ------------------------------------------------------------------------


def test_up_without_a_terminal_needs_yes(tmp_path: Path) -> None:
    fleet = _copy("local", tmp_path)
    lock_before = (fleet / "modelplane.lock.yaml").read_text()
    result = CliRunner().invoke(_cli(), ["up", str(fleet)], env={"PULUMI_CONFIG_PASSPHRASE": "x"})
    assert result.exit_code == 1
    assert "--yes" in result.output and f"modelplane up {fleet} --yes" in result.output
    assert "Traceback" not in result.output
    assert (fleet / "modelplane.lock.yaml").read_text() == lock_before


def test_up_has_the_pulumi_options() -> None:
    text = CliRunner().invoke(_cli(), ["up", "--help"], env={"COLUMNS": "200"}).output
    for option in ("--yes", "-y", "--refresh", "--target", "--expect-no-changes", "--policy-pack"):
        assert option in text, option


def test_version_and_help_texts_keep_their_brackets() -> None:
    from modelplane import __version__
    from modelplane.cli.engine_verbs import _help

    result = CliRunner().invoke(_cli(), ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"modelplane {__version__}"
    assert _help("secrets shown as [secret] here") == "secrets shown as \\[secret] here"


def test_version_answers_without_importing_the_verbs() -> None:
    import subprocess
    import sys

    from modelplane import __version__

    code = (
        "import sys; sys.argv = ['modelplane', '--version']; from modelplane.cli import main; "
        "main(); print(sorted(m for m in sys.modules if m.startswith('modelplane.cli.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"modelplane {__version__}", "[]"]


# --- offline previews -----------------------------------------------------------------------


def test_a_preview_of_a_fleet_never_deployed_renders_every_stack(tmp_path: Path) -> None:
    fleet_dir = _copy("local", tmp_path)
    f = Fleet.load(fleet_dir)
    units = f.stacks(f.plan())
    offline = OfflinePreview(
        fleet_dir, fleet_dir / "modelplane.lock.yaml", units, set(), lambda _n: None
    )
    for unit in units:
        assert "new stack" in offline.offline_reason(unit)
    rendered = {u.name: offline.render(u.name) for u in units}
    assert all(r.count > 0 for r in rendered.values())
    kinds = {c.type for c in rendered["deploy-demo-qwen"].resources}
    assert "kubernetes:apps/v1:Deployment" in kinds
    # The gateway's preview would see the new deployment's endpoints from the render.
    gateway = next(u for u in units if u.name == "gateway")
    overrides = offline.overrides(gateway)
    assert list(overrides) == ["deploy-demo-qwen"]
    assert overrides["deploy-demo-qwen"]["endpoints"], overrides


def test_downstream_previews_see_changed_upstream_outputs_only() -> None:
    units = [
        StackUnit("cluster-a", Tier.CLUSTERS, "InferenceCluster", "a"),
        StackUnit("cluster-new", Tier.CLUSTERS, "InferenceCluster", "new"),
        StackUnit("deploy-x", Tier.DEPLOYMENTS, "ModelDeployment", "ns/x", ("cluster-a",)),
        StackUnit("deploy-y", Tier.DEPLOYMENTS, "ModelDeployment", "ns/y", ("cluster-a",)),
        StackUnit("deploy-z", Tier.DEPLOYMENTS, "ModelDeployment", "ns/z", ("cluster-new",)),
        StackUnit(
            "gateway",
            Tier.GATEWAY,
            "InferenceGateway",
            "default",
            ("deploy-x", "deploy-y", "deploy-z"),
        ),
    ]
    existing = {"cluster-a", "deploy-x", "deploy-y", "deploy-z", "gateway"}
    offline = OfflinePreview(
        Path("/nowhere"), Path("/nowhere/lock"), units, existing, lambda _n: None
    )
    by = {u.name: u for u in units}
    assert offline.offline_reason(by["cluster-a"]) is None
    assert "new stack" in offline.offline_reason(by["cluster-new"])
    assert "cluster-new" in offline.offline_reason(by["deploy-z"])
    assert offline.offline_reason(by["gateway"]) is None
    assert offline.overridden(by["gateway"]) == []
    offline.mark_changed("deploy-x")
    offline.mark_changed("cluster-a")  # cluster outputs come from the live cluster: never
    assert offline.overridden(by["gateway"]) == ["deploy-x"]
    assert offline.overridden(by["deploy-y"]) == []


# --- events and output ----------------------------------------------------------------------


def test_structured_events_drop_engine_noise() -> None:
    recorded = json.loads(RECORDED.read_text())
    raw = [e for evs in recorded["stacks"].values() for e in evs]
    raw.append(
        {
            "sequence": 1,
            "timestamp": 1,
            "diagnosticEvent": {"message": "debug chatter", "color": "never", "severity": "debug"},
        }
    )
    raw.append(
        {"sequence": 2, "timestamp": 1, "stdoutEvent": {"message": "hello", "color": "never"}}
    )
    events = [stack_event("s", e) for e in events_from_json(raw)]
    kept = [e for e in events if e is not None]
    assert len(kept) == len(raw) - 2
    assert all(isinstance(e, StackEvent) and e.engine_event is not None for e in kept)
    resources = [e for e in kept if e.kind == "resource"]
    assert resources and all(e.change is not None and e.change.urn for e in resources)
    assert {e.kind for e in kept} <= {"resource", "diagnostic", "summary", "engine"}


def _run_with(name: str) -> RunResult:
    note = "a long note that must not be cut " * 6
    return RunResult(
        "preview",
        "file:///state",
        [StackResult(name, Tier.DEPLOYMENTS, Outcome.NEW, changes={"create": 7}, note=note)],
    )


def test_tables_in_logs_keep_whole_names_and_words() -> None:
    from modelplane.cli.output import LOG_WIDTH

    name = "deploy-" + "very-long-namespace-" * 3 + "and-a-long-model-name"
    buffer = io.StringIO()
    Console(file=buffer, width=LOG_WIDTH).print(summary_table(_run_with(name), note_width=None))
    text = buffer.getvalue()
    assert name in text and ("a long note that must not be cut " * 6).strip() in text
    plain = io.StringIO()
    Console(file=plain, width=LOG_WIDTH).print(summary_table(_run_with(name), headers=False))
    assert "preview:" not in plain.getvalue() and "result" not in plain.getvalue()
    wide = io.StringIO()
    Console(file=wide, width=LOG_WIDTH).print(summary_table(_run_with(name), wide=True))
    assert "tier" in wide.getvalue() and "deployments" in wide.getvalue()


def test_progress_lines_without_a_terminal() -> None:
    buffer = io.StringIO()
    progress = LiveProgress(Console(file=buffer, width=200), live=False, heartbeat=0.05)
    unit = StackUnit("deploy-demo-qwen", Tier.DEPLOYMENTS, "ModelDeployment", "demo/qwen")
    progress.run_started("up", [unit])
    progress.stack_queued(unit)
    import time

    # Two heartbeats, however long a loaded machine takes to give the thread them (a
    # generous wait: it fails only when the heartbeat never comes).
    deadline = time.monotonic() + 30
    while buffer.getvalue().count("up deploy-demo-qwen: running") < 2:
        assert time.monotonic() < deadline, "no two heartbeat lines in 30 s (every 0.05 s)"
        time.sleep(0.05)
    progress.stack_finished(StackResult(unit.name, unit.tier, Outcome.SUCCEEDED))
    progress.run_finished(RunResult("up", "file:///s", []))
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "up deploy-demo-qwen: started"
    assert sum("up deploy-demo-qwen: running" in ln for ln in lines) >= 2
    assert lines[-1].startswith("up deploy-demo-qwen: succeeded")


# --- schema and the library -----------------------------------------------------------------


def test_the_combined_schema_validates_every_example_document(tmp_path: Path) -> None:
    result = CliRunner().invoke(_cli(), ["schema", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    schema = json.loads((tmp_path / "modelplane.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    seen = set()
    for path in sorted(SPECS.glob("*/*.yaml")):
        if path.name.startswith("Pulumi") or path.name == "modelplane.lock.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                assert not list(validator.iter_errors(doc)), (path, doc.get("kind"))
                seen.add(doc["kind"])
    assert len(seen) >= 6
    bad = [
        {"kind": "ModelService", "metadata": {"name": "x"}, "spec": {}},  # no apiVersion
        {"apiVersion": "modelplane.ai/v1alpha1", "metadata": {"name": "x"}},  # no kind
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": "x"},
            "spec": {"bogus": 1},
        },
        {"apiVersion": "modelplane.ai/v1alpha1", "kind": "Nope", "metadata": {"name": "x"}},
    ]
    for doc in bad:
        assert list(validator.iter_errors(doc)), doc
    assert schema["properties"]["kind"]["description"]
    assert schema["$defs"]["ModelService"]["properties"]["spec"]["description"]


def _undescribed(node: object, at: str = "") -> list[str]:
    """Every property, at any depth, of a JSON Schema that has no description."""
    missing: list[str] = []
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            text = prop.get("description") if isinstance(prop, dict) else None
            if not (isinstance(text, str) and text.strip()):
                missing.append(f"{at}/properties/{name}")
        for key, value in node.items():
            missing += _undescribed(value, f"{at}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            missing += _undescribed(value, f"{at}/{i}")
    return missing


def _descriptions(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [node["description"]] if isinstance(node.get("description"), str) else []
        return own + [t for v in node.values() for t in _descriptions(v)]
    if isinstance(node, list):
        return [t for v in node for t in _descriptions(v)]
    return []


def test_every_field_of_every_schema_is_described(tmp_path: Path) -> None:
    result = CliRunner().invoke(_cli(), ["schema", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    files = sorted(tmp_path.glob("*.schema.json"))
    assert len(files) == 9  # eight kinds (with the lock) and the combined one
    for path in files:
        schema = json.loads(path.read_text())
        assert _undescribed(schema) == [], path.name
        # Docstrings read as prose: no line break inside a paragraph.
        texts = _descriptions(schema)
        assert texts and [t for t in texts if "\n" in t.replace("\n\n", "")] == [], path.name
    combined = json.loads((tmp_path / "modelplane.schema.json").read_text())
    # A deep field, with the docstring of its model attribute.
    pool = combined["$defs"]["NodePool"]["properties"]["maxNodeCount"]["description"]
    assert "scheduler's capacity" in pool
    # The check itself finds a field without one.
    assert _undescribed({"properties": {"a": {"type": "object", "properties": {"b": {}}}}}) == [
        "/properties/a",
        "/properties/a/properties/b",
    ]


def test_the_library_face() -> None:
    import modelplane
    from modelplane import DriverError, FleetInvalid, RunResult, StackEvent, StackResult

    assert {"Fleet", "FleetInvalid", "DriverError", "RunResult", "StackResult"} <= set(
        modelplane.__all__
    )
    assert issubclass(DriverError, Exception) and issubclass(FleetInvalid, Exception)
    assert RunResult.__name__ == "RunResult" and StackResult.__name__ == "StackResult"
    assert StackEvent.__name__ == "StackEvent"
    assert (Path(modelplane.__file__).parent / "py.typed").is_file()


# --- the pull-request workflow --------------------------------------------------------------


def _workflow() -> tuple[dict, str]:
    path = REPO / ".github" / "workflows" / "preview.yml"
    text = path.read_text()
    return yaml.safe_load(text), text


def test_the_workflow_has_no_public_passphrase_and_a_backend_per_fleet() -> None:
    flow, text = _workflow()
    assert "modelplane-local" not in text
    assert flow["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
    steps = {s.get("name"): s for s in flow["jobs"]["preview"]["steps"]}
    throwaway = steps["A throw-away passphrase for the empty backend"]
    assert "add-mask" in throwaway["run"] and "secrets.token_hex" in throwaway["run"]
    run = steps["Preview changed fleets"]["run"]
    assert '--backend "${MODELPLANE_BACKEND_URL%/}/$name"' in run
    assert "--refresh" in run and "--expect-no-changes" in run


def test_the_workflow_comment_is_traceable_kept_fresh_and_safe_for_forks() -> None:
    flow, _text = _workflow()
    steps = {s.get("name"): s for s in flow["jobs"]["preview"]["steps"]}
    run = steps["Preview changed fleets"]["run"]
    assert "${HEAD_SHA}" in run and "${RUN_URL}" in run and "GITHUB_STEP_SUMMARY" in run
    assert "no fleet changes" in run
    post = steps["Post or update the comment"]
    assert "env.FROM_FORK != 'true'" in post["if"]
    assert "updateComment" in post["with"]["script"]
    assert "head.repo.full_name != github.repository" in flow["env"]["FROM_FORK"]
    fail = steps["Fail when a stack did not preview"]
    assert fail["if"] == "steps.preview.outputs.status == '1'"


# --- old → new values ----------------------------------------------------------------------


def test_changed_properties_carry_old_and_new_values() -> None:
    from modelplane.driver.events import StackProgress
    from modelplane.driver.markdown import _props

    recorded = json.loads(RECORDED.read_text())
    progress = StackProgress("deploy-demo-qwen")
    for event in events_from_json(recorded["stacks"]["deploy-demo-qwen"]):
        progress.feed(event)
    image = [
        p
        for c in progress.changes()
        for p in c.properties
        if p.path == "spec.template.spec.containers[0].image"
    ]
    assert image and image[0].old == "vllm/vllm-openai:v0.11.0"
    assert image[0].new == "vllm/vllm-openai:v0.12.0"
    change = next(c for c in progress.changes() if image[0] in c.properties)
    assert "`vllm/vllm-openai:v0.11.0` → `vllm/vllm-openai:v0.12.0`" in _props(change)


@pytest.mark.parametrize(
    ("inputs", "path", "expected"),
    [
        (
            {
                "data": {
                    "token": {
                        "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
                        "value": "s3cr3t",
                    }
                }
            },
            "data.token",
            "[secret]",
        ),
        ({"data": {"token": "[secret]"}}, "data.token", "[secret]"),
        ({"spec": {"ports": [{"port": 80}, {"port": 8080}]}}, "spec.ports[1].port", 8080),
        ({"metadata": {"labels": {"a.b/c": "x"}}}, 'metadata.labels["a.b/c"]', "x"),
        ({"spec": {}}, "spec.replicas", None),
    ],
)
def test_values_at_diff_paths_mask_secrets(inputs: dict, path: str, expected: object) -> None:
    from types import SimpleNamespace

    from modelplane.driver.events import value_at

    assert value_at(SimpleNamespace(inputs=inputs), path) == expected


# --- noise and help ---------------------------------------------------------------------------


def test_a_warning_every_stack_reports_is_said_once_per_run() -> None:
    from modelplane.cli.engine_verbs import warnings_once

    skew = "resource plugin kubernetes is expected to have version >=4.34.2, but has 4.25.0"
    results = [
        StackResult("cluster-local", Tier.CLUSTERS, Outcome.SUCCEEDED, warnings=[skew]),
        StackResult("deploy-demo-qwen", Tier.DEPLOYMENTS, Outcome.SUCCEEDED, warnings=[skew, "x"]),
        StackResult("gateway", Tier.GATEWAY, Outcome.SUCCEEDED, warnings=[skew]),
    ]
    assert warnings_once(RunResult("up", "file:///s", results)) == [
        (skew, ["cluster-local", "deploy-demo-qwen", "gateway"]),
        ("x", ["deploy-demo-qwen"]),
    ]


@pytest.mark.parametrize(
    ("cluster", "address", "gateway_cluster", "warned"),
    [
        ("local", None, "local", False),  # the gateway's own cluster: routed via Services
        ("local", "", "local", False),
        ("edge", None, "local", True),  # really left out of routes
        ("edge", "10.0.0.9", "local", False),  # has an address
        ("edge", None, None, True),  # the gateway runs on an existing cluster
    ],
)
def test_the_no_gateway_address_warning_only_when_true(
    cluster: str, address: str | None, gateway_cluster: str | None, warned: bool
) -> None:
    from modelplane.api.inference_gateway import InferenceGateway
    from modelplane.program import no_gateway_address_warning

    ref = (
        {"inferenceClusterRef": gateway_cluster}
        if gateway_cluster
        else {"existing": {"secretRef": {"name": "gw"}}}
    )
    gateway = InferenceGateway.model_validate(
        {"metadata": {"name": "default"}, "spec": {"cluster": ref}}
    )
    warning = no_gateway_address_warning(cluster, address, gateway)
    assert (warning is not None) == warned
    if warned:
        assert warning is not None and f"cluster {cluster!r} has no gateway address" in warning


def _commands() -> list[tuple[list[str], object]]:
    import typer

    def walk(command: object, path: list[str]) -> list[tuple[list[str], object]]:
        found = [(path, command)]
        if isinstance(getattr(command, "commands", None), dict):
            for name, sub in command.commands.items():  # type: ignore[attr-defined]
                found += walk(sub, [*path, name])
        return found

    return walk(typer.main.get_command(_cli()), [])


def test_every_help_text_renders_in_full() -> None:
    """typer renders help as rich markup: a literal `[secret]` would silently vanish."""
    import inspect

    commands = _commands()
    assert len(commands) > 12
    missing = []
    for path, command in commands:
        result = CliRunner().invoke(_cli(), [*path, "--help"], env={"COLUMNS": "1000"})
        assert result.exit_code == 0, (path, result.output)
        shown = " ".join(result.output.replace("│", " ").split())
        texts = inspect.cleandoc(command.help or "").split("\n\n")  # type: ignore[attr-defined]
        texts += [p.help for p in command.params if getattr(p, "help", None)]  # type: ignore[attr-defined]
        for text in texts:
            plain = " ".join(text.replace("\\[", "[").split())
            if plain and plain not in shown:
                missing.append((" ".join(path), plain))
    assert missing == []
    # The check sees a swallowed bracket.
    assert "[secret]" not in " ".join(
        CliRunner().invoke(_demo_app(), ["--help"], env={"COLUMNS": "200"}).output.split()
    )


def _demo_app():
    import typer

    demo = typer.Typer(add_completion=False)

    @demo.command()
    def show() -> None:
        """Values shown as [secret] here."""

    return demo


# --- run-time decisions as stack config ---------------------------------------------------


@pytest.mark.parametrize(
    ("config", "env", "expected"),
    [
        ({}, None, frozenset()),  # nothing decided
        ({"modelplane:unroutable": '["eu-1", "replica:qwen-0"]'}, None, {"eu-1", "replica:qwen-0"}),
        ({"modelplane:unroutable": '["eu-1"]'}, "us-2", {"us-2"}),  # the driver's preview wins
        ({"modelplane:unroutable": '["eu-1"]'}, "", frozenset()),  # ... also when empty
    ],
)
def test_pulumi_way_the_program_reads_unroutable_clusters_from_stack_config(
    monkeypatch: pytest.MonkeyPatch, config: dict[str, str], env: str | None, expected: set[str]
) -> None:
    from pulumi.runtime import set_all_config

    from modelplane import program

    if env is None:
        monkeypatch.delenv(program.UNROUTABLE_ENV, raising=False)
    else:
        monkeypatch.setenv(program.UNROUTABLE_ENV, env)
    set_all_config(config, [])
    try:
        assert program.unroutable_clusters() == frozenset(expected)
    finally:
        set_all_config({}, [])


@pytest.mark.parametrize(
    ("kind", "unroutable", "templates", "expected", "hold"),
    [
        (
            "InferenceGateway",
            ("eu-1", "replica:a"),
            "",
            {"modelplane:unroutable": '["eu-1", "replica:a"]'},
            None,
        ),
        ("InferenceGateway", (), "", {"modelplane:unroutable": None}, None),  # none: removed
        (
            "ModelDeployment",
            (),
            '{"demo/qwen":{"r1":{"image":"a"}},"demo/other":{"r9":{}}}',
            {"modelplane:revisionTemplates": '{"r1": {"image": "a"}}'},  # its own only
            None,
        ),
        ("ModelDeployment", (), "", {"modelplane:revisionTemplates": None}, None),
        ("InferenceCluster", ("eu-1",), "", {}, None),
        # The driver's front-door hold (an `up`): each side gets what the other did last.
        (
            "InferenceGateway",
            (),
            "",
            {"modelplane:unroutable": None, "modelplane:frontDoorAccepted": '["modelplane"]'},
            {"keep": "modelplane", "accepted": '["modelplane"]'},
        ),
        (
            "ModelDeployment",
            (),
            "",
            {"modelplane:revisionTemplates": None, "modelplane:frontDoorKeep": "modelplane"},
            {"keep": "modelplane", "accepted": '["modelplane"]'},
        ),
        ("InferenceCluster", (), "", {}, {"keep": "modelplane", "accepted": None}),
    ],
)
def test_pulumi_way_up_sets_what_the_program_reads_as_stack_config(
    kind: str,
    unroutable: tuple[str, ...],
    templates: str,
    expected: dict[str, str | None],
    hold: dict[str, str | None] | None,
) -> None:
    from types import SimpleNamespace

    from modelplane.driver.operations import UpOp
    from modelplane.driver.workspace import TEMPLATES_ENV

    session = SimpleNamespace(program_env={TEMPLATES_ENV: templates} if templates else {})
    ctx = SimpleNamespace(session=session, unroutable=unroutable, front_door_hold=hold)
    unit = SimpleNamespace(name="x", kind=kind, key="demo/qwen", tier=0)
    op = UpOp(ctx, unit, force=False)  # type: ignore[arg-type]
    assert op.program_config() == expected
