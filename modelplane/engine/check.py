"""Checking an engine: every binary present and reporting the version its manifest records."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from modelplane.gobuild.cache import read_manifest

from .plugininfo import cli_version, plugin_version
from .plugins import PURPOSE, acquisition_enabled, find_plugin, missing_for_stack, pinned_plugins
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
    manifest = read_manifest(root, "engine")
    expect = EngineVersions(
        pulumi=manifest.versions["pulumi"], kubernetes=manifest.versions["kubernetes"]
    )
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

    plugin_lines, plugin_notes = check_plugins(root)
    lines += plugin_lines
    notes += plugin_notes

    if expect != wanted:
        message = (
            f"this engine is pulumi {expect.pulumi} / kubernetes {expect.kubernetes}, the Python "
            f"packages are pulumi {wanted.pulumi} / pulumi-kubernetes {wanted.kubernetes} "
            + (
                "(the engine installed on this machine, newer than the packages)"
                if manifest.source == "installed"
                else f"({manifest.source} build from what the Go module proxy serves)"
            )
        )
        (problems if strict else notes).append(message)
    return CheckResult(lines=tuple(lines), problems=tuple(problems), notes=tuple(notes))


def plugin_environment(root: Path) -> dict[str, str]:
    """The environment the driver runs the engine with: the engine's bin/ first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def check_plugins(root: Path) -> tuple[list[str], list[str]]:
    """A line per pinned provider plugin (where the engine finds it), notes for missing ones."""
    env = plugin_environment(root)
    lines: list[str] = []
    notes: list[str] = []
    for name, plugin in sorted(pinned_plugins().items()):
        found = find_plugin(plugin, env)
        if found is None:
            lines.append(f"plugin {name} {plugin.version}: MISSING (needed by {PURPOSE[name]})")
            if name != "kubernetes":
                notes.append(
                    f"stacks of {PURPOSE[name]} fail until the {name} plugin is installed: "
                    f"`python -m modelplane.engine install` where the network allows, or "
                    f"`{plugin.install_command}`"
                )
        else:
            version = found.version or "on PATH"
            lines.append(f"plugin {name} {plugin.version}: {found.path} ({version})")
    if acquisition_enabled(env):
        notes.append("automatic plugin acquisition is on: the engine downloads missing plugins")
    return lines, notes


def fleet_plugin_problems(fleet_dir: Path, root: Path) -> list[str]:
    """For each stack of the fleet, the plugins it needs that this machine does not have."""
    from modelplane.api.loader import LOCK_FILE, load_fleet
    from modelplane.lock import read_lock
    from modelplane.stacks import stack_units

    loaded = load_fleet(fleet_dir)
    if loaded.errors:
        return [f"the fleet {fleet_dir} is invalid: run `modelplane validate {fleet_dir}`"]
    lock = read_lock(fleet_dir / LOCK_FILE)
    env = plugin_environment(root)
    problems = []
    for unit in stack_units(loaded.fleet, lock):
        message = missing_for_stack(loaded.fleet, unit, env)
        if message:
            problems.append(message.splitlines()[0])
    return problems
