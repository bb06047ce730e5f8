"""The per-user engine cache: where it is, its lock, its manifests and atomic installs."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The binaries every engine's bin/ holds.
BINARIES = (
    "pulumi",
    "pulumi-language-python",
    "pulumi-language-python-exec",
    "pulumi-resource-kubernetes",
)
MANIFEST = "engine.json"


def cache_base(env: dict[str, str] | None = None) -> Path:
    """`${MODELPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/modelplane}/engine`."""
    env = dict(os.environ) if env is None else env
    if env.get("MODELPLANE_CACHE_DIR"):
        root = Path(env["MODELPLANE_CACHE_DIR"]).expanduser()
    else:
        xdg = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
        root = Path(xdg).expanduser() / "modelplane"
    return root / "engine"


def engine_dir(key: str, base: Path | None = None) -> Path:
    return (base or cache_base()) / key


def is_complete(root: Path) -> bool:
    """A finished engine: its manifest and every binary, executable."""
    if not (root / MANIFEST).is_file():
        return False
    return all(os.access(root / "bin" / name, os.X_OK) for name in BINARIES)


def read_manifest(root: Path) -> dict[str, Any]:
    data = json.loads((root / MANIFEST).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{root / MANIFEST} is not a JSON object")
    return data


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def locked(
    base: Path | None = None, on_wait: Callable[[str], None] | None = None
) -> Iterator[None]:
    """An exclusive lock over the whole cache, so two bootstraps never build at once."""
    base = base or cache_base()
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(f"[engine] waiting for another engine bootstrap ({base / '.lock'}) ...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def staging_dir(key: str, base: Path | None = None) -> Path:
    """A fresh folder beside the final one (same file system, so the final rename is atomic)."""
    base = base or cache_base()
    base.mkdir(parents=True, exist_ok=True)
    path = base / f".staging-{key}-{os.getpid()}-{int(time.time())}"
    shutil.rmtree(path, ignore_errors=True)
    (path / "bin").mkdir(parents=True)
    return path


def publish(staging: Path, key: str, base: Path | None = None) -> Path:
    """Move a finished staging folder into place (replacing an incomplete one) and return it."""
    final = engine_dir(key, base)
    if final.exists():
        old = final.with_name(f".old-{key}-{os.getpid()}")
        os.rename(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.rename(staging, final)
    return final


def clean_stale_staging(base: Path | None = None) -> None:
    """Remove staging folders left by interrupted builds (call with the lock held)."""
    base = base or cache_base()
    if not base.is_dir():
        return
    for path in base.iterdir():
        if path.name.startswith((".staging-", ".old-")):
            shutil.rmtree(path, ignore_errors=True)
