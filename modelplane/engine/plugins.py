"""The provider plugins the project pins, where the engine finds them, and installing them.

The project pins one Python SDK per provider (``pulumi-kubernetes``, ``pulumi-gcp``,
``pulumi-aws``, ``pulumi-eks``); each ships ``pulumi-plugin.json`` naming the resource plugin
and version it needs. The engine finds a plugin either on ``PATH`` (the engine's ``bin/``
holds the Kubernetes provider) or in the plugin cache (``$PULUMI_HOME/plugins``, default
``~/.pulumi/plugins``, as ``resource-<name>-v<version>/pulumi-resource-<name>``).

modelplane runs the engine with automatic plugin acquisition off (no downloads in the middle
of an update); ``python -m modelplane.engine install`` installs the pinned plugins up front
(``pulumi plugin install resource <name> <version>``) where the network allows. A user who
wants the engine to download plugins on demand exports
``PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=false``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelplane.api.fleet import FleetSpec
    from modelplane.stacks import StackUnit

ACQUISITION = "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"
#: What each plugin is for, in messages.
PURPOSE = {
    "kubernetes": "every stack (Kubernetes objects)",
    "gcp": "GKE clusters",
    "aws": "EKS clusters",
    "eks": "EKS clusters",
}
#: The Python SDK each plugin's resources are declared with, and the extra that installs it
#: (pyproject.toml: the cloud SDKs are optional, only fleets on that cloud need them).
SDKS = {
    "kubernetes": ("pulumi_kubernetes", "pulumi-kubernetes", None),
    "gcp": ("pulumi_gcp", "pulumi-gcp", "gke"),
    "aws": ("pulumi_aws", "pulumi-aws", "eks"),
    "eks": ("pulumi_eks", "pulumi-eks", "eks"),
}
#: The pinned provider SDKs (Python module names) whose plugins the program can use.
PROVIDER_MODULES = tuple(module for module, _, _ in SDKS.values())
#: The plugins a cluster stack needs beyond ``kubernetes``, by the cluster's source.
CLOUD_PLUGINS = {"GKE": ("gcp",), "EKS": ("aws", "eks"), "Existing": ()}
PATH_PLUGINS = {"GKE": ("gcp",), "EKS": ("aws",)}


@dataclass(frozen=True, order=True)
class Plugin:
    """A resource plugin at a version (no leading ``v``)."""

    name: str
    version: str

    @property
    def binary(self) -> str:
        return f"pulumi-resource-{self.name}"

    @property
    def install_command(self) -> str:
        return f"pulumi plugin install resource {self.name} {self.version}"


def pinned_plugins() -> dict[str, Plugin]:
    """Every pinned provider's plugin, by name, from the installed SDKs' pulumi-plugin.json."""
    found: dict[str, Plugin] = {}
    for module in PROVIDER_MODULES:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):  # an extra not installed (missing_sdks says so)
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        path = Path(next(iter(spec.submodule_search_locations))) / "pulumi-plugin.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if data.get("resource") and data.get("name") and data.get("version"):
            version = str(data["version"]).removeprefix("v")
            found[data["name"]] = Plugin(str(data["name"]), version)
    return found


def plugin_cache(environ: Mapping[str, str] | None = None) -> Path:
    """``$PULUMI_HOME/plugins`` (default ``~/.pulumi/plugins``)."""
    environ = os.environ if environ is None else environ
    home = environ.get("PULUMI_HOME")
    base = Path(home).expanduser() if home else Path(environ.get("HOME") or Path.home()) / ".pulumi"
    return base / "plugins"


@dataclass(frozen=True)
class Found:
    """Where the engine would load a plugin from, and at which version (None: on PATH)."""

    path: Path
    version: str | None


def find_plugin(plugin: Plugin, environ: Mapping[str, str] | None = None) -> Found | None:
    """The plugin on ``PATH`` or in the plugin cache (exact version first), else None."""
    environ = os.environ if environ is None else environ
    cache = plugin_cache(environ)
    exact = cache / f"resource-{plugin.name}-v{plugin.version}" / plugin.binary
    if os.access(exact, os.X_OK):
        return Found(exact, plugin.version)
    for entry in (environ.get("PATH") or "").split(os.pathsep):
        candidate = Path(entry) / plugin.binary if entry else None
        if candidate is not None and os.access(candidate, os.X_OK):
            return Found(candidate, None)
    if cache.is_dir():
        others = sorted(cache.glob(f"resource-{plugin.name}-v*/{plugin.binary}"))
        for other in reversed(others):
            if os.access(other, os.X_OK):
                version = other.parent.name.removeprefix(f"resource-{plugin.name}-v")
                return Found(other, version)
    return None


def acquisition_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user turned the engine's automatic plugin downloads back on."""
    environ = os.environ if environ is None else environ
    value = environ.get(ACQUISITION)
    return value is not None and value.strip().lower() in ("false", "0", "no")


