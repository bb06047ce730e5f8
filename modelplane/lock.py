"""Read and write the placement lock (`modelplane.lock.yaml`) in its stable format."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml
from pydantic import ValidationError

from modelplane.api.errors import FleetInvalid, SpecError
from modelplane.api.loader import LOCK_FILE, Document, validation_errors, with_marks
from modelplane.api.placement_lock import (
    ClusterAddresses,
    LockedDeployment,
    LockedReplica,
    NetworkLock,
    PlacementLock,
    RoleFootprint,
    duplicate_entries,
)
from modelplane.api.yamlread import MAX_FILE_BYTES, read_yaml

ROLE_ORDER = ("unified", "prefill", "decode")


def default_lock_path(fleet_dir: str | Path) -> Path:
    fleet_dir = Path(fleet_dir)
    return (fleet_dir if fleet_dir.is_dir() else fleet_dir.parent) / LOCK_FILE


def read_lock(path: str | Path) -> PlacementLock:
    """The lock at path; a missing file means no previous placement."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return PlacementLock()
    where = str(path)

    def invalid(message: str, line: int = 0, column: int = 0, at: str = "") -> FleetInvalid:
        return FleetInvalid([SpecError(where, 0, "PlacementLock", at, message, line, column)])

    try:
        if not path.is_file():
            raise invalid("the lock is not a regular file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise invalid(f"the lock is larger than {MAX_FILE_BYTES // 2**20} MiB")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise invalid(f"unreadable lock: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise invalid(f"the lock is not UTF-8 text (byte {exc.start}): {exc.reason}") from None
    docs, problems = read_yaml(text)
    if problems:
        raise FleetInvalid(
            [
                SpecError(where, p.document, "PlacementLock", p.path, p.message, p.line, p.column)
                for p in problems
            ]
        )
    if len(docs) > 1:
        raise invalid("the lock holds more than one YAML document", *docs[1].mark(""))
    if not docs:
        return PlacementLock()
    doc = docs[0]
    try:
        lock = PlacementLock.model_validate(doc.body)
    except ValidationError as exc:
        errors = validation_errors(Document(where, doc.index, doc.body, doc), "PlacementLock", exc)
        raise FleetInvalid(with_marks(errors, {(where, doc.index): doc})) from None
    duplicates = [
        SpecError(where, doc.index, "PlacementLock", at, message)
        for at, message in duplicate_entries(lock)
    ]
    if duplicates:
        raise FleetInvalid(with_marks(duplicates, {(where, doc.index): doc}))
    return lock


def _scalar(value: str) -> str:
    """A YAML scalar exactly as PyYAML would write it on its own."""
    return yaml.safe_dump(value, default_style=None).removesuffix("\n...\n").strip()


def _replica_lines(r: LockedReplica) -> list[str]:
    pools = ", ".join(f"{role}: {_scalar(r.pools[role])}" for role in ROLE_ORDER if role in r.pools)
    lines = [
        f"    - name: {_scalar(r.name)}",
        f"      cluster: {_scalar(r.cluster)}",
        f"      index: {r.index}",
        f"      pools: {{{pools}}}",
    ]
    if r.draining:
        lines.append("      draining: true")
    if r.revision is not None:
        lines.append(f"      revision: {_scalar(r.revision)}")
    if r.surge:
        lines.append("      surge: true")
    if r.footprint is not None:
        roles = ", ".join(
            f"{role}: {_footprint(r.footprint[role])}" for role in ROLE_ORDER if role in r.footprint
        )
        lines.append(f"      footprint: {{{roles}}}")
    return lines


def _footprint(f: RoleFootprint) -> str:
    devices = ", ".join(f"{_scalar(name)}: {f.devices[name]}" for name in sorted(f.devices))
    return (
        f"{{workers: {f.workers}, nodesPerWorker: {f.nodes_per_worker}, devices: {{{devices}}}, "
        f"cpuMillis: {f.cpu_millis}, memoryBytes: {f.memory_bytes}}}"
    )


def _section(name: str, deployments: dict[str, LockedDeployment]) -> list[str]:
    if not deployments:
        return [f"{name}: {{}}"]
    lines = [f"{name}:"]
    for key in sorted(deployments):
        replicas = sorted(deployments[key].replicas, key=lambda r: (r.cluster, r.index))
        lines.append(f"  {_scalar(key)}:")
        count = deployments[key].autoscaled_replicas
        if count is not None:
            lines.append(f"    autoscaledReplicas: {count}")
        if not replicas:
            lines.append("    replicas: []")
            continue
        lines.append("    replicas:")
        for r in replicas:
            lines.extend(_replica_lines(r))
    return lines


ADDRESS_FIELDS = ("source", "block", "nodes", "pods", "vpc", "subnets", "services")


def _addresses(a: ClusterAddresses) -> str:
    parts = []
    for name in ADDRESS_FIELDS:
        value = getattr(a, name)
        if value is None:
            continue
        text = f"[{', '.join(value)}]" if isinstance(value, list) else _scalar(value)
        parts.append(f"{name}: {text}")
    return "{" + ", ".join(parts) + "}"


def _network(network: NetworkLock) -> list[str]:
    if not network.clusters:
        return ["network: {clusters: {}}"]
    lines = ["network:", "  clusters:"]
    for name in sorted(network.clusters):
        lines.append(f"    {_scalar(name)}: {_addresses(network.clusters[name])}")
    return lines


def dump_lock(lock: PlacementLock) -> str:
    """The canonical text: deployments by key, replicas by (cluster, index); then the
    removed deployments whose stacks still run, the same way (only when there are any);
    then the fleet address plan, clusters by name."""
    lines = ["apiVersion: modelplane.ai/v1alpha1", "kind: PlacementLock"]
    lines += _section("deployments", lock.deployments)
    if lock.removed:
        lines += _section("removed", lock.removed)
    if lock.network is not None:
        lines += _network(lock.network)
    return "\n".join(lines) + "\n"


def write_lock(path: str | Path, lock: PlacementLock) -> bool:
    """Write atomically; returns False (and leaves the file untouched) when unchanged."""
    path = Path(path)
    text = dump_lock(lock)
    try:
        if path.is_file() and path.read_bytes() == text.encode("utf-8"):
            return False
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".lock-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return True
