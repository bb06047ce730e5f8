"""GKE and EKS correctness (issue 22): each test pins a rendered cloud resource that was wrong.

Component graphs run under Pulumi's mock runtime (tests/pulumi_mocks.py); data sources answer
with DEFAULT_CALLS there. Names carry gke/eks/cloud: `pytest -k "gke or eks or cloud"`.
"""

from __future__ import annotations

import copy
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi_kubernetes as k8s
import pytest
import yaml

from modelplane.api.model_cache import source_dir
from modelplane.components.cloud import eks_node_groups as node_groups
from modelplane.components.cloud.eks import drain_time, schedule_time
from modelplane.components.cloud.eks_node_groups import block_actions
from modelplane.components.inference_cluster import InferenceClusterComponent
from modelplane.components.manifests import GKE_NVIDIA_DRIVER_INSTALLER
from modelplane.components.model_cache import (
    HYDRATE_SCRIPT,
    MARKER,
    MOUNT,
    ModelCacheComponent,
    hydrated_marker,
)
from modelplane.components.workload.pods import cache_wait_container
from tests.components.cluster_helpers import (
    EKS_CLASSES,
    MNG,
    NODE_POOL,
    RELEASE,
    eks_cluster,
    eks_run,
    gke_class,
    gke_cluster,
    gpu_class,
    inference_cluster,
    planned_cluster,
    release,
)
from tests.components.workload_helpers import (
    CACHE,
    CODER,
    PD,
    deploy,
    engine,
    env_of,
    target,
)
from tests.pulumi_mocks import CAPACITY_BLOCK_END, CAPACITY_BLOCK_START, MockRun

DAEMONSET = "kubernetes:apps/v1:DaemonSet"
SUBNET = "aws:ec2/subnet:Subnet"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
GPU_TAINT_GKE = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _gke_run() -> MockRun:
    run = MockRun.of(
        lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": gke_class()})
    )
    return run


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Kubernetes' toleration matching (key/operator/value/effect)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        if t.get("key") != taint["key"]:
            continue
        if t.get("operator") == "Exists" or t.get("value") == taint["value"]:
            return True
    return False


# --- GKE: the driver (item 1) and scale from zero (item 2) ---------------------------------


def test_gke_dra_pools_get_no_gke_driver_and_the_cos_installer_runs_before_the_dra_driver():
    run = _gke_run()
    gpu = run.one(NODE_POOL, name="gke-central-gpu-h100")
    [accelerator] = gpu.get("nodeConfig.guestAccelerators")
    # GKE's DRA guide: automatic driver installation is not supported with DRA.
    assert accelerator["gpuDriverInstallationConfig"] == {
        "gpuDriverVersion": "INSTALLATION_DISABLED"
    }

    installer = run.one(DAEMONSET, name="gke-central-serving-nvidia-driver-installer")
    upstream = yaml.safe_load(GKE_NVIDIA_DRIVER_INSTALLER.read_text())
    assert installer.get("metadata.name") == "nvidia-driver-installer"
    assert installer.get("metadata.namespace") == "kube-system"
    # The vendored manifest, unmodified but for modelplane's recommended labels.
    spec = installer.get("spec")
    labels = spec["template"]["metadata"].pop("labels")
    assert labels["k8s-app"] == "nvidia-driver-installer"
    assert labels["app.kubernetes.io/part-of"] == "modelplane"
    upstream["spec"]["template"]["metadata"].pop("labels")
    assert spec == upstream["spec"]
    pod = installer.get("spec.template.spec")
    assert _tolerates(pod["tolerations"], GPU_TAINT_GKE)
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # It runs exactly on GPU nodes whose driver GKE does not install.
    assert {
        ("cloud.google.com/gke-accelerator", "Exists"),
        ("cloud.google.com/gke-gpu-driver-version", "DoesNotExist"),
    } <= {(e["key"], e["operator"]) for e in term["matchExpressions"]}
    installed_to = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    dra = release(run, "nvidiaDraDriver")
    assert installed_to["nvidia-install-dir-host"] == dra.get("values.nvidiaDriverRoot")
    assert dra.depends_on(installer)
    assert installer.provider and "gke-central-k8s" in installer.provider


def test_cloud_eks_and_existing_clusters_get_no_cos_driver_installer():
    run = eks_run("eks-west", eks_cluster())
    assert not run.of_type(DAEMONSET)
    assert release(run, "nvidiaDraDriver").get("values.nvidiaDriverRoot") == "/"


def test_gke_dra_pools_carry_the_labels_the_autoscaler_needs_to_scale_up_from_zero():
    run = _gke_run()
    gpu = run.one(NODE_POOL, name="gke-central-gpu-h100")
    assert gpu.get("autoscaling.totalMinNodeCount") == 0
    labels = gpu.get("nodeConfig.labels")
    assert labels["cloud.google.com/gke-nvidia-gpu-dra-driver"] == "true"
    assert labels["nvidia.com/gpu.present"] == "true"
    system = run.one(NODE_POOL, name="gke-central-system")
    assert "cloud.google.com/gke-nvidia-gpu-dra-driver" not in system.get("nodeConfig.labels")


