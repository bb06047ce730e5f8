"""Defects an API server accepts but a real GPU cluster would not serve (issue 14).

Each test pins one rule of docs/api.md or docs/architecture.md that a mock-only
suite missed before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.loader import load_fleet
from modelplane.api.names import child_name, lws_name_budget, replica_name
from modelplane.components.cloud.eks import DESIRED_SIZE, ignore_desired_size
from modelplane.components.gateway import InferenceGatewayComponent
from modelplane.components.model_deployment import replica_manifests
from tests.components.cluster_helpers import existing_run
from tests.components.workload_helpers import SMALL, replica, target
from tests.components.workload_helpers import deployment as load_deployment
from tests.pulumi_mocks import MockRun
from tests.spec_docs import base_fleet, deployment, write_fleet

ROOT = Path(__file__).resolve().parents[2]


# --- workloads --------------------------------------------------------------------------------


def test_gpu_deployments_recreate_instead_of_surging() -> None:
    """A surge pod's claim can never be allocated on an exactly packed pool."""
    dep = load_deployment(SMALL)
    run = MockRun()

    def program() -> list[dict[str, Any]]:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        return replica_manifests(dep, replica(dep, {"unified": "mixed"}), target(provider))

    manifests = run.run(program)
    [workload] = [m for m in manifests if m["kind"] == "Deployment"]
    assert workload["spec"]["strategy"] == {"type": "Recreate"}


def _multi_node(name: str, count: int = 1) -> dict[str, Any]:
    doc = deployment(name=name, tensor=1)
    doc["spec"]["workers"]["topology"]["pipeline"] = 2
    doc["spec"]["workers"]["count"] = count
    return doc


@pytest.mark.parametrize(
    ("name", "count", "ok"),
    [
        ("a" * 36, 1, True),  # LWS "<36>-<5>-unified" = 50 = the budget with one group
        ("a" * 37, 1, False),
        ("a" * 36, 11, False),  # a two-digit group index takes one more character
        ("a" * 35, 11, True),
    ],
)
def test_multi_node_names_leave_room_for_worker_revision_labels(
    tmp_path: Path, name: str, count: int, ok: bool
) -> None:
    docs = base_fleet()
    docs[2] = _multi_node(name, count)
    errors = load_fleet(write_fleet(tmp_path, docs)).errors
    lws = child_name(replica_name(name, "c1", 0), "unified")
    # The rule the check implements: the worker pods' revision label fits 63 characters.
    assert (len(f"{lws}-{count - 1}-") + 10 <= 63) is ok
    assert (len(lws) <= lws_name_budget(count)) is ok
    if ok:
        assert errors == []
    else:
        [error] = errors
        assert error.path == "metadata.name"
        assert "LeaderWorkerSet" in error.message and "shorten" in error.message


def test_single_node_long_names_are_fine(tmp_path: Path) -> None:
    docs = base_fleet()
    docs[2] = deployment(name="a" * 60)
    assert load_fleet(write_fleet(tmp_path, docs)).errors == []


# --- gateways ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "await_address", "annotations"),
    [
        ("Traefik", True, {"pulumi.com/waitFor": "jsonpath={.status.addresses[0].value}"}),
        ("EnvoyGateway", True, {"pulumi.com/waitFor": "jsonpath={.status.addresses[0].value}"}),
        # No controller known to program it: waiting could only time out.
        ("Traefik", False, None),
    ],
)
def test_inference_gateway_waits_for_its_address(
    backend: str, await_address: bool, annotations: dict[str, str] | None
) -> None:
    """Service URLs are filled at the end of the same `up`, not after a refresh."""
    gw = InferenceGateway.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {"backend": backend, "cluster": {"inferenceClusterRef": "w"}},
        }
    )
    run = MockRun.of(
        lambda: InferenceGatewayComponent(
            "default",
            gw,
            k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests"),
            await_address=await_address,
        )
    )
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert gateway.get("metadata.annotations") == annotations


def test_serving_stack_namespaces_are_shared_patches() -> None:
    """No plain (client-side, retained) Namespace: destroy-then-up must work."""
    run = existing_run()
    assert run.of_type("kubernetes:core/v1:Namespace") == []
    patches = {n.get("metadata.name"): n for n in run.of_type("kubernetes:core/v1:NamespacePatch")}
    assert {"modelplane-system", "dra-driver-nvidia-gpu"} <= set(patches)
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert gateway.depends_on(patches["modelplane-system"])
    quota = run.one("kubernetes:core/v1:ResourceQuota")
    assert quota.depends_on(patches["dra-driver-nvidia-gpu"])


