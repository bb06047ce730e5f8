"""The per-user cache of built Go binaries: where it is, its locks, one manifest format and the
one lock-build-publish path every set goes through.

    <cache root>/<set folder>/<key>/        e.g. kube/k8s-v1.35.8-kine-v0.16.4
        bin/...                             the binaries
        src/...                             the generated wrapper modules
        build.log, manifest.json
    <cache root>/<set folder>/<key>.lock    flock held while the set is built

A build runs in a staging folder beside its final one and appears in one rename, so a
half-built set is never found. Folders written before this layout carry ``engine.json`` (the
engine) or ``build-info.json`` (the other sets) instead of ``manifest.json``: both still read.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .gotool import MINIMUM_GO, GoError, GoTool, Progress, format_elapsed

T = TypeVar("T")

MANIFEST = "manifest.json"
ENGINE_MANIFEST = "engine.json"
"""Written by the engine bootstrap before the build wing (read, never written)."""
BUILD_INFO = "build-info.json"
"""Written by the other sets before the build wing (read, never written)."""
FAILED_LOG = "last-failed-build.log"


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """``${MODELPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/modelplane}``."""
    env = os.environ if env is None else env
    if env.get("MODELPLANE_CACHE_DIR"):
        return Path(env["MODELPLANE_CACHE_DIR"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(xdg).expanduser() / "modelplane"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- binaries


class Binary:
    """A class attribute naming one binary of a `BinDir`: ``bin_dir / name`` on an instance."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: BinDir | None, owner: type | None = None) -> Path:
        if obj is None:
            raise AttributeError(self.name)
        return obj.bin_dir / self.name


@dataclass(frozen=True)
class BinDir:
    """A set's ``bin/`` folder; complete when every one of ``COMMANDS`` is executable."""

    bin_dir: Path
    COMMANDS: ClassVar[tuple[str, ...]] = ()

    def all_paths(self) -> list[Path]:
        return [self.bin_dir / name for name in self.COMMANDS]

    def complete(self) -> bool:
        return all(p.is_file() and os.access(p, os.X_OK) for p in self.all_paths())


# --------------------------------------------------------------------------- the manifest


@dataclass(frozen=True)
class Manifest:
    """What a cache folder holds and how it was made."""

    set: str
    versions: dict[str, str]
    source: str = "go-build"
    """``go-build``, ``official`` (Pulumi's archives) or ``installed`` (linked from PATH)."""
    go: str | None = None
    seconds: float = 0.0
    built_at: str = field(default_factory=now)
    details: dict[str, Any] = field(default_factory=dict)

    def write(self, root: Path) -> None:
        data = asdict(self)
        (root / MANIFEST).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def has_manifest(root: Path) -> bool:
    return any((root / name).is_file() for name in (MANIFEST, ENGINE_MANIFEST, BUILD_INFO))


def read_manifest(root: Path, set_name: str = "") -> Manifest:
    """The folder's manifest (``manifest.json``, else one written before the build wing)."""
    for name, convert in (
        (MANIFEST, _current),
        (ENGINE_MANIFEST, _engine_json),
        (BUILD_INFO, _build_info),
    ):
        path = root / name
        if path.is_file():
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError(f"{path} is not a JSON object")
            try:
                return convert(data, set_name)
            except (KeyError, TypeError) as exc:
                raise ValueError(f"{path}: unexpected content ({exc})") from None
    raise FileNotFoundError(f"{root} has no {MANIFEST}")


def _current(data: dict[str, Any], _set: str) -> Manifest:
    return Manifest(**data)


def _engine_json(data: dict[str, Any], _set: str) -> Manifest:
    return Manifest(
        set="engine",
        versions={"pulumi": data["pulumi"], "kubernetes": data["kubernetes"]},
        source=data.get("source", "go-build"),
        seconds=data.get("seconds", 0.0),
        built_at=data.get("created", ""),
        details={"wanted": data.get("wanted"), "sources": data.get("details")},
    )


def _build_info(data: dict[str, Any], set_name: str) -> Manifest:
    own = ("go", "seconds", "built_at")
    return Manifest(
        set=set_name,
        versions={k: v for k, v in data.items() if k not in own and isinstance(v, str)},
        go=data.get("go"),
        seconds=data.get("seconds", 0.0),
        built_at=data.get("built_at", ""),
        details={k: v for k, v in data.items() if k not in own and not isinstance(v, str)},
    )


