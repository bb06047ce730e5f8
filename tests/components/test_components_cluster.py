"""InferenceCluster, GKECluster, EKSCluster and ServingStack under Pulumi's mock runtime.

Each test runs a component graph in process (no engine, no cloud, no network) and asserts the
registered resources and their key inputs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from components.charts import CHARTS, CRDS_DIR
from components.cloud.eks import (
    EKSCapacityBlock,
    EKSCluster,
    EKSClusterArgs,
    EKSGpu,
    EKSNetworking,
    EKSNodePool,
    plan_subnets,
)
from components.inference_cluster import InferenceClusterComponent
from components.providers import cluster_provider
from modelplane.api.inference_class import InferenceClass
from modelplane.api.inference_cluster import InferenceCluster
from tests.pulumi_mocks import MockRun, Registered, Secret, unwrap

COMPONENT_TYPES = {
    "modelplane:cluster:InferenceCluster",
    "modelplane:cluster:ServingStack",
    "modelplane:cloud:GKECluster",
    "modelplane:cloud:EKSCluster",
}
RELEASE = "kubernetes:helm.sh/v3:Release"
NODE_POOL = "gcp:container/nodePool:NodePool"
MNG = "eks:index:ManagedNodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
K8S_PROVIDER = "pulumi:providers:kubernetes"


# --- spec builders --------------------------------------------------------------------------


def gpu_class(name: str, provisioning: dict[str, Any] | None, count: int = 8) -> InferenceClass:
    spec: dict[str, Any] = {
        "devices": [
            {
                "name": "gpu",
                "driver": "gpu.nvidia.com",
                "deviceClassName": "gpu.nvidia.com",
                "count": count,
            },
            {"name": "nic", "driver": "dra.net", "claim": "Synthetic", "count": 16},
        ]
    }
    if provisioning is not None:
        spec["provisioning"] = provisioning
    return InferenceClass.model_validate({"metadata": {"name": name}, "spec": spec})


def gke_class(name: str = "h100-gke") -> InferenceClass:
    return gpu_class(
        name,
        {
            "provider": "GKE",
            "gke": {
                "machineType": "a3-highgpu-8g",
                "diskSizeGb": 200,
                "accelerator": {"type": "nvidia-h100-80gb", "count": 8},
            },
        },
    )


def eks_class(name: str, instance_type: str, accelerator: str = "nvidia-h100") -> InferenceClass:
    return gpu_class(
        name,
        {
            "provider": "EKS",
            "eks": {
                "instanceType": instance_type,
                "diskSizeGb": 300,
                "accelerator": {"type": accelerator, "count": 8},
            },
        },
    )


def inference_cluster(
    name: str, cluster: dict[str, Any], pools: list[dict[str, Any]], **spec: Any
) -> InferenceCluster:
    return InferenceCluster.model_validate(
        {"metadata": {"name": name}, "spec": {"cluster": cluster, "nodePools": pools, **spec}}
    )


def gke_cluster(**spec: Any) -> InferenceCluster:
    return inference_cluster(
        "gke-central",
        {"source": "GKE", "gke": {"project": "acme-ml", "region": "us-central1"}},
        [
            {
                "name": "gpu-h100",
                "className": "h100-gke",
                "nodeCount": 1,
                "minNodeCount": 0,
                "maxNodeCount": 4,
                "zones": ["us-central1-a", "us-central1-b"],
            }
        ],
        **spec,
    )


def eks_cluster(**spec: Any) -> InferenceCluster:
    return inference_cluster(
        "eks-west",
        {"source": "EKS", "eks": {"region": "us-west-2"}},
        [
            {
                "name": "gpu-a10g",
                "className": "a10g",
                "nodeCount": 2,
                "minNodeCount": 1,
                "maxNodeCount": 6,
                "zones": ["us-west-2b"],
            },
            {
                "name": "gpu-h100",
                "className": "h100-eks",
                "nodeCount": 1,
                "maxNodeCount": 2,
                "zones": ["us-west-2c"],
                "capacityBlock": {"capacityReservationId": "cr-0123456789abcdef0"},
                "fabric": "EFA",
            },
        ],
        **spec,
    )


EKS_CLASSES = {
    "a10g": eks_class("a10g", "g5.12xlarge", "nvidia-a10g"),
    "h100-eks": eks_class("h100-eks", "p5.48xlarge"),
}


def existing_cluster(existing: dict[str, Any], **spec: Any) -> InferenceCluster:
    return inference_cluster(
        "on-prem",
        {"source": "Existing", "existing": existing},
        [{"name": "gpu", "className": "h100-gke", "nodeCount": 3}],
        **spec,
    )


# --- shared assertions ----------------------------------------------------------------------


def assert_children_parented(run: MockRun) -> None:
    """Everything but the top component hangs under one of modelplane's components."""
    for r in run:
        if r.type in ("modelplane:cluster:InferenceCluster",):
            continue
        assert r.parent_type in COMPONENT_TYPES, f"{r.type} {r.name} parent {r.parent_type}"


