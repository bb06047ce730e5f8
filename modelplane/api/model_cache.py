"""ModelCache: model weights staged once per cluster on ReadWriteMany storage."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import Field, model_validator

from modelplane.api.base import API_VERSION, LabelSelector, Namespaced, ObjectMeta, Strict


class AuthSecret(Strict):
    name: str = Field(min_length=1, max_length=253)
    """The secret holding the Hugging Face token."""
    key: str = "HF_TOKEN"
    """The key within the secret (default HF_TOKEN)."""


class HuggingFaceSource(Strict):
    repo: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*/[-A-Za-z0-9_.]+$")
    """The Hugging Face repository (owner/name)."""
    revision: str = "main"
    """The branch, tag or commit (default main)."""
    auth_secret: AuthSecret | None = None
    """The token for gated or private repositories."""


class FilestoreOptions(Strict):
    tier: Literal["Zonal", "Regional"] = "Zonal"
    """GKE: the Filestore tier of the cache's instance on each GKE cluster. Zonal (default):
    260 MiB/s read per TiB; Regional: replicated across zones, 120 MiB/s per TiB up to
    9,984 GiB, 260 above (docs/api.md, "ModelCache")."""


class ModelCacheSpec(Strict):
    source: Literal["HuggingFace"]
    """Where the weights come from: HuggingFace; the block of that name is required."""
    hugging_face: HuggingFaceSource | None = None
    """The Hugging Face repository to stage."""
    size_gib: int = Field(alias="sizeGiB", ge=1, le=100_000)
    """The weights' size in GiB (1..100000): the volume holds at least this much."""
    throughput_mibps: int | None = Field(default=None, alias="throughputMiBps", ge=1, le=100_000)
    """The read throughput (MiB/s) a replica loading the weights should get. GKE sizes the
    Filestore instance for it (throughput scales with capacity); EKS's elastic EFS scales on
    its own (up to 1,500 MiB/s per pod). Absent: the volume is sized for the bytes alone."""
    filestore: FilestoreOptions = Field(default_factory=FilestoreOptions)
    """GKE: the Filestore tier."""
    cluster_selector: LabelSelector = Field(default_factory=LabelSelector)
    """Which InferenceClusters get a copy, by their labels; empty: all."""

    @model_validator(mode="after")
    def _block_named_by_source(self) -> ModelCacheSpec:
        if self.source == "HuggingFace" and self.hugging_face is None:
            raise ValueError("source is HuggingFace, so the 'huggingFace' block is required")
        return self


class ModelCache(Namespaced):
    api_version: Literal["modelplane.ai/v1alpha1"] = API_VERSION
    kind: Literal["ModelCache"] = "ModelCache"
    metadata: ObjectMeta
    spec: ModelCacheSpec


REVISIONS_DIR = "revisions"
"""Each source (`repo@revision`) a cache holds has a directory of its own under this one of
the volume: a new revision downloads beside the one replicas still read (docs/api.md,
"ModelCache")."""


def cache_source(cache: ModelCache) -> str | None:
    """What the cache holds: `repo@revision` (None: a source without one)."""
    hf = cache.spec.hugging_face
    return f"{hf.repo}@{hf.revision}" if hf is not None else None


def source_dir(source: str) -> str:
    """The volume's directory of one source, relative to its root: `revisions/<16 hex>` (a
    digest: branch names hold `/`, and every source needs a name of its own)."""
    return f"{REVISIONS_DIR}/{hashlib.sha256(source.encode()).hexdigest()[:16]}"