# --------------------------------------------------------------------------- lock and staging


@contextlib.contextmanager
def locked(path: Path, what: str, say: Progress | None = None) -> Iterator[None]:
    """An exclusive flock on ``path``: one process builds ``what``, the others wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is not None:
                say(f"another process is building {what}; waiting for {path}")
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def lock_path(root: Path) -> Path:
    """``<root>.lock``, beside the set's folder."""
    return root.parent / f"{root.name}.lock"


def clean_stale_staging(base: Path, name: str = "") -> None:
    """Remove staging folders left by interrupted builds of ``name`` (every set's if empty);
    call with the lock held."""
    if not base.is_dir():
        return
    tail = f"{name}-" if name else ""
    for path in base.iterdir():
        if path.name.startswith((f".staging-{tail}", f".old-{tail}")):
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def staged(base: Path, name: str, say: Progress | None = None) -> Iterator[Path]:
    """A fresh folder (with ``bin/``) beside the final ones (same file system, so `publish`'s
    rename is atomic). If the body raises, the folder goes and its build.log is kept as
    ``<base>/last-failed-build.log``."""
    base.mkdir(parents=True, exist_ok=True)
    path = base / f".staging-{name}-{os.getpid()}-{int(time.time())}"
    shutil.rmtree(path, ignore_errors=True)
    (path / "bin").mkdir(parents=True)
    try:
        yield path
    except BaseException:
        if (path / "build.log").is_file():
            shutil.copyfile(path / "build.log", base / FAILED_LOG)
            if say is not None:
                say(f"build failed; the Go commands' output is in {base / FAILED_LOG}")
        raise
    finally:
        shutil.rmtree(path, ignore_errors=True)


def publish(staging: Path, final: Path, manifest: Manifest) -> Path:
    """Write the manifest and move a finished staging folder into place (replacing an incomplete
    one); return the final folder."""
    manifest.write(staging)
    staging.chmod(0o755)
    (staging / "bin").chmod(0o755)
    if final.exists():
        old = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.rename(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.rename(staging, final)
    return final


# --------------------------------------------------------------------------- the one path

Build = Callable[[GoTool, Path], Manifest]
"""Builds a set into a staging folder (binaries into ``<staging>/bin``); returns its manifest."""


def ensure_built(
    root: Path,
    cached: Callable[[], T | None],
    build: Build,
    progress: Progress | None,
    *,
    what: str,
    missing: str = "is incomplete",
) -> T:
    """What ``cached()`` finds, else what it finds once ``build`` has built it into ``root``.

    One process builds (it holds ``<root>.lock``); the others wait, then find it built.
    ``what`` names the set in messages; ``missing``: what the error says of ``root/bin`` if
    the build left nothing to find.
    """
    found = cached()
    if found is not None:
        return found
    say: Progress = progress or (lambda _message: None)
    with locked(lock_path(root), what, say):
        found = cached()
        if found is None:
            build_into(root, build, say, what=what)
            found = cached()
    if found is None:
        raise GoError(f"build finished but {root / 'bin'} {missing}")
    return found


def build_into(root: Path, build: Build, say: Progress, *, what: str) -> Path:
    """Run ``build`` in a staging folder with a Go tool logging to its build.log, then publish
    it as ``root`` with the manifest (the Go version and the time taken filled in)."""
    started = time.monotonic()
    clean_stale_staging(root.parent, root.name)
    with staged(root.parent, root.name, say) as staging:
        go = GoTool(log=staging / "build.log", progress=say)
        go.require(MINIMUM_GO, f"building {what}")
        manifest = build(go, staging)
        elapsed = time.monotonic() - started
        manifest = replace(manifest, go=go.version(), seconds=round(elapsed, 1))
        publish(staging, root, manifest)
    say(f"built {what} in {format_elapsed(elapsed)}: {root / 'bin'}")
    return root


def cached_executable(override_env: str, path: Path) -> Path | None:
    """A single cached binary: ``$override_env`` when set (it must be executable), else
    ``path`` when it is an executable file, else None."""
    override = os.environ.get(override_env)
    if override:
        given = Path(override).expanduser()
        if not (given.is_file() and os.access(given, os.X_OK)):
            raise GoError(f"{override_env}={override} is not an executable")
        return given
    return path if path.is_file() and os.access(path, os.X_OK) else None
