"""Finding or making the engine, in the order of issue 5: installed, official archives, Go build."""

from __future__ import annotations

import datetime
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import cache
from .gobuild import EngineBuilder
from .gotool import GoTool, format_elapsed
from .installed import find_installed, link_into
from .official import OfficialUnavailable, install_official, installer_reachable
from .plugininfo import cli_version
from .resolve import choose_sources
from .sources import EngineSources, all_fallback_sources
from .versions import EngineVersions, wanted_versions

Progress = Callable[[str], None]

SETUP_COMMAND = "python -m modelplane.engine install"
#: `auto` (default), `exact` or `fallback`: which Go module sources a build uses.
SOURCES_ENV = "MODELPLANE_ENGINE_SOURCES"
#: Set to `0` to skip the get.pulumi.com probe (preference 2).
OFFICIAL_ENV = "MODELPLANE_ENGINE_OFFICIAL"


class EngineNotFound(RuntimeError):
    """No usable engine is cached or installed; the message says how to make one."""


class EngineBuildFailed(RuntimeError):
    """Making the engine failed; the message says which step and why."""


def _quiet(_: str) -> None:
    return None


def candidate_keys(wanted: EngineVersions) -> list[str]:
    """Cache folders that can serve `wanted`: the exact one, then the pinned fallback builds."""
    keys = [wanted.key]
    for fallback in all_fallback_sources(wanted):
        if fallback.versions.key not in keys:
            keys.append(fallback.versions.key)
    return keys


def find_engine(
    wanted: EngineVersions | None = None, base: Path | None = None, progress: Progress = _quiet
) -> Path | None:
    """An engine root without building or network: cached exact, installed (linked), fallback."""
    wanted = wanted or wanted_versions()
    base = base or cache.cache_base()
    exact, *others = candidate_keys(wanted)
    root = cache.engine_dir(exact, base)
    if cache.is_complete(root):
        return root
    installed = find_installed(wanted, progress=progress, skip_under=base)
    if installed is not None:
        return _record_installed(wanted, installed, base, progress)
    for key in others:
        root = cache.engine_dir(key, base)
        if cache.is_complete(root):
            return root
    return None


def _record_installed(
    wanted: EngineVersions, binaries: dict[str, Path], base: Path, progress: Progress
) -> Path:
    with cache.locked(base):
        staging = cache.staging_dir(wanted.key, base)
        link_into(staging / "bin", binaries)
        cache.write_manifest(
            staging,
            _manifest(wanted, wanted, "installed", 0.0, {k: str(v) for k, v in binaries.items()}),
        )
        root = cache.publish(staging, wanted.key, base)
    progress(f"[engine] using the installed engine ({binaries['pulumi']}), linked into {root}")
    return root


def _manifest(
    wanted: EngineVersions, built: EngineVersions, source: str, seconds: float, details: Any
) -> dict[str, Any]:
    return {
        "pulumi": built.pulumi,
        "kubernetes": built.kubernetes,
        "wanted": {"pulumi": wanted.pulumi, "kubernetes": wanted.kubernetes},
        "source": source,
        "seconds": round(seconds, 1),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "details": details,
    }


def ensure_engine(progress: Progress = print, rebuild: bool = False) -> Path:
    """The engine root (its bin/ holds pulumi, the Python host and the Kubernetes provider).

    Finds it (cache, then an installed engine of the right versions) or makes it: Pulumi's
    official archives when get.pulumi.com answers, else a build from Go modules. `rebuild`
    makes it again even if cached (the new one replaces the old one atomically).
    """
    wanted = wanted_versions()
    base = cache.cache_base()
    found = None if rebuild else find_engine(wanted, base, progress)
    if found is not None:
        return found
    with cache.locked(base, on_wait=progress):
        for key in [] if rebuild else candidate_keys(wanted):
            if cache.is_complete(cache.engine_dir(key, base)):
                return cache.engine_dir(key, base)
        cache.clean_stale_staging(base)
        if os.environ.get(OFFICIAL_ENV, "1") != "0":
            root = _try_official(wanted, base, progress)
            if root is not None:
                return root
        return _build_from_go(wanted, base, progress, rebuild)


def _try_official(wanted: EngineVersions, base: Path, progress: Progress) -> Path | None:
    progress("[engine] probing get.pulumi.com for the official release archives ...")
    if not installer_reachable():
        progress("[engine] get.pulumi.com is not reachable: building from Go modules instead")
        return None
    start = time.monotonic()
    staging = cache.staging_dir(wanted.key, base)
    try:
        install_official(wanted, staging / "bin", progress)
    except OfficialUnavailable as exc:
        shutil.rmtree(staging, ignore_errors=True)
        progress(f"[engine] official archives failed ({exc}): building from Go modules instead")
        return None
    elapsed = time.monotonic() - start
    cache.write_manifest(staging, _manifest(wanted, wanted, "official", elapsed, None))
    return cache.publish(staging, wanted.key, base)


def _build_from_go(
    wanted: EngineVersions, base: Path, progress: Progress, rebuild: bool = False
) -> Path:
    start = time.monotonic()
    staging = cache.staging_dir("build", base)
    try:
        go = GoTool(log=staging / "build.log", progress=progress)
        mode = os.environ.get(SOURCES_ENV, "auto")
        progress(f"[engine] resolving Go module sources (mode {mode}) ...")
        sources = choose_sources(go, wanted, staging / "probe", mode)
        shutil.rmtree(staging / "probe", ignore_errors=True)
        built = sources.versions
        _announce(wanted, sources, progress)
        existing = cache.engine_dir(built.key, base)
        if cache.is_complete(existing) and not rebuild:
            shutil.rmtree(staging, ignore_errors=True)
            return existing
        EngineBuilder(staging, sources, progress).build_all()
        version = cli_version(staging / "bin" / "pulumi")
        if version != built.pulumi:
            raise EngineBuildFailed(
                f"the built pulumi reports version {version!r}, expected {built.pulumi}"
            )
        elapsed = time.monotonic() - start
        cache.write_manifest(
            staging, _manifest(wanted, built, "go-build", elapsed, _source_details(sources))
        )
        root = cache.publish(staging, built.key, base)
    except BaseException:
        log = base / "last-failed-build.log"
        if (staging / "build.log").is_file():
            shutil.copyfile(staging / "build.log", log)
            progress(f"[engine] build failed; the Go commands' output is in {log}")
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress(f"[engine] engine ready in {root} (built in {format_elapsed(elapsed)})")
    return root


def _announce(wanted: EngineVersions, sources: EngineSources, progress: Progress) -> None:
    built = sources.versions
    progress(
        f"[engine] building pulumi {built.pulumi} and pulumi-resource-kubernetes "
        f"{built.kubernetes} from Go modules (takes many minutes on a cold Go cache)"
    )
    if built != wanted:
        progress(
            f"[engine] NOTE: the Go module proxy does not serve pulumi {wanted.pulumi} / "
            f"pulumi-kubernetes {wanted.kubernetes}; building the pinned fallback instead "
            "(see modelplane/engine/sources.py)"
        )
    if sources.host_module_version is None:
        progress("[engine] pulumi-language-python: modelplane's host (gosrc/langhost)")


def _source_details(sources: EngineSources) -> dict[str, Any]:
    return {
        "pkg/v3": f"v{sources.cli_version}",
        "exec shim sdk/v3": f"v{sources.exec_shim_sdk_version}",
        "language host": sources.host_module_version or "modelplane gosrc/langhost",
        "provider/v4": sources.provider.module_version,
        "kubernetes sdk/v4": sources.provider.sdk_version,
    }
