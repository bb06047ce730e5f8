"""The rules of modelplane's policy pack, each a ResourceValidationPolicy.

- ``stateful-resources-protected``: the cloud resources that hold a fleet's state or its
  network (GKE and EKS clusters, VPCs, EFS and Filestore) carry Pulumi's ``protect``, so no
  `up` replaces them and no `destroy` deletes them by accident (an InferenceCluster's
  ``protect``, default true).
- ``workload-gateways-private``: a replica cluster's workload Gateway is an internal load
  balancer (GKE and EKS: the annotations modelplane sets) or sits on a network the platform
  declared private (an Existing cluster's ``network.connectedTo``, recorded on the Gateway).
  The hop is mutual TLS with the fleet's front-door key as a second factor, but a public
  gateway still lets anyone on the internet reach the gateway's TLS handshake and its
  answers (docs/api.md "Mutual TLS between the gateways"): private is the default asked.
- ``helm-charts-pinned``: every Helm release names one exact chart version.

Each is mandatory; a platform that accepts one (a disposable dev cluster without protection)
sets its ``enforcementLevel`` to ``advisory`` or ``disabled`` in a policy config file
(``--policy-pack-config``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

PACK = "modelplane"

#: What each stateful type is, in messages.
STATEFUL = {
    "gcp:container/cluster:Cluster": "GKE cluster",
    "gcp:compute/network:Network": "VPC network",
    "gcp:filestore/instance:Instance": "Filestore instance",
    "aws:eks/cluster:Cluster": "EKS cluster",
    "eks:index:Cluster": "EKS cluster",
    "aws:ec2/vpc:Vpc": "VPC",
    "aws:efs/fileSystem:FileSystem": "EFS file system",
}

GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
WORKLOAD_GATEWAY_COMPONENT = "workload-gateway"
#: The annotations that make a Gateway's load balancer internal (components/load_balancers.py).
INTERNAL = {
    "networking.gke.io/load-balancer-type": "Internal",
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
}
PRIVATE_NETWORK = "modelplane.ai/private-network"

HELM_RELEASE = ("kubernetes:helm.sh/v3:Release",)
HELM_CHARTS = ("kubernetes:helm.sh/v3:Chart", "kubernetes:helm.sh/v4:Chart")
#: One version: `1.2.3`, `v1.8.3`, `1.2.3-rc.1+build` (no range, wildcard or tag).
EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")

Validate = Callable[[ResourceValidationArgs, ReportViolation], None]


def stateful_protected(args: ResourceValidationArgs, report: ReportViolation) -> None:
    what = STATEFUL.get(args.resource_type)
    if what is not None and not args.opts.protect:
        report(
            f"{what} {args.name} is not protected: an `up` could replace it and `destroy` "
            "delete it with its data. Set the InferenceCluster's `protect: true` (the default)."
        )


def _annotations(props: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    node: Any = props
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def workload_gateway_private(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != GATEWAY:
        return
    labels = _annotations(args.props, "metadata", "labels")
    if labels.get("app.kubernetes.io/component") != WORKLOAD_GATEWAY_COMPONENT:
        return  # the front door, or a platform's own Gateway
    service = _annotations(args.props, "spec", "infrastructure", "annotations")
    if any(service.get(k) == v for k, v in INTERNAL.items()):
        return
    if _annotations(args.props, "metadata", "annotations").get(PRIVATE_NETWORK):
        return
    name = _annotations(args.props, "metadata").get("name", args.name)
    report(
        f"workload Gateway {name} ({args.name}) is neither an internal load balancer nor on a "
        "network declared private: anyone on the internet reaches its TLS handshake (the hop "
        "is mutual TLS, but private is asked first). Declare the cluster's private network "
        "(spec.cluster.existing.network.connectedTo) or accept it for this fleet "
        "(enforcementLevel: advisory in --policy-pack-config)."
    )


def helm_chart_pinned(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in HELM_RELEASE + HELM_CHARTS:
        return
    version = args.props.get("version")
    chart = args.props.get("chart") or args.name
    if not isinstance(version, str) or not EXACT_VERSION.match(version):
        report(
            f"Helm chart {chart} ({args.name}) is not pinned to one version "
            f"(version: {version!r}): a new chart release would change the cluster unseen."
        )


def policies() -> list[ResourceValidationPolicy]:
    rules: list[tuple[str, str, Validate]] = [
        (
            "stateful-resources-protected",
            "Clusters, networks and file systems carry Pulumi's protect.",
            stateful_protected,
        ),
        (
            "workload-gateways-private",
            "A workload Gateway is internal or on a declared private network.",
            workload_gateway_private,
        ),
        (
            "helm-charts-pinned",
            "Every Helm release names one exact chart version.",
            helm_chart_pinned,
        ),
    ]
    return [
        ResourceValidationPolicy(
            name=name,
            description=description,
            enforcement_level=EnforcementLevel.MANDATORY,
            validate=validate,
        )
        for name, description, validate in rules
    ]


def policy_pack() -> PolicyPack:
    return PolicyPack(name=PACK, enforcement_level=EnforcementLevel.MANDATORY, policies=policies())