def assert_no_plaintext(run: MockRun, secret: str) -> None:
    """``secret`` appears only inside Secret-wrapped inputs."""

    def visit(value: Any, where: str) -> None:
        if isinstance(value, Secret):
            return
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                visit(v, f"{where}[{i}]")
        elif isinstance(value, str):
            assert secret not in value, f"plaintext secret at {where}"

    for r in run:
        visit(r.inputs, f"{r.type} {r.name}")


def k8s_resources_use(run: MockRun, provider: Registered) -> None:
    for r in run:
        if r.type.startswith("kubernetes:") and r.custom:
            assert run.provider_of(r) == provider, f"{r.type} {r.name} on another provider"


def release(run: MockRun, key: str) -> Registered:
    return run.one(RELEASE, name=f"{_serving(run)}-{CHARTS[key].release_name}")


def _serving(run: MockRun) -> str:
    return run.one("modelplane:cluster:ServingStack").name


# --- GKE ------------------------------------------------------------------------------------


def test_gke_cluster_network_cluster_and_node_pools() -> None:
    run = MockRun()
    ic = run.run(
        lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": gke_class()})
    )

    network = run.one("gcp:compute/network:Network")
    assert network.inputs["autoCreateSubnetworks"] is False
    subnet = run.one("gcp:compute/subnetwork:Subnetwork")
    assert subnet.inputs["ipCidrRange"] == "10.0.0.0/24"
    assert {r["rangeName"]: r["ipCidrRange"] for r in subnet.inputs["secondaryIpRanges"]} == {
        "pods": "10.1.0.0/16",
        "services": "10.2.0.0/16",
    }

    cluster = run.one("gcp:container/cluster:Cluster")
    assert cluster.inputs["removeDefaultNodePool"] is True
    assert cluster.inputs["deletionProtection"] is True  # protect: true by default
    assert cluster.inputs["minMasterVersion"] == "1.35"
    assert cluster.get("workloadIdentityConfig.workloadPool") == "acme-ml.svc.id.goog"
    assert cluster.get("addonsConfig.gcpFilestoreCsiDriverConfig.enabled") is True
    assert cluster.get("ipAllocationPolicy.clusterSecondaryRangeName") == "pods"
    assert cluster.get("ipAllocationPolicy.servicesSecondaryRangeName") == "services"
    assert cluster.inputs["location"] == "us-central1"

    pools = {p.inputs["name"]: p for p in run.of_type(NODE_POOL)}
    assert set(pools) == {"system", "gpu-h100"}
    system = pools["system"]
    assert system.get("nodeConfig.machineType") == "e2-standard-4"
    assert system.get("autoscaling.totalMinNodeCount") == 1
    assert system.get("autoscaling.totalMaxNodeCount") == 2
    assert system.inputs["initialNodeCount"] == 1
    assert system.inputs["nodeLocations"] == ["us-central1-a"]
    assert system.get("nodeConfig.labels") == {"modelplane.ai/pool": "system"}
    assert not system.get("nodeConfig.guestAccelerators")

    gpu = pools["gpu-h100"]
    assert gpu.get("nodeConfig.machineType") == "a3-highgpu-8g"
    assert gpu.get("nodeConfig.diskSizeGb") == 200
    [accelerator] = gpu.get("nodeConfig.guestAccelerators")
    assert accelerator["type"] == "nvidia-h100-80gb"
    assert accelerator["count"] == 8
    assert gpu.get("nodeConfig.labels") == {
        "modelplane.ai/pool": "gpu-h100",
        "modelplane.ai/gpu": "nvidia-h100-80gb",
        "gke-no-default-nvidia-gpu-device-plugin": "true",
        "cloud.google.com/gke-nvidia-gpu-dra-driver": "true",
        "nvidia.com/gpu.present": "true",
    }
    assert gpu.get("nodeConfig.taints") == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
    ]
    assert gpu.inputs["nodeLocations"] == ["us-central1-a", "us-central1-b"]
    assert gpu.get("autoscaling.totalMinNodeCount") == 0
    assert gpu.get("autoscaling.totalMaxNodeCount") == 4
    assert gpu.inputs["initialNodeCount"] == 1  # ceil(1 node / 2 zones), per zone
    assert gpu.inputs["cluster"] == cluster.state["name"]

    storage = run.one(STORAGE_CLASS)
    assert storage.get("metadata.name") == "modelplane-rwx"
    assert storage.inputs["provisioner"] == "filestore.csi.storage.gke.io"
    assert storage.get("parameters.network") == network.state["name"]

    provider = run.one(K8S_PROVIDER)
    assert isinstance(provider.inputs["kubeconfig"], Secret)
    kubeconfig = json.loads(unwrap(provider.inputs["kubeconfig"]))
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://203.0.113.10"
    assert kubeconfig["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert "renderYamlToDirectory" not in provider.inputs
    assert all(provider.depends_on(pool) for pool in pools.values())  # nodes before charts
    k8s_resources_use(run, provider)

    dra = release(run, "nvidiaDraDriver")
    assert dra.get("values.nvidiaDriverRoot") == "/home/kubernetes/bin/nvidia"

    assert run.is_secret(ic.kubeconfig)
    assert run.value(ic.kubeconfig) == unwrap(provider.inputs["kubeconfig"])
    assert ic.storage_class_name == "modelplane-rwx"
    assert run.value(ic.gateway_address) == "192.0.2.10"
    assert ic.render_to is None
    assert ic.pool_shapes == [
        {
            "name": "gpu-h100",
            "nodes": 4,
            "devices": [
                {"name": "gpu", "driver": "gpu.nvidia.com", "claim": "DRA", "count": 8},
                {"name": "nic", "driver": "dra.net", "claim": "Synthetic", "count": 16},
            ],
        }
    ]
    assert_children_parented(run)
    assert_no_plaintext(run, "gke-gcloud-auth-plugin")


# --- EKS ------------------------------------------------------------------------------------


def test_eks_network_roles_cluster_and_addons() -> None:
    run = MockRun()
    ic = run.run(lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES))

    vpc = run.one("aws:ec2/vpc:Vpc")
    assert vpc.inputs["cidrBlock"] == "10.0.0.0/16"
    subnets = run.of_type("aws:ec2/subnet:Subnet")
    by_zone: dict[str, dict[str, str]] = {}
    for s in subnets:
        tier = "public" if s.inputs["mapPublicIpOnLaunch"] else "private"
        by_zone.setdefault(s.inputs["availabilityZone"], {})[tier] = s.inputs["cidrBlock"]
    # Block i is in <region>{a,b,c}[i] whatever the pools' zones; each /20 halved public|private.
    assert by_zone == {
        "us-west-2a": {"public": "10.0.0.0/21", "private": "10.0.8.0/21"},
        "us-west-2b": {"public": "10.0.16.0/21", "private": "10.0.24.0/21"},
        "us-west-2c": {"public": "10.0.32.0/21", "private": "10.0.40.0/21"},
    }
    igw = run.one("aws:ec2/internetGateway:InternetGateway")
    nat = run.one("aws:ec2/natGateway:NatGateway")
    public_subnet_ids = {s.id for s in subnets if s.inputs["mapPublicIpOnLaunch"]}
    private_ids = {
        s.inputs["availabilityZone"]: s.id for s in subnets if not s.inputs["mapPublicIpOnLaunch"]
    }
    assert nat.inputs["subnetId"] in public_subnet_ids
    tables = {t.name: t for t in run.of_type("aws:ec2/routeTable:RouteTable")}
    assert tables["eks-west-public"].get("routes.0.gatewayId") == igw.id
    assert tables["eks-west-private"].get("routes.0.natGatewayId") == nat.id
    assert len(run.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")) == 6

    roles = {
        r.name: json.loads(r.inputs["assumeRolePolicy"]) for r in run.of_type("aws:iam/role:Role")
    }
    assert roles["eks-west-cluster"]["Statement"][0]["Principal"]["Service"] == "eks.amazonaws.com"
    assert roles["eks-west-node"]["Statement"][0]["Principal"]["Service"] == "ec2.amazonaws.com"
    policies = {
        p.inputs["policyArn"].rsplit("/", 1)[1]
        for p in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    }
    assert {
        "AmazonEKSClusterPolicy",
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryReadOnly",
        "AmazonEFSCSIDriverPolicy",
    } <= policies

    cluster = run.one("eks:index:Cluster")
    assert cluster.inputs["authenticationMode"] == "API"
    assert cluster.inputs["skipDefaultNodeGroup"] is True
    assert cluster.inputs["version"] == "1.36"
    assert cluster.inputs["name"] == "eks-west"
    assert cluster.inputs["vpcId"] == vpc.id
    assert set(cluster.inputs["privateSubnetIds"]) == set(private_ids.values())
    assert cluster.inputs["serviceRole"].urn.endswith("::eks-west-cluster")

    addons = {a.inputs["addonName"]: a for a in run.of_type("aws:eks/addon:Addon")}
    assert {"vpc-cni", "kube-proxy", "coredns", "aws-efs-csi-driver"} <= set(addons)
    assert all(a.inputs["clusterName"] == "eks-west" for a in addons.values())
    [association] = addons["aws-efs-csi-driver"].inputs["podIdentityAssociations"]
    assert association["serviceAccount"] == "efs-csi-controller-sa"
    efs_role = run.one("aws:iam/role:Role", name="eks-west-efs-csi")
    assert association["roleArn"] == efs_role.state["arn"]
    # Nodes join only once the CNI is there; CoreDNS needs a node to run on.
    for group in run.of_type(MNG):
        assert group.depends_on(addons["vpc-cni"])
    system_group = run.one(MNG, name="eks-west-system")
    assert addons["coredns"].depends_on(system_group)
    provider = run.one(K8S_PROVIDER)
    assert all(provider.depends_on(group) for group in run.of_type(MNG))
    assert provider.depends_on(addons["aws-efs-csi-driver"])

    assert run.is_secret(ic.kubeconfig)
    assert "eks get-token" in " ".join(
        json.loads(run.value(ic.kubeconfig))["users"][0]["user"]["exec"]["args"][:2]
    )
    assert_children_parented(run)


def test_eks_node_groups() -> None:
    run = MockRun()
    run.run(lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES))
    private = {
        s.inputs["availabilityZone"]: s.id
        for s in run.of_type("aws:ec2/subnet:Subnet")
        if not s.inputs["mapPublicIpOnLaunch"]
    }

    system = run.one(MNG, name="eks-west-system")
    assert system.inputs["instanceTypes"] == ["m6i.xlarge"]
    assert system.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    assert system.inputs["scalingConfig"] == {"minSize": 1, "desiredSize": 1, "maxSize": 2}
    assert system.inputs["labels"] == {"modelplane.ai/pool": "system"}
    assert not system.inputs.get("taints")

    a10g = run.one(MNG, name="eks-west-gpu-a10g")
    assert a10g.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    assert a10g.inputs["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
    ]
    assert a10g.inputs["labels"] == {
        "modelplane.ai/pool": "gpu-a10g",
        "modelplane.ai/gpu": "nvidia-a10g",
    }
    assert a10g.inputs["scalingConfig"] == {"minSize": 1, "desiredSize": 2, "maxSize": 6}
    assert a10g.inputs["instanceTypes"] == ["g5.12xlarge"]
    assert a10g.inputs["diskSize"] == 300
    assert a10g.inputs["subnetIds"] == [private["us-west-2b"]]
    assert a10g.inputs["capacityType"] == "ON_DEMAND"
    assert "launchTemplate" not in a10g.inputs
    assert a10g.inputs["nodeRole"].urn.endswith("::eks-west-node")
    assert a10g.inputs["cluster"].urn == run.one("eks:index:Cluster").urn


