"""modelplane's policy pack (policy/, issue 34): its rules over what the shipped fleets'
stacks register (rendered under Pulumi's mocks, each resource with its inputs and `protect`),
and over hand-made resources for the edges. The engine runs it in
tests/driver/test_engine_policy_pack.py."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import PolicyCustomTimeouts, PolicyResourceOptions, ResourceValidationArgs

from modelplane.lock import dump_lock
from modelplane.planning import plan_fleet
from modelplane.render.mocks import Registration, StackOutputs
from modelplane.render.runner import _review_outputs, render_stack
from modelplane.stacks import stack_units

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "policy"))

import modelplane_rules as rules  # noqa: E402  (the pack's own module, beside its __main__)


def _args(resource_type: str, props: dict[str, Any], name: str, protect: bool) -> Any:
    opts = PolicyResourceOptions(protect, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    return ResourceValidationArgs(resource_type, props, f"urn:{name}", name, opts, None)


def _violations(registrations: list[Registration]) -> dict[str, list[str]]:
    """Per rule, the violations it reports over ``registrations``."""
    found: dict[str, list[str]] = {}
    checks: list[tuple[str, Callable[..., None]]] = [
        ("stateful-resources-protected", rules.stateful_protected),
        ("workload-gateways-private", rules.workload_gateway_private),
        ("helm-charts-pinned", rules.helm_chart_pinned),
    ]
    for reg in registrations:
        args = _args(reg.type, reg.inputs, reg.name, reg.protect)
        for name, check in checks:
            check(
                args,
                lambda message, urn=None, name=name: found.setdefault(name, []).append(message),
            )
    return found


def _render(fleet_dir: Path, tmp_path: Path) -> list[Registration]:
    """Every registration of every stack of the fleet, as `modelplane render` runs them."""
    outcome = plan_fleet(fleet_dir)
    assert outcome.result is not None, outcome.errors
    lock_path = tmp_path / "modelplane.lock.yaml"
    lock_path.write_text(dump_lock(outcome.result.lock), encoding="utf-8")
    produced: dict[str, StackOutputs] = {}
    found: list[Registration] = []
    for unit in stack_units(outcome.fleet, outcome.result.lock):
        run = render_stack(
            unit.name, fleet_dir=fleet_dir, lock_path=lock_path, upstream=produced.get
        )
        # What a deployed cluster stack would export (as `modelplane render` reads it).
        outputs = run.outputs
        produced[unit.name] = (
            _review_outputs(unit, outputs) if unit.kind == "InferenceCluster" else outputs
        )
        found += run.registrations
    return found


def _copy(fleet: str, tmp_path: Path) -> Path:
    target = tmp_path / fleet
    shutil.copytree(
        REPO / "specs" / fleet, target, ignore=shutil.ignore_patterns(".modelplane", "rendered")
    )
    return target


def test_policy_pack_multicloud_as_shipped_passes_every_rule(tmp_path: Path) -> None:
    """GKE and EKS clusters protected with internal workload gateways, the on-prem cluster's
    gateway on its declared private network, every chart pinned."""
    registrations = _render(_copy("multicloud", tmp_path), tmp_path)
    types = {r.type for r in registrations}
    # The rules have something to judge: each kind they look at is there.
    assert {"gcp:container/cluster:Cluster", "aws:ec2/vpc:Vpc", rules.GATEWAY} <= types
    assert "kubernetes:helm.sh/v3:Release" in types
    gateways = [r for r in registrations if r.type == rules.GATEWAY]
    private = [
        r for r in gateways if rules.PRIVATE_NETWORK in r.inputs["metadata"].get("annotations", {})
    ]
    assert private and private[0].inputs["metadata"]["annotations"][rules.PRIVATE_NETWORK] == (
        "gke-us-central"
    )
    assert _violations(registrations) == {}


def test_policy_pack_an_unprotected_cluster_is_refused(tmp_path: Path) -> None:
    fleet = _copy("multicloud", tmp_path)
    clusters = fleet / "clusters.yaml"
    text = clusters.read_text()
    shipped = 'gke: {project: my-gcp-project, region: us-central1, kubernetesVersion: "1.35"}'
    assert shipped in text
    clusters.write_text(text.replace(shipped, shipped[:-1] + ", protect: false}"))
    found = _violations(_render(fleet, tmp_path))
    assert set(found) == {"stateful-resources-protected"}, found
    said = " ".join(found["stateful-resources-protected"])
    assert "GKE cluster" in said and "VPC network" in said and "protect: true" in said
    assert "EKS" not in said  # only the cluster whose protection was turned off


def test_policy_pack_a_public_workload_gateway_is_refused(tmp_path: Path) -> None:
    """specs/local's cluster declares no private network: its workload Gateway is public."""
    found = _violations(_render(_copy("local", tmp_path), tmp_path))
    assert set(found) == {"workload-gateways-private"}, found
    [message] = found["workload-gateways-private"]
    assert "inference-gateway" in message and "connectedTo" in message