def test_gke_system_node_zone_does_not_follow_the_pool_order():
    def system_zones(pools: list[dict[str, Any]]) -> list[str]:
        cluster = inference_cluster(
            "gke-central",
            {"source": "GKE", "gke": {"project": "acme-ml", "region": "us-central1"}},
            pools,
        )
        run = MockRun.of(
            lambda: InferenceClusterComponent("gke-central", cluster, {"h100-gke": gke_class()})
        )
        return run.one(NODE_POOL, name="gke-central-system").inputs["nodeLocations"]

    b = {"name": "gpu-b", "className": "h100-gke", "maxNodeCount": 2, "zones": ["us-central1-b"]}
    c = {"name": "gpu-c", "className": "h100-gke", "maxNodeCount": 2, "zones": ["us-central1-c"]}
    assert system_zones([c, b]) == system_zones([b, c]) == ["us-central1-b"]
    assert system_zones([b, c, {**c, "name": "gpu-f", "zones": ["us-central1-f"]}]) == [
        "us-central1-b"
    ]


# --- EKS: scale from zero (item 3) and Capacity Blocks (item 7) ----------------------------


def test_eks_dra_node_groups_never_go_below_one_node():
    unset = inference_cluster(
        "eks-west",
        {"source": "EKS", "eks": {"region": "us-west-2"}},
        [{"name": "gpu-a10g", "className": "a10g", "maxNodeCount": 4, "zones": ["us-west-2b"]}],
    )
    run = eks_run("eks-west", unset)
    group = run.one(MNG, name="eks-west-gpu-a10g")
    assert group.inputs["scalingConfig"] == {"minSize": 1, "desiredSize": 1, "maxSize": 4}


BEFORE_THE_BLOCK = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


def test_eks_capacity_block_group_starts_at_zero_and_is_scheduled_to_the_block(monkeypatch):
    monkeypatch.setattr(node_groups, "now", lambda: BEFORE_THE_BLOCK)
    run = eks_run("eks-west", eks_cluster())
    group = run.one(MNG, name="eks-west-gpu-h100")
    assert group.get("scalingConfig.desiredSize") == 0
    assert group.get("scalingConfig.minSize") == 0

    lookups = [
        c.args for c in run.mocks.calls if c.token.startswith("aws:ec2/getCapacityBlockReservation")
    ]
    assert [a["id"] for a in lookups] == ["cr-0123456789abcdef0"]
    schedules = {s.inputs["scheduledActionName"]: s for s in run.of_type(SCHEDULE)}
    assert set(schedules) == {"modelplane-gpu-h100-block-start", "modelplane-gpu-h100-block-end"}
    start = schedules["modelplane-gpu-h100-block-start"]
    end = schedules["modelplane-gpu-h100-block-end"]
    for s in (start, end):
        assert s.inputs["autoscalingGroupName"] == "eks-eks-west-gpu-h100-asg"
        assert s.inputs["maxSize"] == -1  # leaves maxNodeCount alone
        assert s.depends_on(group)
    # While the block is active the group holds the whole block (nodeCount 1 here): the
    # autoscaler cannot remove a paid-for node, and the group is at 0 outside the block.
    assert start.inputs["startTime"] == CAPACITY_BLOCK_START
    assert (start.inputs["minSize"], start.inputs["desiredCapacity"]) == (1, 1)
    assert end.inputs["startTime"] == drain_time(CAPACITY_BLOCK_END) == "2026-12-15T10:50:00Z"
    assert (end.inputs["minSize"], end.inputs["desiredCapacity"]) == (0, 0)
    # Both times are the block's own: nothing pinned, so an extended block moves its drain.
    assert not start.ignore_changes and not end.ignore_changes
    # The on-demand group has no schedule.
    assert all("a10g" not in s.name for s in run.of_type(SCHEDULE))


# (now, expected actions: (kind, time, pinned)) for the mock block 2026-12-01..12-15 11:30Z
BLOCK_ACTIONS = [
    (
        "before-the-block",
        BEFORE_THE_BLOCK,
        [("start", "2026-12-01T11:30:00Z", False), ("end", "2026-12-15T10:50:00Z", False)],
    ),
    (
        # Active: the start two minutes from now, pinned; the drain still the block's.
        "active",
        datetime(2026, 12, 5, 8, 0, tzinfo=UTC),
        [("start", "2026-12-05T08:02:00Z", True), ("end", "2026-12-15T10:50:00Z", False)],
    ),
    (
        # m2: inside the drain window only the scale to 0, never min = desired = block again.
        "draining",
        datetime(2026, 12, 15, 11, 0, tzinfo=UTC),
        [("end", "2026-12-15T11:02:00Z", True)],
    ),
    # m2: after the end (a refresh dropped the actions Auto Scaling deleted): none again.
    ("ended", datetime(2026, 12, 15, 11, 30, tzinfo=UTC), []),
]


@pytest.mark.parametrize(
    ("now", "expected"), [c[1:] for c in BLOCK_ACTIONS], ids=[c[0] for c in BLOCK_ACTIONS]
)
def test_eks_capacity_block_actions_follow_the_block(monkeypatch, now, expected):
    monkeypatch.setattr(node_groups, "now", lambda: now)
    run = eks_run("eks-west", eks_cluster())
    got = [
        (
            s.inputs["scheduledActionName"].rsplit("-", 1)[1],
            s.inputs["startTime"],
            "startTime" in s.ignore_changes,
        )
        for s in run.of_type(SCHEDULE)
    ]
    assert sorted(got) == sorted(expected)  # registered in either order


def test_eks_an_extended_capacity_block_moves_its_drain():
    # m1: the end action's time follows the reservation's end date (not pinned).
    before = block_actions(CAPACITY_BLOCK_START, CAPACITY_BLOCK_END, BEFORE_THE_BLOCK)
    later = block_actions(CAPACITY_BLOCK_START, "2026-12-22T11:30:00Z", BEFORE_THE_BLOCK)
    assert [a.at for a in before if a.kind == "end"] == ["2026-12-15T10:50:00Z"]
    assert [a.at for a in later if a.kind == "end"] == ["2026-12-22T10:50:00Z"]


