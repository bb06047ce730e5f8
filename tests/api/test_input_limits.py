"""Strict scalars, ranges and count limits, endpoint ports, empty fleets (docs/api.md,
"Input limits and strictness"): what Kubernetes' strict decoding rejects is rejected here,
with file, object, field and line; the valid controls next to each class still load."""

from __future__ import annotations

import copy
import json
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from modelplane.api.errors import FleetInvalid
from modelplane.api.kinds import KINDS
from modelplane.api.limits import MAX_CLUSTER_NODES, MAX_POOL_NODES
from modelplane.api.loader import load_fleet
from modelplane.api.placement_lock import PlacementLock
from modelplane.api.yamlread import read_yaml
from modelplane.cli import app, commands, engine_verbs  # noqa: F401  (registers every verb)
from modelplane.driver.fleet import Fleet
from modelplane.planning import plan_fleet
from modelplane.scheduler.placement import Placement
from tests.spec_docs import (
    base_fleet,
    deployment,
    existing_cluster,
    gateway,
    gpu_class,
    write_fleet,
)

runner = CliRunner()
RAW = "RAWVALUE"  # replaced by the case's YAML text, so the real loader reads it


def _fleet_text(edits: list[tuple[str, list[Any], Any]]) -> str:
    """The base fleet with `edits` (kind, key path, value); a value that is a `str` starting
    with `!` is YAML text written as is (`!yes` -> `yes`, `!"2"` -> `"2"`)."""
    docs = copy.deepcopy(base_fleet())
    docs[0]["spec"]["devices"][0]["attributes"]["rank"] = {"int": 1}
    raws = []
    for kind, keys, value in edits:
        target = next(d for d in docs if d["kind"] == kind)
        for key in keys[:-1]:
            if isinstance(key, str) and key not in target:
                target[key] = {}
            target = target[key]
        target[keys[-1]] = _mark(value, raws)
    text = yaml.safe_dump_all(docs, sort_keys=False)
    for i, raw in enumerate(raws):
        text = text.replace(f"{RAW}{i}X", raw)
    return text


def _mark(value: Any, raws: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: _mark(v, raws) for k, v in value.items()}
    if isinstance(value, list):
        return [_mark(v, raws) for v in value]
    if isinstance(value, str) and value.startswith("!"):
        raws.append(value[1:])
        return f"{RAW}{len(raws) - 1}X"
    return value


def _errors(tmp_path: Path, edits: list[tuple[str, list[Any], Any]]) -> list[Any]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "fleet.yaml").write_text(_fleet_text(edits))
    return load_fleet(tmp_path).errors


DEP, CLUSTER, CLASS = "ModelDeployment", "InferenceCluster", "InferenceClass"
WORKERS = ["spec", "workers"]
POD = [*WORKERS, "template", "spec"]
POOL = ["spec", "nodePools", 0]
STACK = ["spec", "servingStack"]
ATTR = ["spec", "devices", 0, "attributes", "rank"]
AUTO = ["spec", "autoscaling"]
_AUTO_BASE = {"minReplicas": 1, "maxReplicas": 4, "metrics": [{"type": "queueDepth"}]}

