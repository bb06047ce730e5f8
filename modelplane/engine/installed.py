"""Preference 1: an engine already installed on this machine, of the right versions."""

from __future__ import annotations

import os
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

    `pulumi` on PATH must print the wanted version, with `pulumi-language-python` and its `-exec`
    shim beside it (where the CLI looks for bundled plugins) or on PATH; the provider is
    `pulumi-resource-kubernetes` on PATH of the wanted version, or the plugin cache's
    `$PULUMI_HOME/plugins/resource-kubernetes-v<version>/`. A `pulumi` that resolves into
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
    if version != wanted.pulumi:
        progress(f"[engine] {cli}: version {version or 'unknown'}, want {wanted.pulumi}: not used")
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
            f"[engine] {cli}: no pulumi-resource-kubernetes {wanted.kubernetes} on PATH "
            "or in the Pulumi plugin cache: not used"
        )
        return None
    binaries["pulumi-resource-kubernetes"] = provider
    return binaries


def _find_provider(
    wanted: EngineVersions, path: str, home: Path, version_of: VersionOf
) -> Path | None:
    on_path = shutil.which("pulumi-resource-kubernetes", path=path)
    if on_path and version_of(Path(on_path)) == wanted.kubernetes:
        return Path(on_path)
    cached = home / "plugins" / f"resource-kubernetes-v{wanted.kubernetes}"
    binary = cached / "pulumi-resource-kubernetes"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    return None


def link_into(bin_dir: Path, binaries: dict[str, Path]) -> None:
    """Symlink the found binaries into an engine's bin/ (the engine then records them)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, target in binaries.items():
        link = bin_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target.resolve())