def test_eks_capacity_block_and_efa_launch_template() -> None:
    run = MockRun()
    run.run(lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES))
    cluster = run.one("eks:index:Cluster")
    h100 = run.one(MNG, name="eks-west-gpu-h100")
    template = run.one(LAUNCH_TEMPLATE, name="eks-west-gpu-h100")

    assert h100.inputs["capacityType"] == "CAPACITY_BLOCK"
    assert h100.inputs["launchTemplate"] == {"id": template.id, "version": "1"}
    assert h100.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    # Created at 0: the block's scheduled actions scale it (test_eks_capacity_block_*).
    assert h100.inputs["scalingConfig"] == {"minSize": 0, "desiredSize": 0, "maxSize": 2}
    # Instance type and disk live in the template when there is one.
    assert "instanceTypes" not in h100.inputs and "diskSize" not in h100.inputs

    assert template.inputs["instanceType"] == "p5.48xlarge"
    assert template.get("instanceMarketOptions.marketType") == "capacity-block"
    assert (
        template.get(
            "capacityReservationSpecification.capacityReservationTarget.capacityReservationId"
        )
        == "cr-0123456789abcdef0"
    )
    assert template.get("blockDeviceMappings.0.ebs.volumeSize") == 300

    efa_sg = run.one(SECURITY_GROUP, name="eks-west-efa")
    assert efa_sg.inputs["ingress"] == [
        {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}
    ]
    assert efa_sg.inputs["egress"] == [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}]
    interfaces = template.inputs["networkInterfaces"]
    assert len(interfaces) == 32  # p5.48xlarge: one per network card
    assert [i["networkCardIndex"] for i in interfaces] == list(range(32))
    assert interfaces[0]["interfaceType"] == "efa" and interfaces[0]["deviceIndex"] == 0
    assert {i["interfaceType"] for i in interfaces[1:]} == {"efa-only"}
    for interface in interfaces:
        assert set(interface["securityGroups"]) == {
            efa_sg.id,
            cluster.state["clusterSecurityGroupId"],
        }

    # The a10g pool has neither a capacity block nor EFA: no template.
    assert [t.name for t in run.of_type(LAUNCH_TEMPLATE)] == ["eks-west-gpu-h100"]