def missing_plugins(names: Iterable[str], environ: Mapping[str, str] | None = None) -> list[Plugin]:
    """The pinned plugins among ``names`` that the engine would not find."""
    pinned = pinned_plugins()
    out = []
    for name in sorted(set(names)):
        plugin = pinned.get(name)
        if plugin is not None and find_plugin(plugin, environ) is None:
            out.append(plugin)
    return out


def missing_message(stack: str, missing: list[Plugin]) -> str:
    """The error of a stack that needs plugins this machine does not have."""
    names = ", ".join(f"{p.name} {p.version}" for p in missing)
    purposes = sorted({PURPOSE.get(p.name, p.name) for p in missing})
    lines = [
        f"stack {stack} needs the Pulumi resource plugin(s) {names} ({'; '.join(purposes)}), "
        "which are not installed on this machine. Install them where the network allows:",
        "  python -m modelplane.engine install",
    ]
    lines += [f"  or: {p.install_command}" for p in missing]
    lines.append(
        f"or let the engine download plugins when it needs them: export {ACQUISITION}=false"
    )
    return "\n".join(lines)


def stack_plugins(fleet: FleetSpec, unit: StackUnit) -> set[str]:
    """The resource plugins the stack's program uses."""
    names = {"kubernetes"}
    if unit.kind == "InferenceCluster" and unit.key in fleet.clusters:
        source = fleet.clusters[unit.key].spec.cluster.source
        names.update(CLOUD_PLUGINS.get(source, ()))
    if unit.kind == "ClusterPath":
        names = set()  # cloud resources only: no Kubernetes, no EKS component
        for end in unit.key.split("/"):
            if end in fleet.clusters:
                names.update(PATH_PLUGINS.get(fleet.clusters[end].spec.cluster.source, ()))
    return names


def sdk_installed(module: str) -> bool:
    """Whether the Python SDK ``module`` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_sdks(names: Iterable[str]) -> list[str]:
    """The plugins among ``names`` whose Python SDK is not installed."""
    return [n for n in sorted(set(names)) if n in SDKS and not sdk_installed(SDKS[n][0])]


def missing_sdk_message(stack: str, missing: list[str]) -> str:
    """The error of a stack whose program cannot import its cloud SDKs."""
    packages = ", ".join(SDKS[n][1] for n in missing)
    purposes = "; ".join(sorted({PURPOSE.get(n, n) for n in missing}))
    extras = sorted({extra for n in missing if (extra := SDKS[n][2])})
    spec = f"modelplane[{','.join(extras)}]" if extras else "modelplane"
    return (
        f"stack {stack} needs the Python SDK(s) {packages} ({purposes}), which are not "
        f"installed in this environment ({sys.executable}). Install them with: "
        f"pip install '{spec}' (in a checkout: `make`, which installs every extra)"
    )


def sdk_of_module(module: str | None) -> str | None:
    """The plugin whose Python SDK ``module`` (or a submodule of it) is, else None."""
    top = (module or "").split(".")[0]
    return next((name for name, (m, _, _) in SDKS.items() if m == top), None)


def missing_for_stack(fleet: FleetSpec, unit: StackUnit, environ: Mapping[str, str]) -> str | None:
    """The error for a stack this environment cannot run: a cloud SDK its program imports is
    not installed, or a plugin the engine would not find (None: all there)."""
    needed = stack_plugins(fleet, unit)
    sdks = missing_sdks(needed)
    if sdks:
        return missing_sdk_message(unit.name, sdks)
    if acquisition_enabled(environ):
        return None
    missing = missing_plugins(needed, environ)
    return missing_message(unit.name, missing) if missing else None


@dataclass(frozen=True)
class InstallResult:
    plugin: Plugin
    ok: bool
    detail: str


def install_plugins(
    pulumi: Path,
    plugins: Iterable[Plugin],
    environ: Mapping[str, str] | None = None,
    progress: Callable[[str], None] = print,
    timeout: float = 600.0,
) -> list[InstallResult]:
    """``pulumi plugin install resource <name> <version>`` for each plugin not yet found."""
    environ = dict(os.environ if environ is None else environ)
    environ.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
    results = []
    for plugin in plugins:
        if find_plugin(plugin, environ) is not None:
            results.append(InstallResult(plugin, True, "already installed"))
            continue
        progress(f"[engine] installing plugin {plugin.name} {plugin.version}")
        try:
            proc = subprocess.run(
                [str(pulumi), "plugin", "install", "resource", plugin.name, plugin.version],
                env=environ,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            results.append(InstallResult(plugin, False, str(exc)))
            continue
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        detail = lines[-1] if lines else f"exit code {proc.returncode}"
        ok = proc.returncode == 0 and find_plugin(plugin, environ) is not None
        results.append(InstallResult(plugin, ok, "installed" if ok else detail))
    return results
