"""The pure CLI verbs as a user runs them: validate, plan, schema (exit codes, JSON, no tracebacks)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.cli.helpers import ROOT, run
from tests.spec_docs import (
    base_fleet,
    deployment,
    existing_cluster,
    gateway,
    gpu_class,
    write_fleet,
)

FLEETS = sorted(p.name for p in (ROOT / "specs").iterdir() if p.is_dir())


@pytest.mark.parametrize("fleet", FLEETS)
def test_example_fleets_validate_and_plan(fleet, tmp_path):
    assert run("validate", f"specs/{fleet}").returncode == 0
    result = run("plan", f"specs/{fleet}", "--lock", str(tmp_path / "lock.yaml"), "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["errors"] == []
    assert out["deployments"], "every example fleet has deployments"
    for key, dep in out["deployments"].items():
        assert dep["unplaced"] == 0, (key, dep["reasons"])
        assert len(dep["replicas"]) == dep["desired"]


def test_example_fleet_locks_are_committed_and_current():
    for fleet in FLEETS:
        lock = ROOT / "specs" / fleet / "modelplane.lock.yaml"
        assert lock.exists(), f"specs/{fleet} has no committed lock"
        before = lock.read_bytes()
        tmp = lock.with_name("check.lock.yaml")
        shutil.copy(lock, tmp)
        try:
            result = run("plan", f"specs/{fleet}", "--lock", str(tmp), "--write", "-o", "json")
            assert result.returncode == 0, result.stderr
            assert tmp.read_bytes() == before, f"specs/{fleet}: committed lock is stale"
        finally:
            tmp.unlink()


def test_validate_reports_every_error_without_traceback(tmp_path):
    docs = base_fleet()
    docs[1]["spec"]["colour"] = "x"
    docs[2]["spec"]["replicas"] = 5000
    write_fleet(tmp_path, docs)
    table = run("validate", str(tmp_path))
    assert table.returncode == 2
    assert "Traceback" not in table.stdout + table.stderr
    assert "spec.colour" in table.stdout and "spec.replicas" in table.stdout
    as_json = run("validate", str(tmp_path), "--output", "json")
    assert as_json.returncode == 2
    errors = json.loads(as_json.stdout)["errors"]
    assert {(e["object"], e["path"]) for e in errors} >= {
        ("InferenceCluster c1", "spec.colour"),
        ("ModelDeployment team/m", "spec.replicas"),
    }
    assert all(
        e["file"].endswith("fleet.yaml") and "message" in e and "document" in e for e in errors
    )


def test_plan_json_shape_with_errors(tmp_path):
    docs = base_fleet()
    docs[2]["spec"]["workers"]["topology"]["tensor"] = 0
    write_fleet(tmp_path, docs)
    result = run("plan", str(tmp_path), "-o", "json")
    assert result.returncode == 2
    out = json.loads(result.stdout)
    assert out["deployments"] == {}
    assert out["errors"][0]["path"] == "spec.workers.topology.tensor"


def test_plan_write_is_byte_stable_and_strict_flags_shortfall(tmp_path):
    docs = base_fleet()
    write_fleet(tmp_path, docs)
    assert run("plan", str(tmp_path), "--write").returncode == 0
    lock = (tmp_path / "modelplane.lock.yaml").read_bytes()
    assert run("plan", str(tmp_path), "--write").returncode == 0
    assert (tmp_path / "modelplane.lock.yaml").read_bytes() == lock

    docs[2]["spec"]["replicas"] = 50  # the fleet has 2 GPUs
    write_fleet(tmp_path, docs)
    out = run("plan", str(tmp_path), "-o", "json")
    assert out.returncode == 0
    dep = json.loads(out.stdout)["deployments"]["team/m"]
    assert (dep["desired"], len(dep["replicas"]), dep["unplaced"]) == (50, 2, 48)
    assert dep["reasons"]
    assert run("plan", str(tmp_path), "--strict").returncode == 1
    # a dry run does not touch the lock
    assert (tmp_path / "modelplane.lock.yaml").read_bytes() == lock


def test_plan_missing_directory_is_a_clear_error(tmp_path):
    result = run("plan", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert "no such file or directory" in result.stdout
    assert "Traceback" not in result.stderr


def test_schema_writes_one_schema_per_kind(tmp_path):
    result = run("schema", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "ModelDeployment.schema.json" in names and "InferenceClass.schema.json" in names
    schema = json.loads((tmp_path / "ModelDeployment.schema.json").read_text())
    assert "spec" in schema["properties"]
    import jsonschema
    import yaml

    docs = list(yaml.safe_load_all((ROOT / "specs/local/qwen.yaml").read_text()))
    jsonschema.validate(docs[0], schema)
    bad = {**docs[0], "spec": {**docs[0]["spec"], "colour": "x"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


JSON_CASES = [
    ("nested", {"a": [1, {"b": None, "c": True}], "d": {}, "e": [], "f": "x"}),
    ("order kept", {"z": 1, "a": 2, "m": {"y": 1, "b": 2}}),
    ("non-ASCII escaped", {"message": "caf\u00e9 \u2014 \U0001f600", "k\u00e9y": 1}),
    ("control characters", {"m": 'tab\there\nnew "quote" \\ back'}),
    ("int keys", {1: "a", 2: {3: "b"}}),
    ("huge int", {"n": 2**70, "neg": -(2**65)}),
    ("floats", {"f": [0.5, 2.0, 1e16, -0.0, 123456789.125]}),
    ("empty", {}),
]


@pytest.mark.parametrize("data", [c[1] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES])
def test_json_output_is_the_json_modules_text(data):
    from modelplane.cli.output import dump_json

    assert dump_json(data) == json.dumps(data, indent=2)


def test_plan_shows_cost_per_hour_and_cheapest_first(tmp_path):
    cheap, dear = gpu_class("cheap", 8), gpu_class("dear", 8)
    cheap["spec"]["pricePerNodeHour"] = 8
    dear["spec"]["pricePerNodeHour"] = 20.5
    docs = [
        cheap,
        dear,
        existing_cluster("a", "dear", 1),
        existing_cluster("z", "cheap", 1),
        deployment("m", tensor=4, replicas=3, placementPolicy="Cheapest"),
        gateway("a"),
    ]
    write_fleet(tmp_path, docs)
    out = json.loads(run("plan", str(tmp_path), "-o", "json", "--explain", "team/m").stdout)
    dep = out["deployments"]["team/m"]
    assert sorted(r["cluster"] for r in dep["replicas"]) == ["a", "z", "z"]
    assert (dep["placementPolicy"], dep["costPerHour"]) == ("Cheapest", 8 + 10.25)
    why = {(r["cluster"], r["why"], r["costPerHour"]) for r in out["explain"]["team/m"]["replicas"]}
    assert why == {("z", "cheapest", 4.0), ("a", "cheapest", 10.25)}
    table = run("plan", str(tmp_path)).stdout
    assert "cheapest first" in table and "18.25 per hour" in table

    dear["spec"]["pricePerNodeHour"] = -3
    docs[4]["spec"]["placementPolicy"] = "Cheap"
    write_fleet(tmp_path, docs)
    bad = run("plan", str(tmp_path), "-o", "json")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    errors = {
        (e["path"], e["file"].endswith("fleet.yaml")) for e in json.loads(bad.stdout)["errors"]
    }
    assert errors == {("spec.pricePerNodeHour", True), ("spec.placementPolicy", True)}
