"""Known cloud machine types: per-node allocatable CPU and memory derived from provisioning.

A node offers pods its capacity minus what the provider reserves for the kubelet and the
system and the hard eviction threshold. The reservation rules are the providers' documented
ones (GKE "Node allocatable"; the EKS optimized AMI's bootstrap); DaemonSets are not counted,
so an InferenceClass sets `allocatable` explicitly to be exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

MIB = 1024 * 1024
GIB = 1024 * MIB

# machine type -> (vCPUs, memory in GiB). GCP's "GB" of machine memory is 2^30 bytes.
GKE_MACHINES: dict[str, tuple[int, float]] = {
    "e2-standard-4": (4, 16),
    "g2-standard-4": (4, 16),
    "g2-standard-8": (8, 32),
    "g2-standard-12": (12, 48),
    "g2-standard-16": (16, 64),
    "g2-standard-24": (24, 96),
    "g2-standard-32": (32, 128),
    "g2-standard-48": (48, 192),
    "g2-standard-96": (96, 384),
    "a2-highgpu-1g": (12, 85),
    "a2-highgpu-2g": (24, 170),
    "a2-highgpu-4g": (48, 340),
    "a2-highgpu-8g": (96, 680),
    "a2-megagpu-16g": (96, 1360),
    "a2-ultragpu-1g": (12, 170),
    "a2-ultragpu-2g": (24, 340),
    "a2-ultragpu-4g": (48, 680),
    "a2-ultragpu-8g": (96, 1360),
    "a3-highgpu-8g": (208, 1872),
    "a3-megagpu-8g": (208, 1872),
    "a3-ultragpu-8g": (224, 2952),
}

EKS_MACHINES: dict[str, tuple[int, float]] = {
    "m6i.xlarge": (4, 16),
    "g5.xlarge": (4, 16),
    "g5.2xlarge": (8, 32),
    "g5.4xlarge": (16, 64),
    "g5.8xlarge": (32, 128),
    "g5.12xlarge": (48, 192),
    "g5.16xlarge": (64, 256),
    "g5.24xlarge": (96, 384),
    "g5.48xlarge": (192, 768),
    "g6.xlarge": (4, 16),
    "g6.2xlarge": (8, 32),
    "g6.4xlarge": (16, 64),
    "g6.8xlarge": (32, 128),
    "g6.12xlarge": (48, 192),
    "g6.16xlarge": (64, 256),
    "g6.24xlarge": (96, 384),
    "g6.48xlarge": (192, 768),
    "g6e.xlarge": (4, 32),
    "g6e.2xlarge": (8, 64),
    "g6e.4xlarge": (16, 128),
    "g6e.8xlarge": (32, 256),
    "g6e.12xlarge": (48, 384),
    "g6e.16xlarge": (64, 512),
    "g6e.24xlarge": (96, 768),
    "g6e.48xlarge": (192, 1536),
    "p4d.24xlarge": (96, 1152),
    "p4de.24xlarge": (96, 1152),
    "p5.48xlarge": (192, 2048),
    "p5e.48xlarge": (192, 2048),
    "p5en.48xlarge": (192, 2048),
}

EVICTION_HARD = 100 * MIB


@dataclass(frozen=True)
class Allocatable:
    """CPU in millicores and memory in bytes one node offers pods."""

    cpu_milli: int
    memory_bytes: int

    @property
    def cpu(self) -> str:
        return f"{self.cpu_milli}m"

    @property
    def memory(self) -> str:
        return f"{self.memory_bytes // MIB}Mi"


def _tiers(total: float, tiers: list[tuple[float, float]], rest: float) -> float:
    """Sum of `rate` x the part of `total` in each (size, rate) tier, `rest` above them."""
    reserved = 0.0
    left = total
    for size, rate in tiers:
        part = min(left, size)
        reserved += part * rate
        left -= part
    return reserved + max(0.0, left) * rest


def reserved_cpu_milli(vcpus: int) -> int:
    """GKE's and the EKS AMI's CPU reservation: 6 % of the first core, 1 % of the second,
    0.5 % of the next two, 0.25 % of the rest (rounded up to a millicore)."""
    return math.ceil(_tiers(vcpus * 1000, [(1000, 0.06), (1000, 0.01), (2000, 0.005)], 0.0025))


def gke_reserved_memory(memory_bytes: int) -> int:
    """25 % of the first 4 GiB, 20 % of the next 4, 10 % of the next 8, 6 % of the next 112,
    2 % of the rest."""
    tiers = [(4 * GIB, 0.25), (4 * GIB, 0.20), (8 * GIB, 0.10), (112 * GIB, 0.06)]
    return int(_tiers(memory_bytes, tiers, 0.02)) + 1


def eks_max_pods(vcpus: int) -> int:
    return 110 if vcpus < 30 else 250


def eks_reserved_memory(vcpus: int) -> int:
    return (11 * eks_max_pods(vcpus) + 255) * MIB


def derived(provider: Literal["GKE", "EKS"], machine: str) -> Allocatable | None:
    """The allocatable of a node of a known machine type, or None."""
    table = GKE_MACHINES if provider == "GKE" else EKS_MACHINES
    known = table.get(machine)
    if known is None:
        return None
    vcpus, gib = known
    memory = int(gib * GIB)
    reserved = gke_reserved_memory(memory) if provider == "GKE" else eks_reserved_memory(vcpus)
    memory_left = (memory - reserved - EVICTION_HARD) // MIB * MIB
    return Allocatable(vcpus * 1000 - reserved_cpu_milli(vcpus), memory_left)