def test_eks_efs_and_storage_class() -> None:
    run = MockRun()
    ic = run.run(lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES))
    fs = run.one("aws:efs/fileSystem:FileSystem")
    assert fs.inputs["encrypted"] is True
    nfs = run.one(SECURITY_GROUP, name="eks-west-efs")
    assert nfs.get("ingress.0.fromPort") == 2049 and nfs.get("ingress.0.toPort") == 2049
    assert nfs.get("ingress.0.cidrBlocks") == ["10.0.0.0/16"]
    private_ids = {
        s.id for s in run.of_type("aws:ec2/subnet:Subnet") if not s.inputs["mapPublicIpOnLaunch"]
    }
    targets = run.of_type("aws:efs/mountTarget:MountTarget")
    assert {t.inputs["subnetId"] for t in targets} == private_ids
    assert all(
        t.inputs["fileSystemId"] == fs.id and t.inputs["securityGroups"] == [nfs.id]
        for t in targets
    )

    storage = run.one(STORAGE_CLASS)
    assert storage.get("metadata.name") == "modelplane-rwx-efs"
    assert storage.inputs["provisioner"] == "efs.csi.aws.com"
    assert storage.get("parameters.provisioningMode") == "efs-ap"
    assert storage.get("parameters.fileSystemId") == fs.id
    assert all(storage.depends_on(t) for t in targets)
    assert ic.storage_class_name == "modelplane-rwx-efs"
    dra = release(run, "nvidiaDraDriver")
    assert dra.get("values.nvidiaDriverRoot") == "/"


