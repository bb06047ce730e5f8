"""Cloud clusters: GKECluster (pulumi-gcp) and EKSCluster (pulumi-aws + pulumi-eks)."""
