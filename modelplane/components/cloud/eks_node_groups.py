"""EKS node group and cluster helpers: the control-plane subnet and size transforms (the
autoscaler and Capacity Block schedules own the sizes after creation), Capacity Block schedule
times, and a group's Auto Scaling group."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import pulumi
import pulumi_aws as aws

CAPACITY_BLOCK_DRAIN = timedelta(minutes=40)
"""AWS: scale a Capacity Block group to zero more than 30 minutes before the block ends."""


NODE_GROUP_TYPE = "aws:eks/nodeGroup:NodeGroup"
DESIRED_SIZE = "scalingConfig.desiredSize"
MIN_SIZE = "scalingConfig.minSize"
CLUSTER_TYPE = "aws:eks/cluster:Cluster"
"""The EKS cluster pulumi-eks's ``eks.Cluster`` creates (its ``vpcConfig`` holds the subnets)."""
CONTROL_PLANE_SUBNETS = "vpcConfig.subnetIds"


def keep_control_plane_subnets(
    args: pulumi.ResourceTransformArgs,
) -> pulumi.ResourceTransformResult | None:
    """The control plane keeps the subnets it was created with: AWS refuses subnets outside
    the cluster's original Availability Zones (EKS user guide, "View Amazon EKS networking
    requirements for VPC and subnets"; aws/containers-roadmap#2330), so no later `up` may
    send it others (applied to the ``aws.eks.Cluster`` inside pulumi-eks's Cluster, whose
    ``vpcConfig.subnetIds`` are the public and private subnet ids it is given)."""
    if args.type_ != CLUSTER_TYPE:
        return None
    return pulumi.ResourceTransformResult(
        args.props,
        pulumi.ResourceOptions.merge(
            args.opts, pulumi.ResourceOptions(ignore_changes=[CONTROL_PLANE_SUBNETS])
        ),
    )


def ignore_desired_size(
    args: pulumi.ResourceTransformArgs,
) -> pulumi.ResourceTransformResult | None:
    """`nodeCount` is the initial size only: a node group's desired size is the
    autoscaler's afterwards, so later `up`s never re-apply it (applied to the
    `aws.eks.NodeGroup` inside pulumi-eks's ManagedNodeGroup)."""
    if args.type_ != NODE_GROUP_TYPE:
        return None
    return pulumi.ResourceTransformResult(
        args.props,
        pulumi.ResourceOptions.merge(
            args.opts, pulumi.ResourceOptions(ignore_changes=[DESIRED_SIZE])
        ),
    )


def ignore_scheduled_sizes(
    args: pulumi.ResourceTransformArgs,
) -> pulumi.ResourceTransformResult | None:
    """A Capacity Block group's minimum and desired size belong to its scheduled actions."""
    if args.type_ != NODE_GROUP_TYPE:
        return None
    return pulumi.ResourceTransformResult(
        args.props,
        pulumi.ResourceOptions.merge(
            args.opts, pulumi.ResourceOptions(ignore_changes=[DESIRED_SIZE, MIN_SIZE])
        ),
    )


def update_config(max_unavailable: int) -> pulumi.ResourceTransform:
    """A version update of the node group takes at most `max_unavailable` nodes down at
    once (pulumi-eks' ManagedNodeGroup has no `updateConfig`, so it is set on the
    `aws.eks.NodeGroup` inside it). EKS has no maintenance window: it changes a group's
    version only when `up` does, launching the new nodes first, and it fails the update
    rather than evict a pod a PodDisruptionBudget protects (after 15 minutes) unless
    forced, which modelplane never is (`forceUpdateVersion: false`)."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != NODE_GROUP_TYPE:
            return None
        props = {**args.props, "updateConfig": {"maxUnavailable": max_unavailable}}
        return pulumi.ResourceTransformResult(props, args.opts)

    return transform


def now() -> datetime:
    """The current time (a function, so tests can move it)."""
    return datetime.now(UTC)


def _utc(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)


def schedule_time(at: str, now: datetime | None = None) -> str:
    """``at`` (RFC 3339), or two minutes from now when it has passed (Auto Scaling rejects
    a scheduled action in the past), as ``YYYY-MM-DDThh:mm:ssZ``."""
    earliest = (now or datetime.now(UTC)) + timedelta(minutes=2)
    when = max(_utc(at), earliest)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class BlockAction:
    """A scheduled action of a Capacity Block group: ``start`` holds the group at the block's
    size, ``end`` scales it to 0. ``pinned``: its time was "two minutes from now" (the moment
    had passed), so later runs must not move it (``ignore_changes: [startTime]``)."""

    kind: Literal["start", "end"]
    at: str
    pinned: bool


def block_actions(start: str, end: str, now: datetime | None = None) -> list[BlockAction]:
    """The scheduled actions a block of ``start``..``end`` needs at ``now``:

    - before the drain time (40 minutes before the end): ``start`` at the block's start (two
      minutes from now once it is active, pinned) and ``end`` at the drain time, never pinned,
      so a block extended in EC2 moves its drain (m1);
    - inside the drain window: only ``end``, two minutes from now (pinned);
    - after the end: none. Auto Scaling deletes a one-time action once it ran, so a refresh
      drops it from the state; recreating both for an ended block would set min = desired =
      the block and 0 in the same minute, and launch into an expired reservation (m2).
    """
    now = now or datetime.now(UTC)
    soon = now + timedelta(minutes=2)
    begins, ends = _utc(start), _utc(end)
    drain = ends - CAPACITY_BLOCK_DRAIN
    if ends <= now:
        return []
    if drain <= soon:
        return [BlockAction("end", schedule_time(drain_time(end), now), pinned=True)]
    return [
        BlockAction("start", schedule_time(start, now), pinned=begins < soon),
        BlockAction("end", drain_time(end), pinned=False),
    ]


def drain_time(end: str) -> str:
    """When a Capacity Block group goes to zero: CAPACITY_BLOCK_DRAIN before the block ends."""
    return (_utc(end) - CAPACITY_BLOCK_DRAIN).strftime("%Y-%m-%dT%H:%M:%SZ")


def asg_name(node_group: aws.eks.NodeGroup | None) -> pulumi.Output[str]:
    """The Auto Scaling group EKS created for a managed node group ("" when unknown, as in an
    offline render)."""
    if node_group is None:
        return pulumi.Output.from_input("")

    def first(resources: Sequence[aws.eks.outputs.NodeGroupResource]) -> str:
        groups = resources[0].autoscaling_groups if resources else None
        return (groups[0].name or "") if groups else ""

    return node_group.resources.apply(first)