def test_eks_cluster_standalone_access_entries() -> None:
    args = EKSClusterArgs(
        region="eu-west-1",
        node_pools=[
            EKSNodePool(
                name="l4",
                role="GPU",
                instance_type="g6.12xlarge",
                gpu=EKSGpu("nvidia-l4"),
                zones=("eu-west-1a",),
                fabric="EFA",
            )
        ],
        admin_principal_arns=("arn:aws:iam::123456789012:role/platform-admin",),
    )
    run = MockRun()
    component = run.run(lambda: EKSCluster("solo", args))
    cluster = run.one("eks:index:Cluster")
    entry = cluster.inputs["accessEntries"]["admin-0"]
    assert entry["principalArn"] == "arn:aws:iam::123456789012:role/platform-admin"
    assert entry["accessPolicies"]["cluster-admin"]["policyArn"].endswith(
        "AmazonEKSClusterAdminPolicy"
    )
    assert entry["accessPolicies"]["cluster-admin"]["accessScope"] == {"type": "cluster"}
    # Region comes from its own aws provider; every AWS child uses it.
    aws_provider = run.one("pulumi:providers:aws")
    assert aws_provider.inputs["region"] == "eu-west-1"
    for r in run:
        if r.type.startswith("aws:"):
            assert run.provider_of(r) == aws_provider, r.name
    # g6 has no EFA table entry: a single EFA interface.
    template = run.one(LAUNCH_TEMPLATE)
    assert len(template.inputs["networkInterfaces"]) == 1
    assert "instanceMarketOptions" not in template.inputs
    assert run.one(MNG, name="solo-l4").inputs["capacityType"] == "ON_DEMAND"
    assert run.is_secret(component.kubeconfig)


def test_eks_subnet_plan_blocks_by_position() -> None:
    pool = EKSNodePool(
        name="g",
        role="GPU",
        instance_type="p5.48xlarge",
        gpu=EKSGpu("nvidia-h100"),
        zones=("us-east-1d",),
    )
    # Explicit zones (us-east-1b is not an EKS zone in some accounts): block i in zones[i].
    plans = plan_subnets(
        "us-east-1",
        [pool],
        EKSNetworking(
            vpc_cidr="10.8.0.0/16",
            subnet_cidrs=("10.8.0.0/18", "10.8.64.0/18"),
            zones=("us-east-1a", "us-east-1d"),
        ),
    )
    assert [(p.zone, p.public_cidr, p.private_cidr) for p in plans] == [
        ("us-east-1a", "10.8.0.0/19", "10.8.32.0/19"),
        ("us-east-1d", "10.8.64.0/19", "10.8.96.0/19"),
    ]
    # Default zones are <region>a, b, ... by position: 1d has no block among two.
    with pytest.raises(ValueError, match="us-east-1d .*no subnetCidrs block"):
        plan_subnets(
            "us-east-1", [pool], EKSNetworking(subnet_cidrs=("10.0.0.0/20", "10.0.16.0/20"))
        )
    assert (
        EKSNodePool(
            name="x",
            role="GPU",
            instance_type="p5en.48xlarge",
            gpu=EKSGpu("h200"),
            zones=("a",),
            capacity_block=EKSCapacityBlock("cr-1"),
        ).efa_interfaces
        == 16
    )
    assert EKSNodePool(name="x", role="System", instance_type="p4d.24xlarge").efa_interfaces == 4


# --- Existing -------------------------------------------------------------------------------


