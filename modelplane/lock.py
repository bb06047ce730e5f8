"""Read and write the placement lock (`modelplane.lock.yaml`) in its stable format."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml
from pydantic import ValidationError

from modelplane.api.errors import FleetInvalid, SpecError
from modelplane.api.loader import LOCK_FILE, Document, validation_errors
from modelplane.api.placement_lock import LockedReplica, PlacementLock

ROLE_ORDER = ("unified", "prefill", "decode")


def default_lock_path(fleet_dir: str | Path) -> Path:
    fleet_dir = Path(fleet_dir)
    return (fleet_dir if fleet_dir.is_dir() else fleet_dir.parent) / LOCK_FILE


def read_lock(path: str | Path) -> PlacementLock:
    """The lock at path; a missing file means no previous placement."""
    path = Path(path)
    if not path.exists():
        return PlacementLock()
    try:
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise FleetInvalid(
            [SpecError(str(path), 0, "PlacementLock", "", f"unreadable lock: {exc}")]
        ) from None
    if body is None:
        return PlacementLock()
    try:
        return PlacementLock.model_validate(body)
    except ValidationError as exc:
        raise FleetInvalid(
            validation_errors(Document(str(path), 0, body), "PlacementLock", exc)
        ) from None


def _scalar(value: str) -> str:
    """A YAML scalar exactly as PyYAML would write it on its own."""
    return yaml.safe_dump(value, default_style=None).removesuffix("\n...\n").strip()


def _replica_lines(r: LockedReplica) -> list[str]:
    pools = ", ".join(f"{role}: {_scalar(r.pools[role])}" for role in ROLE_ORDER if role in r.pools)
    return [
        f"    - name: {_scalar(r.name)}",
        f"      cluster: {_scalar(r.cluster)}",
        f"      index: {r.index}",
        f"      pools: {{{pools}}}",
    ]


def dump_lock(lock: PlacementLock) -> str:
    """The canonical text: deployments by key, replicas by (cluster, index)."""
    lines = ["apiVersion: modelplane.ai/v1alpha1", "kind: PlacementLock"]
    if not lock.deployments:
        lines.append("deployments: {}")
    else:
        lines.append("deployments:")
        for key in sorted(lock.deployments):
            replicas = sorted(lock.deployments[key].replicas, key=lambda r: (r.cluster, r.index))
            lines.append(f"  {_scalar(key)}:")
            if not replicas:
                lines.append("    replicas: []")
                continue
            lines.append("    replicas:")
            for r in replicas:
                lines.extend(_replica_lines(r))
    return "\n".join(lines) + "\n"


def write_lock(path: str | Path, lock: PlacementLock) -> bool:
    """Write atomically; returns False (and leaves the file untouched) when unchanged."""
    path = Path(path)
    text = dump_lock(lock)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    fd, tmp = tempfile.mkstemp(prefix=".lock-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return True
