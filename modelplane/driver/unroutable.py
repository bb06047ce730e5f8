"""The clusters whose endpoints the gateway leaves out of ModelService routes.

`reconcile` writes them each round (`.modelplane/routing.json`, scheduling.md rule 6);
every `up`, `preview` and `status` of the fleet directory reads them: they are an input
of the gateway stack (its fingerprint and `MODELPLANE_UNROUTABLE` for its program).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

ROUTING_FILE = "routing.json"
UNROUTABLE_ENV = "MODELPLANE_UNROUTABLE"


def routing_path(state_dir: Path) -> Path:
    return state_dir / ROUTING_FILE


def read_unroutable(state_dir: Path) -> dict[str, str]:
    """Cluster -> why its endpoints are out of the routes (empty when none or unreadable)."""
    try:
        data = json.loads(routing_path(state_dir).read_text(encoding="utf-8"))
        return {str(k): str(v) for k, v in (data.get("unroutable") or {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def write_unroutable(state_dir: Path, clusters: Mapping[str, str]) -> bool:
    """Record the unroutable clusters; True when the set of clusters changed."""
    before = read_unroutable(state_dir)
    path = routing_path(state_dir)
    if not clusters and not path.exists():
        return False
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"unroutable": dict(sorted(clusters.items()))}, indent=2) + "\n",
        encoding="utf-8",
    )
    os.replace(tmp, path)
    return sorted(before) != sorted(clusters)
