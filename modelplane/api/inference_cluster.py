"""InferenceCluster: a Kubernetes cluster that serves models (GKE, EKS or existing)."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from modelplane.api.base import (
    API_VERSION,
    DNSLabel,
    DNSSubdomain,
    ObjectMeta,
    SecretKeyRef,
    Strict,
    no_repeats,
)
from modelplane.api.limits import MAX_CLUSTER_NODES, PoolNodes, Port
from modelplane.api.maintenance import Maintenance, PoolUpgrade, cloud_problems
from modelplane.api.pod_security import PodSecurityOptions
from modelplane.api.problems import raise_if

Effect = Literal["NoSchedule", "NoExecute"]

MIN_KUBERNETES_MINOR = 34
"""DRA's `resource.k8s.io/v1` API (ResourceClaimTemplates, DeviceClasses) is on by default
from Kubernetes 1.34; an older cluster fails only at deploy."""
IAM_PRINCIPAL = r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]+$"
EKS_AUTOSCALED_MINORS: tuple[str, ...] = ("1.34", "1.35", "1.36")
"""The Kubernetes minors an EKS cluster may run: those with a pinned cluster-autoscaler
release (modelplane/components/charts.py CLUSTER_AUTOSCALER_IMAGES; a test keeps both equal).
cluster-autoscaler supports only its own minor, and the chart's default image is one minor."""


def _kubernetes_version(value: str) -> str:
    match = re.fullmatch(r"1\.(\d+)", value)
    if match is None:
        raise ValueError(f'{value!r} is not a Kubernetes minor version like "1.35"')
    if int(match.group(1)) < MIN_KUBERNETES_MINOR:
        raise ValueError(
            f"Kubernetes {value} is too old: modelplane's workloads use DRA "
            f"(resource.k8s.io/v1), on by default from 1.{MIN_KUBERNETES_MINOR}"
        )
    return value


def eks_block_zones(region: str, networking: EKSNetworking) -> list[str]:
    """The Availability Zone of each `subnetCidrs` block, by position: `networking.zones`
    when given, else `<region>a`, `<region>b`, ... A block's zone never depends on the
    node pools, so adding or reordering pools never moves a subnet."""
    if networking.zones:
        return list(networking.zones)
    return [f"{region}{chr(ord('a') + i)}" for i in range(networking.block_count)]


DEFAULT_CONTROL_PLANE_BLOCKS = 3
"""Without `controlPlaneZones`, the control plane uses the first three blocks' zones."""


def eks_control_plane_zones(region: str, networking: EKSNetworking) -> list[str]:
    """The zones whose subnets the EKS control plane uses: `networking.controlPlaneZones`, else
    the first three blocks' zones. AWS keeps a cluster in the Availability Zones it was
    created in ("All subnets that you add must be in the same set of AZs as originally
    provided", EKS user guide, "View Amazon EKS networking requirements for VPC and subnets";
    aws/containers-roadmap#2330), so a block added later serves node groups only."""
    if networking.control_plane_zones:
        return list(networking.control_plane_zones)
    return eks_block_zones(region, networking)[:DEFAULT_CONTROL_PLANE_BLOCKS]


def cidr(value: str, *, ipv4: bool = False) -> str:
    """`value` when it is a CIDR block (an IPv4 one with `ipv4`), else a ValueError."""
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a CIDR block ({exc})") from None
    if ipv4 and net.version != 4:
        raise ValueError(f"{value!r} is not an IPv4 CIDR block")
    return value