# --- EKS ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "ignored"),
    [
        ("aws:eks/nodeGroup:NodeGroup", [DESIRED_SIZE]),
        ("aws:ec2/launchTemplate:LaunchTemplate", None),
    ],
)
def test_eks_node_groups_ignore_desired_size(type_: str, ignored: list[str] | None) -> None:
    args = pulumi.ResourceTransformArgs(
        True, type_, "ng", {"scalingConfig": {"desiredSize": 2}}, pulumi.ResourceOptions()
    )
    result = ignore_desired_size(args)
    if ignored is None:
        assert result is None
    else:
        assert result is not None
        assert result.opts.ignore_changes == ignored
        assert result.props == args.props


# --- tests in CI --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "outcome"),
    [
        ({}, pytest.skip.Exception),
        ({"CI": "true"}, pytest.fail.Exception),
        ({"MODELPLANE_REQUIRE_APISERVER": "1"}, pytest.fail.Exception),
        ({"CI": "false"}, pytest.skip.Exception),
    ],
)
def test_apiserver_tests_fail_in_ci_without_go(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], outcome: type[BaseException]
) -> None:
    from modelplane.devcluster import GoError
    from tests.fixtures import apiserver

    def no_go() -> None:
        raise GoError("no go on PATH")

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("MODELPLANE_REQUIRE_APISERVER", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(apiserver, "cached_kube_binaries", lambda: None)
    monkeypatch.setattr(apiserver, "find_go", no_go)
    with pytest.raises(outcome):
        apiserver.kube_binaries_or_skip()


def test_ci_script_requires_the_apiserver() -> None:
    assert "export MODELPLANE_REQUIRE_APISERVER=1" in (ROOT / ".ci" / "run").read_text()


# --- EnvoyGateway weights ---------------------------------------------------------------------


def _backend(key: str, path: str, *, replica: bool = False, weight: int = 1) -> Any:
    from modelplane.components.workload.routes import EndpointBackend

    return EndpointBackend(
        key=key,
        backend={"group": "", "kind": "Service", "name": key.split("/")[1], "port": 80},
        rewrite_path=path,
        host=None,
        address_type="IPv4",
        weight=weight,
        replica=replica,
    )


@pytest.mark.parametrize(
    ("paths", "error"),
    [
        ([("/ns/r-a/", True), ("/ns/r-b/", True), ("/", False)], None),  # replicas count as /
        ([("/v1/", False), ("/v1/", False)], None),
        ([("/ns/r-a/", True), ("/openai/", False)], "/, /openai/"),
        ([("/a/", False), ("/b/", False)], "/a/, /b/"),
    ],
)
def test_envoy_split_is_one_rule_or_an_error(
    paths: list[tuple[str, bool]], error: str | None
) -> None:
    """The old grouping made one rule per rewritePath: the first took 100 %."""
    from modelplane.components.workload.routes import SplitError, service_route

    eps = [_backend(f"ns/e{i}", p, replica=r, weight=10 + i) for i, (p, r) in enumerate(paths)]

    def route() -> dict[str, Any]:
        return service_route(
            "svc", "ns", {}, "/ns/svc/", eps, backend="EnvoyGateway", gateway=("gw", "sys")
        )

    if error is not None:
        with pytest.raises(SplitError, match=error):
            route()
        return
    [rule] = route()["spec"]["rules"]
    assert [r["weight"] for r in rule["backendRefs"]] == [10 + i for i in range(len(paths))]


def test_replica_route_also_matches_its_endpoint_header() -> None:
    dep = load_deployment(SMALL)
    run = MockRun()
    locked = replica(dep, {"unified": "mixed"})

    def program() -> list[dict[str, Any]]:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        return replica_manifests(dep, locked, target(provider))

    [route] = [m for m in run.run(program) if m["kind"] == "HTTPRoute"]
    by_header = route["spec"]["rules"][1]
    assert by_header["matches"] == [
        {
            "path": {"type": "PathPrefix", "value": "/"},
            "headers": [
                {
                    "type": "Exact",
                    "name": "x-modelplane-endpoint",
                    "value": f"ml-team/{locked.name}",
                }
            ],
        }
    ]
    # Already rewritten to / by the control-plane gateway: no rewrite, only the front-door
    # credentials removed after the SecurityPolicy checked them (api.md "Private workload
    # gateways").
    assert by_header["filters"] == [
        {"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": ["Authorization"]}}
    ]
    assert by_header["backendRefs"] == route["spec"]["rules"][0]["backendRefs"]


def _envoy_fleet(rewrite: str, replicas: int) -> list[dict[str, Any]]:
    docs = base_fleet()
    docs[2]["spec"]["replicas"] = replicas
    docs[3]["spec"]["backend"] = "EnvoyGateway"
    api = "modelplane.ai/v1alpha1"
    docs.append(
        {
            "apiVersion": api,
            "kind": "ModelEndpoint",
            "metadata": {"name": "ext", "namespace": "team", "labels": {"p": "x"}},
            "spec": {"url": "https://api.example.com/", "rewritePath": rewrite},
        }
    )
    docs.append(
        {
            "apiVersion": api,
            "kind": "ModelService",
            "metadata": {"name": "svc", "namespace": "team"},
            "spec": {
                "endpoints": [
                    {"selector": {"matchLabels": {"modelplane.ai/deployment": "m"}}, "weight": 80},
                    {"selector": {"matchLabels": {"p": "x"}}, "weight": 20},
                ]
            },
        }
    )
    return docs


