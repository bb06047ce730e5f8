"""What the dev-fleet benchmarks share: a 3-cluster dev fleet with specs/dev's pools, a copy of
specs/dev to deploy on it with the engine's environment, and caller `dev`'s key (specs/dev
lets only callers with a key in; the dev fleet writes it into its state)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def dev_fleet_with_specs(tmp: Path, name: str) -> Iterator[tuple[Any, Path, dict[str, str]]]:
    """The dev fleet (state below ``tmp``), a copy of specs/dev at ``tmp/name`` and the
    environment to deploy it with; the fleet is taken down when the block ends."""
    from modelplane.devfleet import fleet as devfleet

    state = tmp / "state"
    os.environ[devfleet.STATE_ENV] = str(state)
    fleet = devfleet.up(state, clusters=3, specs=ROOT / "specs" / "dev")
    try:
        specs = tmp / name
        shutil.copytree(
            ROOT / "specs" / "dev",
            specs,
            ignore=shutil.ignore_patterns(".modelplane", "*.lock.yaml", "Pulumi.*.yaml"),
        )
        env = {
            **os.environ,
            "PULUMI_CONFIG_PASSPHRASE": "bench",
            "KUBECONFIG": "",
            "PULUMI_HOME": str(tmp / "pulumi-home"),
        }
        yield fleet, specs, env
    finally:
        devfleet.down(state)


def dev_caller_key() -> str | None:
    """Caller `dev`'s key, from the running dev fleet's state (None without one)."""
    from modelplane.devfleet.fleet import STATE_ENV

    path = Path(os.environ.get(STATE_ENV, "")) / "callers" / "dev"
    return path.read_text().strip() if path.is_file() else None
