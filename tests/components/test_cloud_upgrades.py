"""GKE and EKS node upgrades (issue 21 item 3): the rendered node pools and node groups never
take a serving GPU node down before its replacement is up, and the maintenance window and
surge settings of the InferenceCluster spec reach the cloud resources (docs/api.md, "Node
upgrades and maintenance windows"). Pulumi's mock runtime (tests/pulumi_mocks.py);
`pytest -k "gke or eks or cloud"`."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from modelplane.components.cloud.eks import NODE_GROUP_TYPE, update_config
from modelplane.components.inference_cluster import InferenceClusterComponent, eks_args, gke_args
from tests.components.cluster_helpers import (
    EKS_CLASSES,
    MNG,
    NODE_POOL,
    eks_cluster,
    gke_class,
    gke_cluster,
)
from tests.pulumi_mocks import MockRun

CLUSTER = "gcp:container/cluster:Cluster"
WINDOW = {
    "start": "2026-01-03T01:00:00Z",
    "duration": "6h",
    "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
}


def _gke(**spec: Any) -> MockRun:
    run = MockRun()
    cluster = gke_cluster(**spec)
    run.run(lambda: InferenceClusterComponent("gke-central", cluster, {"h100-gke": gke_class()}))
    return run


def _with_upgrade(upgrade: dict[str, Any]) -> Any:
    cluster = gke_cluster()
    doc = cluster.model_dump(by_alias=True, exclude_none=True)
    doc["spec"]["nodePools"][0]["upgrade"] = upgrade
    return type(cluster).model_validate(doc)


def test_gke_gpu_pools_surge_one_node_and_never_take_one_down_first() -> None:
    run = _gke()
    for name in ("gke-central-gpu-h100", "gke-central-system"):
        pool = run.one(NODE_POOL, name=name)
        assert pool.inputs["upgradeSettings"] == {
            "strategy": "SURGE",
            "maxSurge": 1,
            "maxUnavailable": 0,
        }
        # a release channel keeps auto-upgrade on (GKE rejects turning it off there)
        assert pool.inputs["management"] == {"autoRepair": True, "autoUpgrade": True}


# The exclusion nodeUpgrades: Manual renders (issue 36, N6): GKE neither upgrades the nodes nor
# force-evicts a pod a PodDisruptionBudget holds (GKE's grace is one hour) until the minor's end
# of support; the operator upgrades them after `modelplane drain`.
EXCLUSION = {
    "exclusionName": "modelplane-manual-node-upgrades",
    "exclusionOptions": {
        "scope": "NO_MINOR_OR_NODE_UPGRADES",
        "endTimeBehavior": "UNTIL_END_OF_SUPPORT",
    },
}
DEFAULT_WINDOW = {
    "startTime": "2026-01-03T01:00:00Z",
    "endTime": "2026-01-03T07:00:00Z",
    "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
}


@pytest.mark.parametrize(
    ("maintenance", "policy"),
    [
        # the default: Manual, with the default window GKE requires beside an exclusion
        (
            None,
            {
                "recurringWindow": DEFAULT_WINDOW,
                "maintenanceExclusions": [{**EXCLUSION, "startTime": "2026-01-03T01:00:00Z"}],
            },
        ),
        # Manual with the user's window: the exclusion starts with it
        (
            {"window": {**WINDOW, "start": "2026-02-07T22:00:00Z", "duration": "8h"}},
            {
                "recurringWindow": {
                    "startTime": "2026-02-07T22:00:00Z",
                    "endTime": "2026-02-08T06:00:00Z",
                    "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
                },
                "maintenanceExclusions": [{**EXCLUSION, "startTime": "2026-02-07T22:00:00Z"}],
            },
        ),
        # Automatic: no exclusion; without a window no policy (GKE upgrades any time)
        ({"nodeUpgrades": "Automatic"}, None),
        (
            {"nodeUpgrades": "Automatic", "window": WINDOW},
            {"recurringWindow": {**DEFAULT_WINDOW, "startTime": WINDOW["start"]}},
        ),
    ],
    ids=["default-manual", "manual-with-window", "automatic", "automatic-with-window"],
)
def test_gke_node_upgrades_are_manual_unless_automatic(
    maintenance: dict[str, Any] | None, policy: dict[str, Any] | None
) -> None:
    run = _gke(**({"maintenance": maintenance} if maintenance is not None else {}))
    assert run.one(CLUSTER).inputs.get("maintenancePolicy") == policy


@pytest.mark.parametrize(
    ("upgrade", "settings"),
    [
        ({"maxSurge": 2}, {"strategy": "SURGE", "maxSurge": 2, "maxUnavailable": 0}),
        (
            {"maxSurge": 0, "maxUnavailable": 1},
            {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1},
        ),
        (
            {"strategy": "BlueGreen"},
            {
                "strategy": "BLUE_GREEN",
                "blueGreenSettings": {"standardRolloutPolicy": {"batchNodeCount": 1}},
            },
        ),
    ],
)
def test_gke_pool_upgrade_settings_come_from_the_spec(
    upgrade: dict[str, Any], settings: dict[str, Any]
) -> None:
    cluster = _with_upgrade(upgrade)
    run = MockRun()
    run.run(lambda: InferenceClusterComponent("gke-central", cluster, {"h100-gke": gke_class()}))
    assert run.one(NODE_POOL, name="gke-central-gpu-h100").inputs["upgradeSettings"] == settings
    # the injected system pool keeps the safe default
    system = run.one(NODE_POOL, name="gke-central-system").inputs["upgradeSettings"]
    assert system == {"strategy": "SURGE", "maxSurge": 1, "maxUnavailable": 0}


def test_gke_maintenance_window_is_the_clusters_recurring_window() -> None:
    run = _gke(maintenance={"window": WINDOW})
    assert run.one(CLUSTER).inputs["maintenancePolicy"]["recurringWindow"] == {
        "startTime": "2026-01-03T01:00:00Z",
        "endTime": "2026-01-03T07:00:00Z",
        "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
    }
    assert gke_args(gke_cluster(maintenance={"window": WINDOW}), {"h100-gke": gke_class()})


def test_eks_node_groups_update_one_node_at_a_time_and_are_never_forced() -> None:
    run = MockRun()
    run.run(lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES))
    for group in run.of_type(MNG):
        assert group.inputs["forceUpdateVersion"] is False
    assert [p.max_unavailable for p in eks_args(eks_cluster(), EKS_CLASSES).node_pools] == [1, 1]


def test_eks_pool_max_unavailable_comes_from_the_spec() -> None:
    cluster = eks_cluster()
    doc = cluster.model_dump(by_alias=True, exclude_none=True)
    doc["spec"]["nodePools"][0]["upgrade"] = {"maxUnavailable": 3}
    cluster = type(cluster).model_validate(doc)
    assert [p.max_unavailable for p in eks_args(cluster, EKS_CLASSES).node_pools] == [3, 1]


@pytest.mark.parametrize(
    ("type_", "changed"),
    [(NODE_GROUP_TYPE, True), ("aws:ec2/launchTemplate:LaunchTemplate", False)],
)
def test_eks_update_config_lands_on_the_inner_node_group(type_: str, changed: bool) -> None:
    opts = pulumi.ResourceOptions(ignore_changes=["scalingConfig.desiredSize"])
    args = pulumi.ResourceTransformArgs(True, type_, "ng", {"scalingConfig": {"minSize": 1}}, opts)
    result = update_config(2)(args)
    if not changed:
        assert result is None
        return
    assert result is not None
    assert result.props == {"scalingConfig": {"minSize": 1}, "updateConfig": {"maxUnavailable": 2}}
    assert result.opts.ignore_changes == ["scalingConfig.desiredSize"]  # other transforms kept


# --- EKS: every node group follows kubernetesVersion and the AMI release (issue 36, N4) -------


def _eks_groups(**eks: Any) -> dict[str, dict[str, Any]]:
    cluster = eks_cluster()
    doc = cluster.model_dump(by_alias=True, exclude_none=True)
    doc["spec"]["cluster"]["eks"].update(eks)
    run = MockRun.of(
        lambda: InferenceClusterComponent(
            "eks-west", type(cluster).model_validate(doc), EKS_CLASSES
        )
    )
    launch_templates = {t.name for t in run.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    assert launch_templates == {"eks-west-gpu-h100"}  # the EFA + Capacity Block group's
    return {g.name: g.inputs for g in run.of_type(MNG)}


@pytest.mark.parametrize("version", ["1.35", "1.36"])
def test_eks_every_node_group_follows_the_kubernetes_version(version: str) -> None:
    groups = _eks_groups(kubernetesVersion=version)
    assert set(groups) == {"eks-west-system", "eks-west-gpu-a10g", "eks-west-gpu-h100"}
    # pulumi-eks sets a version only without a launch template: the EFA/Capacity Block group
    # (which has one) stayed on its first minor; now every group carries the cluster's.
    assert "launchTemplate" in groups["eks-west-gpu-h100"]
    assert {name: g.get("version") for name, g in groups.items()} == dict.fromkeys(groups, version)
    # Without amiReleaseVersion EKS takes its latest release for the version when it changes.
    assert all("releaseVersion" not in g for g in groups.values())


def test_eks_ami_release_version_reaches_every_node_group() -> None:
    groups = _eks_groups(kubernetesVersion="1.36", amiReleaseVersion="1.36.1-20260801")
    assert {g["releaseVersion"] for g in groups.values()} == {"1.36.1-20260801"}
