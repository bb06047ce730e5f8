"""How big a ModelCache's cloud volume is, and how fast a replica loads from it (pure).

GKE: each cache's PVC is one Filestore instance (the Filestore CSI driver provisions one per
volume), whose read throughput scales with its capacity. So a cache is sized for the larger
of its bytes and its `throughputMiBps` hint, in its tier's capacity bands:

| tier | band | capacity | step | read per TiB |
| --- | --- | --- | --- | --- |
| Zonal | lower | 1 TiB .. 9,984 GiB | 256 GiB | 260 MiB/s |
| Zonal | higher | 10 TiB .. 100 TiB | 2.5 TiB | 260 MiB/s |
| Regional | lower | 100 GiB .. 9,984 GiB | 256 GiB | 120 MiB/s |
| Regional | higher | 10 TiB .. 100 TiB | 2.5 TiB | 260 MiB/s |

Sources: the Filestore "Performance" page (per tier, read throughput at the bands' ends:
Zonal 260 MiB/s at 1 TiB, 2,600 at 10 TiB, 26,000 at 100 TiB; Regional 120 at 1 TiB, 1,170 at
9.75 TiB, 2,600 at 10 TiB; "performance scales linearly with the capacity"), the Zonal tier
page (scaling in 256 GiB and 2.5 TiB units; a band is chosen for good at creation), and the
capacity ranges the GKE Filestore CSI driver enforces (kubernetes-sigs/gcp-filestore-csi-
driver `pkg/csi_driver/controller.go`: zonal 1 TiB..9984 GiB and 10..100 TiB, regional
100 GiB..9984 GiB and 10..100 TiB). These are the instance's limits: one client (a pod
loading its weights) may get less (Filestore recommends `nconnect` for few clients).

EKS: every cache is an access point on the cluster's one EFS file system in elastic
throughput mode, which scales with the load: up to 20..60 GiB/s per file system (by region)
and 1,500 MiB/s per client (EFS user guide, "Amazon EFS performance specifications").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from modelplane.errors import UserError

FilestoreTier = Literal["Zonal", "Regional"]
TIB_GIB = 1024


@dataclass(frozen=True)
class Band:
    min_gib: int
    max_gib: int
    step_gib: int
    read_mibps_per_tib: int

    def capacity_for(self, need_gib: float) -> int:
        """The smallest capacity of this band that holds ``need_gib`` (maybe above the max)."""
        gib = max(self.min_gib, math.ceil(need_gib))
        return math.ceil(gib / self.step_gib) * self.step_gib


FILESTORE_BANDS: dict[str, tuple[Band, Band]] = {
    "Zonal": (Band(1024, 9984, 256, 260), Band(10240, 102400, 2560, 260)),
    "Regional": (Band(100, 9984, 256, 120), Band(10240, 102400, 2560, 260)),
}
EFS_CLIENT_READ_MIBPS = 1500
"""EFS elastic throughput: the most one client (one pod) reads, MiB/s."""


@dataclass(frozen=True)
class CacheVolume:
    """A cache's volume on one cloud: its capacity and the read throughput a loading replica
    can expect (the instance's for Filestore, a client's for EFS)."""

    storage: str
    capacity_gib: int
    read_mibps: int

    def load_seconds(self, size_gib: int) -> float:
        """How long reading ``size_gib`` of weights takes at ``read_mibps``."""
        return size_gib * 1024 / self.read_mibps

    def describe(self, size_gib: int) -> str:
        """E.g. `Filestore Zonal 4 TiB, ~1,040 MiB/s read: 300 GiB in ~5 min`."""
        minutes = self.load_seconds(size_gib) / 60
        took = f"~{minutes:.0f} min" if minutes >= 1 else f"~{minutes * 60:.0f} s"
        sized = f" {_gib(self.capacity_gib)}" if self.storage.startswith("Filestore") else ""
        return f"{self.storage}{sized}, ~{self.read_mibps:,} MiB/s read: {size_gib:,} GiB in {took}"


def _gib(gib: int) -> str:
    return f"{gib / TIB_GIB:g} TiB" if gib % 256 == 0 and gib >= TIB_GIB else f"{gib} GiB"


class CacheTooLarge(UserError, ValueError):
    """A cache larger than its storage tier can hold (a spec error)."""


def filestore_volume(
    size_gib: int, throughput_mibps: int | None = None, tier: FilestoreTier = "Zonal"
) -> CacheVolume:
    """The Filestore instance for a cache of ``size_gib`` that should read at
    ``throughput_mibps`` (default: whatever its size gives): the first band of the tier
    that holds both, at the smallest capacity step. CacheTooLarge above the tier's maximum."""
    bands = FILESTORE_BANDS[tier]
    for band in bands:
        need = float(size_gib)
        if throughput_mibps is not None:
            need = max(need, throughput_mibps / band.read_mibps_per_tib * TIB_GIB)
        capacity = band.capacity_for(need)
        if capacity <= band.max_gib:
            read = capacity * band.read_mibps_per_tib // TIB_GIB
            return CacheVolume(f"Filestore {tier}", capacity, read)
    top = bands[-1]
    most = top.max_gib * top.read_mibps_per_tib // TIB_GIB
    raise CacheTooLarge(
        f"needs more than Filestore {tier}'s maximum of {_gib(top.max_gib)} "
        f"({most:,} MiB/s read) for {size_gib:,} GiB"
        + (f" at {throughput_mibps:,} MiB/s" if throughput_mibps is not None else "")
    )


def efs_volume(size_gib: int) -> CacheVolume:
    """An access point on the cluster's elastic-throughput EFS file system."""
    return CacheVolume("EFS elastic", size_gib, EFS_CLIENT_READ_MIBPS)
