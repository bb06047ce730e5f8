"""Security M8 as rendered (docs/api.md "Pod Security and namespaces"): the workload namespaces
modelplane creates enforce Pod Security "baseline" (`privileged` where the cluster's allowlist
names a deployment of the namespace), system namespaces are left alone, and the reserved
namespaces of validation are every namespace modelplane and its serving stack use."""

from __future__ import annotations

import dataclasses

import pulumi_kubernetes as k8s
import pytest

from modelplane.api.pod_security import ENFORCE_LABEL, reserved_namespace
from modelplane.components.charts import CHARTS
from modelplane.components.gateway import ENVOY, TRAEFIK
from modelplane.components.model_deployment import ModelDeploymentComponent
from modelplane.components.workload.objects import SYSTEM_NAMESPACE, namespace_manifest
from modelplane.devfleet.cluster import LWS_NAMESPACE
from modelplane.observe.prometheus import PROMETHEUS_NAMESPACE
from tests import k8s_schemas
from tests.components.workload_helpers import SMALL, deployment, replica, target
from tests.pulumi_mocks import MockRun

PATCH = "kubernetes:core/v1:NamespacePatch"


def test_security_every_namespace_modelplane_uses_is_reserved() -> None:
    used = {c.namespace for c in CHARTS.values()} | {
        TRAEFIK["namespace"],
        ENVOY["namespace"],
        SYSTEM_NAMESPACE,
        LWS_NAMESPACE,
        PROMETHEUS_NAMESPACE,
    }
    assert [n for n in sorted(used) if not reserved_namespace(n)] == []


@pytest.mark.parametrize(
    ("level", "label"), [("baseline", "baseline"), ("privileged", "privileged"), (None, None)]
)
def test_security_namespace_manifest_enforces_its_level(
    level: str | None, label: str | None
) -> None:
    manifest = namespace_manifest("ml-team", level)
    assert manifest["metadata"]["labels"].get(ENFORCE_LABEL) == label
    assert k8s_schemas.errors(manifest) == []


@pytest.mark.parametrize(("exempt", "level"), [((), "baseline"), (("ml-team",), "privileged")])
def test_security_deployment_namespace_enforces_baseline(
    exempt: tuple[str, ...], level: str
) -> None:
    """The deployment stack's namespace on its cluster: `baseline`, or `privileged` where the
    cluster's allowlist names a deployment of that namespace."""
    run = MockRun()
    dep = deployment(SMALL)

    def program() -> ModelDeploymentComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        on = dataclasses.replace(target(provider), privileged_namespaces=frozenset(exempt))
        return ModelDeploymentComponent(
            dep.metadata.name, dep, [replica(dep, {"unified": "mixed"})], {"west": on}
        )

    run.run(program)
    [namespace] = run.of_type(PATCH)
    labels = namespace.get("metadata.labels")
    assert labels[ENFORCE_LABEL] == level
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"


def test_security_cluster_target_reads_the_allowlist() -> None:
    from modelplane.api.inference_cluster import InferenceCluster
    from modelplane.components.workload.targets import ClusterTarget
    from tests.factories import cluster, pool

    data = cluster("c1", [pool("gpu", "h100")]).model_dump(by_alias=True, exclude_none=True)
    data["spec"]["podSecurity"] = {"exemptDeployments": ["ml/rdma", "ops/tool"]}
    on = ClusterTarget.from_spec(InferenceCluster.model_validate(data), {}, None)  # type: ignore[arg-type]
    assert [on.pod_security(ns) for ns in ("ml", "ops", "other")] == [
        "privileged",
        "privileged",
        "baseline",
    ]
