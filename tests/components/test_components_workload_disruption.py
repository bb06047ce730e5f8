"""Workload disruption: PodDisruptionBudgets and safe-to-evict annotations."""

from __future__ import annotations

import pulumi_kubernetes as k8s
import pytest

from modelplane.api.names import replica_name
from modelplane.api.placement_lock import LockedReplica
from modelplane.components.model_deployment import ModelDeploymentComponent
from tests.components.workload_helpers import (
    CODER,
    PD,
    PDB,
    SMALL,
    deploy,
    deployment,
    pod_templates,
    target,
)
from tests.pulumi_mocks import MockRun

SPECS = {"CODER": CODER, "PD": PD, "SMALL": SMALL}
"""The deployment texts the parametrized cases name."""
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"

BUDGETS = [
    # (name, spec, pools, replicas, expected {pdb name: selector})
    (
        "one-node-unified",
        "SMALL",
        {"unified": "mixed"},
        1,
        {"small-unified": {"modelplane.ai/deployment": "small", "modelplane.ai/role": "unified"}},
    ),
    (
        "one-budget-for-all-replicas-on-the-cluster",
        "SMALL",
        {"unified": "mixed"},
        3,
        {"small-unified": {"modelplane.ai/deployment": "small", "modelplane.ai/role": "unified"}},
    ),
    (
        # Leaders and workers alike (issue 36, N6): a worker's eviction restarts its group.
        "multi-node-every-pod-of-the-groups",
        "CODER",
        {"unified": "h200"},
        1,
        {"coder-unified": {"modelplane.ai/deployment": "coder", "modelplane.ai/role": "unified"}},
    ),
    (
        "prefill-decode-one-per-role",
        "PD",
        {"prefill": "h200", "decode": "h200"},
        1,
        {
            "kimi-prefill": {"modelplane.ai/deployment": "kimi", "modelplane.ai/role": "prefill"},
            "kimi-decode": {"modelplane.ai/deployment": "kimi", "modelplane.ai/role": "decode"},
        },
    ),
]


@pytest.mark.parametrize(
    ("spec", "pools", "replicas", "expected"),
    [b[1:] for b in BUDGETS],
    ids=[b[0] for b in BUDGETS],
)
def test_disruption_budget_per_deployment_and_role_on_each_cluster(
    spec: str, pools: dict[str, str], replicas: int, expected: dict[str, dict[str, str]]
) -> None:
    run, _ = deploy(SPECS[spec], pools, replicas=replicas)
    budgets = run.of_type(PDB)
    assert {b.get("metadata.name"): b.get("spec.selector.matchLabels") for b in budgets} == expected
    for budget in budgets:
        assert budget.get("metadata.namespace") == "ml-team"
        assert budget.get("spec.maxUnavailable") == 0
        assert "minAvailable" not in budget.get("spec")
        assert budget.get("spec.unhealthyPodEvictionPolicy") == "AlwaysAllow"
        assert budget.parent_type == "modelplane:deployment:ModelDeployment"
        assert budget.get("metadata.labels")["app.kubernetes.io/managed-by"] == "modelplane"
    # every budget selects serving pods the deployment renders
    templates = pod_templates(run)
    for budget in budgets:
        selector = budget.get("spec.selector.matchLabels")
        assert any(selector.items() <= t["metadata"]["labels"].items() for t in templates)


@pytest.mark.parametrize(
    ("spec", "pools", "role"),
    [
        ("CODER", {"unified": "h200"}, "unified"),
        ("PD", {"prefill": "h200", "decode": "h200"}, "decode"),
    ],
)
def test_multi_node_budget_holds_every_pod_of_every_group(
    spec: str, pools: dict[str, str], role: str
) -> None:
    """No pod of a serving LeaderWorkerSet group may be evicted: its budget selects the leader
    and the worker templates alike (a worker's eviction recreates the group, leader included,
    under RecreateGroupOnPodRestart)."""
    run, _ = deploy(SPECS[spec], pools)
    [lws] = [
        w
        for w in run.of_type(LWS)
        if w.get("spec.leaderWorkerTemplate.leaderTemplate.metadata.labels")["modelplane.ai/role"]
        == role
    ]
    template = lws.get("spec.leaderWorkerTemplate")
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert template["size"] > 1
    [budget] = [b for b in run.of_type(PDB) if b.get("metadata.name").endswith(f"-{role}")]
    selector = budget.get("spec.selector.matchLabels").items()
    assert budget.get("spec.maxUnavailable") == 0
    for part in ("leaderTemplate", "workerTemplate"):
        assert selector <= template[part]["metadata"]["labels"].items(), part


def test_budgets_follow_the_clusters_hosting_replicas() -> None:
    run = MockRun()
    dep = deployment(SMALL)
    locked = [
        LockedReplica(
            name=replica_name("small", cluster, 0),
            cluster=cluster,
            index=0,
            pools={"unified": "mixed"},
        )
        for cluster in ("west", "east")
    ]

    def program() -> ModelDeploymentComponent:
        targets = {
            name: target(k8s.Provider(f"{name}-k8s", kubeconfig="kubeconfig-for-tests"))
            for name in ("west", "east")
        }
        return ModelDeploymentComponent("small", dep, locked, targets)

    run.run(program)
    budgets = run.of_type(PDB)
    assert sorted(b.name for b in budgets) == [
        "east/ml-team/small-unified",
        "west/ml-team/small-unified",
    ]
    providers = {run.provider_of(b).name for b in budgets}  # type: ignore[union-attr]
    assert providers == {"east-k8s", "west-k8s"}


@pytest.mark.parametrize(
    ("spec", "pools"),
    [
        ("SMALL", {"unified": "mixed"}),
        ("CODER", {"unified": "h200"}),
        ("PD", {"prefill": "h200", "decode": "h200"}),
    ],
)
def test_serving_pods_are_not_safe_to_evict(spec: str, pools: dict[str, str]) -> None:
    run, _ = deploy(SPECS[spec], pools)
    templates = pod_templates(run)
    serving = [t for t in templates if "modelplane.ai/role" in t["metadata"]["labels"]]
    assert serving
    for template in serving:
        assert template["metadata"]["annotations"][SAFE_TO_EVICT] == "false"
    # the endpoint picker is no serving pod: the autoscaler may move it
    for template in templates:
        if "modelplane.ai/role" not in template["metadata"]["labels"]:
            assert SAFE_TO_EVICT not in template["metadata"].get("annotations", {})


def test_a_template_annotation_overrides_safe_to_evict() -> None:
    text = SMALL.replace(
        "    template:\n      spec:\n",
        "    template:\n      metadata:\n        annotations:\n"
        f'          {SAFE_TO_EVICT}: "true"\n      spec:\n',
    )
    assert "safe-to-evict" in text
    run, _ = deploy(text, {"unified": "mixed"})
    [template] = [t for t in pod_templates(run) if "modelplane.ai/role" in t["metadata"]["labels"]]
    assert template["metadata"]["annotations"][SAFE_TO_EVICT] == "true"
