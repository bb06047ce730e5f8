"""Finding or making the engine, in the order of issue 5: installed, official archives, Go build."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from modelplane.errors import EnvironmentProblem
from modelplane.gobuild import cache
from modelplane.gobuild.cache import Manifest
from modelplane.gobuild.gotool import GoTool, format_elapsed

from .gobuild import EngineBuilder
from .installed import find_installed, link_into
from .official import OfficialUnavailable, install_official, installer_reachable
from .plugininfo import cli_version
from .resolve import choose_sources
from .sources import EngineSources, all_fallback_sources, modelplane_host_digest
from .versions import EngineVersions, wanted_versions

Progress = Callable[[str], None]

SETUP_COMMAND = "python -m modelplane.engine install"
#: `auto` (default), `exact` or `fallback`: which Go module sources a build uses.
SOURCES_ENV = "MODELPLANE_ENGINE_SOURCES"
#: Set to `0` to skip the get.pulumi.com probe (preference 2).
OFFICIAL_ENV = "MODELPLANE_ENGINE_OFFICIAL"


#: The binaries every engine's bin/ holds.
BINARIES = (
    "pulumi",
    "pulumi-language-python",
    "pulumi-language-python-exec",
    "pulumi-resource-kubernetes",
)
WHAT = "the Pulumi engine"


def cache_base(env: Mapping[str, str] | None = None) -> Path:
    """`<cache root>/engine`: one folder per engine key, one lock (`.lock`) over them all."""
    return cache.cache_root(env) / "engine"


def lock_path(base: Path) -> Path:
    return base / ".lock"


def is_complete(root: Path) -> bool:
    """A finished engine: its manifest and every binary, executable."""
    if not cache.has_manifest(root):
        return False
    return all(os.access(root / "bin" / name, os.X_OK) for name in BINARIES)


class EngineNotFound(EnvironmentProblem, RuntimeError):
    """No usable engine is cached or installed; the message says how to make one."""


class EngineBuildFailed(EnvironmentProblem, RuntimeError):
    """Making the engine failed; the message says which step and why."""


def _quiet(_: str) -> None:
    return None


def candidate_keys(wanted: EngineVersions) -> list[str]:
    """Cache folders that can serve `wanted`: the exact one, then the pinned fallback builds."""
    keys = [wanted.key]
    # The exact versions built with modelplane's host (when the host module is not served).
    with_host = EngineVersions(wanted.pulumi, wanted.kubernetes, host=modelplane_host_digest())
    if with_host.key not in keys:
        keys.append(with_host.key)
    for fallback in all_fallback_sources(wanted):
        if fallback.versions.key not in keys:
            keys.append(fallback.versions.key)
    return keys


def find_engine(
    wanted: EngineVersions | None = None, base: Path | None = None, progress: Progress = _quiet
) -> Path | None:
    """An engine root without building or network: cached exact, installed (linked), fallback."""
    wanted = wanted or wanted_versions()
    base = base or cache_base()
    exact, *others = candidate_keys(wanted)
    root = base / exact
    if is_complete(root):
        return root
    installed = find_installed(wanted, progress=progress, skip_under=base)
    if installed is not None:
        return _record_installed(wanted, installed, base, progress)
    for key in others:
        root = base / key
        if is_complete(root):
            return root
    return None


def _record_installed(
    wanted: EngineVersions, binaries: dict[str, Path], base: Path, progress: Progress
) -> Path:
    from .plugininfo import cli_version, plugin_version

    # What was found, which may be newer than wanted: recorded, and said.
    found = EngineVersions(
        cli_version(binaries["pulumi"]) or wanted.pulumi,
        plugin_version(binaries["pulumi-resource-kubernetes"], "resource") or wanted.kubernetes,
    )
    with cache.locked(lock_path(base), WHAT), cache.staged(base, wanted.key) as staging:
        link_into(staging / "bin", binaries)
        details = {k: str(v) for k, v in binaries.items()}
        root = cache.publish(
            staging, base / wanted.key, _manifest(wanted, found, "installed", details)
        )
    skew = (
        ""
        if (found.pulumi, found.kubernetes) == (wanted.pulumi, wanted.kubernetes)
        else f" (the SDKs are pulumi {wanted.pulumi}, pulumi-kubernetes {wanted.kubernetes})"
    )
    progress(
        f"[engine] using the installed engine: pulumi {found.pulumi} ({binaries['pulumi']}), "
        f"kubernetes provider {found.kubernetes}{skew}; linked into {root}"
    )
    return root


def _manifest(
    wanted: EngineVersions, built: EngineVersions, source: str, details: Any, seconds: float = 0.0
) -> Manifest:
    return Manifest(
        set="engine",
        versions={"pulumi": built.pulumi, "kubernetes": built.kubernetes},
        source=source,
        seconds=round(seconds, 1),
        details={
            "wanted": {"pulumi": wanted.pulumi, "kubernetes": wanted.kubernetes},
            "sources": details,
        },
    )


def ensure_engine(progress: Progress = print, rebuild: bool = False) -> Path:
    """The engine root (its bin/ holds pulumi, the Python host and the Kubernetes provider).

    Finds it (cache, then an installed engine of the right versions) or makes it: Pulumi's
    official archives when get.pulumi.com answers, else a build from Go modules. `rebuild`
    makes it again even if cached (the new one replaces the old one atomically).
    """
    wanted = wanted_versions()
    base = cache_base()
    found = None if rebuild else find_engine(wanted, base, progress)
    if found is not None:
        return found
    with cache.locked(lock_path(base), WHAT, progress):
        for key in [] if rebuild else candidate_keys(wanted):
            if is_complete(base / key):
                return base / key
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
    with cache.staged(base, wanted.key) as staging:
        try:
            install_official(wanted, staging / "bin", progress)
        except OfficialUnavailable as exc:
            progress(f"[engine] official archives failed ({exc}): building from Go modules instead")
            return None
        manifest = _manifest(wanted, wanted, "official", None, time.monotonic() - start)
        return cache.publish(staging, base / wanted.key, manifest)


def _build_from_go(
    wanted: EngineVersions, base: Path, progress: Progress, rebuild: bool = False
) -> Path:
    start = time.monotonic()
    with cache.staged(base, "build", progress) as staging:
        go = GoTool(log=staging / "build.log", progress=progress)
        mode = os.environ.get(SOURCES_ENV, "auto")
        progress(f"[engine] resolving Go module sources (mode {mode}) ...")
        sources = choose_sources(go, wanted, staging / "probe", mode)
        shutil.rmtree(staging / "probe", ignore_errors=True)
        built = sources.versions
        _announce(wanted, sources, progress)
        existing = base / built.key
        if is_complete(existing) and not rebuild:
            return existing
        EngineBuilder(staging, sources, go).build_all()
        version = cli_version(staging / "bin" / "pulumi")
        if version != built.pulumi:
            raise EngineBuildFailed(
                f"the built pulumi reports version {version!r}, expected {built.pulumi}"
            )
        elapsed = time.monotonic() - start
        manifest = _manifest(wanted, built, "go-build", _source_details(sources), elapsed)
        manifest = dataclasses.replace(manifest, go=go.version())
        root = cache.publish(staging, existing, manifest)
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
