"""Validation rules of api.md: each bad document gives an error naming file, object and field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from modelplane.api.loader import load_fleet
from tests.spec_docs import (
    base_fleet,
    deployment,
    error_paths,
    existing_cluster,
    gpu_class,
    write_fleet,
)

Docs = list[dict[str, Any]]


def _set(path: str, value: Any) -> Callable[[Docs], None]:
    """Set a dotted path (ints index lists) in the document of the given kind prefix."""
    kind, dotted = path.split(":", 1)

    def mutate(docs: Docs) -> None:
        doc = next(d for d in docs if d["kind"] == kind)
        *parents, last = [int(p) if p.isdigit() else p for p in dotted.split(".")]
        node: Any = doc
        for p in parents:
            node = node[p]
        node[last] = value

    return mutate


def _only_prefill(docs: Docs) -> None:
    spec = docs[2]["spec"]
    spec["prefill"] = {"workers": spec.pop("workers")}


def _engine_args(args: list[str]) -> Callable[[Docs], None]:
    return _set("ModelDeployment:spec.workers.template.spec.containers.0.args", args)


def _all(*mutations: Callable[[Docs], None]) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        for m in mutations:
            m(docs)

    return mutate


def _decode_port(docs: Docs) -> None:
    spec = docs[2]["spec"]
    workers = spec.pop("workers")
    decode = copy.deepcopy(workers)
    decode["template"]["spec"]["containers"][0]["args"] = ["--port", "8000"]
    spec["prefill"], spec["decode"] = {"workers": workers}, {"workers": decode}


def _cache_on(docs: Docs) -> None:
    docs.append(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelCache",
            "metadata": {"name": "weights", "namespace": "team"},
            "spec": {
                "source": "HuggingFace",
                "huggingFace": {"repo": "org/model"},
                "sizeGiB": 10,
            },
        }
    )


EKS_TWO_SUBNETS = {
    "source": "EKS",
    "eks": {
        "region": "us-west-2",
        "networking": {"vpcCidr": "10.0.0.0/16", "subnetCidrs": ["10.0.0.0/20", "10.0.16.0/20"]},
    },
}


def _eks(*more: Callable[[Docs], None], zones: list[str] | None = None) -> Callable[[Docs], None]:
    """The cluster on EKS (two subnet blocks), its pool in ``zones`` (default us-west-2a),
    then ``more``."""
    return _all(
        _set("InferenceCluster:spec.cluster", copy.deepcopy(EKS_TWO_SUBNETS)),
        _set("InferenceCluster:spec.nodePools.0.zones", zones or ["us-west-2a"]),
        *more,
    )


CASES: list[tuple[str, Callable[[Docs], None], str, str, str]] = [
    # Checks the components used to make inside the Pulumi program (as ValueErrors).
    (
        "serving-stack-version-key",
        _set("InferenceCluster:spec.servingStack", {"versions": {"envoy": "v1"}}),
        "InferenceCluster c1",
        "spec.servingStack.versions",
        "unknown component(s) envoy",
    ),
    (
        "eks-zone-without-a-subnet-block",
        _eks(zones=["us-west-2a", "us-west-2c"]),
        "InferenceCluster c1",
        "spec.nodePools[0].zones",
        "us-west-2c has no subnet block: the blocks of cluster.eks.networking.subnetCidrs are "
        "in us-west-2a, us-west-2b",
    ),
    (
        "eks-explicit-zones-per-block",
        _eks(_set("InferenceCluster:spec.cluster.eks.networking.zones", ["us-west-2a"])),
        "InferenceCluster c1",
        "spec.cluster.eks.networking",
        "zones has 1 entries but subnetCidrs has 2 blocks",
    ),
    (
        "eks-control-plane-zone-without-a-block",
        _eks(
            _set(
                "InferenceCluster:spec.cluster.eks.networking.controlPlaneZones",
                ["us-west-2a", "us-west-2d"],
            )
        ),
        "InferenceCluster c1",
        "spec.cluster.eks.networking.controlPlaneZones",
        "us-west-2d has no subnet block (the blocks of networking.subnetCidrs are in "
        "us-west-2a, us-west-2b",
    ),
    (
        "eks-control-plane-needs-two-zones",
        _eks(
            _set("InferenceCluster:spec.cluster.eks.networking.controlPlaneZones", ["us-west-2a"])
        ),
        "InferenceCluster c1",
        "spec.cluster.eks.networking.controlPlaneZones",
        "needs at least two zones",
    ),
    (
        "eks-ami-release-of-another-minor",
        _eks(_set("InferenceCluster:spec.cluster.eks.amiReleaseVersion", "1.35.4-20260801")),
        "InferenceCluster c1",
        "spec.cluster.eks.amiReleaseVersion",
        "1.35.4-20260801 is not a release of Kubernetes 1.36 (kubernetesVersion)",
    ),
    (
        "eks-ami-release-format",
        _eks(_set("InferenceCluster:spec.cluster.eks.amiReleaseVersion", "v20260801")),
        "InferenceCluster c1",
        "spec.cluster.eks.amiReleaseVersion",
        "should match pattern",
    ),
    (
        "eks-kubernetes-minor-without-an-autoscaler-pin",
        _eks(_set("InferenceCluster:spec.cluster.eks.kubernetesVersion", "1.37")),
        "InferenceCluster c1",
        "spec.cluster.eks.kubernetesVersion",
        "no cluster-autoscaler release is pinned for Kubernetes 1.37",
    ),
    (
        "eks-dra-pool-min-zero",
        _eks(_set("InferenceCluster:spec.nodePools.0.minNodeCount", 0)),
        "InferenceCluster c1",
        "spec.nodePools[0].minNodeCount",
        "cannot scale a DRA GPU node group up from zero",
    ),
    (
        "eks-capacity-block-min-below-the-block",
        _eks(
            _set("InferenceCluster:spec.nodePools.0.minNodeCount", 1),
            _set(
                "InferenceCluster:spec.nodePools.0.capacityBlock",
                {"capacityReservationId": "cr-0123456789abcdef0"},
            ),
        ),
        "InferenceCluster c1",
        "spec.nodePools[0].minNodeCount",
        "a Capacity Block pool runs nodeCount nodes",
    ),
    (
        "eks-admin-principal-not-an-iam-arn",
        _eks(_set("InferenceCluster:spec.cluster.eks.adminPrincipals", ["platform-admin"])),
        "InferenceCluster c1",
        "spec.cluster.eks.adminPrincipals",
        "is not an IAM role or user ARN",
    ),
    (
        "eks-public-access-cidr",
        _eks(_set("InferenceCluster:spec.cluster.eks.publicAccessCidrs", ["203.0.113.0/33"])),
        "InferenceCluster c1",
        "spec.cluster.eks.publicAccessCidrs",
        "is not a CIDR block",
    ),
    (
        "gke-public-access-cidr",
        _set(
            "InferenceCluster:spec.cluster",
            {
                "source": "GKE",
                "gke": {
                    "project": "p",
                    "region": "us-central1",
                    "publicAccessCidrs": ["10.0.0.1/8"],
                },
            },
        ),
        "InferenceCluster c1",
        "spec.cluster.gke.publicAccessCidrs",
        "is not a CIDR block",
    ),
    (
        "gke-kubernetes-version-before-dra",
        _all(
            _set(
                "InferenceCluster:spec.cluster",
                {
                    "source": "GKE",
                    "gke": {"project": "p", "region": "us-central1", "kubernetesVersion": "1.33"},
                },
            ),
            _set("InferenceCluster:spec.nodePools.0.zones", ["us-central1-a"]),
        ),
        "InferenceCluster c1",
        "spec.cluster.gke.kubernetesVersion",
        "Kubernetes 1.33 is too old: modelplane's workloads use DRA (resource.k8s.io/v1)",
    ),
    (
        "decode-engine-on-the-sidecar-port",
        _decode_port,
        "ModelDeployment team/m",
        "spec.decode.workers.template.spec.containers[engine].args",
        "P/D routing sidecar owns",
    ),
    (
        "cache-without-storage-class",
        _cache_on,
        "ModelCache team/weights",
        "spec.clusterSelector",
        "no RWX StorageClass",
    ),
    (
        "allocatable-zero",
        _set("InferenceClass:spec.allocatable", {"cpu": "0", "memory": "1Gi"}),
        "InferenceClass l4",
        "spec.allocatable",
        "cpu must be greater than zero",
    ),
    # (id, mutation, object, field path, message fragment)
    (
        "unknown-field",
        _set("InferenceCluster:spec.colour", "blue"),
        "InferenceCluster c1",
        "spec.colour",
        "unknown field",
    ),
    (
        "bad-name",
        _set("InferenceClass:metadata.name", "L4_GPU"),
        "InferenceClass L4_GPU",
        "metadata.name",
        "DNS-1123",
    ),
    (
        "source-block-missing",
        _set("InferenceCluster:spec.cluster", {"source": "GKE"}),
        "InferenceCluster c1",
        "spec.cluster",
        "'gke' block is required",
    ),
    (
        "source-enum",
        _set("InferenceCluster:spec.cluster.source", "AKS"),
        "InferenceCluster c1",
        "spec.cluster.source",
        "GKE",
    ),
    (
        "pool-class-missing",
        _set("InferenceCluster:spec.nodePools.0.className", "h100"),
        "InferenceCluster c1",
        "spec.nodePools[0].className",
        "'h100' does not exist",
    ),
    (
        "pool-name-too-long",
        _set("InferenceCluster:spec.nodePools.0.name", "p" * 41),
        "InferenceCluster c1",
        "spec.nodePools[0].name",
        "40",
    ),
    (
        "pool-max-below-count",
        _set("InferenceCluster:spec.nodePools.0.maxNodeCount", 1),
        "InferenceCluster c1",
        "spec.nodePools[0]",
        "greater than maxNodeCount",
    ),
    (
        "capacity-block-pattern",
        _set("InferenceCluster:spec.nodePools.0.capacityBlock", {"capacityReservationId": "ab-12"}),
        "InferenceCluster c1",
        "spec.nodePools[0].capacityBlock.capacityReservationId",
        "pattern",
    ),
    (
        "capacity-block-not-eks",
        _set("InferenceCluster:spec.nodePools.0.capacityBlock", {"capacityReservationId": "cr-0a"}),
        "InferenceCluster c1",
        "spec.nodePools[0].capacityBlock",
        "only supported on EKS",
    ),
    (
        "taint-effect",
        _set("InferenceCluster:spec.taints", [{"key": "a", "effect": "PreferNoSchedule"}]),
        "InferenceCluster c1",
        "spec.taints[0].effect",
        "NoSchedule",
    ),
    (
        "device-count-range",
        _set("InferenceClass:spec.devices.0.count", 65),
        "InferenceClass l4",
        "spec.devices[0].count",
        "64",
    ),
    (
        "dra-needs-class",
        _set("InferenceClass:spec.devices.0.deviceClassName", None),
        "InferenceClass l4",
        "spec.devices[0]",
        "deviceClassName is required",
    ),
    (
        "attribute-one-of",
        _set("InferenceClass:spec.devices.0.attributes", {"x": {"string": "a", "int": 3}}),
        "InferenceClass l4",
        "spec.devices[0].attributes.x",
        "exactly one",
    ),
    (
        "attribute-version",
        _set("InferenceClass:spec.devices.0.attributes", {"cc": {"version": "9.0"}}),
        "InferenceClass l4",
        "spec.devices[0].attributes.cc",
        "semantic version",
    ),
    (
        "capacity-quantity",
        _set("InferenceClass:spec.devices.0.capacity", {"memory": {"value": "lots"}}),
        "InferenceClass l4",
        "spec.devices[0].capacity.memory.value",
        "quantity",
    ),
    (
        "replicas-range",
        _set("ModelDeployment:spec.replicas", 1001),
        "ModelDeployment team/m",
        "spec.replicas",
        "1000",
    ),
    (
        "data-multiple",
        _set("ModelDeployment:spec.workers.topology", {"tensor": 1, "data": 3, "dataLocal": 2}),
        "ModelDeployment team/m",
        "spec.workers.topology",
        "multiple of dataLocal",
    ),
    (
        "no-engine",
        _set("ModelDeployment:spec.workers.template.spec.containers.0.name", "vllm"),
        "ModelDeployment team/m",
        "spec.workers.template.spec.containers",
        "named 'engine'",
    ),
    (
        "reserved-label",
        _set(
            "ModelDeployment:spec.workers.template.metadata",
            {"labels": {"modelplane.ai/pool": "x"}},
        ),
        "ModelDeployment team/m",
        "spec.workers.template.metadata.labels",
        "reserved prefix",
    ),
    (
        "tp-disagrees",
        _engine_args(["--tensor-parallel-size=2"]),
        "ModelDeployment team/m",
        "spec.workers.template.spec.containers[0].args",
        "topology.tensor=1",
    ),
    (
        "pp-space-form",
        _engine_args(["--pipeline-parallel-size", "4"]),
        "ModelDeployment team/m",
        "spec.workers.template.spec.containers[0].args",
        "topology.pipeline=1",
    ),
    (
        "both-shapes",
        lambda docs: docs[2]["spec"].update(prefill={"workers": docs[2]["spec"]["workers"]}),
        "ModelDeployment team/m",
        "spec",
        "not both",
    ),
    (
        "prefill-without-decode",
        _only_prefill,
        "ModelDeployment team/m",
        "spec.decode",
        "must both be set",
    ),
    (
        "cel-compile",
        _set(
            "ModelDeployment:spec.nodeSelector",
            {"devices": [{"name": "gpu", "selectors": [{"cel": "device.driver =="}]}]},
        ),
        "ModelDeployment team/m",
        "spec.nodeSelector.devices[0].selectors[0].cel",
        "does not compile",
    ),
    (
        "other-device-needs-count",
        _set("ModelDeployment:spec.nodeSelector", {"devices": [{"name": "gpu"}, {"name": "nic"}]}),
        "ModelDeployment team/m",
        "spec.nodeSelector.devices[1].count",
        "required",
    ),
    (
        "cache-ref-missing",
        _set("ModelDeployment:spec.modelCacheRef", {"name": "weights"}),
        "ModelDeployment team/m",
        "spec.modelCacheRef.name",
        "ModelCache 'weights' does not exist",
    ),
    (
        "gateway-name",
        _set("InferenceGateway:metadata.name", "front"),
        "InferenceGateway front",
        "metadata.name",
        "must be named 'default'",
    ),
    (
        "gateway-cluster-missing",
        _set("InferenceGateway:spec.cluster", {"inferenceClusterRef": "nope"}),
        "InferenceGateway default",
        "spec.cluster.inferenceClusterRef",
        "does not exist",
    ),
    (
        "gpu-limit",
        _set(
            "ModelDeployment:spec.workers.template.spec.containers.0.resources",
            {"limits": {"nvidia.com/gpu": "1"}},
        ),
        "ModelDeployment team/m",
        "spec.workers.template.spec.containers[0].resources",
        "DRA",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "obj", "path", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_spec_is_reported_with_file_object_and_field(tmp_path, mutate, obj, path, fragment):
    docs = base_fleet()
    mutate(docs)
    write_fleet(tmp_path, docs)
    errors = load_fleet(tmp_path).errors
    matching = [e for e in errors if e.object == obj and e.path == path and fragment in e.message]
    assert matching, f"no error {obj} {path} ~ {fragment!r}; got:\n" + "\n".join(map(str, errors))
    assert all(e.file.endswith("fleet.yaml") for e in matching)


def test_base_fleet_is_valid(tmp_path):
    write_fleet(tmp_path, base_fleet())
    assert load_fleet(tmp_path).errors == []


def test_defaults_are_applied(tmp_path):
    write_fleet(tmp_path, base_fleet())
    fleet = load_fleet(tmp_path).fleet
    dep = fleet.deployments["team/m"]
    assert dep.spec.workers is not None
    topo = dep.spec.workers.topology
    assert (topo.pipeline, topo.data, topo.data_local, dep.spec.workers.count) == (1, 1, 1, 1)
    assert dep.spec.priority == 0
    pool = fleet.clusters["c1"].spec.node_pools[0]
    assert pool.capacity_nodes == 2
    assert fleet.classes["l4"].spec.devices[0].claim == "DRA"


def test_all_errors_are_collected_not_only_the_first(tmp_path):
    docs = base_fleet()
    docs[0]["spec"]["devices"][0]["count"] = 0
    docs[1]["spec"]["colour"] = "x"
    docs[2]["spec"]["replicas"] = -1
    paths = error_paths(tmp_path, docs)
    assert {"spec.devices[0].count", "spec.colour", "spec.replicas"} <= paths


def test_duplicate_object_names_both_files(tmp_path):
    write_fleet(tmp_path, base_fleet(), "a.yaml")
    write_fleet(tmp_path / "nested", [deployment()], "b.yml")
    errors = load_fleet(tmp_path).errors
    dup = [e for e in errors if "duplicate" in e.message]
    assert len(dup) == 1
    assert dup[0].file.endswith("b.yml") and "a.yaml" in dup[0].message


def test_file_order_does_not_matter(tmp_path):
    docs = base_fleet()
    write_fleet(tmp_path / "one", docs)
    for i, doc in enumerate(reversed(docs)):
        write_fleet(tmp_path / "two" / f"d{i}", [doc], f"{i}.yml")
    a, b = load_fleet(tmp_path / "one").fleet, load_fleet(tmp_path / "two").fleet
    assert list(a.deployments) == list(b.deployments)
    assert a.clusters == b.clusters and a.deployments == b.deployments


def test_accelerator_count_must_match_first_dra_device(tmp_path):
    cls = gpu_class(count=4, provider="GKE")
    cls["spec"]["provisioning"]["gke"]["accelerator"]["count"] = 8
    write_fleet(tmp_path, [cls])
    errors = load_fleet(tmp_path).errors
    assert any("disagrees with device 'gpu' count 4" in e.message for e in errors)


def test_provisioned_cluster_needs_a_recipe_for_its_cloud(tmp_path):
    cluster = existing_cluster()
    cluster["spec"]["cluster"] = {"source": "GKE", "gke": {"project": "p", "region": "us-central1"}}
    cluster["spec"]["nodePools"][0]["zones"] = ["us-central1-a"]
    write_fleet(tmp_path, [gpu_class(), cluster])
    errors = load_fleet(tmp_path).errors
    assert any(
        e.path == "spec.nodePools[0].className" and "no provisioning recipe" in e.message
        for e in errors
    )


def test_invalid_yaml_and_wrong_api_version(tmp_path):
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    (tmp_path / "other.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    errors = load_fleet(tmp_path).errors
    assert any(
        e.file.endswith("broken.yaml") and "invalid YAML" in e.message and e.line == 2
        for e in errors
    )
    assert any(e.file.endswith("other.yaml") and e.path == "apiVersion" for e in errors)


def test_rendered_manifests_inside_render_dir_are_not_specs(tmp_path):
    write_fleet(tmp_path, base_fleet())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
    )
    assert load_fleet(tmp_path).errors == []


def test_invalid_endpoint_url(tmp_path):
    ep = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelEndpoint",
        "metadata": {"name": "ext", "namespace": "team"},
        "spec": {"url": "ftp://example.com/"},
    }
    write_fleet(tmp_path, [ep])
    errors = load_fleet(tmp_path).errors
    assert [(e.object, e.path) for e in errors] == [("ModelEndpoint team/ext", "spec.url")]
