"""The real Pulumi engine for modelplane: the `pulumi` CLI, the Python language host and the
Kubernetes provider plugin, found on the machine or built from Go modules into a per-user cache.

    root = ensure_engine()                       # finds or builds (slow the first time)
    cmd = PulumiCommand(root=str(engine_root())) # <root>/bin/pulumi, version check passes
    env = engine_env()                           # no update checks, no plugin downloads
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .bootstrap import SETUP_COMMAND, EngineBuildFailed, EngineNotFound, find_engine
from .bootstrap import ensure_engine as _ensure_engine

__all__ = [
    "SETUP_COMMAND",
    "EngineBuildFailed",
    "EngineNotFound",
    "engine_env",
    "engine_root",
    "ensure_engine",
]


def engine_root() -> Path:
    """The engine root whose `bin/` holds everything; never builds, never uses the network.

    Raises EngineNotFound (with the set-up command to run) when there is none yet.
    """
    root = find_engine()
    if root is None:
        raise EngineNotFound(
            "the Pulumi engine is not set up for this user yet: run "
            f"`{SETUP_COMMAND}` (builds it from Go modules the first time; takes many minutes)"
        )
    return root


def ensure_engine(progress: Callable[[str], None] = print, rebuild: bool = False) -> Path:
    """Find the engine, or make it (official archives if reachable, else a Go build)."""
    return _ensure_engine(progress, rebuild=rebuild)


def engine_env() -> dict[str, str]:
    """Environment for every engine command: the engine's bin/ first on PATH, no network use."""
    bin_dir = engine_root() / "bin"
    path = os.environ.get("PATH", "")
    return {
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PATH": f"{bin_dir}{os.pathsep}{path}" if path else str(bin_dir),
    }