@pytest.mark.parametrize(
    ("version", "pinned"),
    [
        ("41.3.0", True),
        ("v1.8.3", True),
        ("1.2.3-rc.1+build.5", True),
        (None, False),
        ("", False),
        ("^41.3.0", False),
        ("~1.8", False),
        (">=1.0.0", False),
        ("1.x", False),
        ("latest", False),
    ],
)
def test_policy_pack_helm_chart_versions(version: str | None, pinned: bool) -> None:
    said: list[str] = []
    props = {"chart": "traefik", **({"version": version} if version is not None else {})}
    for kind in ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart"):
        rules.helm_chart_pinned(
            _args(kind, props, "mp-traefik", True), lambda m, u=None: said.append(m)
        )
    assert (said == []) is pinned, said
    if not pinned:
        assert all("traefik" in m and "not pinned" in m for m in said)


@pytest.mark.parametrize(
    ("labels", "service", "annotations", "refused"),
    [
        ({"app.kubernetes.io/component": "workload-gateway"}, {}, {}, True),
        (
            {"app.kubernetes.io/component": "workload-gateway"},
            {"networking.gke.io/load-balancer-type": "Internal"},
            {},
            False,
        ),
        (
            {"app.kubernetes.io/component": "workload-gateway"},
            {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"},
            {},
            False,
        ),
        (
            {"app.kubernetes.io/component": "workload-gateway"},
            {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing"},
            {},
            True,
        ),
        (
            {"app.kubernetes.io/component": "workload-gateway"},
            {},
            {"modelplane.ai/private-network": "gke-us-central"},
            False,
        ),
        ({"app.kubernetes.io/component": "front-door"}, {}, {}, False),  # public by design
        ({}, {}, {}, False),  # a platform's own Gateway
    ],
    ids=[
        "public",
        "GKE internal",
        "EKS internal",
        "EKS internet-facing",
        "declared",
        "front",
        "other",
    ],
)
def test_policy_pack_workload_gateways(
    labels: dict, service: dict, annotations: dict, refused: bool
) -> None:
    props = {
        "metadata": {"name": "inference-gateway", "labels": labels, "annotations": annotations},
        "spec": {"infrastructure": {"annotations": service}} if service else {},
    }
    said: list[str] = []
    rules.workload_gateway_private(
        _args(rules.GATEWAY, props, "gw", True), lambda m, u=None: said.append(m)
    )
    assert bool(said) is refused, said


def test_policy_pack_declares_each_rule_mandatory() -> None:
    policies = rules.policies()
    assert [p.name for p in policies] == [
        "stateful-resources-protected",
        "workload-gateways-private",
        "helm-charts-pinned",
    ]
    assert {p.enforcement_level for p in policies} == {rules.EnforcementLevel.MANDATORY}
    pack = (REPO / "policy" / "PulumiPolicy.yaml").read_text()
    assert "name: python" in pack and "virtualenv: ../.venv" in pack