def test_existing_render_to_has_no_serving_stack(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    cluster = existing_cluster({"renderTo": str(out), "cache": {"storageClassName": "nfs-rwx"}})
    run = MockRun()
    ic = run.run(lambda: InferenceClusterComponent("on-prem", cluster, {"h100-gke": gke_class()}))

    provider = run.one(K8S_PROVIDER)
    assert provider.inputs["renderYamlToDirectory"] == str(out)
    assert os.path.isabs(provider.inputs["renderYamlToDirectory"])
    # Explicitly empty (never the ambient $KUBECONFIG); the provider accepts "" with renderTo.
    assert provider.inputs.get("kubeconfig", "") == ""
    assert ic.provider is not None
    assert not run.find("modelplane:cluster:ServingStack")
    assert not run.of_type(RELEASE)
    assert not [r for r in run if r.type.startswith(("gcp:", "aws:", "eks:"))]
    assert ic.render_to == str(out)
    assert run.is_secret(ic.kubeconfig) and run.value(ic.kubeconfig) == ""
    assert ic.storage_class_name == "nfs-rwx"
    assert run.value(ic.gateway_address) is None
    assert ic.pool_shapes[0]["name"] == "gpu" and ic.pool_shapes[0]["nodes"] == 3


def test_existing_with_kubeconfig_installs_serving_stack() -> None:
    kubeconfig = "apiVersion: v1\nkind: Config\n# token: s3cr3t-token\n"
    cluster = existing_cluster({"secretRef": {"name": "on-prem"}})
    run = MockRun()
    ic = run.run(
        lambda: InferenceClusterComponent(
            "on-prem", cluster, {"h100-gke": gke_class()}, kubeconfig=kubeconfig
        )
    )

    provider = run.one(K8S_PROVIDER)
    assert provider.inputs["kubeconfig"] == Secret(kubeconfig)
    assert run.one("modelplane:cluster:ServingStack").parent_type == (
        "modelplane:cluster:InferenceCluster"
    )
    assert release(run, "nvidiaDraDriver").get("values.nvidiaDriverRoot") == "/"
    assert not run.of_type(STORAGE_CLASS)
    assert ic.storage_class_name is None
    assert run.is_secret(ic.kubeconfig) and run.value(ic.kubeconfig) == kubeconfig
    k8s_resources_use(run, provider)
    assert_no_plaintext(run, "s3cr3t-token")
    assert_children_parented(run)


def test_existing_without_kubeconfig_or_render_to_is_an_error() -> None:
    cluster = existing_cluster({"secretRef": {"name": "on-prem"}})
    run = MockRun()
    with pytest.raises(ValueError, match="kubeconfig"):
        run.run(lambda: InferenceClusterComponent("on-prem", cluster, {"h100-gke": gke_class()}))


def test_serving_stack_can_be_skipped() -> None:
    cluster = existing_cluster({"secretRef": {"name": "x"}}, servingStack={"install": False})
    run = MockRun()
    ic = run.run(
        lambda: InferenceClusterComponent(
            "on-prem", cluster, {"h100-gke": gke_class()}, kubeconfig="k"
        )
    )
    assert not run.find("modelplane:cluster:ServingStack")
    assert run.value(ic.gateway_address) is None


# --- ServingStack ---------------------------------------------------------------------------


def _existing_run(**serving: Any) -> MockRun:
    cluster = existing_cluster({"secretRef": {"name": "x"}}, servingStack=serving)
    run = MockRun()
    run.run(
        lambda: InferenceClusterComponent(
            "on-prem", cluster, {"h100-gke": gke_class()}, kubeconfig="k"
        )
    )
    return run


def test_serving_stack_prometheus_is_where_reconcile_asks_and_scrapes_the_engines() -> None:
    from modelplane.observe.prometheus import (
        ENGINE_JOB,
        PROMETHEUS_NAMESPACE,
        PROMETHEUS_SERVICE,
        engine_scrape_job,
    )

    run = _existing_run()
    [release] = [r for r in run.of_type(RELEASE) if r.inputs["name"] == "mp-kube-prometheus-stack"]
    assert release.inputs["namespace"] == PROMETHEUS_NAMESPACE
    # kube-prometheus-stack names its Prometheus Service `<fullname>-prometheus`
    assert f"{release.get('values.fullnameOverride')}-prometheus" == PROMETHEUS_SERVICE
    jobs = release.get("values.prometheus.prometheusSpec.additionalScrapeConfigs")
    assert [j["job_name"] for j in jobs] == ["envoy-gateway-proxy", ENGINE_JOB]
    assert jobs[1] == engine_scrape_job()


def test_serving_stack_releases_pins_and_values() -> None:
    run = _existing_run()
    releases = {r.inputs["name"]: r for r in run.of_type(RELEASE)}
    assert set(releases) == {
        "mp-cert-manager",
        "mp-gateway-helm",
        "mp-ai-gateway-crds-helm",
        "mp-ai-gateway-helm",
        "mp-kube-prometheus-stack",
        "mp-lws",
        "mp-node-feature-discovery",
        "mp-dra-driver-nvidia-gpu",
        "mp-keda",
    }
    assert all(name.startswith("mp-") for name in releases)
    expected = {
        "mp-cert-manager": ("cert-manager", "v1.21.1", "https://charts.jetstack.io"),
        "mp-gateway-helm": ("oci://docker.io/envoyproxy/gateway-helm", "v1.8.3", None),
        "mp-kube-prometheus-stack": (
            "kube-prometheus-stack",
            "88.5.3",
            "https://prometheus-community.github.io/helm-charts",
        ),
        "mp-lws": ("oci://registry.k8s.io/lws/charts/lws", "v0.10.0", None),
        "mp-node-feature-discovery": (
            "oci://registry.k8s.io/nfd/charts/node-feature-discovery",
            "0.19.0",
            None,
        ),
        "mp-dra-driver-nvidia-gpu": (
            "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu",
            "0.4.1",
            None,
        ),
        "mp-keda": ("keda", "2.20.2", "https://kedacore.github.io/charts"),
    }
    for name, (chart, version, repo) in expected.items():
        r = releases[name]
        assert (r.inputs["chart"], r.inputs["version"], r.get("repositoryOpts.repo")) == (
            chart,
            version,
            repo,
        ), name

    assert releases["mp-cert-manager"].get("values.crds.enabled") is True
    assert (
        releases["mp-gateway-helm"].get("values.config.envoyGateway.extensionApis.enableBackend")
        is True
    )
    assert releases["mp-kube-prometheus-stack"].get("values.grafana.enabled") is False
    assert releases["mp-kube-prometheus-stack"].get("values.alertmanager.enabled") is False
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        releases["mp-node-feature-discovery"].get("values.worker.tolerations")
    )
    dra = releases["mp-dra-driver-nvidia-gpu"]
    assert dra.get("values.gpuResourcesEnabledOverride") is True
    assert dra.get("values.resources.computeDomains.enabled") is False

    gateway_class = run.one("kubernetes:gateway.networking.k8s.io/v1:GatewayClass")
    assert gateway_class.get("spec.controllerName") == (
        "gateway.envoyproxy.io/gatewayclass-controller"
    )
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert gateway.get("metadata.name") == "inference-gateway"
    assert gateway.get("metadata.namespace") == "modelplane-system"
    assert gateway.get("spec.gatewayClassName") == gateway_class.get("metadata.name")
    assert gateway.get("spec.listeners") == [
        {
            "name": "http",
            "protocol": "HTTP",
            "port": 80,
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }
    ]
    namespace = next(
        n
        for n in run.of_type("kubernetes:core/v1:NamespacePatch")
        if n.get("metadata.name") == "modelplane-system"
    )
    assert gateway.depends_on(namespace)


