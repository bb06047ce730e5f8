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

from components.cloud.eks import DESIRED_SIZE, ignore_desired_size
from components.gateway import InferenceGatewayComponent
from components.model_deployment import replica_manifests
from modelplane.api.inference_gateway import InferenceGateway
from modelplane.api.loader import load_fleet
from modelplane.api.names import child_name, lws_name_budget, replica_name
from tests.pulumi_mocks import MockRun
from tests.spec_docs import base_fleet, deployment, write_fleet
from tests.test_components_cluster import _existing_run
from tests.test_components_workload import SMALL, replica, target
from tests.test_components_workload import deployment as load_deployment

ROOT = Path(__file__).resolve().parent.parent


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


@pytest.mark.parametrize("backend", ["Traefik", "EnvoyGateway"])
def test_inference_gateway_waits_for_its_address(backend: str) -> None:
    """Service URLs are filled at the end of the same `up`, not after a refresh."""
    gw = InferenceGateway.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {"backend": backend, "cluster": {"inferenceClusterRef": "w"}},
        }
    )
    run = MockRun()
    run.run(
        lambda: InferenceGatewayComponent(
            "default", gw, k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests")
        )
    )
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert gateway.get("metadata.annotations") == {
        "pulumi.com/waitFor": "jsonpath={.status.addresses[0].value}"
    }


def test_serving_stack_namespaces_are_shared_patches() -> None:
    """No plain (client-side, retained) Namespace: destroy-then-up must work."""
    run = _existing_run()
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
    from modelplane.devcluster import KubeBuildError
    from tests.fixtures import apiserver

    def no_go() -> None:
        raise KubeBuildError("no go on PATH")

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
