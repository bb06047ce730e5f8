"""The embedded default for real: the Pulumi engine through the driver on a local file backend.

Each test works on a copy of a fleet in ``tmp_path`` (its own state, workspaces and render
directory) and never touches the network: the engine comes from the per-user cache
(``ensure_engine()`` builds it there the first time, as set-up).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from modelplane.components.workload.front_door import basic_credentials
from modelplane.driver.engine_calls import LOG_ENV, Call, read_log
from modelplane.driver.events import event_to_json
from modelplane.driver.fleet import Fleet
from modelplane.driver.observer import Observer
from modelplane.driver.results import Outcome, StackResult
from modelplane.driver.settings import SecretsSettings
from modelplane.driver.workspace import EngineSession, stack_salt
from modelplane.stacks import StackUnit
from tests.fixtures.engine import (
    CANARY,
    LOCAL,
    REPO,
    TWO_CLUSTERS,
    check,
    copy_fleet,
    fleet_project,
    manifests,
    outcomes,
    plain_cli,
)

pytestmark = pytest.mark.engine

# --- up, up again, change, destroy on the local fleet ----------------------------------------


def test_local_fleet_up_change_destroy(tmp_path: Path, env: dict[str, str]) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    rendered = fleet_dir / "rendered"
    calls = tmp_path / "calls.jsonl"  # every CLI process the driver starts
    env = {**env, LOG_ENV: str(calls)}
    fleet = Fleet.load(fleet_dir, env=env)

    def cli_calls() -> list[Call]:
        """The calls since the last look."""
        found = read_log(calls)
        calls.unlink(missing_ok=True)
        return found

    first = check(fleet.up())
    assert outcomes(first) == {
        "cluster-local": Outcome.SUCCEEDED,
        "deploy-demo-qwen": Outcome.SUCCEEDED,
        "gateway": Outcome.SUCCEEDED,
    }
    assert first.lock_written and (fleet_dir / "modelplane.lock.yaml").exists()
    lock = yaml.safe_load((fleet_dir / "modelplane.lock.yaml").read_text())
    (replica,) = lock["deployments"]["demo/qwen"]["replicas"]
    before = manifests(rendered)
    assert before, "up rendered no manifests"
    assert any(replica["name"] in name for name in before), sorted(before)
    kinds = {yaml.safe_load(text)["kind"] for text in before.values()}
    assert {"Deployment", "Service", "HTTPRoute", "ResourceClaimTemplate"} <= kinds, kinds
    # Stack outputs
    cluster = first.result("cluster-local").outputs
    # Relative to the program's folder (this checkout's stacks/, where the engine runs it).
    assert (REPO / "stacks" / cluster["renderTo"]).resolve() == rendered.resolve()
    assert cluster["kubeconfig"] == "[secret]"
    endpoints = first.result("deploy-demo-qwen").outputs["endpoints"]
    assert endpoints and all(replica["name"] in json.dumps(e) for e in endpoints), endpoints
    assert "services" in first.result("gateway").outputs
    assert all(r.count("create") > 0 for r in first.results)
    # One passphrase salt for the fleet's stacks: a run that reads upstream stacks derives
    # one key, not one per stack (issue 32).
    salts = {stack_salt(fleet_dir / f"Pulumi.{r.stack}.yaml") for r in first.results}
    assert len(salts) == 1 and None not in salts, salts

    assert [(c.verb, c.stack) for c in cli_calls() if c.engine_run] == [
        ("up", "cluster-local"),
        ("up", "deploy-demo-qwen"),
        ("up", "gateway"),
    ]

    # Second up: nothing changed, nothing runs -- not even a CLI process per stack: one
    # `stack ls` says every stack is as the driver left it (issue 32: the guard on the count).
    second = check(fleet.up())
    assert set(outcomes(second).values()) == {Outcome.UNCHANGED}
    assert [c.verb for c in cli_calls()] == ["stack ls"]
    # Forced, the engine runs each stack once and reports no changes.
    forced = check(fleet.up(all_stacks=True))
    assert set(outcomes(forced).values()) == {Outcome.SUCCEEDED}
    assert not any(r.changed for r in forced.results), [r.changes for r in forced.results]
    assert manifests(rendered) == before
    forced_calls = cli_calls()
    assert sorted(c.stack or "" for c in forced_calls if c.engine_run) == [
        "cluster-local",
        "deploy-demo-qwen",
        "gateway",
    ]
    # Only the cluster stack has a secret output (its kubeconfig) to read after its update.
    assert [c.stack for c in forced_calls if not c.engine_run] == [None, "cluster-local"]
    # The forced updates are recognised as the driver's own: the next up starts nothing.
    check(fleet.up())
    assert [c.verb for c in cli_calls()] == ["stack ls"]

    # Scale to two replicas: only the deployment stack (and the gateway's routes) change.
    qwen = fleet_dir / "qwen.yaml"
    qwen.write_text(qwen.read_text().replace("replicas: 1", "replicas: 2", 1))
    fleet = Fleet.load(fleet_dir, env=env)
    third = check(fleet.up())
    assert outcomes(third)["cluster-local"] is Outcome.UNCHANGED
    assert outcomes(third)["deploy-demo-qwen"] is Outcome.SUCCEEDED
    lock = yaml.safe_load((fleet_dir / "modelplane.lock.yaml").read_text())
    names = [r["name"] for r in lock["deployments"]["demo/qwen"]["replicas"]]
    assert len(names) == 2 and replica["name"] in names
    (new_name,) = [n for n in names if n != replica["name"]]
    after = manifests(rendered)
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(n for n in set(before) & set(after) if before[n] != after[n])
    assert not removed, removed
    # The new replica's workload, claim template, Service and route, nothing else new.
    assert all(new_name in name for name in added), added
    added_kinds = sorted(yaml.safe_load(after[n])["kind"] for n in added)
    assert added_kinds == ["Deployment", "HTTPRoute", "ResourceClaimTemplate", "Service"]
    # The existing replica's objects are untouched; the ModelService route gains a backend
    # and the deployment's front-door check (api.md "Private hops") the new replica's route.
    kinds = {yaml.safe_load(after[n])["kind"]: n for n in changed}
    assert sorted(kinds) == ["HTTPRoute", "SecurityPolicy"], changed
    for name in changed:
        assert new_name in after[name] and new_name not in before[name], name
    assert not any(replica["name"] in name for name in changed)
    deploy, gateway = third.result("deploy-demo-qwen"), third.result("gateway")
    # As many engine runs as stacks that changed, and nothing read that the run knew.
    third_calls = cli_calls()
    assert sorted(c.stack or "" for c in third_calls if c.engine_run) == [
        "deploy-demo-qwen",
        "gateway",
    ]
    assert [c.verb for c in third_calls if not c.engine_run] == ["stack ls"]
    assert deploy.count("update") == 1  # the front-door SecurityPolicy's targets
    assert deploy.count("delete") == deploy.count("replace") == 0
    assert gateway.count("update") == 1 and gateway.count("delete") == 0

    # The cluster stack alone is refused while the other stacks hold objects on it.
    refused = fleet.destroy(only=["cluster-local"])
    (alone,) = refused.results
    assert alone.outcome is Outcome.FAILED and alone.error
    assert "deploy-demo-qwen" in alone.error and "gateway" in alone.error
    assert fleet.resources("cluster-local") and manifests(rendered) == after

    # Destroy: manifests gone, no resources left in any stack.
    gone = check(fleet.destroy())
    assert [r.stack for r in gone.results] == ["gateway", "deploy-demo-qwen", "cluster-local"]
    assert not [p for p in manifests(rendered)], manifests(rendered).keys()
    for stack in ("gateway", "deploy-demo-qwen", "cluster-local"):
        assert fleet.resources(stack) == []


def test_a_new_stack_takes_the_fleets_salt_unless_its_passphrase_differs(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`stack init` of a new passphrase stack reuses the salt of the fleet's existing stacks;
    one the passphrase does not open (stacks made with another) gets a salt of its own."""
    fleet_dir = tmp_path / "fleet"
    fleet_dir.mkdir()
    backend = (tmp_path / "state").as_uri()

    def session(passphrase: str) -> EngineSession:
        made = EngineSession(
            fleet_dir / ".modelplane" / "workspaces",
            backend,
            SecretsSettings("passphrase", uses_passphrase=True),
            environ={**env, "PULUMI_CONFIG_PASSPHRASE": passphrase},
            config_dir=fleet_dir,
            project="salts",
        )
        made.stack_markers()  # what `up` lists first: the stacks that exist
        return made

    first = session("one")
    first.stack("a")
    first.stack("b")
    salt_a = stack_salt(first.config_file("a"))  # the fleet's first stack mints it
    assert salt_a is not None and stack_salt(first.config_file("b")) == salt_a
    later = session("one")
    written = "# written before the stack\nconfig:\n  salts:region: north\n"
    later.config_file("c").write_text(written)
    later.stack("c")
    assert stack_salt(later.config_file("c")) == salt_a
    kept = later.config_file("c").read_text()
    assert written in kept and yaml.safe_load(kept)["config"] == {"salts:region": "north"}
    other = session("two")
    other.stack("d")
    assert stack_salt(other.config_file("d")) not in (None, salt_a)
    assert stack_salt(other.config_file("a")) == salt_a  # left as it was