class GKENetworking(Strict):
    node_cidr: str | None = None
    """The nodes' subnet (absent: from the fleet address plan, docs/api.md "Addresses")."""
    pod_cidr: str | None = None
    """The pods' secondary range (absent: from the fleet address plan)."""
    service_cidr: str | None = None
    """The services' secondary range (absent: from the fleet address plan)."""

    _check = field_validator("node_cidr", "pod_cidr", "service_cidr")(
        lambda v: v if v is None else cidr(v)
    )

    @property
    def declared(self) -> bool:
        """The ranges are the user's (all three set), not the fleet address plan's."""
        return self.node_cidr is not None

    @model_validator(mode="after")
    def _ipv4_and_disjoint(self) -> GKENetworking:
        """All three ranges or none; the subnet's primary range and its pod/service secondary
        ranges are IPv4 blocks of one VPC subnet: never IPv6, never overlapping."""
        fields = {"nodeCidr": self.node_cidr, "podCidr": self.pod_cidr}
        fields["serviceCidr"] = self.service_cidr
        unset = [name for name, value in fields.items() if value is None]
        if unset and len(unset) < len(fields):
            raise_if(
                [
                    (
                        name,
                        "set nodeCidr, podCidr and serviceCidr together, or none of them "
                        "(then the fleet address plan gives all three)",
                    )
                    for name in unset
                ]
            )
        if unset:
            return self
        nets = {name: ipaddress.ip_network(value) for name, value in fields.items() if value}
        problems = [
            (name, f"{fields[name]} is IPv6; GKE node, pod and service ranges are IPv4")
            for name, net in nets.items()
            if net.version != 4
        ]
        v4 = [(name, net) for name, net in nets.items() if net.version == 4]
        for i, (a_name, a) in enumerate(v4):
            for b_name, b in v4[i + 1 :]:
                if a.overlaps(b):  # type: ignore[arg-type]
                    problems.append((b_name, f"{b} overlaps {a_name} {a}"))
        raise_if(problems)
        return self


DEFAULT_EKS_BLOCKS = 3
"""Subnet blocks the fleet address plan gives an EKS cluster without `zones`."""


class EKSNetworking(Strict):
    vpc_cidr: str | None = None
    """The VPC's CIDR block (absent: from the fleet address plan, docs/api.md "Addresses")."""
    subnet_cidrs: list[str] | None = Field(default=None, min_length=2, max_length=6)
    """The subnets, one per availability zone (2..6, inside vpcCidr, not overlapping; absent:
    from the fleet address plan, one per zone). A block belongs to the zone at its position
    for good: append blocks, never reorder."""
    service_cidr: str | None = None
    """The Kubernetes services' range (EKS' serviceIpv4Cidr, fixed when the cluster is
    created; absent with declared ranges: EKS picks 10.100.0.0/16 or 172.20.0.0/16)."""
    zones: list[str] = Field(default_factory=list, max_length=6)
    """The Availability Zone of each subnetCidrs block, in the same order (default:
    `<region>a`, `<region>b`, ...). Set it where those letters are not the zones to use."""
    nat_gateways: Literal["Single", "PerZone"] = "Single"
    """Single (default): one NAT gateway for every private subnet; PerZone: one per zone."""
    control_plane_zones: list[str] = Field(default_factory=list, max_length=6)
    """The zones whose subnets the EKS control plane uses, fixed when the cluster is created
    (default: the first three blocks' zones). Blocks added later serve node groups only."""

    @property
    def declared(self) -> bool:
        """The VPC and subnet ranges are the user's, not the fleet address plan's."""
        return self.vpc_cidr is not None

    @property
    def block_count(self) -> int:
        """How many subnet blocks (and so zones) the cluster has."""
        if self.subnet_cidrs is not None:
            return len(self.subnet_cidrs)
        return len(self.zones) or DEFAULT_EKS_BLOCKS

    @model_validator(mode="after")
    def _subnets_inside_vpc(self) -> EKSNetworking:
        if (self.vpc_cidr is None) != (self.subnet_cidrs is None):
            raise ValueError(
                "set vpcCidr and subnetCidrs together, or neither (then the fleet address "
                "plan gives both)"
            )
        if self.zones and len(self.zones) != self.block_count:
            raise ValueError(
                f"zones has {len(self.zones)} entries but subnetCidrs has "
                f"{self.block_count} blocks (one zone per block, in the same order)"
            )
        if len(set(self.zones)) != len(self.zones):
            raise ValueError("zones must not repeat (one block per zone)")
        if self.service_cidr is not None:
            _eks_service_cidr(self.service_cidr, self.vpc_cidr)
        if self.vpc_cidr is None or self.subnet_cidrs is None:
            return self
        vpc = ipaddress.ip_network(cidr(self.vpc_cidr))
        nets = [ipaddress.ip_network(cidr(c)) for c in self.subnet_cidrs]
        for block, net in zip(self.subnet_cidrs, nets, strict=True):
            if net.version != vpc.version:
                raise ValueError(
                    f"subnet {block} is IPv{net.version} but vpcCidr {self.vpc_cidr} is "
                    f"IPv{vpc.version}"
                )
            if not net.subnet_of(vpc):  # type: ignore[arg-type]
                raise ValueError(f"subnet {block} is not inside vpcCidr {self.vpc_cidr}")
        for i, a in enumerate(nets):
            for b in nets[i + 1 :]:
                if a.overlaps(b):
                    raise ValueError(f"subnets {a} and {b} overlap")
        return self