def test_eks_capacity_block_in_another_zone_fails_the_up():
    # m3: the reservation's zone must be one of the pool's (its group's subnets).
    def answer(args):
        return {
            "id": args.get("id"),
            "startDate": CAPACITY_BLOCK_START,
            "endDate": CAPACITY_BLOCK_END,
            "availabilityZone": "us-west-2a",
        }

    token = "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation"
    with pytest.raises(Exception, match=r"Capacity Block cr-0123456789abcdef0 is in us-west-2a"):
        MockRun.of(
            lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES),
            answers={token: answer},
        )
    ok = {token: lambda a: {**answer(a), "availabilityZone": "us-west-2c"}}
    run = MockRun.of(
        lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES), answers=ok
    )
    assert run.of_type(SCHEDULE)


def test_eks_capacity_block_schedule_times():
    now = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
    assert schedule_time("2026-12-06T11:30:00Z", now) == "2026-12-06T11:30:00Z"
    # An active block (start in the past): two minutes from now, Auto Scaling refuses the past.
    assert schedule_time("2026-12-01T11:30:00Z", now) == "2026-12-05T08:02:00Z"
    assert drain_time("2026-12-15T11:30:00+00:00") == "2026-12-15T10:50:00Z"


# --- EKS: stable subnets (item 4) ------------------------------------------------------------


def _subnets(pools: list[dict[str, Any]], blocks: list[str] | None = None) -> dict[str, Any]:
    eks: dict[str, Any] = {"region": "us-west-2"}
    if blocks is not None:
        eks["networking"] = {"vpcCidr": "10.0.0.0/16", "subnetCidrs": blocks}
    cluster = inference_cluster("eks-west", {"source": "EKS", "eks": eks}, pools)
    run = eks_run("eks-west", cluster)
    return {
        s.name: (s.inputs["availabilityZone"], s.inputs["cidrBlock"]) for s in run.of_type(SUBNET)
    }


def test_eks_adding_a_pool_in_a_new_zone_changes_no_existing_subnet():
    pool_b = {"name": "gpu-b", "className": "a10g", "maxNodeCount": 2, "zones": ["us-west-2b"]}
    pool_a = {**pool_b, "name": "gpu-a", "zones": ["us-west-2a"]}
    pool_c = {**pool_b, "name": "gpu-c", "zones": ["us-west-2c"]}
    before = _subnets([pool_b])
    assert len(before) == 6
    # A pool in a new zone, put first: the old code re-mapped every block.
    after = _subnets([pool_a, pool_b, pool_c])
    assert after == before
    assert after["eks-west-private-us-west-2b"] == ("us-west-2b", "10.0.24.0/21")

    # A fourth zone takes an appended block; the first three subnets pairs stay as they were.
    blocks = ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20"]
    three = _subnets([pool_b], blocks)
    pool_d = {**pool_b, "name": "gpu-d", "zones": ["us-west-2d"]}
    four = _subnets([pool_d, pool_b], [*blocks, "10.0.48.0/20"])
    assert {k: v for k, v in four.items() if k in three} == three
    assert set(four) - set(three) == {"eks-west-public-us-west-2d", "eks-west-private-us-west-2d"}
    assert four["eks-west-private-us-west-2d"] == ("us-west-2d", "10.0.56.0/21")


def test_eks_explicit_block_zones_are_used_instead_of_letters():
    cluster = inference_cluster(
        "eks-tokyo",
        {
            "source": "EKS",
            "eks": {
                "region": "ap-northeast-1",
                # Planned ranges: one block per zone.
                "networking": {"zones": ["ap-northeast-1a", "ap-northeast-1c"]},
            },
        },
        [{"name": "gpu", "className": "a10g", "maxNodeCount": 2, "zones": ["ap-northeast-1c"]}],
    )
    run = eks_run("eks-tokyo", cluster)
    zones = sorted({s.inputs["availabilityZone"] for s in run.of_type(SUBNET)})
    assert zones == ["ap-northeast-1a", "ap-northeast-1c"]


# --- EKS: access, endpoint, upgrade policy, add-ons (items 8, 11) -----------------------------


def _eks_with(**eks: Any) -> MockRun:
    cluster = inference_cluster(
        "eks-west",
        {"source": "EKS", "eks": {"region": "us-west-2", **eks}},
        [{"name": "gpu-a10g", "className": "a10g", "maxNodeCount": 2, "zones": ["us-west-2b"]}],
    )
    run = eks_run("eks-west", cluster)
    return run