def test_serving_stack_crds_before_the_objects_that_use_them() -> None:
    run = _existing_run()
    groups = {
        g.name.rsplit("-serving-", 1)[1]: g for g in run.of_type("kubernetes:yaml/v2:ConfigGroup")
    }
    gateway_api = groups["gateway-api-crds"]
    gaie = groups["inference-extension-crds"]
    for group, folder in ((gateway_api, "gateway-api-v1.5.1-standard"), (gaie, "gaie-v1.0.1")):
        files = group.inputs["files"]
        assert files and all(os.path.isabs(f) and os.path.exists(f) for f in files)
        assert {Path(f).parent for f in files} == {CRDS_DIR / folder}
    assert any("httproutes" in f for f in gateway_api.inputs["files"])
    assert any("inferencepools" in f for f in gaie.inputs["files"])

    envoy = release(run, "envoyGateway")
    ai_gateway = release(run, "envoyAiGateway")
    gateway_class = run.one("kubernetes:gateway.networking.k8s.io/v1:GatewayClass")
    gateway = run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert envoy.depends_on(gateway_api) and envoy.depends_on(gaie)
    assert ai_gateway.depends_on(envoy) and ai_gateway.depends_on(
        release(run, "envoyAiGatewayCrds")
    )
    assert gateway_class.depends_on(gateway_api) and gateway_class.depends_on(envoy)
    assert gateway.depends_on(gateway_class)
    dra = release(run, "nvidiaDraDriver")
    quota = run.one("kubernetes:core/v1:ResourceQuota")
    assert dra.depends_on(quota) and dra.depends_on(release(run, "nodeFeatureDiscovery"))


def test_serving_stack_version_overrides() -> None:
    run = _existing_run(versions={"keda": "2.19.0", "certManager": "v1.19.1"})
    assert release(run, "keda").inputs["version"] == "2.19.0"
    assert release(run, "certManager").inputs["version"] == "v1.19.1"
    assert release(run, "envoyGateway").inputs["version"] == "v1.8.3"  # untouched


def test_serving_stack_rejects_unknown_versions() -> None:
    with pytest.raises(ValueError, match="unknown component"):
        _existing_run(versions={"kedaa": "2.19.0"})
    with pytest.raises(ValueError, match="no vendored CRDs"):
        _existing_run(versions={"gatewayApi": "v9.9.9"})


def test_serving_stack_oci_mirror_rewrites_every_chart() -> None:
    run = _existing_run(chartRepository="oci://mirror.internal/charts/")
    for r in run.of_type(RELEASE):
        chart = r.inputs["chart"]
        assert chart.startswith("oci://mirror.internal/charts/"), chart
        assert chart.rsplit("/", 1)[1] == r.inputs["name"].removeprefix("mp-")
        assert "repositoryOpts" not in r.inputs


def test_serving_stack_https_mirror_rewrites_every_chart() -> None:
    run = _existing_run(chartRepository="https://charts.mirror.internal")
    for r in run.of_type(RELEASE):
        assert r.get("repositoryOpts.repo") == "https://charts.mirror.internal"
        assert r.inputs["chart"] == r.inputs["name"].removeprefix("mp-")


# --- errors and providers -------------------------------------------------------------------


