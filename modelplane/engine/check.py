"""Checking an engine: every binary present and reporting the version its manifest records."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import cache
from .plugininfo import cli_version, plugin_version
from .versions import EngineVersions


@dataclass(frozen=True)
class CheckResult:
    lines: tuple[str, ...]
    problems: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def check_engine(root: Path, wanted: EngineVersions, strict: bool = False) -> CheckResult:
    """Run each binary and compare its version with the manifest (and, if strict, with `wanted`)."""
    lines: list[str] = []
    problems: list[str] = []
    notes: list[str] = []
    manifest = cache.read_manifest(root)
    expect = EngineVersions(pulumi=manifest["pulumi"], kubernetes=manifest["kubernetes"])
    bin_dir = root / "bin"

    cli = cli_version(bin_dir / "pulumi")
    lines.append(f"pulumi version: {cli or 'FAILED'} (expected {expect.pulumi})")
    if cli != expect.pulumi:
        problems.append(f"pulumi reports {cli!r}, expected {expect.pulumi}")

    shim = bin_dir / "pulumi-language-python-exec"
    if not os.access(shim, os.X_OK):
        problems.append(f"{shim} is missing or not executable")
    host = plugin_version(bin_dir / "pulumi-language-python", "language")
    shim_state = "ok" if os.access(shim, os.X_OK) else "MISSING"
    lines.append(f"pulumi-language-python: {host or 'FAILED'} (exec shim {shim_state})")
    if host is None:
        problems.append("pulumi-language-python did not start or did not answer GetPluginInfo")

    provider = plugin_version(bin_dir / "pulumi-resource-kubernetes", "resource")
    lines.append(
        f"pulumi-resource-kubernetes: {provider or 'FAILED'} (expected {expect.kubernetes})"
    )
    if provider != expect.kubernetes:
        problems.append(
            f"pulumi-resource-kubernetes reports {provider!r}, expected {expect.kubernetes}"
        )

    if expect != wanted:
        message = (
            f"this engine is pulumi {expect.pulumi} / kubernetes {expect.kubernetes}, the Python "
            f"packages are pulumi {wanted.pulumi} / pulumi-kubernetes {wanted.kubernetes} "
            f"({manifest.get('source')} build from what the Go module proxy serves)"
        )
        (problems if strict else notes).append(message)
    return CheckResult(lines=tuple(lines), problems=tuple(problems), notes=tuple(notes))