def test_eks_admin_principals_get_cluster_admin_access_entries():
    arns = [
        "arn:aws:iam::123456789012:role/platform-admin",
        "arn:aws:iam::123456789012:role/ci-deployer",
    ]
    cluster = _eks_with(adminPrincipals=arns).one("eks:index:Cluster")
    entries = cluster.inputs["accessEntries"]
    assert [entries[k]["principalArn"] for k in sorted(entries)] == arns
    for entry in entries.values():
        policy = entry["accessPolicies"]["cluster-admin"]
        assert policy["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
        assert policy["accessScope"] == {"type": "cluster"}
    assert (
        "accessEntries" not in _eks_with().one("eks:index:Cluster").inputs
        or not (_eks_with().one("eks:index:Cluster").inputs["accessEntries"])
    )


def test_eks_endpoint_cidrs_upgrade_policy_and_pinned_addons():
    run = _eks_with(publicAccessCidrs=["203.0.113.0/24"], kubernetesVersion="1.35")
    cluster = run.one("eks:index:Cluster")
    assert cluster.inputs["publicAccessCidrs"] == ["203.0.113.0/24"]
    assert cluster.inputs["upgradePolicy"] == {"supportType": "STANDARD"}
    assert _eks_with().one("eks:index:Cluster").inputs["publicAccessCidrs"] == ["0.0.0.0/0"]
    addons = {a.inputs["addonName"]: a for a in run.of_type("aws:eks/addon:Addon")}
    assert set(addons) == {
        "vpc-cni",
        "kube-proxy",
        "eks-pod-identity-agent",
        "coredns",
        "aws-efs-csi-driver",
    }
    for name, addon in addons.items():
        # The default version EKS gives this add-on on the cluster's Kubernetes version.
        assert addon.inputs["addonVersion"] == f"{name}-for-1.35"
    asked = [
        c.args for c in run.mocks.calls if c.token == "aws:eks/getAddonVersion:getAddonVersion"
    ]
    assert all(a["kubernetesVersion"] == "1.35" and not a.get("mostRecent") for a in asked)


# --- protection (item 10) ----------------------------------------------------------------------


@pytest.mark.parametrize("protect", [True, False])
def test_cloud_stateful_resources_are_protected_unless_switched_off(protect):
    gke_spec = gke_cluster().model_dump(by_alias=True, exclude_none=True)
    gke_spec["spec"]["cluster"]["gke"]["protect"] = protect
    run = MockRun.of(
        lambda: InferenceClusterComponent(
            "gke-central", planned_cluster(gke_spec), {"h100-gke": gke_class()}
        )
    )
    cluster = run.one("gcp:container/cluster:Cluster")
    assert cluster.inputs["deletionProtection"] is protect
    for typ in (
        "gcp:container/cluster:Cluster",
        "gcp:compute/network:Network",
        "gcp:compute/subnetwork:Subnetwork",
    ):
        assert run.one(typ).protect is protect, typ
    assert run.one(NODE_POOL, name="gke-central-gpu-h100").protect is False

    eks_spec = copy.deepcopy(eks_cluster().model_dump(by_alias=True, exclude_none=True))
    eks_spec["spec"]["cluster"]["eks"]["protect"] = protect
    run = MockRun.of(
        lambda: InferenceClusterComponent("eks-west", planned_cluster(eks_spec), EKS_CLASSES)
    )
    for typ in ("eks:index:Cluster", "aws:ec2/vpc:Vpc", "aws:efs/fileSystem:FileSystem"):
        assert run.one(typ).protect is protect, typ
    assert all(not g.protect for g in run.of_type(MNG))


# --- ModelCache on the clouds (item 6) ---------------------------------------------------------


def _hydrate(tmp_path: Path, mount: Path, revision: str) -> str:
    """Run the hydration Job's script with stand-ins for pip and hf (which log their calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("pip", "hf"):
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/calls"\n')
        stub.chmod(0o755)
    script = HYDRATE_SCRIPT.replace(MOUNT, str(mount))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "MODELPLANE_REPO": "Qwen/Qwen3-Coder",
        "MODELPLANE_REVISION": revision,
        "MODELPLANE_DIR": source_dir(f"Qwen/Qwen3-Coder@{revision}"),
    }
    subprocess.run(["/bin/sh", "-c", script], env=env, check=True, timeout=30)
    calls = tmp_path / "calls"
    text = calls.read_text() if calls.exists() else ""
    calls.unlink(missing_ok=True)
    return text


def test_cloud_cache_rehydrates_when_the_revision_changes(tmp_path):
    mount = tmp_path / "models"
    mount.mkdir()
    v1, v2 = (mount / source_dir(f"Qwen/Qwen3-Coder@{r}") for r in ("v1", "v2"))
    first = _hydrate(tmp_path, mount, "v1")
    assert f"hf download Qwen/Qwen3-Coder --revision v1 --local-dir {v1}" in first
    assert (v1 / MARKER).read_text() == "Qwen/Qwen3-Coder@v1"
    assert _hydrate(tmp_path, mount, "v1") == ""  # same weights: nothing to do
    # A revision bump downloads beside the weights replicas still read, into its own directory.
    assert f"--revision v2 --local-dir {v2}" in _hydrate(tmp_path, mount, "v2")
    assert (v2 / MARKER).read_text() == "Qwen/Qwen3-Coder@v2"
    assert (v1 / MARKER).read_text() == "Qwen/Qwen3-Coder@v1"


@pytest.mark.parametrize(
    ("keep", "root", "left"),
    [
        (["a@v2"], False, {"revisions/a@v2"}),
        (["a@v1", "a@v2"], False, {"revisions/a@v1", "revisions/a@v2"}),
        (["a@v2"], True, {"revisions/a@v2", "config.json", ".modelplane-hydrated"}),
        ([], False, set()),
    ],
    ids=["after-a-rollout", "during-a-rollout", "root-still-read", "nothing-read"],
)
def test_cloud_cache_prune_removes_only_what_no_replica_reads(tmp_path, keep, root, left):
    from modelplane.components.model_cache import prune_manifest

    mount = tmp_path / "models"
    dirs = {f"revisions/{s}": mount / source_dir(s) for s in ("a@v1", "a@v2", "a@v3")}
    for d in dirs.values():
        d.mkdir(parents=True)
        (d / "model.safetensors").write_text("w")
    (mount / "config.json").write_text("{}")  # the layout before directories: the root
    (mount / MARKER).write_text("a@v0")
    job = prune_manifest(CACHE, {}, keep, root=root)
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    script = container["command"][-1].replace(MOUNT, str(mount))
    subprocess.run(
        ["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin", **env}, check=True, timeout=30
    )
    present = {name for name, d in dirs.items() if d.exists()}
    present |= {p.name for p in mount.iterdir() if p.name != "revisions"}
    assert present == left
    # Named by what it keeps: it runs again only when that changes.
    again = prune_manifest(CACHE, {}, list(reversed(keep)), root=root)
    assert again["metadata"]["name"] == job["metadata"]["name"]
    other = prune_manifest(CACHE, {}, keep, root=not root)
    assert other["metadata"]["name"] != job["metadata"]["name"]


def test_cloud_cache_pvc_is_not_awaited_and_replicas_wait_for_hydration():
    cache = CACHE  # Qwen/Qwen3-Coder-480B-A35B-Instruct at revision v1
    run = MockRun()

    def program() -> ModelCacheComponent:
        provider = k8s.Provider("west-k8s", kubeconfig="kubeconfig-for-tests")
        return ModelCacheComponent("coder", cache, {"west": target(provider)})

    run.run(program)
    pvc = run.one("kubernetes:core/v1:PersistentVolumeClaim")
    # Filestore provisioning outlasts pulumi-kubernetes' wait for Bound.
    assert pvc.get("metadata.annotations") == {"pulumi.com/skipAwait": "true"}

    run, _ = deploy(CODER, {"unified": "h200"}, cache=cache)
    lws = run.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
    for template in ("leaderTemplate", "workerTemplate"):
        pod = lws.get(f"spec.leaderWorkerTemplate.{template}.spec")
        wait = pod["initContainers"][0]
        assert wait["name"] == "wait-for-model-cache"
        assert env_of(wait) == {"MODELPLANE_CACHE_READY": hydrated_marker(cache)}
        assert hydrated_marker(cache) == "Qwen/Qwen3-Coder-480B-A35B-Instruct@v1"
        # The whole volume (the source's directory may not exist yet), its marker there.
        assert wait["volumeMounts"] == [
            {"name": "model-cache", "mountPath": MOUNT, "readOnly": True}
        ]
        assert f"{MOUNT}/{source_dir(hydrated_marker(cache))}/{MARKER}" in wait["command"][-1]
        # The engine sees the source's directory alone, at the same path.
        engine_mount = next(
            m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == MOUNT
        )
        assert engine_mount["subPath"] == source_dir(hydrated_marker(cache))


def test_cloud_cache_wait_container_returns_once_the_marker_matches(tmp_path):
    wait = cache_wait_container("org/model@v2")
    script = wait["command"][-1].replace(MOUNT, str(tmp_path)).replace("sleep 15", "sleep 0.1")
    env = {"PATH": "/usr/bin:/bin", "MODELPLANE_CACHE_READY": "org/model@v2"}
    (tmp_path / MARKER).write_text("org/model@v1")
    waiting = subprocess.Popen(["/bin/sh", "-c", script], env=env, stdout=subprocess.DEVNULL)
    with pytest.raises(subprocess.TimeoutExpired):
        waiting.wait(timeout=1)  # the old revision's marker: still waiting
    (tmp_path / MARKER).write_text("org/model@v2")
    assert waiting.wait(timeout=10) == 0


# --- example classes declare what the DRA driver publishes (item 5) ---------------------------

NVML_MEMORY_MIB = {
    # NVML's total memory (nvidia-smi's "MiB" figure), which the NVIDIA DRA driver publishes as
    # the device's `memory` capacity: less than the marketing size.
    "NVIDIA L4": 23034,
    "NVIDIA L40S": 46068,
    "NVIDIA A100-SXM4-80GB": 81920,
    "NVIDIA H100 80GB HBM3": 81559,
    "NVIDIA H200": 143771,
}


@pytest.mark.parametrize("fleet", ["quickstart", "multicloud", "frontier"])
def test_cloud_example_classes_declare_the_gpu_memory_the_driver_publishes(fleet):
    from modelplane.api.loader import load_fleet
    from modelplane.cel.quantity import parse_quantity

    result = load_fleet(Path(__file__).resolve().parents[2] / "specs" / fleet)
    assert not result.errors
    checked = 0
    for cls in result.fleet.classes.values():
        for device in cls.spec.devices:
            product = device.attributes.get("productName")
            if device.driver != "gpu.nvidia.com" or product is None:
                continue
            declared = parse_quantity(device.capacity["memory"].value)
            assert declared == parse_quantity(f"{NVML_MEMORY_MIB[product.string]}Mi"), (
                f"{fleet}: class {cls.metadata.name} declares {device.capacity['memory'].value}"
            )
            checked += 1
    assert checked


# --- engines: startup and liveness beside readiness (item 11) ----------------------------------


def test_cloud_serving_engines_get_startup_and_liveness_probes():
    run, _ = deploy(CODER, {"unified": "h200"}, cache=CACHE)
    lws = run.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
    leader = engine(lws.get("spec.leaderWorkerTemplate.leaderTemplate.spec"))
    health = leader["readinessProbe"]["httpGet"]
    assert leader["startupProbe"]["httpGet"] == leader["livenessProbe"]["httpGet"] == health
    # An hour to load weights before liveness takes over; a hung engine is then restarted.
    startup = leader["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 3600
    assert leader["livenessProbe"]["failureThreshold"] >= 3
    worker = engine(lws.get("spec.leaderWorkerTemplate.workerTemplate.spec"))
    assert not {"readinessProbe", "startupProbe", "livenessProbe"} & set(worker)


def test_eks_nat_gateway_per_zone_routes_each_private_subnet_through_its_own():
    def routes(nat_gateways: str | None) -> tuple[MockRun, dict[str, str]]:
        networking = {"natGateways": nat_gateways} if nat_gateways else {}
        run = _eks_with(networking=networking)
        tables = {t.id: t for t in run.of_type("aws:ec2/routeTable:RouteTable")}
        nats = {n.id: n for n in run.of_type("aws:ec2/natGateway:NatGateway")}
        zone_of = {s.id: s.inputs["availabilityZone"] for s in run.of_type(SUBNET)}
        through: dict[str, str] = {}
        for assoc in run.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation"):
            table = tables[assoc.inputs["routeTableId"]]
            nat_id = table.get("routes.0.natGatewayId")
            if nat_id:
                through[zone_of[assoc.inputs["subnetId"]]] = zone_of[
                    nats[nat_id].inputs["subnetId"]
                ]
        return run, through

    run, single = routes(None)
    assert single == dict.fromkeys(["us-west-2a", "us-west-2b", "us-west-2c"], "us-west-2a")
    assert len(run.of_type("aws:ec2/natGateway:NatGateway")) == 1
    run, per_zone = routes("PerZone")
    assert per_zone == {z: z for z in ("us-west-2a", "us-west-2b", "us-west-2c")}
    cluster = run.one("eks:index:Cluster")
    assert all(cluster.depends_on(n) for n in run.of_type("aws:ec2/natGateway:NatGateway"))
    # The first zone keeps the single-NAT names: switching adds gateways, replaces none.
    assert {n.name for n in run.of_type("aws:ec2/natGateway:NatGateway")} == {
        "eks-west-nat",
        "eks-west-nat-us-west-2b",
        "eks-west-nat-us-west-2c",
    }


def test_gke_boot_disk_type_and_specific_reservation_reach_the_node_pool():
    recipe = {
        "provider": "GKE",
        "gke": {
            "machineType": "a3-ultragpu-8g",
            "diskType": "hyperdisk-balanced",
            "reservation": "projects/acme-ml/reservations/h200-block",
            "accelerator": {"type": "nvidia-h200-141gb", "count": 8},
        },
    }
    cls = gpu_class("h100-gke", recipe)
    run = MockRun.of(
        lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": cls})
    )
    gpu = run.one(NODE_POOL, name="gke-central-gpu-h100")
    assert gpu.get("nodeConfig.diskType") == "hyperdisk-balanced"
    assert gpu.get("nodeConfig.reservationAffinity") == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["projects/acme-ml/reservations/h200-block"],
    }
    plain = _gke_run().one(NODE_POOL, name="gke-central-gpu-h100")
    assert "diskType" not in plain.get("nodeConfig") and "reservationAffinity" not in plain.get(
        "nodeConfig"
    )


@pytest.mark.parametrize(("version", "tag"), [("1.36", "v1.36.1"), ("1.35", "v1.35.2")])
def test_eks_cluster_autoscaler_image_matches_the_cluster_minor(version, tag):
    run = _eks_with(kubernetesVersion=version)
    autoscaler = run.one(RELEASE, name="eks-west-mp-cluster-autoscaler")
    assert autoscaler.get("values.image.tag") == tag


def test_cloud_both_envoy_gateway_installs_use_one_version():
    from modelplane.components.charts import CHARTS
    from modelplane.components.gateway import ENVOY

    assert ENVOY["version"] == CHARTS["envoyGateway"].version


# --- status: classes against the published GPU memory (item 5) ---------------------------------


def test_cloud_status_names_a_class_that_declares_more_gpu_memory_than_published():
    from modelplane.health.observation import ClusterObservation, Observation, PoolObservation
    from modelplane.health.readiness import readiness
    from tests.factories import cluster, fleet, inference_class, lock, pool

    f = fleet(
        [inference_class("l4", 1, memory="24Gi"), inference_class("h100", 8, memory="79Gi")],
        [cluster("gke", [pool("gpu-l4", "l4", 2)]), cluster("onprem", [pool("gpu", "h100", 2)])],
    )
    seen = Observation(
        100.0,
        {
            "gke": ClusterObservation(
                "gke", reachable=True, pools={"gpu-l4": PoolObservation(2, 2, 2, "23034Mi")}
            ),
            "onprem": ClusterObservation(
                "onprem", reachable=True, pools={"gpu": PoolObservation(2, 2, 16, "81559Mi")}
            ),
        },
    )
    view = {c.name: c for c in readiness(f, lock({}), seen).clusters}
    assert (
        "pool gpu-l4: InferenceClass l4 declares gpu.nvidia.com memory 24Gi but its GPUs "
        "publish 23034Mi" in view["gke"].message
    )
    assert "InferenceClass" not in view["onprem"].message  # 79Gi <= 81559Mi: fine
    assert Observation.from_json(seen.as_json()) == seen


def test_cloud_observe_keeps_the_smallest_published_gpu_memory_per_pool():
    from modelplane.observe.cluster import ClusterReader

    class Reader:
        def get(self, path: str, **_: Any) -> dict[str, Any]:
            return {}

        def items(self, path: str) -> list[dict[str, Any]]:
            if path == "/api/v1/nodes":
                return [
                    {"metadata": {"name": n, "labels": {"modelplane.ai/pool": "gpu-l4"}}}
                    for n in ("n1", "n2")
                ]

            def gpus(node: str, *memory: str) -> dict[str, Any]:
                devices = [
                    {"name": f"gpu-{i}", "capacity": {"memory": {"value": m}}}
                    for i, m in enumerate(memory)
                ]
                return {"spec": {"nodeName": node, "driver": "gpu.nvidia.com", "devices": devices}}

            nic = {
                "spec": {
                    "nodeName": "n1",
                    "driver": "dra.net",
                    "devices": [{"name": "nic", "capacity": {"memory": {"value": "1Mi"}}}],
                }
            }
            return [gpus("n1", "23034Mi"), gpus("n2", "22Gi", "23034Mi"), nic]

    pools = ClusterReader(Reader()).pools()  # type: ignore[arg-type]
    assert pools["gpu-l4"].devices == 4
    assert pools["gpu-l4"].gpu_memory == "22Gi"  # the NIC's capacity is not a GPU's


# --- Both clouds: load balancers are gone before the network goes (item 11) ---------------

NAMESPACE = "kubernetes:core/v1:Namespace"
NETWORK = {
    "gke": ("gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork"),
    "eks": ("aws:ec2/vpc:Vpc", SUBNET, "aws:ec2/natGateway:NatGateway"),
}


@pytest.mark.parametrize("cloud", ["gke", "eks"])
def test_cloud_destroy_waits_for_load_balancers_before_the_network(cloud):
    run = MockRun()
    cluster = gke_cluster() if cloud == "gke" else eks_cluster()
    classes = {"h100-gke": gke_class()} if cloud == "gke" else EKS_CLASSES
    run.run(lambda: InferenceClusterComponent(cluster.metadata.name, cluster, classes))

    # Envoy Gateway creates each Gateway's LoadBalancer Service in its own namespace: this
    # stack owns that namespace (Helm's create_namespace would leave it, and the Service,
    # behind), and destroy waits for it to be gone, i.e. for the LB finalizers to clear.
    envoy = release(run, "envoyGateway")
    [namespace] = [
        n for n in run.of_type(NAMESPACE) if n.get("metadata.name") == "envoy-gateway-system"
    ]
    assert envoy.get("createNamespace") is False
    assert envoy.get("namespace") == "envoy-gateway-system"
    assert envoy.depends_on(namespace)
    assert namespace.custom_timeouts.get("delete") == "30m"

    # Deleted in reverse: Gateway, GatewayClass, controller, namespace (waits), provider, and
    # only then the network the LBs live in.
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    gateway_class = run.one("kubernetes:gateway.networking.k8s.io/v1:GatewayClass")
    assert gateway.depends_on(gateway_class) and gateway_class.depends_on(envoy)
    provider = run.provider_of(namespace)
    assert provider is not None and provider is run.provider_of(gateway)
    network = [r for t in NETWORK[cloud] for r in run.of_type(t)]
    assert len(network) >= len(NETWORK[cloud])
    assert all(provider.depends_on(n) for n in network)


# --- Chart pins checked against upstream (item 12) ----------------------------------------


def _leaf_paths(values: Any, prefix: str = "") -> set[str]:
    """Dotted paths of the values modelplane sets (lists are leaves)."""
    if isinstance(values, dict) and values:
        return {p for k, v in values.items() for p in _leaf_paths(v, f"{prefix}{k}.")}
    return {prefix.rstrip(".")}


# Every key below exists in that chart version's values.yaml (checked upstream: the EFA plugin
# in aws/eks-charts stable/aws-efa-k8s-device-plugin, Traefik in traefik/traefik-helm-chart
# tag v41.3.0). A key set but not listed here has not been checked.
CHECKED_KEYS = {
    "awsEfaDevicePlugin": ("v0.5.30", {"tolerations"}),
    "traefik": (
        "41.3.0",
        {
            "providers.kubernetesGateway.enabled",
            "providers.kubernetesGateway.statusAddress.service.name",
            "providers.kubernetesGateway.statusAddress.service.namespace",
            "providers.kubernetesIngress.enabled",
            # The front door's retry Middlewares (issue 26): both top-level keys of the
            # chart's values.yaml (`providers.kubernetesCRD.enabled`, `additionalArguments: []`).
            "providers.kubernetesCRD.enabled",
            # modelplane's namespaces only (security review H3): `namespaces: []` there.
            "providers.kubernetesCRD.namespaces",
            "additionalArguments",
            "gateway.enabled",
            "gatewayClass.enabled",
        },
    ),
}


def test_cloud_efa_plugin_and_traefik_pins_and_their_values_keys():
    from modelplane.api.inference_gateway import InferenceGateway
    from modelplane.components.gateway import TRAEFIK, InferenceGatewayComponent

    run = eks_run("eks-west", eks_cluster())
    efa = run.one(RELEASE, name="eks-west-mp-aws-efa-k8s-device-plugin")

    gateway = InferenceGateway.model_validate(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "InferenceGateway",
            "metadata": {"name": "default"},
            "spec": {"backend": "Traefik", "cluster": {"inferenceClusterRef": "eks-west"}},
        }
    )
    gw_run = MockRun()
    gw_run.run(
        lambda: InferenceGatewayComponent(
            "default", gateway, k8s.Provider("gw-k8s", kubeconfig="kubeconfig-for-tests")
        )
    )
    traefik = gw_run.one(RELEASE)
    assert traefik.get("name") == TRAEFIK["release"]

    for key, release_ in (("awsEfaDevicePlugin", efa), ("traefik", traefik)):
        version, keys = CHECKED_KEYS[key]
        assert release_.inputs["version"] == version, key
        assert _leaf_paths(release_.get("values")) <= keys, key
    # Traefik's Service is the one the Gateway's status address names.
    assert traefik.get("values.providers.kubernetesGateway.statusAddress.service") == {
        "name": TRAEFIK["release"],
        "namespace": TRAEFIK["namespace"],
    }


# --- LWS: the dev fleet's v0.8.0 CRD knows every field modelplane renders -------------------

LWS_TYPE = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
LWS_CRD = Path(__file__).resolve().parents[2] / "modelplane" / "crds" / "lws-v0.8.0"


def _unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Paths in ``value`` that the structural ``schema`` does not declare (names only)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        out = []
        for key, item in value.items():
            if props is not None and key in props:
                out += _unknown_fields(item, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += _unknown_fields(item, extra, f"{path}.{key}")
            elif props is not None or extra is False:
                out.append(f"{path}.{key}")
        return out
    if isinstance(value, list) and "items" in schema:
        return [
            p
            for i, item in enumerate(value)
            for p in _unknown_fields(item, schema["items"], f"{path}[{i}]")
        ]
    return []


def test_cloud_lws_manifests_use_only_fields_of_the_dev_fleets_lws_crd():
    # The dev fleet runs LWS v0.8.0, clouds the chart v0.10.0, whose v1 schema only adds fields
    # (docs/architecture.md, dev fleet): what validates against v0.8.0 means the same on both.
    [crd_file] = LWS_CRD.glob("*.yaml")
    [version] = yaml.safe_load(crd_file.read_text())["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    # It can fail: a field only v0.10.0 knows is flagged.
    newer = {
        "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"schedulingGroup": {}}}}}
    }
    assert _unknown_fields(newer, schema) == [
        ".spec.leaderWorkerTemplate.workerTemplate.spec.schedulingGroup"
    ]

    rendered = []
    for text, pools in ((CODER, {"unified": "h200"}), (PD, {"prefill": "h200", "decode": "h200"})):
        run, _ = deploy(text, pools, cache=CACHE if text is CODER else None)
        rendered += run.of_type(LWS_TYPE)
    assert len(rendered) == 2
    for lws in rendered:
        body = {k: lws.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}
        assert body["apiVersion"] == f"leaderworkerset.x-k8s.io/{version['name']}"
        assert _unknown_fields(body, schema) == [], lws.name


def test_eks_kubernetes_minors_are_those_with_a_pinned_cluster_autoscaler():
    # m4: a minor without a pinned image fell back to the chart's default (another minor).
    from modelplane.api.inference_cluster import EKS_AUTOSCALED_MINORS
    from modelplane.components.charts import CLUSTER_AUTOSCALER_IMAGES

    assert set(EKS_AUTOSCALED_MINORS) == set(CLUSTER_AUTOSCALER_IMAGES)


def test_eks_a_deleted_cache_takes_its_efs_data_along():
    # m6: the EFS CSI add-on keeps an access point's directory by default (billed forever).
    run = eks_run("eks-west", eks_cluster())
    addons = {a.inputs["addonName"]: a for a in run.of_type("aws:eks/addon:Addon")}
    config = json.loads(addons["aws-efs-csi-driver"].inputs["configurationValues"])
    assert config == {"controller": {"deleteAccessPointRootDir": True}}
    assert all(
        "configurationValues" not in a.inputs
        for n, a in addons.items()
        if n not in ("aws-efs-csi-driver", "vpc-cni")  # vpc-cni: network policy (security M4)
    )


def test_gke_system_pool_keeps_its_zone_once_created():
    # m13 / previous 17: a GPU pool added in an earlier zone changes the rendered zone, but the
    # system pool ignores nodeLocations after creation, so its node never moves.
    run = _gke_run()
    system = run.one(NODE_POOL, name="gke-central-system")
    assert "nodeLocations" in system.ignore_changes
    gpu = run.one(NODE_POOL, name="gke-central-gpu-h100")
    assert "nodeLocations" not in gpu.ignore_changes  # a GPU pool's zones are the spec's


@pytest.mark.parametrize(
    ("cidrs", "config"),
    [
        (None, None),
        (
            ["203.0.113.0/24", "198.51.100.7/32"],
            {
                "cidrBlocks": [
                    {"cidrBlock": "203.0.113.0/24", "displayName": "modelplane-0"},
                    {"cidrBlock": "198.51.100.7/32", "displayName": "modelplane-1"},
                ]
            },
        ),
    ],
)
def test_gke_public_endpoint_admits_only_the_authorized_networks(cidrs, config):
    # Previous 5: GKE's control plane had no authorized networks at all.
    spec = gke_cluster().model_dump(by_alias=True, exclude_none=True)
    if cidrs is not None:
        spec["spec"]["cluster"]["gke"]["publicAccessCidrs"] = cidrs
    run = MockRun.of(
        lambda: InferenceClusterComponent(
            "gke-central", planned_cluster(spec), {"h100-gke": gke_class()}
        )
    )
    cluster = run.one("gcp:container/cluster:Cluster")
    assert cluster.inputs.get("masterAuthorizedNetworksConfig") == config
