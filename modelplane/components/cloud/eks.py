"""EKSCluster: an EKS cluster (pulumi-eks) with a system node group and DRA-ready GPU node groups.

Arguments follow the seeds' EKSCluster reference (region, kubernetesVersion, networking
{vpcCidr, subnetCidrs}, nodePools with role System|GPU, instanceType, gpu.acceleratorType,
diskSizeGb, node counts, zones, capacityBlock, fabric). Usable on its own; InferenceCluster
composes it.

Network layout. ``subnetCidrs`` holds one block per Availability Zone (the seeds' "three /20
subnets, one per AZ"). A block's zone is fixed by its position: ``networking.zones[i]`` when
given, else ``<region>a``, ``<region>b``, ... (at least two blocks: the EKS control plane needs
two AZs). So a zone keeps its block forever: adding, removing or reordering pools never
re-maps a subnet (``cidr_block`` and ``availability_zone`` force a replacement, which would
fail on the CIDR conflict and replace node groups and EFS mount targets); new zones take
appended blocks. A pool zone without a block is an error. Each block is halved: the lower
half is the public subnet (NAT gateway, internet-facing load balancers), the upper half the
private subnet (nodes and pods). One NAT gateway (in the first block's public subnet) serves
every private subnet, or (``natGateways: PerZone``) one NAT gateway per zone. The control
plane uses the blocks of ``controlPlaneZones`` (default the first three) and keeps them: AWS
refuses control-plane subnets outside the zones a cluster was created in, so appended blocks
serve node groups only (``keep_control_plane_subnets``); the system node group stays in the
control-plane zones.

Add-ons are explicit ``aws.eks.Addon`` resources (pulumi-eks's own are switched off, and
self-managed bootstrap add-ons too): vpc-cni and kube-proxy before any node group, coredns and
the EFS CSI driver (with its IAM role bound through EKS Pod Identity) after the system group.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from modelplane.components.cloud import eks_node_groups as node_groups
from modelplane.components.cloud.eks_args import (
    EFA_INTERFACES,
    GPU_AMI_TYPE,
    GPU_LABEL,
    GPU_TAINT,
    POOL_LABEL,
    ROOT_DEVICE,
    SYSTEM_AMI_TYPE,
    SYSTEM_INSTANCE_TYPE,
    EKSCapacityBlock,
    EKSClusterArgs,
    EKSGpu,
    EKSNetworking,
    EKSNodePool,
    SubnetPlan,
    control_plane_plans,
    plan_subnets,
    system_pool,
)
from modelplane.components.cloud.eks_iam import (
    AUTOSCALER_NAMESPACE,
    AUTOSCALER_SERVICE_ACCOUNT,
    CLUSTER_ADMIN_POLICY,
    MANAGED_POLICY,
    UPGRADE_POLICY,
    assume_role_policy,
    autoscaler_policy,
)
from modelplane.components.cloud.eks_node_groups import (
    CAPACITY_BLOCK_DRAIN,
    DESIRED_SIZE,
    MIN_SIZE,
    NODE_GROUP_TYPE,
    asg_name,
    block_actions,
    drain_time,
    ignore_desired_size,
    ignore_scheduled_sizes,
    keep_control_plane_subnets,
    schedule_time,
    update_config,
)
from modelplane.components.cloud.pools import with_system_pool
from modelplane.components.cloud.provider_config import aws_provider_settings

__all__ = [
    "EKSCluster",
    "POOL_LABEL",
    "GPU_LABEL",
    "GPU_TAINT",
    "SYSTEM_INSTANCE_TYPE",
    "GPU_AMI_TYPE",
    "SYSTEM_AMI_TYPE",
    "ROOT_DEVICE",
    "EFA_INTERFACES",
    "EKSGpu",
    "EKSCapacityBlock",
    "EKSNodePool",
    "EKSNetworking",
    "EKSClusterArgs",
    "SubnetPlan",
    "system_pool",
    "plan_subnets",
    "control_plane_plans",
    "keep_control_plane_subnets",
    "AUTOSCALER_NAMESPACE",
    "AUTOSCALER_SERVICE_ACCOUNT",
    "CLUSTER_ADMIN_POLICY",
    "UPGRADE_POLICY",
    "autoscaler_policy",
    "CAPACITY_BLOCK_DRAIN",
    "NODE_GROUP_TYPE",
    "DESIRED_SIZE",
    "MIN_SIZE",
    "ignore_desired_size",
    "ignore_scheduled_sizes",
    "schedule_time",
    "drain_time",
    "update_config",
]


EFS_CSI_CONFIGURATION: dict[str, object] = {"controller": {"deleteAccessPointRootDir": True}}
"""The EFS CSI add-on's configuration: deleting a PVC deletes its access point's directory."""

#: The VPC CNI's network policy agent on: the NetworkPolicies modelplane renders are enforced
#: (security M4). A string, as the add-on's configuration schema wants it. Changing it updates
#: the add-on in place (no node is replaced).
VPC_CNI_CONFIGURATION: dict[str, object] = {"enableNetworkPolicy": "true"}


def _aws_provider_in(opts: pulumi.ResourceOptions | None) -> pulumi.ProviderResource | None:
    if opts is None:
        return None
    candidates: list[object] = [opts.provider]
    providers = opts.providers
    if isinstance(providers, dict):
        candidates.extend(providers.values())
    elif providers:
        candidates.extend(providers)
    for p in candidates:
        if isinstance(p, pulumi.ProviderResource) and p.package == "aws":
            return p
    return None


class EKSCluster(pulumi.ComponentResource):
    """VPC, IAM roles, EKS cluster, node groups, add-ons and an EFS file system.

    Outputs: ``kubeconfig`` (secret), ``cluster_name``, ``file_system_id``, ``vpc_id``.
    AWS resources use the ``aws`` provider from ``opts`` if one is given, else a provider for
    ``args.region`` with the stack's ``aws:*`` config (profile, assumeRoles, defaultTags...;
    ``modelplane.components.cloud.provider_config``) and credentials from the environment otherwise.
    """

    kubeconfig: pulumi.Output[str]
    cluster_name: pulumi.Output[str]
    file_system_id: pulumi.Output[str]
    vpc_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        args: EKSClusterArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        pools = with_system_pool("EKSCluster", name, args.node_pools, system_pool)
        plans = plan_subnets(args.region, pools, args.networking)
        control_plane = control_plane_plans(plans, args.networking)
        super().__init__("modelplane:cloud:EKSCluster", name, None, opts)
        cluster_name = args.cluster_name or name
        self._protect_stateful = args.protect

        # Its own provider for the spec's region carries the stack's `aws:*` config (profile,
        # assumed roles, default tags, ...), which a provider made here would otherwise lose.
        provider = _aws_provider_in(opts) or aws.Provider(
            f"{name}-aws",
            region=args.region,
            **aws_provider_settings(),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self._provider = provider
        tags = {"modelplane.ai/cluster": cluster_name}

        # --- network -------------------------------------------------------------------
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.networking.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": f"{cluster_name}-vpc"},
            opts=self._opts(protect=True),
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": cluster_name}, opts=self._opts()
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            tags={**tags, "Name": f"{cluster_name}-public"},
            opts=self._opts(),
        )
        self.public_subnets: dict[str, aws.ec2.Subnet] = {}
        associations: list[pulumi.Resource] = []
        self.private_subnets: dict[str, aws.ec2.Subnet] = {}
        for plan in plans:
            public, association = self._subnet(
                name, cluster_name, "public", plan.zone, plan.public_cidr, vpc, tags, public_rt
            )
            associations.append(association)
            self.public_subnets[plan.zone] = public
        # One NAT gateway in the first block's public subnet, or (natGateways: PerZone) one per
        # zone, each zone's private subnet routed through its own: no single point of failure
        # for node egress, no cross-zone traffic. The first zone keeps the single-NAT names, so
        # switching to PerZone adds gateways and replaces no route.
        per_zone = args.networking.nat_gateways == "PerZone"
        nats: dict[str, aws.ec2.NatGateway] = {}
        private_tables: dict[str, aws.ec2.RouteTable] = {}
        for i, plan in enumerate(plans if per_zone else plans[:1]):
            suffix = "" if i == 0 else f"-{plan.zone}"
            nat_ip = aws.ec2.Eip(
                f"{name}-nat{suffix}",
                domain="vpc",
                tags={**tags, "Name": f"{cluster_name}-nat{suffix}"},
                opts=self._opts(depends_on=[igw]),
            )
            nats[plan.zone] = aws.ec2.NatGateway(
                f"{name}-nat{suffix}",
                allocation_id=nat_ip.id,
                subnet_id=self.public_subnets[plan.zone].id,
                tags={**tags, "Name": f"{cluster_name}-nat{suffix}"},
                opts=self._opts(depends_on=[igw]),
            )
            private_tables[plan.zone] = aws.ec2.RouteTable(
                f"{name}-private{suffix}",
                vpc_id=vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nats[plan.zone].id}],
                tags={**tags, "Name": f"{cluster_name}-private{suffix}"},
                opts=self._opts(),
            )
        self.private_route_tables = list(private_tables.values())
        first_table = private_tables[plans[0].zone]
        for plan in plans:
            table = private_tables.get(plan.zone, first_table)
            private, association = self._subnet(
                name, cluster_name, "private", plan.zone, plan.private_cidr, vpc, tags, table
            )
            associations.append(association)
            self.private_subnets[plan.zone] = private

        # --- IAM -----------------------------------------------------------------------
        cluster_role = aws.iam.Role(
            f"{name}-cluster",
            assume_role_policy=assume_role_policy("eks.amazonaws.com"),
            tags=tags,
            opts=self._opts(),
        )
        aws.iam.RolePolicyAttachment(
            f"{name}-cluster-policy",
            role=cluster_role.name,
            policy_arn=MANAGED_POLICY + "AmazonEKSClusterPolicy",
            opts=self._opts(),
        )
        node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
            tags=tags,
            opts=self._opts(),
        )
        node_policies = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=node_role.name,
                policy_arn=MANAGED_POLICY + policy,
                opts=self._opts(),
            )
            for policy in (
                "AmazonEKSWorkerNodePolicy",
                "AmazonEKS_CNI_Policy",
                "AmazonEC2ContainerRegistryReadOnly",
                "AmazonSSMManagedInstanceCore",
            )
        ]
        efs_csi_role = self._pod_identity_role(f"{name}-efs-csi", tags)
        efs_csi_policy = aws.iam.RolePolicyAttachment(
            f"{name}-efs-csi-policy",
            role=efs_csi_role.name,
            policy_arn=MANAGED_POLICY + "service-role/AmazonEFSCSIDriverPolicy",
            opts=self._opts(),
        )

        # --- cluster -------------------------------------------------------------------
        cluster = eks.Cluster(
            f"{name}-eks",
            name=cluster_name,
            version=args.kubernetes_version,
            vpc_id=vpc.id,
            # Only the control-plane blocks: a zone added later is for node groups.
            public_subnet_ids=[self.public_subnets[p.zone].id for p in control_plane],
            private_subnet_ids=[self.private_subnets[p.zone].id for p in control_plane],
            endpoint_private_access=True,
            endpoint_public_access=True,
            public_access_cidrs=list(args.public_access_cidrs),
            # The fleet address plan's service range (set only at creation; None: EKS picks).
            kubernetes_service_ip_address_range=args.networking.service_cidr,
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type=UPGRADE_POLICY),
            node_associate_public_ip_address=False,
            service_role=cluster_role,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries={
                f"admin-{i}": eks.AccessEntryArgs(
                    principal_arn=arn,
                    access_policies={
                        "cluster-admin": eks.AccessPolicyAssociationArgs(
                            policy_arn=CLUSTER_ADMIN_POLICY,
                            access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(
                                type="cluster"
                            ),
                        )
                    },
                )
                for i, arn in enumerate(args.admin_principal_arns)
            },
            skip_default_node_group=True,
            skip_default_security_groups=True,
            create_oidc_provider=False,
            bootstrap_self_managed_addons=False,
            use_default_vpc_cni=True,
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(enabled=False),
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                providers={"aws": provider},
                depends_on=[*nats.values(), *associations],
                protect=args.protect,
                transforms=[keep_control_plane_subnets],
            ),
        )
        self.cluster = cluster
        self.control_plane_zones = [p.zone for p in control_plane]

        def addon(
            addon_name: str,
            depends_on: Sequence[pulumi.Resource],
            pod_identity_associations: Sequence[aws.eks.AddonPodIdentityAssociationArgs]
            | None = None,
            configuration: dict[str, object] | None = None,
        ) -> aws.eks.Addon:
            # Pinned: the add-on's default version for the cluster's Kubernetes version (not
            # whatever was current at creation), so a kubernetesVersion bump upgrades it.
            version = aws.eks.get_addon_version_output(
                addon_name=addon_name,
                kubernetes_version=args.kubernetes_version,
                most_recent=False,
                opts=pulumi.InvokeOutputOptions(provider=provider, parent=self),
            ).version
            return aws.eks.Addon(
                f"{name}-{addon_name}",
                cluster_name=cluster_name,
                addon_name=addon_name,
                addon_version=version,
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                pod_identity_associations=pod_identity_associations,
                configuration_values=(
                    json.dumps(configuration, sort_keys=True) if configuration else None
                ),
                tags=tags,
                opts=self._opts(depends_on=[cluster, *depends_on]),
            )

        self.addons: dict[str, aws.eks.Addon] = {}
        for early in ("vpc-cni", "kube-proxy", "eks-pod-identity-agent"):
            self.addons[early] = addon(
                early, [], configuration=VPC_CNI_CONFIGURATION if early == "vpc-cni" else None
            )

        # --- node groups ---------------------------------------------------------------
        efa_sg = None
        if any(p.fabric == "EFA" for p in pools):
            # EFA traffic must be allowed to and from the group itself, all protocols.
            efa_sg = aws.ec2.SecurityGroup(
                f"{name}-efa",
                vpc_id=vpc.id,
                description="EFA: all traffic within the group",
                ingress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}],
                egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}],
                tags={**tags, "Name": f"{cluster_name}-efa"},
                opts=self._opts(),
            )
        self.efa_security_group = efa_sg
        self._kubernetes_version = args.kubernetes_version
        self._ami_release_version = args.ami_release_version
        self.launch_templates: dict[str, aws.ec2.LaunchTemplate] = {}
        self.capacity_block_schedules: dict[str, list[aws.autoscaling.Schedule]] = {}
        self.node_groups: dict[str, eks.ManagedNodeGroup] = {}
        before_nodes = [self.addons["vpc-cni"], self.addons["kube-proxy"], *node_policies]
        for pool in pools:
            self.node_groups[pool.name] = self._node_group(
                name, pool, cluster, node_role, efa_sg, provider, before_nodes, tags
            )
        system = next(self.node_groups[p.name] for p in pools if p.role == "System")

        self.addons["coredns"] = addon("coredns", [system])
        self.addons["aws-efs-csi-driver"] = addon(
            "aws-efs-csi-driver",
            [system, self.addons["eks-pod-identity-agent"], efs_csi_policy],
            pod_identity_associations=[
                aws.eks.AddonPodIdentityAssociationArgs(
                    role_arn=efs_csi_role.arn, service_account="efs-csi-controller-sa"
                )
            ],
            # A deleted cache's access point takes its data along (the driver keeps it by
            # default, billed): kubernetes-sigs/aws-efs-csi-driver#1171, add-on >= v1.7.6.
            configuration=EFS_CSI_CONFIGURATION,
        )

        # --- cluster-autoscaler identity (EKS Pod Identity) --------------------------------
        # Installed (by InferenceCluster, through the cluster's Kubernetes provider) when some
        # node group may grow beyond its initial size; node groups ignore later changes to
        # their desired size, so the autoscaler owns it.
        self.autoscaler_identity: aws.eks.PodIdentityAssociation | None = None
        self.region = args.region
        if any(p.max_node_count > p.desired_size for p in pools):
            autoscaler_role = self._pod_identity_role(f"{name}-cluster-autoscaler", tags)
            autoscaler_policy_ = aws.iam.RolePolicy(
                f"{name}-cluster-autoscaler",
                role=autoscaler_role.id,
                policy=autoscaler_policy(cluster_name),
                opts=self._opts(),
            )
            self.autoscaler_identity = aws.eks.PodIdentityAssociation(
                f"{name}-cluster-autoscaler",
                cluster_name=cluster_name,
                namespace=AUTOSCALER_NAMESPACE,
                service_account=AUTOSCALER_SERVICE_ACCOUNT,
                role_arn=autoscaler_role.arn,
                tags=tags,
                opts=self._opts(
                    depends_on=[
                        cluster,
                        self.addons["eks-pod-identity-agent"],
                        autoscaler_policy_,
                    ]
                ),
            )

        # --- EFS (ReadWriteMany storage for model caches) ------------------------------
        nfs_sg = aws.ec2.SecurityGroup(
            f"{name}-efs",
            vpc_id=vpc.id,
            description="NFS from the VPC to the EFS mount targets",
            ingress=[
                {
                    "protocol": "tcp",
                    "from_port": 2049,
                    "to_port": 2049,
                    "cidr_blocks": [args.networking.vpc_cidr],
                }
            ],
            egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}],
            tags={**tags, "Name": f"{cluster_name}-efs"},
            opts=self._opts(),
        )
        file_system = aws.efs.FileSystem(
            f"{name}-efs",
            encrypted=True,
            performance_mode="generalPurpose",
            throughput_mode="elastic",
            tags={**tags, "Name": f"{cluster_name}-model-cache"},
            opts=self._opts(protect=True),
        )
        self.mount_targets = {
            zone: aws.efs.MountTarget(
                f"{name}-efs-{zone}",
                file_system_id=file_system.id,
                subnet_id=subnet.id,
                security_groups=[nfs_sg.id],
                opts=self._opts(),
            )
            for zone, subnet in self.private_subnets.items()
        }

        self.cluster_name = pulumi.Output.from_input(cluster_name)
        self.file_system_id = file_system.id
        self.vpc_id = vpc.id
        self.kubeconfig = pulumi.Output.secret(cluster.kubeconfig_json)
        self.register_outputs(
            {
                "kubeconfig": self.kubeconfig,
                "cluster_name": self.cluster_name,
                "file_system_id": self.file_system_id,
                "vpc_id": self.vpc_id,
            }
        )

    def _pod_identity_role(self, name: str, tags: dict[str, str]) -> aws.iam.Role:
        """An IAM role EKS Pod Identity hands to a service account's pods."""
        return aws.iam.Role(
            name,
            assume_role_policy=assume_role_policy(
                "pods.eks.amazonaws.com", "sts:AssumeRole", "sts:TagSession"
            ),
            tags=tags,
            opts=self._opts(),
        )

    def _subnet(
        self,
        name: str,
        cluster_name: str,
        kind: Literal["public", "private"],
        zone: str,
        cidr: str,
        vpc: aws.ec2.Vpc,
        tags: dict[str, str],
        table: aws.ec2.RouteTable,
    ) -> tuple[aws.ec2.Subnet, aws.ec2.RouteTableAssociation]:
        """A block's public or private subnet in ``zone``, tagged for the cluster and for
        its load balancers (public: internet-facing, with public IPs; private: internal),
        and its route table association."""
        subnet = aws.ec2.Subnet(
            f"{name}-{kind}-{zone}",
            vpc_id=vpc.id,
            cidr_block=cidr,
            availability_zone=zone,
            map_public_ip_on_launch=kind == "public",
            tags={
                **tags,
                f"kubernetes.io/cluster/{cluster_name}": "shared",
                "kubernetes.io/role/elb"
                if kind == "public"
                else "kubernetes.io/role/internal-elb": "1",
                "Name": f"{cluster_name}-{kind}-{zone}",
            },
            opts=self._opts(),
        )
        association = aws.ec2.RouteTableAssociation(
            f"{name}-{kind}-{zone}",
            subnet_id=subnet.id,
            route_table_id=table.id,
            opts=self._opts(),
        )
        return subnet, association

    def _opts(
        self, depends_on: Sequence[pulumi.Resource] = (), *, protect: bool = False
    ) -> pulumi.ResourceOptions:
        """Child options; ``protect`` asks for the cluster's protection (stateful resources)."""
        return pulumi.ResourceOptions(
            parent=self,
            provider=self._provider,
            depends_on=list(depends_on) or None,
            protect=self._protect_stateful if protect else None,
        )

    def _node_group(
        self,
        name: str,
        pool: EKSNodePool,
        cluster: eks.Cluster,
        node_role: aws.iam.Role,
        efa_sg: aws.ec2.SecurityGroup | None,
        provider: pulumi.ProviderResource,
        depends_on: Sequence[pulumi.Resource],
        tags: dict[str, str],
    ) -> eks.ManagedNodeGroup:
        gpu = pool.role == "GPU"
        labels = {POOL_LABEL: pool.name}
        if gpu:
            assert pool.gpu is not None
            labels[GPU_LABEL] = pool.gpu.accelerator_type
        # A pool without zones (the system pool) stays in the control plane's zones: a managed
        # node group's subnets cannot change in place, so following every block would replace
        # it whenever a zone is added.
        zones = pool.zones or tuple(self.control_plane_zones)
        subnet_ids = [self.private_subnets[z].id for z in zones]

        launch_template = None
        if pool.capacity_block is not None or pool.fabric == "EFA":
            launch_template = self._launch_template(name, pool, cluster, efa_sg, tags)
            self.launch_templates[pool.name] = launch_template
        if pool.capacity_block is not None:
            capacity_type = "CAPACITY_BLOCK"
        else:
            capacity_type = "ON_DEMAND"

        group = eks.ManagedNodeGroup(
            f"{name}-{pool.name}",
            cluster=cluster,
            node_role=node_role,
            subnet_ids=subnet_ids,
            ami_type=GPU_AMI_TYPE if gpu else SYSTEM_AMI_TYPE,
            capacity_type=capacity_type,
            # With a launch template, the instance type and root volume live in the template
            # (EKS rejects them on the node group then).
            instance_types=None if launch_template else [pool.instance_type],
            disk_size=None if launch_template else pool.disk_size_gb,
            launch_template=(
                {"id": launch_template.id, "version": launch_template.latest_version.apply(str)}
                if launch_template
                else None
            ),
            scaling_config={
                "min_size": pool.min_size,
                "desired_size": pool.desired_size,
                "max_size": pool.max_node_count,
            },
            labels=labels,
            taints=[GPU_TAINT] if gpu else None,
            tags=tags,
            # Every group follows the cluster's Kubernetes version: pulumi-eks sets it only for
            # groups without a launch template (nodes/nodegroup.ts), so EFA and Capacity Block
            # groups stayed on their first minor. EKS takes a version with a launch template
            # that names no AMI, as ours. The AMI release: EKS' latest for the version when the
            # version changes, or `amiReleaseVersion` where given (a bump rolls every group).
            version=self._kubernetes_version,
            release_version=self._ami_release_version,
            # a PodDisruptionBudget that refuses an eviction fails the update, never forced
            force_update_version=False,
            opts=pulumi.ResourceOptions(
                parent=self,
                providers={"aws": provider},
                depends_on=list(depends_on),
                transforms=[
                    ignore_scheduled_sizes if pool.capacity_block else ignore_desired_size,
                    update_config(pool.max_unavailable),
                ],
            ),
        )
        if pool.capacity_block is not None:
            self._capacity_block_schedules(name, pool, group, provider)
        return group

    def _capacity_block_schedules(
        self,
        name: str,
        pool: EKSNodePool,
        group: eks.ManagedNodeGroup,
        provider: pulumi.ProviderResource,
    ) -> None:
        """A Capacity Block group is created at 0 (AWS: desired 0 before the reservation is
        active, and while upgrading); scheduled actions on its Auto Scaling group hold it at
        the block's size (min = desired = nodeCount, so cluster-autoscaler never removes a
        paid-for node) from the block's start, and scale it to 0 before the block ends."""
        assert pool.capacity_block is not None
        reservation = pool.capacity_block.capacity_reservation_id
        # The block's dates and zone as plain values: which actions exist depends on them.
        block = aws.ec2.get_capacity_block_reservation(
            id=reservation, opts=pulumi.InvokeOptions(provider=provider, parent=self)
        )
        zone = block.availability_zone
        if zone and pool.zones and zone not in pool.zones:
            # m3: the group's subnets are in the pool's zones; instances of a block in another
            # zone can never launch there.
            raise ValueError(
                f"EKS node pool {pool.name!r}: Capacity Block {reservation} is in {zone}, but "
                f"the pool's zones are {', '.join(pool.zones)}; set its zones to [{zone}]"
            )
        asg: pulumi.Output[str] = group.node_group.apply(asg_name)
        sizes = {"start": pool.node_count, "end": 0}
        actions = (
            block_actions(block.start_date, block.end_date, node_groups.now())
            if block.start_date and block.end_date
            else []
        )
        self.capacity_block_schedules[pool.name] = [
            aws.autoscaling.Schedule(
                f"{name}-{pool.name}-{reservation}-{action.kind}",
                autoscaling_group_name=asg,
                scheduled_action_name=f"modelplane-{pool.name}-block-{action.kind}",
                start_time=action.at,
                min_size=sizes[action.kind],
                desired_capacity=sizes[action.kind],
                max_size=-1,
                opts=self._opts(depends_on=[group]).merge(
                    pulumi.ResourceOptions(ignore_changes=["startTime"] if action.pinned else None)
                ),
            )
            for action in actions
        ]

    def _launch_template(
        self,
        name: str,
        pool: EKSNodePool,
        cluster: eks.Cluster,
        efa_sg: aws.ec2.SecurityGroup | None,
        tags: dict[str, str],
    ) -> aws.ec2.LaunchTemplate:
        network_interfaces: list[aws.ec2.LaunchTemplateNetworkInterfaceArgs] | None = None
        if pool.fabric == "EFA":
            assert efa_sg is not None
            # Card 0 carries the primary ENA+EFA interface; every other network card an
            # EFA-only interface (no IP address, RDMA only).
            network_interfaces = [
                aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                    network_card_index=card,
                    device_index=0 if card == 0 else 1,
                    interface_type="efa" if card == 0 else "efa-only",
                    delete_on_termination="true",
                    security_groups=[cluster.cluster_security_group_id, efa_sg.id],
                )
                for card in range(pool.efa_interfaces)
            ]
        capacity_block = pool.capacity_block
        _ReservationTarget = (
            aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs
        )
        return aws.ec2.LaunchTemplate(
            f"{name}-{pool.name}",
            instance_type=pool.instance_type,
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=ROOT_DEVICE,
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=pool.disk_size_gb,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            instance_market_options=(
                aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
                if capacity_block is not None
                else None
            ),
            capacity_reservation_specification=(
                aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                    capacity_reservation_target=_ReservationTarget(
                        capacity_reservation_id=capacity_block.capacity_reservation_id
                    )
                )
                if capacity_block is not None
                else None
            ),
            network_interfaces=network_interfaces,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=2,
            ),
            update_default_version=True,
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type="instance", tags=tags)
            ],
            tags=tags,
            opts=self._opts(),
        )