PRIVATE_V4 = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
"""RFC 1918: where EKS takes a service range from, and the fleet address plan its blocks."""


def private_v4(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    return net.version == 4 and any(net.subnet_of(p) for p in PRIVATE_V4)  # type: ignore[arg-type]


def _eks_service_cidr(value: str, vpc_cidr: str | None) -> None:
    """EKS' serviceIpv4Cidr: an RFC 1918 block from /12 to /24, outside the VPC (EKS API
    reference, KubernetesNetworkConfigRequest)."""
    net = ipaddress.ip_network(cidr(value))
    if not private_v4(net) or not 12 <= net.prefixlen <= 24:
        raise ValueError(
            f"serviceCidr {value} must be an IPv4 block from /12 to /24 inside 10.0.0.0/8, "
            "172.16.0.0/12 or 192.168.0.0/16 (EKS serviceIpv4Cidr)"
        )
    if vpc_cidr is not None and net.overlaps(ipaddress.ip_network(vpc_cidr)):
        raise ValueError(f"serviceCidr {value} overlaps vpcCidr {vpc_cidr}")


class GKESource(Strict):
    project: str = Field(min_length=1)
    """The GCP project the cluster is created in."""
    region: str = Field(min_length=1, max_length=32)
    """The GCP region of the (regional) cluster."""
    kubernetes_version: str = "1.35"
    """The Kubernetes minor version (default "1.35"; at least 1.34, for DRA)."""
    networking: GKENetworking = Field(default_factory=GKENetworking)
    """The cluster's network ranges."""
    public_access_cidrs: list[str] | None = Field(default=None, min_length=1, max_length=50)
    """The CIDR blocks that may reach the public control-plane endpoint (GKE's master
    authorized networks); absent: any address (the endpoint still needs Google credentials)."""
    protect: bool = True
    """Protect the cluster and its network from delete and replace (default true); set false,
    `up`, then `destroy` to tear it down."""

    _check_version = field_validator("kubernetes_version")(lambda v: _kubernetes_version(v))

    @field_validator("public_access_cidrs")
    @classmethod
    def _public_cidrs(cls, cidrs: list[str] | None) -> list[str] | None:
        return None if cidrs is None else [cidr(c) for c in cidrs]


class EKSSource(Strict):
    region: str = Field(min_length=1, max_length=32)
    """The AWS region of the cluster."""
    kubernetes_version: str = "1.36"
    """The Kubernetes minor version (default "1.36"; at least 1.34, for DRA)."""
    networking: EKSNetworking = Field(default_factory=EKSNetworking)
    """The cluster's VPC and subnets."""
    admin_principals: list[str] = Field(default_factory=list, max_length=20)
    """IAM role or user ARNs given cluster-admin access entries (operators, CI); the identity
    that creates the cluster is admin already."""
    public_access_cidrs: list[str] = Field(
        default_factory=lambda: ["0.0.0.0/0"], min_length=1, max_length=40
    )
    """The CIDR blocks that may reach the public API endpoint (default 0.0.0.0/0)."""
    protect: bool = True
    """Protect the cluster, VPC and file system from delete and replace (default true); set
    false, `up`, then `destroy` to tear it down."""
    ami_release_version: str | None = Field(
        default=None, pattern=r"^1\.[0-9]+\.[0-9]+-[0-9]{8}$", max_length=32
    )
    """The EKS-optimized AMI release of every node group, e.g. "1.36.1-20260801" (default:
    EKS' latest for kubernetesVersion, taken whenever the version changes). Bumping it rolls
    every group to that release (drain the cluster first: docs/api.md)."""

    _check_version = field_validator("kubernetes_version")(lambda v: _kubernetes_version(v))

    @model_validator(mode="after")
    def _autoscaler_for_the_version(self) -> EKSSource:
        if self.kubernetes_version not in EKS_AUTOSCALED_MINORS:
            raise_if(
                [
                    (
                        "kubernetesVersion",
                        f"no cluster-autoscaler release is pinned for Kubernetes "
                        f"{self.kubernetes_version} (it supports only its own minor); EKS "
                        f"clusters run {', '.join(EKS_AUTOSCALED_MINORS)}",
                    )
                ]
            )
        return self

    @model_validator(mode="after")
    def _ami_release_of_the_version(self) -> EKSSource:
        release = self.ami_release_version
        if release is not None and not release.startswith(f"{self.kubernetes_version}."):
            raise_if(
                [
                    (
                        "amiReleaseVersion",
                        f"{release} is not a release of Kubernetes {self.kubernetes_version} "
                        f"(kubernetesVersion): an AMI release starts with "
                        f"{self.kubernetes_version}.",
                    )
                ]
            )
        return self

    @model_validator(mode="after")
    def _control_plane_zones_have_blocks(self) -> EKSSource:
        chosen = self.networking.control_plane_zones
        if not chosen:
            return self
        field = "networking.controlPlaneZones"
        problems: list[tuple[str, str]] = []
        zones = eks_block_zones(self.region, self.networking)
        missing = [z for z in chosen if z not in zones]
        if missing:
            problems.append(
                (
                    field,
                    f"{', '.join(missing)} has no subnet block (the blocks of "
                    f"networking.subnetCidrs are in {', '.join(zones)}, by position)",
                )
            )
        if len(set(chosen)) != len(chosen):
            problems.append((field, "must not repeat"))
        elif len(chosen) < 2:
            problems.append((field, "needs at least two zones (EKS: two Availability Zones)"))
        raise_if(problems)
        return self

    @field_validator("admin_principals")
    @classmethod
    def _principal_arns(cls, arns: list[str]) -> list[str]:
        for arn in arns:
            if not re.fullmatch(IAM_PRINCIPAL, arn):
                raise ValueError(
                    f"{arn!r} is not an IAM role or user ARN (arn:aws:iam::<account>:role/<name>)"
                )
        if len(set(arns)) != len(arns):
            raise ValueError("adminPrincipals must not repeat")
        return arns

    @field_validator("public_access_cidrs")
    @classmethod
    def _public_cidrs(cls, cidrs: list[str]) -> list[str]:
        return [cidr(c) for c in cidrs]


class KubeconfigSecretRef(SecretKeyRef):
    key: str = Field(default="kubeconfig", min_length=1, max_length=253)
    """The key within the secret that holds the kubeconfig (default `kubeconfig`)."""


class ExistingCache(Strict):
    storage_class_name: DNSSubdomain
    """The ReadWriteMany StorageClass the cluster already has, for ModelCache."""


def _cidrs(values: list[str]) -> list[str]:
    return [cidr(v) for v in values]


class ExistingNetwork(Strict):
    """The address ranges an existing cluster already uses; the fleet address plan keeps
    every provisioned cluster clear of them, and `validate` refuses overlaps with clusters
    it must reach (docs/api.md, "Addresses")."""

    node_cidrs: list[str] = Field(default_factory=list, max_length=20)
    """The nodes' ranges."""
    pod_cidrs: list[str] = Field(default_factory=list, max_length=20)
    """The pods' ranges."""
    service_cidrs: list[str] = Field(default_factory=list, max_length=20)
    """The services' ranges."""
    connected_to: list[DNSLabel] = Field(default_factory=list, max_length=100)
    """The InferenceClusters whose networks the platform connects to this one privately
    (Interconnect, VPN, peering it runs itself): the front door reaches the cluster's workload
    gateway over that network (docs/api.md, "Paths")."""

    _check = field_validator("node_cidrs", "pod_cidrs", "service_cidrs")(lambda v: _cidrs(v))

    @field_validator("connected_to")
    @classmethod
    def _once_each(cls, names: list[str]) -> list[str]:
        no_repeats(names, "each cluster at most once")
        return names


class ExistingSource(Strict):
    secret_ref: KubeconfigSecretRef | None = None
    """Where the cluster's kubeconfig comes from (see docs/architecture.md, Secrets)."""
    cache: ExistingCache | None = None
    """The cluster's storage for ModelCache."""
    render_to: str | None = Field(default=None, min_length=1)
    """Instead of applying to a cluster, keep this directory's manifests in sync with the stack."""
    network: ExistingNetwork | None = None
    """The cluster's address ranges, when it must be reachable privately (absent: unknown)."""

    @model_validator(mode="after")
    def _needs_a_target(self) -> ExistingSource:
        if self.secret_ref is None and self.render_to is None:
            raise ValueError("set secretRef (the cluster's kubeconfig) or renderTo (a directory)")
        if self.secret_ref is not None and self.render_to is not None:
            raise ValueError("secretRef and renderTo are mutually exclusive")
        return self


class ClusterSource(Strict):
    source: Literal["GKE", "EKS", "Existing"]
    """GKE, EKS or Existing; the block of that name is required."""
    gke: GKESource | None = None
    """A GKE cluster modelplane provisions."""
    eks: EKSSource | None = None
    """An EKS cluster modelplane provisions."""
    existing: ExistingSource | None = None
    """A cluster that already exists, reached with its kubeconfig (or rendered to a directory)."""

    @model_validator(mode="after")
    def _block_named_by_source(self) -> ClusterSource:
        wanted = self.source.lower()
        if getattr(self, wanted) is None:
            raise ValueError(f"source is {self.source}, so the {wanted!r} block is required")
        extra = [b for b in ("gke", "eks", "existing") if b != wanted and getattr(self, b)]
        if extra:
            raise ValueError(
                f"source is {self.source}, so {', '.join(repr(b) for b in extra)} must not be set"
            )
        return self


class CapacityBlock(Strict):
    capacity_reservation_id: str = Field(pattern=r"^cr-[0-9a-f]+$", min_length=4, max_length=64)
    """The EC2 capacity reservation (cr-...) the pool's nodes launch into (EKS only)."""


class NodePool(Strict):
    name: DNSLabel = Field(max_length=40)
    """The pool's name (unique, at most 40 characters; `system` is reserved)."""
    class_name: DNSSubdomain
    """The InferenceClass describing one node of this pool."""
    node_count: PoolNodes = 1
    """Initial nodes (default 1); later changes are the autoscaler's."""
    min_node_count: PoolNodes | None = None
    """The autoscaler's minimum node count."""
    max_node_count: PoolNodes | None = Field(default=None, ge=1)
    """The autoscaler's maximum node count; the scheduler's capacity is maxNodeCount, else
    nodeCount.
    """
    zones: list[str] = Field(default_factory=list, max_length=8)
    """The zones of the pool's nodes (required for GPU pools on GKE and EKS)."""
    capacity_block: CapacityBlock | None = None
    """An EC2 capacity reservation for the pool (EKS only)."""
    fabric: Literal["None", "EFA"] = "None"
    """None (default) or EFA (EKS only): the node-to-node network fabric."""
    upgrade: PoolUpgrade | None = None
    """GKE and EKS: how the cloud replaces this pool's nodes in an upgrade (default: one new
    node before an old one goes)."""

    @model_validator(mode="after")
    def _counts_ordered(self) -> NodePool:
        lo = self.min_node_count if self.min_node_count is not None else 0
        if self.max_node_count is not None and lo > self.max_node_count:
            raise ValueError(
                f"minNodeCount {lo} is greater than maxNodeCount {self.max_node_count}"
            )
        if self.max_node_count is not None and self.node_count > self.max_node_count:
            raise ValueError(
                f"nodeCount {self.node_count} is greater than maxNodeCount {self.max_node_count}"
            )
        return self

    @property
    def capacity_nodes(self) -> int:
        """The scheduler's capacity: maxNodeCount if set, else nodeCount."""
        return self.max_node_count if self.max_node_count is not None else self.node_count


class Taint(Strict):
    key: str = Field(min_length=1)
    """The taint's key."""
    value: str = ""
    """The taint's value (may be empty)."""
    effect: Effect
    """NoSchedule or NoExecute."""

    def describe(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


class WorkloadGateway(Strict):
    """A platform-run gateway controller's class, for clusters without the installed stack."""

    class_name: DNSSubdomain
    """The GatewayClass modelplane's workload Gateway uses."""
    port: Port = 443
    """The HTTPS listener's port replicas are reached on (default 443; mutual TLS, api.md
    "Mutual TLS between the gateways")."""
    controller: Literal["Traefik", "EnvoyGateway"] | None = None
    """The controller behind the class, so modelplane can make its replica routes require the
    front door's credentials (api.md "Private workload gateways"). Without it the cluster's
    replicas get no routes (fail closed)."""
    namespace: DNSLabel | None = None
    """The namespace the controller's proxy pods run in: the replicas' NetworkPolicy admits
    the serving ports from every pod there (api.md "Network policies"). Without it, from
    every namespace (modelplane does not know where the platform's gateway runs)."""


# The components of the serving stack whose versions `servingStack.versions` may override
# (modelplane.components.charts pins them; a test keeps both lists equal).
SERVING_STACK_COMPONENTS: frozenset[str] = frozenset(
    {
        "certManager",
        "envoyGateway",
        "envoyAiGatewayCrds",
        "envoyAiGateway",
        "prometheus",
        "leaderWorkerSet",
        "nodeFeatureDiscovery",
        "nvidiaDraDriver",
        "keda",
        "clusterAutoscaler",
        "awsEfaDevicePlugin",
        "gatewayApi",
        "inferenceExtension",
    }
)


class ServingStackOptions(Strict):
    install: bool = True
    """Install the serving stack (default true); false: the platform team runs its own."""
    chart_repository: str = ""
    """A chart mirror for air-gapped installs (OCI or https); empty: the upstream repositories."""
    versions: dict[str, str] = Field(default_factory=dict)
    """Per-component chart version overrides."""
    gateway: WorkloadGateway | None = None
    """Only with install: false -- the platform's own gateway controller for the workload Gateway.
    """

    @field_validator("versions")
    @classmethod
    def _known_components(cls, versions: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(versions) - SERVING_STACK_COMPONENTS)
        if unknown:
            raise ValueError(
                f"unknown component(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(SERVING_STACK_COMPONENTS))}"
            )
        return versions

    @model_validator(mode="after")
    def _gateway_only_without_install(self) -> ServingStackOptions:
        if self.install and self.gateway is not None:
            raise ValueError(
                "gateway is for clusters whose platform runs its own gateway controller: set "
                "install: false, or remove gateway (the installed stack brings Envoy Gateway)"
            )
        return self


def _eks_pool_problems(eks: EKSSource, pools: list[NodePool]) -> list[tuple[str, str]]:
    """Zones need a subnet block; DRA GPU pools cannot scale up from zero on EKS."""
    problems: list[tuple[str, str]] = []
    zones = eks_block_zones(eks.region, eks.networking)
    for i, pool in enumerate(pools):
        missing = [z for z in pool.zones if z not in zones]
        if missing:
            problems.append(
                (
                    f"nodePools[{i}].zones",
                    f"{', '.join(missing)} has no subnet block: the blocks of "
                    f"cluster.eks.networking.subnetCidrs are in {', '.join(zones)} (by "
                    "position); append a block (and its zone to networking.zones)",
                )
            )
        if pool.capacity_block is None and pool.min_node_count == 0:
            problems.append(
                (
                    f"nodePools[{i}].minNodeCount",
                    "must be at least 1 on EKS: cluster-autoscaler on AWS cannot scale a "
                    "DRA GPU node group up from zero (its template node has no "
                    "ResourceSlices, kubernetes/autoscaler#7799), so a group at 0 stays at 0 "
                    "(unset: 1)",
                )
            )
        if pool.capacity_block is not None and pool.min_node_count not in (
            None,
            pool.node_count,
        ):
            problems.append(
                (
                    f"nodePools[{i}].minNodeCount",
                    "a Capacity Block pool runs nodeCount nodes (the block) while the block "
                    "is active and 0 outside it; leave minNodeCount unset or equal to nodeCount",
                )
            )
    return problems


class InferenceClusterSpec(Strict):
    cluster: ClusterSource
    """Where the cluster comes from: provisioned on GKE or EKS, or an existing one."""
    node_pools: list[NodePool] = Field(min_length=1, max_length=8)
    """The GPU node pools (1..8, unique names); provisioned clusters also get a `system` pool."""
    taints: list[Taint] = Field(default_factory=list)
    """Whole-cluster scheduling taints (drain, maintenance), matched against deployments'
    tolerations.
    """
    serving_stack: ServingStackOptions = Field(default_factory=ServingStackOptions)
    """Overrides of the per-cluster serving stack."""
    maintenance: Maintenance | None = None
    """GKE and EKS: when the cloud may upgrade the cluster (a GKE maintenance window)."""
    pod_security: PodSecurityOptions | None = None
    """The platform's allowlist here: deployments that may run outside Pod Security
    "baseline" (docs/api.md "Pod Security and namespaces")."""

    @field_validator("node_pools")
    @classmethod
    def _unique_pool_names(cls, pools: list[NodePool]) -> list[NodePool]:
        no_repeats((p.name for p in pools), "node pool names must be unique")
        if any(p.name == "system" for p in pools):
            raise ValueError("the pool name 'system' is reserved for the injected system pool")
        return pools

    @model_validator(mode="after")
    def _cloud_specific_pool_fields(self) -> InferenceClusterSpec:
        problems: list[tuple[str, str]] = []
        source = self.cluster.source
        for i, pool in enumerate(self.node_pools):
            if source in ("GKE", "EKS") and not pool.zones:
                problems.append((f"nodePools[{i}].zones", f"required for GPU pools on {source}"))
            if pool.capacity_block is not None and source != "EKS":
                problems.append((f"nodePools[{i}].capacityBlock", "only supported on EKS"))
            if pool.fabric == "EFA" and source != "EKS":
                problems.append((f"nodePools[{i}].fabric", "EFA is only supported on EKS"))
        eks = self.cluster.eks
        if source == "EKS" and eks is not None:
            problems.extend(_eks_pool_problems(eks, self.node_pools))
        upgrades = [p.upgrade for p in self.node_pools]
        problems.extend(cloud_problems(source, self.maintenance, upgrades))
        raise_if(problems)
        return self

    @model_validator(mode="after")
    def _cluster_nodes_bounded(self) -> InferenceClusterSpec:
        total = sum(p.capacity_nodes for p in self.node_pools)
        if total > MAX_CLUSTER_NODES:
            message = (
                f"the node pools hold {total:,} nodes (maxNodeCount, else nodeCount, summed); "
                f"a cluster has at most {MAX_CLUSTER_NODES:,}"
            )
            raise_if([("nodePools", message)])
        return self

    def pool(self, name: str) -> NodePool | None:
        return next((p for p in self.node_pools if p.name == name), None)


class InferenceCluster(Strict):
    api_version: Literal["modelplane.ai/v1alpha1"] = API_VERSION
    kind: Literal["InferenceCluster"] = "InferenceCluster"
    metadata: ObjectMeta
    spec: InferenceClusterSpec

    @property
    def has_rwx_storage(self) -> bool:
        """Whether ModelCache volumes can live here: GKE (Filestore) and EKS (EFS) clusters
        get a RWX StorageClass; an Existing cluster only when it names one."""
        source = self.spec.cluster
        if source.source != "Existing":
            return True
        return source.existing is not None and source.existing.cache is not None
