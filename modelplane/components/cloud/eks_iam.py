"""IAM for EKSCluster: managed policies, trust policies, cluster-admin access, and the
cluster-autoscaler's policy."""

from __future__ import annotations

import json

MANAGED_POLICY = "arn:aws:iam::aws:policy/"
AUTOSCALER_NAMESPACE = "kube-system"
AUTOSCALER_SERVICE_ACCOUNT = "cluster-autoscaler"
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
UPGRADE_POLICY = "STANDARD"
"""pulumi-eks defaults to EXTENDED, billed as extended support once a version leaves standard."""


def assume_role_policy(service: str, *actions: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": service},
                    "Action": list(actions) or ["sts:AssumeRole"],
                }
            ],
        }
    )


def autoscaler_policy(cluster_name: str) -> str:
    """What cluster-autoscaler needs on AWS: read the node groups and instance types (also to
    scale a managed node group up from zero), and resize or shrink only this cluster's
    groups (EKS tags their Auto Scaling groups `k8s.io/cluster-autoscaler/<cluster>=owned`)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": [
                        "autoscaling:DescribeAutoScalingGroups",
                        "autoscaling:DescribeAutoScalingInstances",
                        "autoscaling:DescribeLaunchConfigurations",
                        "autoscaling:DescribeScalingActivities",
                        "autoscaling:DescribeTags",
                        "ec2:DescribeImages",
                        "ec2:DescribeInstanceTypes",
                        "ec2:DescribeLaunchTemplateVersions",
                        "ec2:GetInstanceTypesFromInstanceRequirements",
                        "eks:DescribeNodegroup",
                    ],
                    "Resource": "*",
                },
                {
                    "Effect": "Allow",
                    "Action": [
                        "autoscaling:SetDesiredCapacity",
                        "autoscaling:TerminateInstanceInAutoScalingGroup",
                    ],
                    "Resource": "*",
                    "Condition": {
                        "StringEquals": {
                            f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"
                        }
                    },
                },
            ],
        },
        sort_keys=True,
    )
