"""EKS clusters: network, IAM, node groups, Capacity Blocks, EFA, EFS, autoscaler."""

from __future__ import annotations

import json
from typing import Any

import pytest

from modelplane.components.charts import CHARTS
from modelplane.components.cloud.eks import (
    EKSCapacityBlock,
    EKSCluster,
    EKSClusterArgs,
    EKSGpu,
    EKSNetworking,
    EKSNodePool,
    plan_subnets,
)
from modelplane.components.inference_cluster import InferenceClusterComponent
from tests.components.cluster_helpers import (
    EKS_CLASSES,
    K8S_PROVIDER,
    LAUNCH_TEMPLATE,
    MNG,
    RELEASE,
    SECURITY_GROUP,
    STORAGE_CLASS,
    assert_children_parented,
    eks_cluster,
    eks_run,
    inference_cluster,
    release,
)
from tests.pulumi_mocks import MockRun, Secret


def gpu_pool(
    name: str, instance_type: str, accelerator: str, zone: str, **more: Any
) -> EKSNodePool:
    """A GPU node pool of ``instance_type`` in ``zone``."""
    return EKSNodePool(
        name=name,
        role="GPU",
        instance_type=instance_type,
        gpu=EKSGpu(accelerator),
        zones=(zone,),
        **more,
    )


def test_eks_network_roles_cluster_and_addons() -> None:
    run = MockRun()
    ic = run.run(lambda: InferenceClusterComponent("eks-west", eks_cluster(), EKS_CLASSES))

    vpc = run.one("aws:ec2/vpc:Vpc")
    # The fleet address plan's first block, 10.0.0.0/16: the VPC is its low half.
    assert vpc.inputs["cidrBlock"] == "10.0.0.0/17"
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
    # Services outside the VPC, from the block's high half (EKS serviceIpv4Cidr).
    assert cluster.inputs["kubernetesServiceIpAddressRange"] == "10.0.144.0/20"

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
    run = eks_run("eks-west", eks_cluster())
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
    run = eks_run("eks-west", eks_cluster())
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
    assert nfs.get("ingress.0.cidrBlocks") == ["10.0.0.0/17"]  # the VPC
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
        node_pools=[gpu_pool("l4", "g6.12xlarge", "nvidia-l4", "eu-west-1a", fabric="EFA")],
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
    pool = gpu_pool("g", "p5.48xlarge", "nvidia-h100", "us-east-1d")
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
        gpu_pool(
            "x", "p5en.48xlarge", "h200", "a", capacity_block=EKSCapacityBlock("cr-1")
        ).efa_interfaces
        == 16
    )
    assert EKSNodePool(name="x", role="System", instance_type="p4d.24xlarge").efa_interfaces == 4


# --- Existing -------------------------------------------------------------------------------


def test_eks_cluster_autoscaler_with_pod_identity() -> None:
    """Node groups may grow to maxNodeCount (the scheduler counts it): cluster-autoscaler
    runs on the system pool with its AWS permissions through EKS Pod Identity."""
    run = eks_run("eks-west", eks_cluster())

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


def test_eks_efa_pools_get_the_efa_device_plugin() -> None:
    run = eks_run("eks-west", eks_cluster())
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
    run = eks_run("eks-plain", plain)
    assert not [r for r in run.of_type(RELEASE) if "efa" in r.name]


@pytest.mark.parametrize(
    ("config", "secrets", "expected"),
    [
        ({}, [], {"region": "eu-west-1"}),  # no aws:* config: the region alone
        (  # profile, roles, tags, account guard: carried over in the provider's spelling
            {
                "aws:profile": "prod",
                "aws:region": "us-east-1",  # the spec's region wins
                "aws:assumeRoles": json.dumps(
                    [{"roleArn": "arn:aws:iam::123456789012:role/deployer", "sessionName": "mp"}]
                ),
                "aws:defaultTags": json.dumps({"tags": {"team": "ml-platform", "costCenter": "7"}}),
                "aws:allowedAccountIds": json.dumps(["123456789012"]),
                "aws:skipMetadataApiCheck": "false",
            },
            [],
            {
                "region": "eu-west-1",
                "profile": "prod",
                "assumeRoles": [
                    {"roleArn": "arn:aws:iam::123456789012:role/deployer", "sessionName": "mp"}
                ],
                "defaultTags": {"tags": {"team": "ml-platform", "costCenter": "7"}},
                "allowedAccountIds": ["123456789012"],
                "skipMetadataApiCheck": False,
            },
        ),
        (  # the one-role form of older stacks, and a secret key that stays secret
            {
                "aws:assumeRole": json.dumps({"roleArn": "arn:aws:iam::1:role/r"}),
                "aws:secretKey": "s3cr3t-canary",
                "aws:accessKey": "AKIACANARY",
            },
            ["aws:secretKey"],
            {
                "region": "eu-west-1",
                "assumeRoles": [{"roleArn": "arn:aws:iam::1:role/r"}],
                "secretKey": "s3cr3t-canary",
                "accessKey": "AKIACANARY",
            },
        ),
    ],
)
def test_eks_own_provider_honours_the_stacks_aws_config(
    config: dict[str, str], secrets: list[str], expected: dict[str, Any]
) -> None:
    from pulumi.runtime import set_all_config

    args = EKSClusterArgs(
        region="eu-west-1",
        node_pools=[gpu_pool("l4", "g6.12xlarge", "nvidia-l4", "eu-west-1a")],
    )
    set_all_config(config, secrets)
    try:
        run = MockRun()
        run.run(lambda: EKSCluster("cfg", args))
    finally:
        set_all_config({}, [])
    provider = run.one("pulumi:providers:aws")

    def value(raw: Any) -> Any:  # a provider's inputs reach it as JSON text
        try:
            return json.loads(raw)
        except (TypeError, ValueError):
            return raw

    got = {k: value(provider.get(k)) for k in provider.inputs}
    sdk_defaults = {"version", "skipCredentialsValidation", "skipRegionValidation"}
    assert {k: v for k, v in got.items() if k not in sdk_defaults or k in expected} == expected
    for key in ("secretKey", "accessKey"):  # credentials are secrets in state, always
        if key in expected:
            assert isinstance(provider.inputs[key], Secret), key
    for r in run:
        if r.type.startswith("aws:"):
            assert run.provider_of(r) == provider, r.name
