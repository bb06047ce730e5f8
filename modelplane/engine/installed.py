"""Preference 1: an engine already installed on this machine: the user's own.

Any `pulumi` at or above the Python SDK's version (the SDK's minimum: an older CLI lacks what
the SDK asks of it) is used, with the newest Kubernetes provider plugin at or above the SDK's
(`pulumi_kubernetes`) version; older ones are refused, saying why. The versions used are
recorded in the engine's manifest and shown by `python -m modelplane.engine check`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from .plugininfo import cli_version, plugin_version
from .versions import EngineVersions

Progress = Callable[[str], None]
VersionOf = Callable[[Path], str | None]


def _cli_version(path: Path) -> str | None:
    return cli_version(path)


def _provider_version(path: Path) -> str | None:
    return plugin_version(path, "resource")


def version_key(version: str | None) -> tuple[int, ...] | None:
    """`3.274.1` (or `v3.274.1-alpha.2`) as comparable numbers; None when not a version."""
    found = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", version or "")
    return tuple(int(part) for part in found.groups()) if found else None


def at_least(version: str | None, minimum: str) -> bool:
    have, need = version_key(version), version_key(minimum)
    return have is not None and need is not None and have >= need


def pulumi_home(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    return Path(env.get("PULUMI_HOME") or Path(env.get("HOME") or Path.home()) / ".pulumi")


def find_installed(
    wanted: EngineVersions,
    path: str | None = None,
    home: Path | None = None,
    progress: Progress = print,
    cli_version_of: VersionOf = _cli_version,
    provider_version_of: VersionOf = _provider_version,
    skip_under: Path | None = None,
) -> dict[str, Path] | None:
    """The binaries of an installed engine matching `wanted`, or None.

    `pulumi` on PATH must print a version at or above the wanted one, with
    `pulumi-language-python` and its `-exec` shim beside it (where the CLI looks for bundled
    plugins) or on PATH; the provider is `pulumi-resource-kubernetes` on PATH at or above the
    wanted version, else the newest such in the plugin cache
    (`$PULUMI_HOME/plugins/resource-kubernetes-v<version>/`). A `pulumi` that resolves into
    `skip_under` (modelplane's own cache, e.g. put on PATH by the driver) does not count.
    """
    path = os.environ.get("PATH", "") if path is None else path
    found = shutil.which("pulumi", path=path)
    if not found:
        return None
    cli = Path(found)
    if skip_under is not None and cli.resolve().is_relative_to(skip_under.resolve()):
        return None
    version = cli_version_of(cli)
    if not at_least(version, wanted.pulumi):
        progress(
            f"[engine] {cli}: version {version or 'unknown'} is below {wanted.pulumi}, the "
            "Pulumi Python SDK's own version (the least CLI it works with): not used"
        )
        return None
    real_dir = cli.resolve().parent
    binaries = {"pulumi": cli}
    for name in ("pulumi-language-python", "pulumi-language-python-exec"):
        beside = real_dir / name
        on_path = shutil.which(name, path=path)
        if beside.is_file() and os.access(beside, os.X_OK):
            binaries[name] = beside
        elif on_path:
            binaries[name] = Path(on_path)
        else:
            progress(f"[engine] {cli}: no {name} beside it or on PATH: not used")
            return None
    provider = _find_provider(wanted, path, home or pulumi_home(), provider_version_of)
    if provider is None:
        progress(
            f"[engine] {cli}: no pulumi-resource-kubernetes {wanted.kubernetes} or newer on "
            "PATH or in the Pulumi plugin cache: not used"
        )
        return None
    binaries["pulumi-resource-kubernetes"] = provider
    return binaries


def _find_provider(
    wanted: EngineVersions, path: str, home: Path, version_of: VersionOf
) -> Path | None:
    on_path = shutil.which("pulumi-resource-kubernetes", path=path)
    if on_path and at_least(version_of(Path(on_path)), wanted.kubernetes):
        return Path(on_path)
    cached = []
    for folder in (home / "plugins").glob("resource-kubernetes-v*"):
        version = folder.name.removeprefix("resource-kubernetes-v")
        binary = folder / "pulumi-resource-kubernetes"
        key = version_key(version)
        if key and at_least(version, wanted.kubernetes) and binary.is_file():
            if os.access(binary, os.X_OK):
                cached.append((key, binary))
    return max(cached)[1] if cached else None


def link_into(bin_dir: Path, binaries: dict[str, Path]) -> None:
    """Symlink the found binaries into an engine's bin/ (the engine then records them)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, target in binaries.items():
        link = bin_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target.resolve())