@pytest.mark.parametrize(
    ("rewrite", "replicas", "ok"),
    [("/", 2, True), ("/openai/", 2, False), ("/openai/", 0, True)],
)
def test_envoy_gateway_split_needing_two_paths_fails_validation(
    tmp_path: Path, rewrite: str, replicas: int, ok: bool
) -> None:
    errors = load_fleet(write_fleet(tmp_path, _envoy_fleet(rewrite, replicas))).errors
    if ok:
        assert errors == []
    else:
        [error] = errors
        assert (error.object, error.path) == ("ModelService team/svc", "spec.endpoints")
        assert "'/openai/' (ModelEndpoint ext)" in error.message


# --- existing clusters ----------------------------------------------------------------------------


def test_identity_secret_ref_is_not_accepted(tmp_path: Path) -> None:
    """It was accepted and never used; now an unknown field, named as such."""
    docs = base_fleet()
    docs[1]["spec"]["cluster"]["existing"]["identitySecretRef"] = {"name": "gcp-sa"}
    [error] = load_fleet(write_fleet(tmp_path, docs)).errors
    assert error.path == "spec.cluster.existing.identitySecretRef"


# --- multi-node examples ----------------------------------------------------------------------


def _frontier_multi_node() -> list[tuple[str, str, Any]]:
    fleet = load_fleet(ROOT / "specs" / "frontier").fleet
    assert fleet is not None
    return [
        (key, role_name, role)
        for key, dep in sorted(fleet.deployments.items())
        for role_name, role in dep.spec.roles.items()
        if role.workers.topology.shape.nodes_per_worker > 1
    ]


def test_frontier_multi_node_engines_join_one_group() -> None:
    """Without rank, node count and leader address each pod starts an independent server."""
    import re

    from modelplane.components.workload.disaggregation import decode_engine_port

    found = _frontier_multi_node()
    assert {(k, r) for k, r, _ in found} == {
        ("ml-team/deepseek-v3", "unified"),
        ("ml-team/kimi-k2", "decode"),
        ("ml-team/qwen3-coder", "unified"),
    }
    injected = {
        "MODELPLANE_LEADER_ADDRESS",
        "MODELPLANE_RANK",
        "MODELPLANE_NODES",
        "MODELPLANE_DATA_LOCAL",
    }
    for key, role_name, role in found:
        engine = role.workers.template.spec.engine
        text = " ".join([*engine.command, *engine.args])
        assert "MODELPLANE_RANK" in text and "MODELPLANE_LEADER_ADDRESS" in text, key
        # Every variable the engine reads is one the platform injects.
        used = set(re.findall(r"\$\(?(MODELPLANE_[A-Z_]+)", text))
        assert used and used <= injected, (key, used - injected)
        if engine.command[:2] == ["/bin/sh", "-c"]:
            # One script, nothing appended after it (it would become $0, not an engine flag).
            assert len(engine.args) == 1, key
            if role_name == "decode":
                assert decode_engine_port(engine)[1] == []
        if "sglang" in engine.image:
            assert {"--nnodes=$(MODELPLANE_NODES)", "--node-rank=$(MODELPLANE_RANK)"} <= set(
                engine.args
            )


# --- program errors -------------------------------------------------------------------------------


def test_component_value_errors_are_program_errors(tmp_path: Path) -> None:
    """A lock that no longer matches the specs fails the stack with a message, no traceback."""
    import shutil

    from modelplane.render import RenderError, render_stack

    fleet = tmp_path / "fleet"
    shutil.copytree(
        ROOT / "specs" / "local", fleet, ignore=shutil.ignore_patterns("rendered", "Pulumi.*.yaml")
    )
    qwen = fleet / "qwen.yaml"
    qwen.write_text(qwen.read_text().replace('quantity("16Gi")', 'quantity("1000Gi")'))
    lock = ROOT / "specs" / "local" / "modelplane.lock.yaml"
    cluster = render_stack(
        "cluster-local", fleet_dir=fleet, lock_path=lock, upstream=lambda _: None
    )
    with pytest.raises(RenderError) as exc:
        render_stack(
            "deploy-demo-qwen",
            fleet_dir=fleet,
            lock_path=lock,
            upstream=lambda name: cluster.outputs if name == "cluster-local" else None,
        )
    assert isinstance(exc.value.cause, pulumi.RunError)
    assert "stack 'deploy-demo-qwen'" in str(exc.value.cause)
    assert "re-run `modelplane plan`" in str(exc.value.cause)