# (id, edits, error path or None when valid, a fragment of the message)
CASES: list[tuple[str, list[tuple[str, list[Any], Any]], str | None, str]] = [
    # integers: YAML integers only
    ("replicas quoted", [(DEP, ["spec", "replicas"], '!"2"')], "spec.replicas", "integer"),
    ("replicas yes", [(DEP, ["spec", "replicas"], "!yes")], "spec.replicas", "the boolean true"),
    ("replicas float", [(DEP, ["spec", "replicas"], "!2.0")], "spec.replicas", "number 2.0"),
    ("replicas 0", [(DEP, ["spec", "replicas"], "!0")], None, ""),
    ("replicas max", [(DEP, ["spec", "replicas"], "!1000")], None, ""),
    ("replicas over", [(DEP, ["spec", "replicas"], "!1001")], "spec.replicas", "1000"),
    ("replicas hex", [(DEP, ["spec", "replicas"], "!0x10")], None, ""),
    ("workers quoted", [(DEP, [*WORKERS, "count"], '!"2"')], "spec.workers.count", "integer"),
    (
        "tensor bool",
        [(DEP, [*WORKERS, "topology", "tensor"], "!true")],
        "spec.workers.topology.tensor",
        "integer",
    ),
    # int32 priorities, like a PriorityClass value
    ("priority int32 max", [(DEP, ["spec", "priority"], f"!{2**31 - 1}")], None, ""),
    ("priority int32 min", [(DEP, ["spec", "priority"], f"!{-(2**31)}")], None, ""),
    ("priority over", [(DEP, ["spec", "priority"], f"!{2**31}")], "spec.priority", "2147483647"),
    (
        "priority under",
        [(DEP, ["spec", "priority"], f"!{-(2**31) - 1}")],
        "spec.priority",
        "-2147483648",
    ),
    ("priority quoted", [(DEP, ["spec", "priority"], '!"1"')], "spec.priority", "integer"),
    # node counts: at most MAX_POOL_NODES a pool, MAX_CLUSTER_NODES a cluster
    ("nodeCount max", [(CLUSTER, [*POOL, "nodeCount"], f"!{MAX_POOL_NODES}")], None, ""),
    (
        "nodeCount over",
        [(CLUSTER, [*POOL, "nodeCount"], f"!{MAX_POOL_NODES + 1}")],
        "spec.nodePools[0].nodeCount",
        f"{MAX_POOL_NODES}",
    ),
    (
        "maxNodeCount 10^8",
        [(CLUSTER, [*POOL, "maxNodeCount"], "!100000000")],
        "spec.nodePools[0].maxNodeCount",
        f"{MAX_POOL_NODES}",
    ),
    (
        "maxNodeCount past int64",
        [(CLUSTER, [*POOL, "maxNodeCount"], f"!{10**30}")],
        "spec.nodePools[0].maxNodeCount",
        f"{MAX_POOL_NODES}",
    ),
    (
        "nodeCount of 5000 digits",
        [(CLUSTER, [*POOL, "nodeCount"], "!" + "9" * 5000)],
        "spec.nodePools[0].nodeCount",
        "too long",
    ),
    (
        "nodeCount quoted",
        [(CLUSTER, [*POOL, "nodeCount"], '!"2"')],
        "spec.nodePools[0].nodeCount",
        "integer",
    ),
    (
        "cluster over its node limit",
        [
            (
                CLUSTER,
                ["spec", "nodePools"],
                [
                    {"name": "gpu", "className": "l4", "nodeCount": MAX_POOL_NODES},
                    {"name": "more", "className": "l4", "nodeCount": MAX_CLUSTER_NODES},
                ],
            )
        ],
        "spec.nodePools",
        f"at most {MAX_CLUSTER_NODES:,}",
    ),
    # booleans: YAML booleans only
    (
        "install quoted",
        [(CLUSTER, [*STACK, "install"], '!"yes"')],
        "spec.servingStack.install",
        "boolean",
    ),
    ("install 1", [(CLUSTER, [*STACK, "install"], "!1")], "spec.servingStack.install", "boolean"),
    ("install false", [(CLUSTER, [*STACK, "install"], "!false")], None, ""),
    (
        "attribute bool quoted",
        [(CLASS, ATTR, {"bool": '!"true"'})],
        "spec.devices[0].attributes.rank.bool",
        "boolean",
    ),
    (
        "attribute int quoted",
        [(CLASS, ATTR, {"int": '!"5"'})],
        "spec.devices[0].attributes.rank.int",
        "integer",
    ),
    ("attribute int64 max", [(CLASS, ATTR, {"int": f"!{2**63 - 1}"})], None, ""),
    (
        "attribute past int64",
        [(CLASS, ATTR, {"int": f"!{2**63}"})],
        "spec.devices[0].attributes.rank.int",
        "less than or equal",
    ),
    # numbers: integers or finite floats, never strings
    (
        "target quoted",
        [(DEP, AUTO, {**_AUTO_BASE, "metrics": [{"type": "queueDepth", "target": '!"2"'}]})],
        "spec.autoscaling.metrics[0].target",
        "number",
    ),
    (
        "target nan",
        [(DEP, AUTO, {**_AUTO_BASE, "metrics": [{"type": "queueDepth", "target": "!.nan"}]})],
        "spec.autoscaling.metrics[0].target",
        "finite",
    ),
    (
        "target integer",
        [(DEP, AUTO, {**_AUTO_BASE, "metrics": [{"type": "queueDepth", "target": "!2"}]})],
        None,
        "",
    ),
    (
        "tolerance inf",
        [
            (
                DEP,
                AUTO,
                {
                    **_AUTO_BASE,
                    "tolerance": "!.inf",
                    "metrics": [{"type": "queueDepth", "target": 2}],
                },
            )
        ],
        "spec.autoscaling.tolerance",
        "finite",
    ),
    # ports 1-65535
    (
        "containerPort 0",
        [(DEP, [*POD, "containers", 0, "ports"], [{"containerPort": 0}])],
        "spec.workers.template.spec.containers[0].ports[0].containerPort",
        "greater than or equal to 1",
    ),
    (
        "containerPort max",
        [(DEP, [*POD, "containers", 0, "ports"], [{"containerPort": 65535}])],
        None,
        "",
    ),
    (
        "gateway port 0",
        [(CLUSTER, STACK, {"install": False, "gateway": {"className": "traefik", "port": 0}})],
        "spec.servingStack.gateway.port",
        "greater than or equal to 1",
    ),
    (
        "grace period negative",
        [(DEP, [*POD, "terminationGracePeriodSeconds"], -1)],
        "spec.workers.template.spec.terminationGracePeriodSeconds",
        "greater than or equal to 0",
    ),
    # strings stay strings: quoted is fine, an unquoted number is not
    (
        "env value quoted",
        [(DEP, [*POD, "containers", 0, "env"], [{"name": "PORT", "value": '!"8000"'}])],
        None,
        "",
    ),
    (
        "env value unquoted",
        [(DEP, [*POD, "containers", 0, "env"], [{"name": "PORT", "value": "!8000"}])],
        "spec.workers.template.spec.containers[0].env[0].value",
        "must be a string",
    ),
    ("label value quoted", [(CLUSTER, ["metadata", "labels", "gpu"], '!"true"')], None, ""),
    ("annotation quoted", [(DEP, ["metadata", "annotations"], {"note": '!"yes"'})], None, ""),
    ("name all digits quoted", [(DEP, ["metadata", "name"], '!"123"')], None, ""),
]


