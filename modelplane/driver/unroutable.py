"""The clusters and replicas whose endpoints the gateway leaves out of ModelService routes.

`reconcile` writes them each round (`.modelplane/routing.json`: the unroutable clusters,
scheduling.md rule 6, and the replicas not Ready yet); every `up`, `preview` and `status` of
the fleet directory reads them: they are an input of the gateway stack (its fingerprint and
`MODELPLANE_UNROUTABLE` for its program: cluster names, and `replica:<name>` per replica).
The replicas not Ready are what a running `reconcile` sees: it clears them when it stops
(`clear_unready`), so that a later plain `up` routes every placed replica again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

ROUTING_FILE = "routing.json"
UNROUTABLE_ENV = "MODELPLANE_UNROUTABLE"
REPLICA_PREFIX = "replica:"


def routing_path(state_dir: Path) -> Path:
    return state_dir / ROUTING_FILE


def _sections(state_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(unroutable clusters, unready replicas) as recorded; empty when none or unreadable."""
    try:
        data = json.loads(routing_path(state_dir).read_text(encoding="utf-8"))
        clusters, replicas = (
            {str(k): str(v) for k, v in (data.get(key) or {}).items()}
            for key in ("unroutable", "unready")
        )
    except (OSError, ValueError, AttributeError, TypeError):
        return {}, {}
    return clusters, replicas


def read_unroutable(state_dir: Path) -> dict[str, str]:
    """Cluster -> why its endpoints are out of the routes (empty when none or unreadable)."""
    return _sections(state_dir)[0]


def read_unready(state_dir: Path) -> dict[str, str]:
    """Replica -> why it is out of the routes until Ready (empty when none or unreadable)."""
    return _sections(state_dir)[1]


def route_exclusions(state_dir: Path) -> tuple[str, ...]:
    """What the gateway stack leaves out: cluster names and `replica:<name>` entries."""
    clusters, replicas = _sections(state_dir)
    return tuple(sorted(clusters) + sorted(REPLICA_PREFIX + r for r in replicas))


def write_unroutable(
    state_dir: Path, clusters: Mapping[str, str], unready: Mapping[str, str] | None = None
) -> bool:
    """Record the unroutable clusters (and the replicas not Ready); True when the set of
    clusters changed."""
    before = read_unroutable(state_dir)
    path = routing_path(state_dir)
    if not clusters and not unready and not path.exists():
        return False
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    data: dict[str, dict[str, str]] = {"unroutable": dict(sorted(clusters.items()))}
    if unready:
        data["unready"] = dict(sorted(unready.items()))
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return sorted(before) != sorted(clusters)


def clear_unready(state_dir: Path) -> bool:
    """Forget the replicas not Ready (reconcile stopping), keeping the unroutable clusters;
    True when there were some."""
    clusters, replicas = _sections(state_dir)
    if not replicas:
        return False
    write_unroutable(state_dir, clusters)
    return True
