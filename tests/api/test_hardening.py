"""Hostile and malformed input: every class gets a clear error (exit 2), never a
traceback, a hang or a silent skip (docs/api.md, "Input limits and strictness")."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from modelplane.api.errors import FleetInvalid
from modelplane.api.loader import load_fleet
from modelplane.api.yamlread import MAX_EXPANDED_NODES, read_yaml
from modelplane.cel import CelCompileError, Device, compile_selector
from modelplane.cel.environment import BudgetExceeded, evaluate
from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)
from modelplane.cli.output import error_table
from modelplane.lock import dump_lock, read_lock
from modelplane.secrets import MAX_SECRET_FILE_BYTES, SecretNotFound, resolve_secret
from tests.spec_docs import base_fleet, existing_cluster, write_fleet

runner = CliRunner()


def cli(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def fleet_text() -> str:
    return yaml.safe_dump_all(base_fleet(), sort_keys=False)


# --- YAML: duplicate keys, aliases, size ------------------------------------------------

DUPLICATES = [
    ("top level", "a: 1\na: 2\n", "a", 2),
    ("nested", "a:\n  b: 1\n  c: 2\n  b: 3\n", "a.b", 4),
    ("in a list item", "l:\n  - x: 1\n    x: 2\n", "l[0].x", 3),
]


@pytest.mark.parametrize(
    ("text", "path", "line"), [d[1:] for d in DUPLICATES], ids=[d[0] for d in DUPLICATES]
)
def test_duplicate_keys_are_rejected_with_path_and_line(text, path, line):
    docs, problems = read_yaml(text)
    assert docs == []
    assert [(p.path, p.line) for p in problems] == [(path, line)]
    assert "duplicate key" in problems[0].message


def test_anchors_and_merge_keys_still_work():
    text = "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\nother: *b\n"
    docs, problems = read_yaml(text)
    assert problems == []
    assert docs[0].body == {
        "base": {"x": 1, "y": 2},
        "use": {"x": 1, "y": 3},
        "other": {"x": 1, "y": 2},
    }


def _alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    return "\n".join(lines) + "\n"


BOUNDS = [
    ("alias bomb", _alias_bomb(9), "too large once aliases are expanded"),
    ("deep nesting", "a: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("syntax", "a: [unclosed\n", "invalid YAML"),
    ("huge file", "a: " + "x" * (9 * 1024 * 1024) + "\n", "larger than"),
]


@pytest.mark.parametrize(("text", "message"), [b[1:] for b in BOUNDS], ids=[b[0] for b in BOUNDS])
def test_yaml_bounds_are_errors(text, message):
    # The bound's own message: the limit stopped the read (a 10**9-node alias bomb read to
    # the end would not return at all); no wall-clock bound.
    docs, problems = read_yaml(text)
    assert docs == [] and len(problems) == 1 and message in problems[0].message


def test_alias_bomb_under_the_limit_is_fine():
    docs, problems = read_yaml(_alias_bomb(4))
    assert problems == [] and len(docs) == 1
    assert MAX_EXPANDED_NODES > 10**4


# --- the loader: files, folders, symlinks, encodings ------------------------------------


def _fs_case(tmp_path: Path, case: str) -> Path:
    write_fleet(tmp_path, base_fleet())
    if case == "dangling symlink":
        (tmp_path / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    elif case == "looping symlink":
        (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    elif case == "folder loop":
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "up").symlink_to(tmp_path)
    elif case == "not UTF-8":
        (tmp_path / "latin.yaml").write_bytes(b"name: caf\xe9\n")
    elif case == "binary":
        (tmp_path / "bin.yaml").write_bytes(bytes(range(256)))
    elif case == "duplicate key":
        (tmp_path / "fleet.yaml").write_text(
            fleet_text().replace(
                "kind: InferenceClass", "kind: InferenceClass\nkind: InferenceClass", 1
            )
        )
    return tmp_path


FS_CASES = [
    ("dangling symlink", "gone.yaml", "dangling symlink"),
    ("looping symlink", "loop.yaml", "symlink loops"),
    ("folder loop", "up", "loops back"),
    ("not UTF-8", "latin.yaml", "not UTF-8"),
    ("binary", "bin.yaml", "not UTF-8"),
    ("duplicate key", "fleet.yaml", "duplicate key 'kind'"),
]


@pytest.mark.parametrize(("case", "file", "message"), FS_CASES, ids=[c[0] for c in FS_CASES])
def test_fleet_files_that_cannot_be_read_are_errors(tmp_path, case, file, message):
    root = _fs_case(tmp_path, case)
    errors = load_fleet(root).errors
    assert any(e.file.endswith(file) and message in e.message for e in errors), errors
    result = cli("validate", str(root))
    assert result.exit_code == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_unreadable_folder_is_an_error(tmp_path):
    write_fleet(tmp_path, base_fleet())
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        assert any("cannot read folder" in e.message for e in load_fleet(tmp_path).errors)
    finally:
        locked.chmod(0o755)


# --- errors carry line and column; table, JSON and GitHub output -------------------------


def test_errors_carry_line_and_column(tmp_path):
    text = fleet_text().replace("nodeCount: 2", "nodeCount: -2")
    (tmp_path / "fleet.yaml").write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "nodeCount: -2" in t)
    result = cli("validate", str(tmp_path), "-o", "json")
    assert result.exit_code == 2
    errors = json.loads(result.stdout)["errors"]
    assert [(e["path"], e["line"]) for e in errors] == [("spec.nodePools[0].nodeCount", line)]
    assert errors[0]["column"] > 1
    gh = cli("validate", str(tmp_path), "-o", "github")
    assert gh.exit_code == 2
    assert gh.stdout.startswith(f"::error file={tmp_path}/fleet.yaml,line={line},col=")
    table = cli("validate", str(tmp_path))
    assert table.exit_code == 2
    wide = Console(width=400, record=True, file=io.StringIO())
    wide.print(error_table(load_fleet(tmp_path).errors))
    assert f"fleet.yaml:{line}:{errors[0]['column']}" in wide.export_text()


MARKUP = [
    ("object name", lambda t: t.replace("name: c1", "name: '[/red]'", 1), "[/red]"),
    ("file name", None, "[bold]"),
]


@pytest.mark.parametrize(("edit", "needle"), [m[1:] for m in MARKUP], ids=[m[0] for m in MARKUP])
def test_user_text_is_never_rich_markup(tmp_path, edit, needle):
    if edit is None:
        (tmp_path / f"x{needle}.yaml").write_text("a: [\n")
    else:
        (tmp_path / "fleet.yaml").write_text(edit(fleet_text()))
    # A wide terminal: the file column must not be cut, whatever the temporary path's length.
    result = runner.invoke(app, ["validate", str(tmp_path)], env={"COLUMNS": "500"})
    assert result.exit_code == 2, result.exception
    assert needle in result.stdout.replace("\n", "")


# --- the lock --------------------------------------------------------------------------

REPLICA = "    - {name: r0, cluster: c1, index: 0, pools: {unified: gpu}}\n"
LOCK_HEAD = "apiVersion: modelplane.ai/v1alpha1\nkind: PlacementLock\ndeployments:\n  team/m:\n    replicas:\n"
LOCKS = [
    ("not UTF-8", b"kind: caf\xe9\n", "not UTF-8"),
    ("binary", bytes(range(256)), "not UTF-8"),
    ("duplicate replica", (LOCK_HEAD + REPLICA + REPLICA).encode(), "duplicate replica"),
    (
        "duplicate slot",
        (LOCK_HEAD + REPLICA + REPLICA.replace("r0", "r1")).encode(),
        "duplicate slot",
    ),
    (
        "duplicate key",
        (LOCK_HEAD + REPLICA + "  team/m:\n    replicas: []\n").encode(),
        "duplicate key",
    ),
    ("two documents", (LOCK_HEAD + REPLICA + "---\na: 1\n").encode(), "more than one"),
]


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in LOCKS], ids=[c[0] for c in LOCKS])
def test_bad_locks_are_rejected_and_never_rewritten(tmp_path, body, message):
    write_fleet(tmp_path, base_fleet())
    lock = tmp_path / "modelplane.lock.yaml"
    lock.write_bytes(body)
    with pytest.raises(FleetInvalid) as info:
        read_lock(lock)
    assert any(message in e.message for e in info.value.errors), info.value.errors
    result = cli("plan", str(tmp_path), "--write")
    assert result.exit_code == 2
    assert lock.read_bytes() == body


def test_plan_write_into_a_missing_folder_is_exit_2(tmp_path):
    write_fleet(tmp_path, base_fleet())
    result = cli("plan", str(tmp_path), "--write", "--lock", str(tmp_path / "no" / "lock.yaml"))
    assert result.exit_code == 2
    assert "cannot write the lock" in result.stderr if result.stderr_bytes else True


def test_a_good_lock_round_trips(tmp_path):
    write_fleet(tmp_path, base_fleet())
    assert cli("plan", str(tmp_path), "--write").exit_code == 0
    lock = tmp_path / "modelplane.lock.yaml"
    assert dump_lock(read_lock(lock)) == lock.read_text()


# --- renderTo confinement ---------------------------------------------------------------

RENDER_TO = [
    ("absolute", "/tmp/out", "relative path"),
    ("parent", "../out", "'..'"),
    ("fleet folder", ".", "not the fleet folder"),
    ("fleet folder, slash", "./", "not the fleet folder"),
    ("spec subfolder", "specs", "holds specs"),
    ("spec subfolder, slash", "./specs/", "holds specs"),
]


@pytest.mark.parametrize("through_link", [False, True], ids=["fleet", "fleet via symlink"])
@pytest.mark.parametrize(
    ("render_to", "message"), [r[1:] for r in RENDER_TO], ids=[r[0] for r in RENDER_TO]
)
def test_render_to_is_confined(tmp_path, render_to, message, through_link):
    docs = base_fleet()
    cluster = existing_cluster()
    cluster["spec"]["cluster"]["existing"]["renderTo"] = render_to
    docs[1] = cluster
    fleet = tmp_path / "fleet"
    write_fleet(fleet / "specs", docs)
    if through_link:
        (tmp_path / "link").symlink_to(fleet)
        fleet = tmp_path / "link"
    errors = load_fleet(fleet).errors
    assert any(
        e.path == "spec.cluster.existing.renderTo" and message in e.message for e in errors
    ), errors


def test_render_to_a_dedicated_folder_is_fine(tmp_path):
    write_fleet(tmp_path, base_fleet())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "deploy.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n")
    assert load_fleet(tmp_path).errors == []


# --- network settings ---------------------------------------------------------------------


def test_mixed_address_families_are_an_error_not_a_traceback():
    from pydantic import ValidationError

    from modelplane.api.inference_cluster import EKSNetworking

    with pytest.raises(ValidationError, match="IPv6 but vpcCidr"):
        EKSNetworking(vpc_cidr="10.0.0.0/16", subnet_cidrs=["10.0.0.0/20", "fd00::/64"])


GKE_DECLARED = {"nodeCidr": "10.0.0.0/24", "podCidr": "10.1.0.0/16", "serviceCidr": "10.2.0.0/16"}

GKE_NETWORKS = [
    # (id, networking (over GKE_DECLARED unless empty), error path or None, message fragment)
    ("planned", {}, None, ""),
    ("declared", GKE_DECLARED, None, ""),
    ("ipv6 pods", {"podCidr": "fd00::/64"}, "podCidr", "IPv6"),
    ("ipv6 nodes", {"nodeCidr": "fd00:1::/64"}, "nodeCidr", "IPv6"),
    ("services inside pods", {"serviceCidr": "10.1.128.0/20"}, "serviceCidr", "overlaps podCidr"),
    ("pods over nodes", {"podCidr": "10.0.0.0/16"}, "podCidr", "overlaps nodeCidr"),
    ("disjoint custom", {"nodeCidr": "172.16.0.0/24", "podCidr": "172.17.0.0/16"}, None, ""),
]


@pytest.mark.parametrize(
    ("networking", "path", "fragment"),
    [c[1:] for c in GKE_NETWORKS],
    ids=[c[0] for c in GKE_NETWORKS],
)
def test_gke_ranges_are_ipv4_and_disjoint(tmp_path, networking, path, fragment):
    cluster = existing_cluster()
    cluster["spec"]["cluster"] = {
        "source": "GKE",
        "gke": {
            "project": "p",
            "region": "us-central1",
            "networking": {**GKE_DECLARED, **networking} if networking else {},
        },
    }
    write_fleet(tmp_path, [cluster])
    errors = [e for e in load_fleet(tmp_path).errors if e.path.startswith("spec.cluster")]
    if path is None:
        assert errors == []
        return
    assert [e.path for e in errors] == [f"spec.cluster.gke.networking.{path}"]
    assert fragment in errors[0].message and errors[0].line > 0


# --- CEL: estimated cost and a time budget ---------------------------------------------------


def _nested(depth: int, width: int) -> str:
    items = "[" + ", ".join(["1"] * width) + "]"
    expr = "true"
    for level in range(depth):
        expr = f"{items}.all(v{level}, {expr})"
    return expr


CEL_COST = [
    ("one level", _nested(1, 10), True),
    ("two levels", _nested(2, 10), True),
    ("four levels of 50", _nested(4, 50), False),
]


@pytest.mark.parametrize(("expr", "ok"), [c[1:] for c in CEL_COST], ids=[c[0] for c in CEL_COST])
def test_cel_estimated_cost_limit(expr, ok):
    if ok:
        assert compile_selector(expr).matches(Device("d"))
    else:
        with pytest.raises(CelCompileError, match="estimated cost"):
            compile_selector(expr)


@pytest.mark.parametrize(
    "expr",
    [
        _nested(2, 10),
        # every macro body is a handful of steps: the steps are counted across the
        # sub-evaluators, so the budget still ends it
        "[1, 2, 3, 4, 5, 6, 7, 8].all(a, [1, 2, 3, 4, 5, 6, 7, 8].all(b, true))",
    ],
    ids=["nested", "small-bodies"],
)
def test_cel_time_budget(expr, monkeypatch):
    """The budget ends the evaluation part-way: fewer steps than the whole evaluation takes
    (counted, not timed)."""
    from modelplane.cel import environment

    budgets = []

    class Counted(environment._Budget):
        def __init__(self, deadline: float) -> None:
            super().__init__(deadline)
            budgets.append(self)

    monkeypatch.setattr(environment, "_Budget", Counted)
    selector = compile_selector(expr)
    evaluate(selector._ast, Device("d"), budget=3600.0)
    with pytest.raises(BudgetExceeded):
        evaluate(selector._ast, Device("d"), budget=0.0)
    whole, stopped = (b.steps for b in budgets)
    assert stopped < whole, (stopped, whole)


def test_cel_budget_is_cpu_time_not_waiting():
    """A thread that waits for a core (a loaded machine) uses no budget: the selector's
    answer must not depend on the load. While this evaluation runs, another thread takes
    the interpreter lock for one long C call (~0.5 s, longer than the 0.2 s budget)."""
    import sys
    import threading

    # ~60 ms of CPU (a third of the budget): long enough that the other thread, runnable as
    # soon as `go` is set, takes the lock during the evaluation on a busy machine too (with
    # 30 the evaluation could end first, before the thread was scheduled).
    selector = compile_selector(_nested(2, 60))
    go = threading.Event()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.001)

    def hog() -> None:
        go.wait()
        sum(range(15_000_000))  # one C call: holds the interpreter lock throughout

    other = threading.Thread(target=hog)
    other.start()
    started = time.monotonic()
    go.set()
    try:
        value = evaluate(selector._ast, Device("d"), budget=0.2)
    finally:
        sys.setswitchinterval(switch)
    waited = time.monotonic() - started
    other.join()
    assert bool(value) is True
    assert waited > 0.2  # the evaluation did wait longer than its budget


# --- file: secrets -----------------------------------------------------------------------------


def _secret_case(tmp_path: Path, case: str) -> str:
    path = tmp_path / "s"
    if case == "fifo":
        os.mkfifo(path)
    elif case == "device":
        path.symlink_to("/dev/zero")  # a device outside the fleet folder: refused by the path
    elif case == "folder":
        path.mkdir()
    elif case == "too large":
        path.write_bytes(b"x" * (MAX_SECRET_FILE_BYTES + 1))
    elif case == "regular":
        path.write_text("v")
    return "s"


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("fifo", "regular file"),
        ("device", "leaves the fleet folder"),
        ("folder", "regular file"),
        ("too large", "regular file"),
        ("regular", None),
    ],
)
def test_file_secrets_are_regular_bounded_files(tmp_path, case, why):
    name = "file:" + _secret_case(tmp_path, case)
    # Refused before any read (a FIFO would block, /dev/zero never end): the outcome says
    # so, no wall-clock bound.
    if why is None:
        assert (
            resolve_secret(name, "k", config=lambda _: None, env={}, base_dir=tmp_path).value == "v"
        )
    else:
        with pytest.raises(SecretNotFound, match=why):
            resolve_secret(name, "k", config=lambda _: None, env={}, base_dir=tmp_path)


# --- Kubernetes rules for fields that pass through, all at once ---------------------------------


def _container(**fields):
    return {"name": "engine", "image": "vllm/vllm-openai:v0.11.0", **fields}


K8S_RULES = [
    (
        "container name",
        {"containers": [_container(), {"name": "Side_Car", "image": "x"}]},
        "containers[1].name",
    ),
    (
        "env var name",
        {"containers": [_container(env=[{"name": "1BAD=", "value": "x"}])]},
        "containers[0].env[0].name",
    ),
    (
        "port range",
        {"containers": [_container(ports=[{"containerPort": 70000}])]},
        "containers[0].ports[0].containerPort",
    ),
    (
        "port as text",
        {"containers": [_container(ports=[{"containerPort": "80"}])]},
        "containers[0].ports[0].containerPort",
    ),
    (
        "port name",
        {"containers": [_container(ports=[{"containerPort": 80, "name": "HTTP--x"}])]},
        "containers[0].ports[0].name",
    ),
    (
        "negative quantity",
        {"containers": [_container(resources={"limits": {"cpu": "-1"}})]},
        "containers[0].resources.limits.cpu",
    ),
    (
        "volume name",
        {"containers": [_container()], "volumes": [{"name": "A b", "emptyDir": {}}]},
        "volumes[0].name",
    ),
]


def test_kubernetes_rules_are_enforced_at_load_all_at_once(tmp_path):
    from tests.spec_docs import deployment

    docs = [d for d in base_fleet() if d["kind"] != "ModelDeployment"]
    for i, (_, spec, _) in enumerate(K8S_RULES):
        dep = deployment(name=f"m{i}")
        dep["spec"]["workers"]["template"]["spec"] = spec
        docs.append(dep)
    write_fleet(tmp_path, docs)
    errors = load_fleet(tmp_path).errors
    for i, (case, _, path) in enumerate(K8S_RULES):
        assert any(
            e.object == f"ModelDeployment team/m{i}" and e.path.endswith(path) and e.line
            for e in errors
        ), (case, [(e.object, e.path) for e in errors])


ENDPOINT = {
    "apiVersion": "modelplane.ai/v1alpha1",
    "kind": "ModelEndpoint",
    "metadata": {"name": "e", "namespace": "team"},
    "spec": {"url": "http://e:8000/v1"},
}
SERVICE = {
    "apiVersion": "modelplane.ai/v1alpha1",
    "kind": "ModelService",
    "metadata": {"name": "s", "namespace": "team"},
    "spec": {"endpoints": [{"selector": {"matchLabels": {"app": "e"}}, "weight": 1}]},
}
ENDPOINT_RULES = [
    (
        "reserved label",
        ENDPOINT,
        ["metadata", "labels"],
        {"modelplane.ai/cluster": "x"},
        "metadata.labels",
    ),
    ("control character in url", ENDPOINT, ["spec", "url"], "http://e:8000/v1\x07", "spec.url"),
    ("space in url", ENDPOINT, ["spec", "url"], "http://e :8000/v1", "spec.url"),
    (
        "fractional weight",
        SERVICE,
        ["spec", "endpoints", 0, "weight"],
        1.5,
        "spec.endpoints[0].weight",
    ),
]


@pytest.mark.parametrize(
    ("base", "where", "value", "path"),
    [r[1:] for r in ENDPOINT_RULES],
    ids=[r[0] for r in ENDPOINT_RULES],
)
def test_endpoint_and_service_rules(tmp_path, base, where, value, path):
    import copy

    doc = copy.deepcopy(base)
    target = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    write_fleet(tmp_path, [*base_fleet(), doc])
    errors = load_fleet(tmp_path).errors
    assert any(e.path == path for e in errors), [(e.path, e.message) for e in errors]