@pytest.mark.parametrize(
    ("edits", "path", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_strict_scalars_and_limits(tmp_path, edits, path, fragment):
    errors = _errors(tmp_path, edits)
    if path is None:
        assert errors == [], [str(e) for e in errors]
        return
    hits = [e for e in errors if e.path == path and fragment in e.message]
    assert hits, [str(e) for e in errors]
    assert all(e.file.endswith("fleet.yaml") and e.line > 0 for e in hits)


# One bad value per class, at distinct places of one fleet.
AT_ONCE = [
    "replicas quoted",
    "priority over",
    "workers quoted",
    "maxNodeCount 10^8",
    "install quoted",
    "attribute bool quoted",
    "target nan",
    "containerPort 0",
    "grace period negative",
]


def test_every_class_at_once_exit_2_no_traceback(tmp_path):
    cases = {c[0]: c for c in CASES}
    edits = [edit for name in AT_ONCE for edit in cases[name][1]]
    (tmp_path / "fleet.yaml").write_text(_fleet_text(edits))
    result = runner.invoke(app, ["validate", str(tmp_path), "--output", "json"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    reported = {e["path"] for e in json.loads(result.stdout)["errors"]}
    assert {cases[name][2] for name in AT_ONCE} <= reported


# --- the scheduler: work follows what is placed, not the pool's node count ------------------


def _big_pool_fleet(tmp_path: Path, nodes: int, replicas: int = 12) -> Path:
    cluster = existing_cluster(nodes=min(nodes, 2))
    cluster["spec"]["nodePools"][0]["maxNodeCount"] = nodes
    docs = [gpu_class(count=8), cluster, gateway(), deployment(tensor=8, replicas=replicas)]
    return write_fleet(tmp_path / str(nodes), docs)


@pytest.mark.parametrize("nodes", [12, 100, MAX_POOL_NODES])
def test_a_pool_is_charged_by_the_nodes_it_uses(tmp_path, nodes):
    fleet = load_fleet(_big_pool_fleet(tmp_path, nodes)).fleet
    run = Placement(fleet)
    run.retain(None)
    run.scale_down()
    run.fill()
    layout = run.pools[("c1", "gpu")].layout
    # 12 replicas of a whole node each: 12 node rows, however many nodes the pool has.
    assert len(layout.free) == 12 and layout.nodes == nodes
    assert layout.free_total == 8 * (nodes - 12)


def test_the_largest_pool_plans_like_a_small_one(tmp_path):
    small = plan_fleet(_big_pool_fleet(tmp_path, 12))
    large = plan_fleet(_big_pool_fleet(tmp_path, MAX_POOL_NODES))
    assert not small.errors and not large.errors
    assert small.result is not None and large.result is not None
    assert small.result.lock == large.result.lock


def test_over_the_limit_never_reaches_the_scheduler(tmp_path):
    outcome = plan_fleet(_big_pool_fleet(tmp_path, 10**8))
    assert outcome.result is None
    assert [e.path for e in outcome.errors] == ["spec.nodePools[0].maxNodeCount"]


# --- endpoint URLs: a port, if given, is 1-65535 ------------------------------------------

URL_PORTS = [
    ("http://e:0/v1", "port 0"),
    ("http://e:1/v1", None),
    ("https://e:65535/v1", None),
    ("http://e:65536/v1", "1-65535"),
    ("http://[::1]:0/v1", "port 0"),
    ("http://e/v1", None),
    ("http://e:/v1", None),
]


@pytest.mark.parametrize(("url", "fragment"), URL_PORTS, ids=[u for u, _ in URL_PORTS])
def test_endpoint_url_ports(tmp_path, url, fragment):
    endpoint = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelEndpoint",
        "metadata": {"name": "e", "namespace": "team"},
        "spec": {"url": url},
    }
    write_fleet(tmp_path, [*base_fleet(), endpoint])
    errors = load_fleet(tmp_path).errors
    if fragment is None:
        assert errors == [], [str(e) for e in errors]
    else:
        assert [(e.object, e.path) for e in errors] == [("ModelEndpoint team/e", "spec.url")]
        assert fragment in errors[0].message


# --- a fleet folder without specs: `up` and `plan --write` refuse, `destroy` still loads ----


def _empty(tmp_path: Path, case: str) -> Path:
    root = tmp_path / "fleet"
    root.mkdir()
    if case == "lock and Pulumi files only":
        (root / "modelplane.lock.yaml").write_text(
            "apiVersion: modelplane.ai/v1alpha1\nkind: PlacementLock\n"
        )
        (root / "Pulumi.yaml").write_text("name: x\nruntime: python\n")
    elif case == "specs only in a hidden folder":
        write_fleet(root / ".old", base_fleet())
    elif case == "empty YAML documents":
        (root / "fleet.yaml").write_text("---\n---\n# nothing\n")
    return root


EMPTY = [
    "no files",
    "lock and Pulumi files only",
    "specs only in a hidden folder",
    "empty YAML documents",
]


@pytest.mark.parametrize("case", EMPTY)
def test_plan_write_of_an_empty_fleet_is_an_error_naming_the_folder(tmp_path, case):
    root = _empty(tmp_path, case)
    lock = root / "modelplane.lock.yaml"
    before = lock.read_text() if lock.exists() else None
    result = runner.invoke(app, ["plan", str(root), "--write", "--output", "json"])
    assert result.exit_code == 2, result.output
    errors = json.loads(result.stdout)["errors"]
    assert [e["file"] for e in errors] == [str(root)]
    assert "no specs" in errors[0]["message"] and "destroy" in errors[0]["message"]
    assert (lock.read_text() if lock.exists() else None) == before
    # a dry run says there is nothing to place, and writes nothing
    assert runner.invoke(app, ["plan", str(root)]).exit_code == 0


@pytest.mark.parametrize("case", EMPTY)
def test_up_of_an_empty_fleet_is_an_error_and_destroy_still_loads(tmp_path, case):
    root = _empty(tmp_path, case)
    result = runner.invoke(app, ["up", str(root), "--yes"])
    assert result.exit_code == 2, result.output
    assert "no specs" in result.output and str(root) in result.output.replace("\n", "")
    with pytest.raises(FleetInvalid, match="no specs"):
        Fleet.load(root, require_specs=True)
    fleet = Fleet.load(root)  # what destroy loads: an empty fleet is fine there
    with pytest.raises(FleetInvalid, match="no specs"):
        fleet.up()  # the library refuses too, before any engine work


def test_an_invalid_spec_is_reported_as_itself_not_as_no_specs(tmp_path):
    doc = deployment()
    doc["spec"]["replicas"] = "2"
    write_fleet(tmp_path, [doc])
    result = runner.invoke(app, ["plan", str(tmp_path), "--write", "--output", "json"])
    assert result.exit_code == 2
    messages = [e["message"] for e in json.loads(result.stdout)["errors"]]
    assert messages and not any("no specs" in m for m in messages)


def _models(root: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """root and every model its fields hold (through lists, dicts, unions)."""
    if root in seen:
        return seen
    seen.add(root)
    for info in root.model_fields.values():
        stack = [info.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                _models(tp, seen)
            stack.extend(typing.get_args(tp))
    return seen


def test_every_spec_and_lock_model_is_strict():
    models: set[type[BaseModel]] = set()
    for kind in [*KINDS.values(), PlacementLock]:
        _models(kind, models)
    assert len(models) > 40  # every nested model is reached
    lax = sorted(m.__name__ for m in models if not m.model_config.get("strict"))
    assert lax == []
    assert all(m.model_config.get("allow_inf_nan") is False for m in models)


UNREADABLE = [
    ("long integer", "a:\n  b: " + "9" * 5000 + "\n", "a.b", "too long"),
    ("long integer with an alias", "x: &x 1\ny: *x\nz: " + "1" * 4400 + "\n", "z", "too long"),
    ("impossible date", "when: 2024-02-30\n", "when", "timestamp"),
    ("long integer is fine quoted", 'a: "' + "9" * 5000 + '"\n', None, ""),
    ("4,300 digits", "a: " + "9" * 4300 + "\n", None, ""),
]


@pytest.mark.parametrize(
    ("text", "path", "fragment"), [u[1:] for u in UNREADABLE], ids=[u[0] for u in UNREADABLE]
)
def test_unreadable_scalars_are_problems_not_tracebacks(text, path, fragment):
    docs, problems = read_yaml(text)
    if path is None:
        assert problems == [] and len(docs) == 1
    else:
        assert [p.path for p in problems] == [path] and problems[0].line > 0
        assert fragment in problems[0].message and docs == []


def test_a_lock_with_an_over_long_index_is_an_error(tmp_path):
    write_fleet(tmp_path, base_fleet())
    lock = tmp_path / "modelplane.lock.yaml"
    lock.write_text(
        "apiVersion: modelplane.ai/v1alpha1\nkind: PlacementLock\ndeployments:\n"
        "  team/m:\n    replicas:\n    - name: m-00000\n      cluster: c1\n"
        f"      index: {'7' * 5000}\n      pools: {{unified: gpu}}\n"
    )
    result = runner.invoke(app, ["plan", str(tmp_path), "--write", "--output", "json"])
    assert result.exit_code == 2
    errors = json.loads(result.stdout)["errors"]
    assert [e["path"] for e in errors] == ["deployments.team/m.replicas[0].index"]