def test_pool_without_recipe_for_the_cloud_is_an_error() -> None:
    eks_only = eks_class("h100-gke", "p5.48xlarge")  # named as the pool expects, but EKS-only
    run = MockRun()
    with pytest.raises(ValueError) as err:
        run.run(
            lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": eks_only})
        )
    message = str(err.value)
    assert "gke-central" in message and "gpu-h100" in message and "h100-gke" in message
    assert "GKE" in message
    assert not run.resources  # validated before anything was registered

    bare = gpu_class("h100-gke", None)
    with pytest.raises(ValueError, match="no GKE provisioning recipe"):
        MockRun().run(
            lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": bare})
        )
    with pytest.raises(ValueError, match="does not exist"):
        MockRun().run(lambda: InferenceClusterComponent("gke-central", gke_cluster(), {}))


def test_cluster_provider_needs_exactly_one_target() -> None:
    with pytest.raises(ValueError, match="ambient kubeconfig"):
        MockRun().run(lambda: cluster_provider("p", kubeconfig=None, render_to=None, opts=None))
    with pytest.raises(ValueError, match="exactly one"):
        MockRun().run(lambda: cluster_provider("p", kubeconfig="k", render_to="/x", opts=None))


def test_validate_knows_exactly_the_pinned_serving_stack_components() -> None:
    from components.charts import VERSION_KEYS
    from modelplane.api.inference_cluster import SERVING_STACK_COMPONENTS

    assert VERSION_KEYS == SERVING_STACK_COMPONENTS


def test_eks_cluster_autoscaler_with_pod_identity() -> None:
    """Node groups may grow to maxNodeCount (the scheduler counts it): cluster-autoscaler
    runs on the system pool with its AWS permissions through EKS Pod Identity."""
    run = MockRun()
    run.run(lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES))

    role = run.one("aws:iam/role:Role", name="eks-west-cluster-autoscaler")
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
    assert trust["Principal"]["Service"] == "pods.eks.amazonaws.com"
    assert set(trust["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    policy = run.one("aws:iam/rolePolicy:RolePolicy", name="eks-west-cluster-autoscaler")
    assert policy.inputs["role"] == role.id
    statements = json.loads(policy.inputs["policy"])["Statement"]
    scale = next(s for s in statements if "autoscaling:SetDesiredCapacity" in s["Action"])
    assert scale["Condition"]["StringEquals"] == {
        "aws:ResourceTag/k8s.io/cluster-autoscaler/eks-west": "owned"
    }
    assert any("eks:DescribeNodegroup" in s["Action"] for s in statements)

    association = run.one("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert association.inputs["clusterName"] == "eks-west"
    assert association.inputs["namespace"] == "kube-system"
    assert association.inputs["serviceAccount"] == "cluster-autoscaler"
    assert association.inputs["roleArn"] == role.state["arn"]
    assert association.depends_on(run.one("eks:index:Cluster"))

    autoscaler = run.one(RELEASE, name="eks-west-mp-cluster-autoscaler")
    assert autoscaler.inputs["chart"] == "cluster-autoscaler"
    assert autoscaler.inputs["version"] == CHARTS["clusterAutoscaler"].version
    assert autoscaler.get("repositoryOpts.repo") == "https://kubernetes.github.io/autoscaler"
    assert autoscaler.inputs["namespace"] == "kube-system"
    assert autoscaler.get("values.cloudProvider") == "aws"
    assert autoscaler.get("values.awsRegion") == "us-west-2"
    assert autoscaler.get("values.autoDiscovery.clusterName") == "eks-west"
    assert autoscaler.get("values.rbac.serviceAccount.name") == "cluster-autoscaler"
    assert autoscaler.get("values.nodeSelector") == {"modelplane.ai/pool": "system"}
    assert autoscaler.depends_on(association)
    assert autoscaler.provider and "eks-west-k8s" in autoscaler.provider


def test_gke_clusters_get_no_cluster_autoscaler_release() -> None:
    run = MockRun()
    run.run(
        lambda: InferenceClusterComponent("gke-central", gke_cluster(), {"h100-gke": gke_class()})
    )
    assert not [r for r in run.of_type(RELEASE) if "cluster-autoscaler" in r.name]
    assert not run.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")


def test_eks_efa_pools_get_the_efa_device_plugin() -> None:
    run = MockRun()
    run.run(lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES))
    plugin = run.one(RELEASE, name="eks-west-mp-aws-efa-k8s-device-plugin")
    assert plugin.inputs["chart"] == "aws-efa-k8s-device-plugin"
    assert plugin.get("repositoryOpts.repo") == "https://aws.github.io/eks-charts"
    assert plugin.inputs["namespace"] == "kube-system"
    assert plugin.get("values.tolerations") == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]

    plain = inference_cluster(
        "eks-plain",
        {"source": "EKS", "eks": {"region": "us-west-2"}},
        [{"name": "gpu-a10g", "className": "a10g", "nodeCount": 1, "zones": ["us-west-2b"]}],
    )
    run = MockRun()
    run.run(lambda: InferenceClusterComponent("eks-plain", plain, EKS_CLASSES))
    assert not [r for r in run.of_type(RELEASE) if "efa" in r.name]
