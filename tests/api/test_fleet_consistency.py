"""Whole-fleet consistency (docs/api.md): GPU counts agree with the topology wherever
written, ModelCache clusters have RWX storage, ModelService selectors that match nothing
are warnings (errors with --strict)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from modelplane.api.loader import load_fleet
from modelplane.cli import app, commands  # noqa: F401  (importing registers every verb)
from tests.spec_docs import API, base_fleet, deployment, existing_cluster, write_fleet

Docs = list[dict[str, Any]]
runner = CliRunner()


def _dep(docs: Docs) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "ModelDeployment")["spec"]


def _engine(spec: dict[str, Any], role: str | None = None) -> dict[str, Any]:
    workers = spec[role]["workers"] if role else spec["workers"]
    return workers["template"]["spec"]["containers"][0]


def _gpu_request(count: int | None, name: str = "gpu") -> dict[str, Any]:
    req: dict[str, Any] = {"name": name}
    if count is not None:
        req["count"] = count
    return {"devices": [req]}


def _unified(count: int | None, name: str = "gpu", tensor: int = 1, **topo: int):
    def mutate(docs: Docs) -> None:
        spec = _dep(docs)
        spec["nodeSelector"] = _gpu_request(count, name)
        spec["workers"]["topology"] = {"tensor": tensor, **topo}

    return mutate


def _disaggregated(prefill_count: int | None, decode_args: list[str]):
    def mutate(docs: Docs) -> None:
        spec = _dep(docs)
        workers = spec.pop("workers")
        spec["prefill"] = {"nodeSelector": _gpu_request(prefill_count), "workers": workers}
        decode = json.loads(json.dumps(workers))
        decode["template"]["spec"]["containers"][0]["args"] = decode_args
        spec["decode"] = {"nodeSelector": _gpu_request(None), "workers": decode}

    return mutate


def _args(*args: str, tensor: int = 1, **topo: int):
    def mutate(docs: Docs) -> None:
        spec = _dep(docs)
        spec["workers"]["topology"] = {"tensor": tensor, **topo}
        _engine(spec)["args"] = list(args)

    return mutate


def _env(*env: dict[str, Any], tensor: int = 1):
    def mutate(docs: Docs) -> None:
        spec = _dep(docs)
        spec["workers"]["topology"] = {"tensor": tensor}
        _engine(spec)["env"] = list(env)

    return mutate


def _resources(section: str, name: str, container: str = "engine", init: bool = False):
    def mutate(docs: Docs) -> None:
        pod = _dep(docs)["workers"]["template"]["spec"]
        body = {"name": container, "image": "x", "resources": {section: {name: "1"}}}
        if init:
            pod["initContainers"] = [body]
        elif container == "engine":
            pod["containers"][0]["resources"] = {section: {name: "1"}}
        else:
            pod["containers"].append(body)

    return mutate


WS = "spec.workers.template.spec"
GPU_CASES: list[tuple[str, Callable[[Docs], None], str | None, str]] = [
    # (id, mutation, error path or None when valid, message fragment)
    ("count defaults", _unified(None, tensor=4), None, ""),
    ("count equals tensor", _unified(4, tensor=4), None, ""),
    ("count equals tensor x dataLocal", _unified(4, tensor=2, data=2, dataLocal=2), None, ""),
    ("count below tensor", _unified(2, tensor=4), "spec.nodeSelector.devices[0].count", "= 4"),
    ("count above tensor", _unified(8, tensor=4), "spec.nodeSelector.devices[0].count", "= 4"),
    (
        "count ignores pipeline and data",
        _unified(8, tensor=2, pipeline=2, data=2),
        "spec.nodeSelector.devices[0].count",
        "2 × 1 = 2",
    ),
    (
        "first request is the GPU",
        _unified(3, name="accel"),
        "spec.nodeSelector.devices[0].count",
        "count 3",
    ),
    (
        "prefill count",
        _disaggregated(2, []),
        "spec.prefill.nodeSelector.devices[0].count",
        "count 2",
    ),
    (
        "decode args",
        _disaggregated(None, ["--tensor-parallel-size=2"]),
        "spec.decode.workers.template.spec.containers[0].args",
        "topology.tensor=1",
    ),
    ("disaggregated agreeing", _disaggregated(1, ["--tp-size=1"]), None, ""),
    ("tp literal", _args("--tensor-parallel-size=4", tensor=4), None, ""),
    ("tp quoted", _args("--tensor-parallel-size='4'", tensor=4), None, ""),
    ("tp k8s var", _args("--tensor-parallel-size=$(MODELPLANE_TENSOR)", tensor=4), None, ""),
    ("tp shell var", _args("vllm serve m -tp $MODELPLANE_TENSOR", tensor=4), None, ""),
    ("tp braced var", _args('-tp "${MODELPLANE_TENSOR}"', tensor=4), None, ""),
    (
        "tp wrong var",
        _args("--tensor-parallel-size=$(MODELPLANE_PIPELINE)", tensor=4),
        f"{WS}.containers[0].args",
        "MODELPLANE_TENSOR",
    ),
    (
        "tp wrong number",
        _args("--tp-size", "8", tensor=4),
        f"{WS}.containers[0].args",
        "topology.tensor=4",
    ),
    (
        "dpl wrong",
        _args("--data-parallel-size-local=1", data=2, dataLocal=2),
        f"{WS}.containers[0].args",
        "topology.dataLocal=2",
    ),
    ("nnodes literal", _args("--nnodes=2", pipeline=2), None, ""),
    ("nnodes var", _args("--nnodes=$(MODELPLANE_NODES)", pipeline=2), None, ""),
    (
        "nnodes wrong",
        _args("--nnodes", "4", pipeline=2),
        f"{WS}.containers[0].args",
        "nodes per worker",
    ),
    ("env agrees", _env({"name": "MODELPLANE_TENSOR", "value": "2"}, tensor=2), None, ""),
    ("env other name", _env({"name": "TP", "value": "9"}), None, ""),
    (
        "env disagrees",
        _env({"name": "MODELPLANE_TENSOR", "value": "8"}, tensor=2),
        f"{WS}.containers[0].env[0].value",
        "topology.tensor=2",
    ),
    (
        "env nodes",
        _env({"name": "X", "value": "1"}, {"name": "MODELPLANE_NODES", "value": "3"}),
        f"{WS}.containers[0].env[1].value",
        "nodes per worker",
    ),
    (
        "env from a secret",
        _env({"name": "MODELPLANE_DATA", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
        f"{WS}.containers[0].env[0]",
        "set by modelplane",
    ),
    (
        "nvidia limit",
        _resources("limits", "nvidia.com/gpu"),
        f"{WS}.containers[0].resources",
        "DRA",
    ),
    ("amd request", _resources("requests", "amd.com/gpu"), f"{WS}.containers[0].resources", "DRA"),
    (
        "mig slice",
        _resources("limits", "nvidia.com/mig-1g.5gb"),
        f"{WS}.containers[0].resources",
        "DRA",
    ),
    (
        "shared gpu in a sidecar",
        _resources("limits", "nvidia.com/gpu.shared", "side"),
        f"{WS}.containers[1].resources",
        "DRA",
    ),
    (
        "gpu in an init container",
        _resources("limits", "nvidia.com/gpu", "init", init=True),
        f"{WS}.initContainers[0].resources",
        "DRA",
    ),
    ("other extended resource", _resources("limits", "rdma/ib"), None, ""),
    ("cpu and memory", _resources("limits", "cpu"), None, ""),
]


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"), [c[1:] for c in GPU_CASES], ids=[c[0] for c in GPU_CASES]
)
def test_gpu_counts_agree_with_the_topology_wherever_written(tmp_path, mutate, path, fragment):
    docs = base_fleet()
    mutate(docs)
    write_fleet(tmp_path, docs)
    errors = load_fleet(tmp_path).errors
    if path is None:
        assert errors == []
        return
    assert [(e.object, e.path) for e in errors] == [("ModelDeployment team/m", path)], errors
    assert fragment in errors[0].message and errors[0].line > 0


# --- ModelCache: RWX storage on every covered cluster ---------------------------------


def _cache(selector: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": "HuggingFace",
        "huggingFace": {"repo": "Qwen/Qwen3-0.6B"},
        "sizeGiB": 10,
    }
    if selector is not None:
        spec["clusterSelector"] = selector
    return {
        "apiVersion": API,
        "kind": "ModelCache",
        "metadata": {"name": "weights", "namespace": "team"},
        "spec": spec,
    }


def _with_storage(cluster: dict[str, Any], name: str = "rwx") -> dict[str, Any]:
    cluster["spec"]["cluster"]["existing"]["cache"] = {"storageClassName": name}
    return cluster


def _gke(name: str) -> dict[str, Any]:
    cluster = existing_cluster(name)
    cluster["metadata"]["labels"] = {"modelplane.ai/region": "gke"}
    cluster["spec"]["cluster"] = {"source": "GKE", "gke": {"project": "p", "region": "us-central1"}}
    cluster["spec"]["nodePools"] = []
    return cluster


def _other(name: str, region: str) -> dict[str, Any]:
    cluster = existing_cluster(name)
    cluster["metadata"]["labels"] = {"modelplane.ai/region": region}
    cluster["spec"]["cluster"]["existing"]["renderTo"] = f"out-{name}"
    return cluster


CACHE_CASES: list[tuple[str, list[dict[str, Any]], str | None]] = [
    # (id, extra documents, fragment naming the bare clusters, or None when valid)
    ("covers a bare Existing cluster", [_cache()], "c1 ("),
    (
        "selector picks the bare one",
        [_other("c2", "r2"), _cache({"matchLabels": {"modelplane.ai/region": "r1"}})],
        "c1 (",
    ),
    ("several bare clusters", [_other(f"x{i}", "r1") for i in range(7)] + [_cache()], "and 3 more"),
    (
        "selector avoids the bare one",
        [
            _with_storage(_other("c2", "r2")),
            _cache({"matchLabels": {"modelplane.ai/region": "r2"}}),
        ],
        None,
    ),
    (
        "selector matches no cluster",
        [_cache({"matchLabels": {"modelplane.ai/region": "nowhere"}})],
        None,
    ),
    (
        "provisioned cluster has its own",
        [_gke("g1"), _cache({"matchLabels": {"modelplane.ai/region": "gke"}})],
        None,
    ),
]


@pytest.mark.parametrize(
    ("extra", "fragment"), [c[1:] for c in CACHE_CASES], ids=[c[0] for c in CACHE_CASES]
)
def test_a_cache_needs_rwx_storage_on_every_cluster_it_covers(tmp_path, extra, fragment):
    docs = base_fleet() + extra
    write_fleet(tmp_path, docs)
    errors = [e for e in load_fleet(tmp_path).errors if e.object.startswith("ModelCache")]
    if fragment is None:
        assert errors == []
        return
    assert len(errors) == 1, errors
    e = errors[0]
    assert (e.object, e.path) == ("ModelCache team/weights", "spec.clusterSelector")
    assert fragment in e.message and "storageClassName" in e.message
    assert e.file.endswith("fleet.yaml") and e.line > 0


def test_a_cache_on_a_storage_class_cluster_is_valid(tmp_path):
    docs = base_fleet()
    _with_storage(docs[1])
    write_fleet(tmp_path, [*docs, _cache()])
    assert load_fleet(tmp_path).errors == []


# --- ModelService selectors that match nothing: warnings, errors with --strict ----------


def _service(*selectors: dict[str, Any], ns: str = "team") -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ModelService",
        "metadata": {"name": "svc", "namespace": ns},
        "spec": {"endpoints": [{"selector": s} for s in selectors]},
    }


def _endpoint(labels: dict[str, str], ns: str = "team") -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ModelEndpoint",
        "metadata": {"name": "ext", "namespace": ns, "labels": labels},
        "spec": {"url": "https://api.example.com/"},
    }


DEP = {"matchLabels": {"modelplane.ai/deployment": "m"}}
CLUSTER = "modelplane.ai/cluster"
INDEX = "modelplane.ai/replica-index"


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    req: dict[str, Any] = {"key": key, "operator": op}
    if values:
        req["values"] = list(values)
    return {"matchExpressions": [req]}


def _and(*selectors: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"matchLabels": {}, "matchExpressions": []}
    for s in selectors:
        out["matchLabels"].update(s.get("matchLabels", {}))
        out["matchExpressions"] += s.get("matchExpressions", [])
    return out


def _scaled_to_zero(docs: Docs) -> None:
    _dep(docs)["replicas"] = 0


def _template_label(docs: Docs) -> None:
    _dep(docs)["workers"]["template"]["metadata"] = {"labels": {"team": "coder"}}


SERVICE_CASES: list[tuple[str, list[dict[str, Any]], Callable[[Docs], None] | None, list[int]]] = [
    # (id, extra documents, mutation, indexes of the entries that warn)
    ("selects the deployment", [_service(DEP)], None, []),
    (
        "typo in the deployment name",
        [_service({"matchLabels": {"modelplane.ai/deployment": "nm"}})],
        None,
        [0],
    ),
    ("one good one bad entry", [_service(DEP, {"matchLabels": {"x": "y"}})], None, [1]),
    ("other namespace", [_service(DEP, ns="other"), deployment(ns="other", name="z")], None, [0]),
    ("deployment scaled to zero still counts", [_service(DEP)], _scaled_to_zero, []),
    ("template label", [_service({"matchLabels": {"team": "coder"}})], _template_label, []),
    ("template label absent", [_service({"matchLabels": {"team": "coder"}})], None, [0]),
    ("an existing cluster", [_service(_and(DEP, {"matchLabels": {CLUSTER: "c1"}}))], None, []),
    ("no such cluster", [_service(_and(DEP, {"matchLabels": {CLUSTER: "c9"}}))], None, [0]),
    ("cluster In", [_service(_and(DEP, _expr(CLUSTER, "In", "c9", "c1")))], None, []),
    (
        "cluster NotIn every cluster",
        [_service(_and(DEP, _expr(CLUSTER, "NotIn", "c1")))],
        None,
        [0],
    ),
    ("cluster DoesNotExist", [_service(_and(DEP, _expr(CLUSTER, "DoesNotExist")))], None, [0]),
    (
        "replica index below replicas",
        [_service(_and(DEP, {"matchLabels": {INDEX: "0"}}))],
        None,
        [],
    ),
    (
        "replica index past replicas",
        [_service(_and(DEP, {"matchLabels": {INDEX: "5"}}))],
        None,
        [0],
    ),
    (
        "hand-written endpoint",
        [
            _service({"matchLabels": {"modelplane.ai/external-provider": "t"}}),
            _endpoint({"modelplane.ai/external-provider": "t"}),
        ],
        None,
        [],
    ),
    (
        "endpoint in another namespace",
        [_service({"matchLabels": {"p": "t"}}), _endpoint({"p": "t"}, ns="other")],
        None,
        [0],
    ),
    ("empty selector", [_service({})], None, []),
]


@pytest.mark.parametrize(
    ("extra", "mutate", "warned"),
    [c[1:] for c in SERVICE_CASES],
    ids=[c[0] for c in SERVICE_CASES],
)
def test_service_entries_that_select_nothing_are_warnings(tmp_path, extra, mutate, warned):
    docs = base_fleet() + extra
    if mutate:
        mutate(docs)
    write_fleet(tmp_path, docs)
    result = load_fleet(tmp_path)
    assert result.errors == []
    assert [w.path for w in result.warnings] == [f"spec.endpoints[{i}].selector" for i in warned]
    for w in result.warnings:
        assert w.object.startswith("ModelService ") and w.file.endswith("fleet.yaml")
        assert w.line > 0 and w.column > 0 and "selects nothing" in w.message


def test_an_invalid_deployment_does_not_also_warn(tmp_path):
    docs = [*base_fleet(), _service(DEP)]
    _dep(docs)["replicas"] = -1
    write_fleet(tmp_path, docs)
    result = load_fleet(tmp_path)
    assert result.errors and result.warnings == []


BAD_SERVICE = _service({"matchLabels": {"modelplane.ai/deployment": "nm"}})


@pytest.mark.parametrize("verb", ["validate", "plan"])
@pytest.mark.parametrize(
    ("strict", "code", "where"),
    [(False, 0, "warnings"), (True, 2, "errors")],
    ids=["warning", "strict"],
)
def test_cli_reports_warnings_and_strict_makes_them_errors(tmp_path, verb, strict, code, where):
    write_fleet(tmp_path, [*base_fleet(), BAD_SERVICE])
    args = [verb, str(tmp_path), "--output", "json", *(["--strict"] if strict else [])]
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    out = json.loads(result.output)
    other = "errors" if where == "warnings" else "warnings"
    assert out[other] == []
    (item,) = out[where]
    assert item["path"] == "spec.endpoints[0].selector" and item["line"] > 0
    assert item["object"] == "ModelService team/svc"
    if verb == "plan":
        assert bool(out["deployments"]) is not strict  # strict: nothing scheduled


@pytest.mark.parametrize("verb", ["validate", "plan"])
def test_cli_warning_table_and_github_annotations(tmp_path, verb):
    write_fleet(tmp_path, [*base_fleet(), BAD_SERVICE])
    table = runner.invoke(app, [verb, str(tmp_path)])
    assert table.exit_code == 0 and "1 warning(s)" in table.output
    github = runner.invoke(app, [verb, str(tmp_path), "--output", "github"])
    assert github.exit_code == 0
    (line,) = github.output.splitlines()
    assert line.startswith("::warning file=") and ",line=" in line and "selects nothing" in line
    strict = runner.invoke(app, [verb, str(tmp_path), "--output", "github", "--strict"])
    assert strict.exit_code == 2 and strict.output.startswith("::error file=")
