"""ModelCache volumes on GKE and EKS (issue 36, N7): a Filestore instance sized for the bytes
and the `throughputMiBps` hint in its tier's bands, an error above the tier's maximum naming
file, object and field, and the load time `plan` shows (docs/api.md, "ModelCache")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelplane.api.cache_storage import (
    EFS_CLIENT_READ_MIBPS,
    CacheTooLarge,
    efs_volume,
    filestore_volume,
)
from modelplane.api.loader import load_fleet
from modelplane.planning import plan_fleet
from tests.cli.helpers import run
from tests.spec_docs import existing_cluster, gpu_class, write_fleet

SIZING = [
    # (size GiB, throughput MiB/s, tier) -> (capacity GiB, read MiB/s)
    # The tier's minimum: 1 TiB of Zonal (260 MiB/s per TiB) however small the model.
    (40, None, "Zonal", 1024, 260),
    # Bytes alone past the minimum: rounded up to the 256 GiB step.
    (1100, None, "Zonal", 1280, 325),
    # Sized for throughput: 1,000 MiB/s needs 3.85 TiB -> 4 TiB.
    (300, 1000, "Zonal", 4096, 1040),
    # Past the lower band's 9,984 GiB: the higher band, 10 TiB and 2.5 TiB steps.
    (300, 2600, "Zonal", 10240, 2600),
    (300, 2601, "Zonal", 12800, 3250),
    # The top: 100 TiB, 26,000 MiB/s.
    (100_000, None, "Zonal", 102400, 26000),
    (300, 26000, "Zonal", 102400, 26000),
    # Regional: from 100 GiB (one 256 GiB step), 120 MiB/s per TiB up to 9,984 GiB.
    (40, None, "Regional", 256, 30),
    (300, 1000, "Regional", 8704, 1020),
    (300, 1200, "Regional", 10240, 2600),
]


@pytest.mark.parametrize(("size", "throughput", "tier", "capacity", "read"), SIZING)
def test_filestore_capacity_and_throughput(
    size: int, throughput: int | None, tier: Any, capacity: int, read: int
) -> None:
    volume = filestore_volume(size, throughput, tier)
    assert (volume.capacity_gib, volume.read_mibps) == (capacity, read)
    assert volume.capacity_gib >= size
    if throughput is not None:
        assert volume.read_mibps >= throughput


@pytest.mark.parametrize("tier", ["Zonal", "Regional"])
def test_filestore_above_the_tier_maximum_is_refused(tier: Any) -> None:
    with pytest.raises(CacheTooLarge, match=f"Filestore {tier}'s maximum of 100 TiB"):
        filestore_volume(300, 26001, tier)


def test_load_time_is_the_bytes_over_the_read_throughput() -> None:
    volume = filestore_volume(300, 1000)
    assert volume.load_seconds(300) == pytest.approx(300 * 1024 / 1040)
    assert volume.describe(300) == "Filestore Zonal 4 TiB, ~1,040 MiB/s read: 300 GiB in ~5 min"
    efs = efs_volume(40)
    assert efs.read_mibps == EFS_CLIENT_READ_MIBPS
    assert efs.describe(40) == "EFS elastic, ~1,500 MiB/s read: 40 GiB in ~27 s"


def _cache(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {"name": "weights", "namespace": "team"},
        "spec": {
            "source": "HuggingFace",
            "huggingFace": {"repo": "org/model"},
            "sizeGiB": 300,
            **spec,
        },
    }


def _gke_cluster(name: str = "g1") -> dict[str, Any]:
    doc = existing_cluster(name)
    doc["spec"]["cluster"] = {"source": "GKE", "gke": {"project": "p", "region": "us-central1"}}
    doc["spec"]["nodePools"][0]["zones"] = ["us-central1-a"]
    return doc


def _existing_with_storage() -> dict[str, Any]:
    doc = existing_cluster()
    doc["spec"]["cluster"]["existing"]["cache"] = {"storageClassName": "cephfs"}
    return doc


@pytest.mark.parametrize(
    ("cache", "clusters", "path", "fragment"),
    [
        (
            _cache(throughputMiBps=30000),
            [_gke_cluster()],
            "spec.throughputMiBps",
            "on GKE cluster(s) g1 the cache is one Filestore instance and needs more than "
            "Filestore Zonal's maximum of 100 TiB (26,000 MiB/s read) for 300 GiB at 30,000",
        ),
        (
            _cache(throughputMiBps=1200, filestore={"tier": "Regional"}),
            [_gke_cluster()],
            None,
            None,
        ),
        # Only Existing clusters covered: their storage is the platform's, no Filestore limit.
        (_cache(throughputMiBps=30000), [_existing_with_storage()], None, None),
        (_cache(filestore={"tier": "Basic"}), [_gke_cluster()], "spec.filestore.tier", "Zonal"),
    ],
    ids=["above-the-maximum", "regional-fits", "not-on-gke", "unknown-tier"],
)
def test_cache_validation_names_file_object_and_field(
    tmp_path: Path,
    cache: dict[str, Any],
    clusters: list[dict[str, Any]],
    path: str | None,
    fragment: str | None,
) -> None:
    write_fleet(tmp_path, [gpu_class(provider="GKE"), *clusters, cache])
    errors = [e for e in load_fleet(tmp_path).errors if e.object.startswith("ModelCache")]
    if path is None:
        assert errors == []
        return
    [error] = errors
    assert (error.path, error.object) == (path, "ModelCache team/weights")
    assert error.file.endswith("fleet.yaml")
    assert fragment is not None and fragment in error.message


def test_plan_shows_each_caches_load_time(tmp_path: Path) -> None:
    eks = existing_cluster("e1", class_name="l4e")
    eks["spec"]["cluster"] = {"source": "EKS", "eks": {"region": "us-west-2"}}
    eks["spec"]["nodePools"][0]["zones"] = ["us-west-2a"]
    classes = [gpu_class(provider="GKE"), {**gpu_class("l4e"), "spec": _eks_recipe()}]
    onprem = _existing_with_storage()
    write_fleet(tmp_path, [*classes, _gke_cluster(), eks, onprem, _cache(throughputMiBps=1000)])
    outcome = plan_fleet(tmp_path)
    assert not outcome.errors, outcome.errors
    caches = outcome.as_json()["caches"]["team/weights"]
    assert caches["g1"] == {
        "storage": "Filestore Zonal",
        "capacityGiB": 4096,
        "readMiBps": 1040,
        "loadSeconds": 295,
    }
    assert caches["e1"]["readMiBps"] == EFS_CLIENT_READ_MIBPS
    assert "c1" not in caches  # an Existing cluster's storage is the platform's
    # The table output, as a user runs it.
    shown = run("plan", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert (
        "cache team/weights on g1: Filestore Zonal 4 TiB, ~1,040 MiB/s read: 300 GiB in ~5 min"
        in text
    )
    assert "cache team/weights on e1: EFS elastic, ~1,500 MiB/s read: 300 GiB in ~3 min" in text


def _eks_recipe() -> dict[str, Any]:
    spec = gpu_class()["spec"]
    spec["provisioning"] = {
        "provider": "EKS",
        "eks": {
            "instanceType": "g6.xlarge",
            "diskSizeGb": 100,
            "accelerator": {"type": "nvidia-l4", "count": 1},
        },
    }
    return spec