def test_cli_up_twice_and_destroy(tmp_path: Path, env: dict[str, str]) -> None:
    """`modelplane up specs/local` (a copy) through the CLI: summary, JSON, exit codes."""
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    runner = CliRunner()
    cli_env = {**env, "COLUMNS": "200"}
    first = runner.invoke(app, ["up", str(fleet_dir), "--yes"], env=cli_env, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    assert "cluster-local" in first.output and "succeeded" in first.output
    again = runner.invoke(app, ["up", str(fleet_dir), "--yes", "-o", "json"], env=cli_env)
    assert again.exit_code == 0, again.output
    data = json.loads(again.output)
    assert {s["stack"]: s["result"] for s in data["stacks"]} == {
        "cluster-local": "unchanged",
        "deploy-demo-qwen": "unchanged",
        "gateway": "unchanged",
    }
    status = runner.invoke(app, ["status", str(fleet_dir), "-o", "json"], env=cli_env)
    assert status.exit_code == 0, status.output
    st = json.loads(status.output)
    assert all(s["lastResult"] == "succeeded" and s["inSync"] for s in st["stacks"]), st
    assert st["placement"]["demo/qwen"]
    assert "deploy-demo-qwen" in st["endpoints"]
    # A deployment removed from the specs leaves an orphaned stack until --prune.
    (fleet_dir / "qwen.yaml").unlink()
    orphaned = runner.invoke(app, ["up", str(fleet_dir), "--yes", "-o", "json"], env=cli_env)
    assert orphaned.exit_code == 0, orphaned.output
    assert json.loads(orphaned.output)["orphans"] == ["deploy-demo-qwen"]
    # Its replicas still run: the lock keeps what they hold until the stack is destroyed.
    lock_text = (fleet_dir / "modelplane.lock.yaml").read_text()
    assert "\nremoved:\n  demo/qwen:\n" in lock_text and "footprint: {unified:" in lock_text
    pruned = runner.invoke(
        app, ["up", str(fleet_dir), "--yes", "--prune", "-o", "json"], env=cli_env
    )
    assert pruned.exit_code == 0, pruned.output
    result = {s["stack"]: s for s in json.loads(pruned.output)["stacks"]}
    assert result["deploy-demo-qwen"]["result"] == "succeeded"
    assert result["deploy-demo-qwen"]["changes"]["delete"] > 0
    assert "removed:" not in (fleet_dir / "modelplane.lock.yaml").read_text()
    assert not any("qwen" in name for name in manifests(fleet_dir / "rendered"))
    down = runner.invoke(app, ["destroy", str(fleet_dir), "--yes"], env=cli_env)
    assert down.exit_code == 0, down.output
    assert not manifests(fleet_dir / "rendered")


# --- preview --markdown on a changed fleet ---------------------------------------------------


def test_preview_markdown_on_a_changed_fleet(tmp_path: Path, env: dict[str, str]) -> None:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    check(Fleet.load(fleet_dir, env=env).up())
    lock_before = (fleet_dir / "modelplane.lock.yaml").read_text()
    qwen = fleet_dir / "qwen.yaml"
    text = qwen.read_text().replace("replicas: 1", "replicas: 2", 1)
    qwen.write_text(text.replace("vllm/vllm-openai:v0.11.0", "vllm/vllm-openai:v0.12.0"))
    out = tmp_path / "comment.md"
    result = CliRunner().invoke(
        app, ["preview", str(fleet_dir), "--markdown", str(out)], env={**env, "COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    md = out.read_text()
    assert "### Placement" in md and "| added |" in md
    assert "`demo/qwen`" in md
    assert "<code>deploy-demo-qwen</code>" in md
    assert "+ create" in md and "~ update" in md
    assert "image" in md  # the changed property of the existing replica's workload
    # preview writes no lock and changes nothing
    assert (fleet_dir / "modelplane.lock.yaml").read_text() == lock_before


# --- two stacks of a tier in parallel; a failing stack -------------------------------------


class Timeline(Observer):
    def __init__(self) -> None:
        self.spans: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def stack_queued(self, unit: StackUnit) -> None:
        with self.lock:
            self.spans[unit.name] = [time.monotonic(), 0.0]

    def stack_finished(self, result: StackResult) -> None:
        with self.lock:
            if result.stack in self.spans:
                self.spans[result.stack][1] = time.monotonic()


def test_parallel_tier_and_a_failing_stack(tmp_path: Path, env: dict[str, str]) -> None:
    fleet_dir = copy_fleet(TWO_CLUSTERS, tmp_path / "two")
    # Cluster b's kubeconfig secret is missing: its stack fails, deploy-demo-west (placed on
    # b) and the gateway (which reads it) are skipped; cluster a and deploy-demo-east go on.
    fleet_file = fleet_dir / "fleet.yaml"
    fleet_file.write_text(
        fleet_file.read_text().replace(
            "existing: {renderTo: rendered/b}",
            "existing: {secretRef: {name: missing-kubeconfig}}\n  servingStack: {install: false}",
        )
    )
    timeline = Timeline()
    run = Fleet.load(fleet_dir, env=env).up(parallel=4, observer=timeline)
    got = outcomes(run)
    assert got == {
        "cluster-a": Outcome.SUCCEEDED,
        "cluster-b": Outcome.FAILED,
        "deploy-demo-east": Outcome.SUCCEEDED,
        "deploy-demo-west": Outcome.SKIPPED,
        "gateway": Outcome.SKIPPED,
    }, {r.stack: (r.outcome, r.error, r.note) for r in run.results}
    assert "missing-kubeconfig" in (run.result("cluster-b").error or "")
    assert "cluster-b" in (run.result("deploy-demo-west").note or "")
    a, b = timeline.spans["cluster-a"], timeline.spans["cluster-b"]
    assert a[0] < b[1] and b[0] < a[1], "the two cluster stacks did not overlap"
    assert manifests(fleet_dir / "rendered" / "a")


def test_one_argument_on_event_and_a_raising_callback(
    tmp_path: Path, env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """`on_event=lambda e: ...` (Pulumi's own shape) gets every stack's events, each naming
    its stack; a callback that raises is reported once and never fails a stack."""
    fleet_dir = copy_fleet(TWO_CLUSTERS, tmp_path / "two")
    events: list[Any] = []

    def broken(event: Any) -> None:
        events.append(event)
        raise RuntimeError("a bug in the user's callback")

    with caplog.at_level(logging.WARNING, logger="modelplane.driver"):
        run = check(Fleet.load(fleet_dir, env=env).up(parallel=2, on_event=broken))
    assert {r.outcome for r in run.results} == {Outcome.SUCCEEDED}
    assert {e.stack for e in events} == {r.stack for r in run.results}
    for r in run.results:
        kinds = [e.kind for e in events if e.stack == r.stack]
        assert kinds[:2] == ["queued", "started"] and kinds[-1] == "finished", kinds
        assert "resource" in kinds
    reports = [r for r in caplog.records if "on_event raised RuntimeError" in r.getMessage()]
    assert len(reports) == 1


def test_concurrent_update_of_one_stack_is_reported_as_locked(
    tmp_path: Path, env: dict[str, str]
) -> None:
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    fleet = Fleet.load(fleet_dir, env=env)
    check(fleet.up(only=["cluster-local"]))
    # Hold the stack's lock the way a running update does (file backend lock file).
    locks = fleet.state_dir / "state" / ".pulumi" / "locks" / "organization" / fleet.project
    lock_dir = locks / "cluster-local"
    lock_dir.mkdir(parents=True, exist_ok=True)
    (lock_dir / "held-by-test.json").write_text(
        json.dumps(
            {
                "pid": 1,
                "username": "test",
                "hostname": "elsewhere",
                "timestamp": "2026-01-01T00:00:00Z",
            }
        )
    )
    run = fleet.up(only=["cluster-local"], all_stacks=True)
    result = run.result("cluster-local")
    assert result.outcome is Outcome.LOCKED, (result.outcome, result.error)
    assert "locked by another update" in (result.error or "")
    shutil.rmtree(lock_dir)


# --- no plaintext secrets anywhere ----------------------------------------------------------


def test_no_plaintext_secret_in_state_lock_logs_or_manifests(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)

    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    # A second, tainted Existing cluster whose kubeconfig (with a token) comes from the
    # environment, and a config secret on the local cluster's stack.
    (fleet_dir / "remote.yaml").write_text(
        """apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: remote
spec:
  cluster:
    source: Existing
    existing:
      secretRef: {name: remote-kube}
  servingStack: {install: false}
  nodePools:
  - {name: gpu, className: local-l4, nodeCount: 1}
  taints:
  - {key: modelplane.ai/maintenance, value: "on", effect: NoSchedule}
"""
    )
    kubeconfig = f"""apiVersion: v1
kind: Config
clusters:
- name: remote
  cluster: {{server: "https://127.0.0.1:1"}}
users:
- name: remote
  user: {{token: {CANARY}}}
contexts:
- name: remote
  context: {{cluster: remote, user: remote}}
current-context: remote
"""
    # renderTo hand-offs (H5): a ModelCache with a HuggingFace token, the front door's TLS key
    # and the fleet's front-door key (on the routes' Secrets): none reaches the rendered files.
    (fleet_dir / "cache.yaml").write_text(
        """apiVersion: modelplane.ai/v1alpha1
kind: ModelCache
metadata: {name: weights, namespace: demo}
spec:
  source: HuggingFace
  huggingFace: {repo: Qwen/Qwen3-0.6B, authSecret: {name: hf-token, key: token}}
  sizeGiB: 10
  clusterSelector: {matchLabels: {modelplane.ai/region: local}}
"""
    )
    fleet_yaml = fleet_dir / "fleet.yaml"
    fleet_yaml.write_text(
        fleet_yaml.read_text()
        .replace(
            "  cluster: {inferenceClusterRef: local}\n",
            "  cluster: {inferenceClusterRef: local}\n"
            "  tls:\n"
            "    certificate: {name: front-tls, key: crt}\n"
            "    privateKey: {name: front-tls, key: key}\n",
            1,
        )
        .replace(
            "      renderTo: rendered\n",
            "      renderTo: rendered\n      cache: {storageClassName: shared-rwx}\n",
            1,
        )
    )
    assert "privateKey" in fleet_yaml.read_text()
    hand_offs = {
        "MODELPLANE_SECRET_HF_TOKEN_TOKEN": f"{CANARY}-hf",
        "MODELPLANE_SECRET_FRONT_TLS_CRT": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        "MODELPLANE_SECRET_FRONT_TLS_KEY": f"-----BEGIN PRIVATE KEY-----\n{CANARY}-key\n-----END PRIVATE KEY-----",
        "MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY": f"{CANARY}-door",
    }
    # A temporary directory of this test's own, for the driver and every process it starts:
    # what appears there came from this run, whatever else runs on the machine.
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    run_env = {
        **env,
        "MODELPLANE_SECRET_REMOTE_KUBE_KUBECONFIG": kubeconfig,
        **hand_offs,
        "COLUMNS": "200",
        "TMPDIR": str(temp),
    }
    temp_before = {p.name for p in temp.iterdir()}
    events: list[dict[str, Any]] = []
    fleet = Fleet.load(fleet_dir, env=run_env)
    run = fleet.up(
        on_event=lambda stack, e: (
            events.append(event_to_json(e.engine_event)) if e.engine_event else None
        )
    )
    check(run)
    assert run.result("cluster-remote").outputs["kubeconfig"] == "[secret]"
    cli = CliRunner().invoke(app, ["up", str(fleet_dir), "--yes", "--all"], env=run_env)
    assert cli.exit_code == 0, cli.output
    status = CliRunner().invoke(app, ["status", str(fleet_dir), "-o", "json"], env=run_env)
    assert status.exit_code == 0, status.output

    places: dict[str, str] = {
        "events": json.dumps(events),
        "cli output": cli.output + status.output,
        "run result": json.dumps(run.as_json()),
    }
    for path in fleet_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            places[str(path.relative_to(fleet_dir))] = path.read_bytes().decode("utf-8", "replace")
    # The Kubernetes provider writes kubeconfigs to temporary files: the driver gives it a
    # private temporary directory and removes it after each run.
    for path in temp.iterdir():
        if path.name not in temp_before and path.is_file():
            places[str(path)] = path.read_bytes().decode("utf-8", "replace")
    assert not [
        p
        for p in temp.iterdir()
        if p.name.startswith("modelplane-engine-") and p.name not in temp_before
    ]
    encoded = [base64.b64encode(v.encode()).decode() for v in hand_offs.values() if CANARY in v] + [
        basic_credentials(hand_offs["MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY"]).split()[1]
    ]
    leaks = [
        where for where, text in places.items() if CANARY in text or any(e in text for e in encoded)
    ]
    assert not leaks, f"plaintext secret found in: {leaks}"
    # The rendered Secrets name their keys for the platform team and hold no value.
    rendered = [
        doc
        for path in (fleet_dir / "rendered").rglob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "Secret"
    ]
    names = {d["metadata"]["name"] for d in rendered}
    assert "modelplane-front-door-tls" in names, names
    assert any(n.endswith("-auth") for n in names), names  # the cache's token
    for doc in rendered:
        assert "data" not in doc and "stringData" not in doc, doc["metadata"]["name"]
        assert "keys:" in doc["metadata"]["annotations"]["modelplane.ai/hand-off"]
    # The state really holds the secret (encrypted): the stack exports it.
    state_files = [p for p in places if p.startswith(".modelplane/state/")]
    assert any("ciphertext" in places[p] for p in state_files), state_files


# --- the plain CLI in the repository -------------------------------------------------------


def test_plain_pulumi_cli_runs_a_stack_from_the_fleet_project(
    tmp_path: Path, env: dict[str, str], engine_root: Path
) -> None:
    """`cd <fleet> && pulumi stack select --create cluster-local && pulumi up -s cluster-local`."""
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    fleet_project(fleet_dir)
    (fleet_dir / ".modelplane" / "state").mkdir(parents=True)
    run = plain_cli(fleet_dir, env, engine_root)
    run("stack", "select", "--create", "cluster-local")
    run("up", "-s", "cluster-local", "--yes", "--skip-preview")
    outputs = json.loads(run("stack", "output", "-s", "cluster-local", "--json").stdout)
    assert (REPO / "stacks" / outputs["renderTo"]).resolve() == (fleet_dir / "rendered").resolve()
    # The stack's config is the fleet's own file, with no path in it.
    config = (fleet_dir / "Pulumi.cluster-local.yaml").read_text()
    assert str(tmp_path) not in config
    run("destroy", "-s", "cluster-local", "--yes", "--skip-preview")


@pytest.fixture
def recorded_events_path() -> Iterator[Path | None]:
    """Set MODELPLANE_RECORD_PREVIEW=1 to refresh tests/data/preview_events.json."""
    yield (
        (Path(__file__).parents[1] / "data" / "preview_events.json")
        if os.environ.get("MODELPLANE_RECORD_PREVIEW")
        else None
    )


def test_record_a_real_preview(
    tmp_path: Path, env: dict[str, str], recorded_events_path: Path | None
) -> None:
    """A real preview's engine events, replayable by the unit tests (and kept as a fixture)."""
    fleet_dir = copy_fleet(LOCAL, tmp_path / "local")
    fleet = Fleet.load(fleet_dir, env=env)
    check(fleet.up())
    previous = yaml.safe_load((fleet_dir / "modelplane.lock.yaml").read_text())
    qwen = fleet_dir / "qwen.yaml"
    text = qwen.read_text().replace("replicas: 1", "replicas: 2", 1)
    qwen.write_text(text.replace("vllm/vllm-openai:v0.11.0", "vllm/vllm-openai:v0.12.0"))
    fleet = Fleet.load(fleet_dir, env=env)
    plan = fleet.plan()
    events: dict[str, list[dict[str, Any]]] = {}
    run = check(
        fleet.preview(
            plan,
            parallel=1,
            on_event=lambda stack, e: (
                events.setdefault(stack, []).append(event_to_json(e.engine_event))
                if e.engine_event
                else None
            ),
        )
    )
    deploy = run.result("deploy-demo-qwen")
    assert deploy.count("create") > 0 and deploy.count("update") > 0, deploy.changes
    if recorded_events_path is None:
        return
    recording = {
        "about": "engine events of a real `modelplane preview` of specs/local after scaling "
        "demo/qwen to 2 replicas and changing its image (recorded by "
        "MODELPLANE_RECORD_PREVIEW=1 pytest tests/driver/test_engine_local.py -k record; resource "
        "outputs in old/new states are left out)",
        "counts": {r.stack: r.changes for r in run.results},
        "changed_stack": "deploy-demo-qwen",
        "expected_properties": sorted(
            {p.path for c in deploy.resources if c.op == "update" for p in c.properties}
        ),
        "previous_lock": previous,
        "lock": plan.lock.model_dump(mode="json", by_alias=True),
        "report": {k: r.as_dict() for k, r in plan.report.items()},
    }
    lines = ["{"]
    for key, value in sorted(recording.items()):
        lines.append(f" {json.dumps(key)}: {json.dumps(value, sort_keys=True)},")
    lines.append(' "stacks": {')
    for i, (stack, evs) in enumerate(sorted(events.items())):
        kept = [_without_outputs(e) for e in evs if _worth_keeping(e)]
        body = ",\n".join("   " + json.dumps(e, sort_keys=True) for e in kept)
        comma = "," if i < len(events) - 1 else ""
        lines.append(f"  {json.dumps(stack)}: [\n{body}\n  ]{comma}")
    lines += [" }", "}"]
    text = "\n".join(lines).replace(str(tmp_path), "/tmp/fleet") + "\n"
    assert CANARY not in text
    json.loads(text)
    recorded_events_path.write_text(text)


def _worth_keeping(event: dict[str, Any]) -> bool:
    if event.get("stdoutEvent"):
        return False
    diagnostic = event.get("diagnosticEvent")
    return not diagnostic or (
        diagnostic.get("severity") != "debug" and " from $PATH at " not in diagnostic["message"]
    )


def _without_outputs(event: dict[str, Any]) -> dict[str, Any]:
    for key in ("resourcePreEvent", "resOutputsEvent", "resOpFailedEvent"):
        metadata = event.get(key, {}).get("metadata", {})
        for state in ("old", "new"):
            if metadata.get(state):
                metadata[state].pop("outputs", None)
    return event
