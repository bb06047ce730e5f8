"""Which engine versions the project wants, and how a cached engine is named."""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass

from modelplane.errors import EnvironmentProblem

PULUMI_DIST = "pulumi"
KUBERNETES_DIST = "pulumi-kubernetes"

_SEMVER = re.compile(r"v?(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]*)?)")


class VersionNotFound(EnvironmentProblem, RuntimeError):
    """A Python distribution the engine version is read from is not installed."""


@dataclass(frozen=True)
class EngineVersions:
    """The Pulumi CLI version and the Kubernetes provider plugin version (no leading `v`);
    ``host``: the digest of modelplane's own language host when the engine uses it (a build
    with a changed host is another engine)."""

    pulumi: str
    kubernetes: str
    host: str = ""

    @property
    def key(self) -> str:
        key = cache_key(self.pulumi, self.kubernetes)
        return f"{key}-mphost-{self.host}" if self.host else key


def cache_key(pulumi: str, kubernetes: str) -> str:
    """The cache folder name of an engine: `pulumi-v<cli>-k8s-v<provider>`."""
    return f"pulumi-v{strip_v(pulumi)}-k8s-v{strip_v(kubernetes)}"


def strip_v(version: str) -> str:
    return version[1:] if version.startswith("v") else version


def installed_version(dist: str) -> str:
    """The version of an installed Python distribution, e.g. `3.272.0` for `pulumi`."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError as exc:
        raise VersionNotFound(
            f"the Python package {dist!r} is not installed; install the project first "
            "(pip install -e '.[dev]')"
        ) from exc


def wanted_versions() -> EngineVersions:
    """The engine the installed Python packages call for (`pulumi`, `pulumi-kubernetes`)."""
    return EngineVersions(
        pulumi=installed_version(PULUMI_DIST), kubernetes=installed_version(KUBERNETES_DIST)
    )


def parse_cli_version(output: str) -> str | None:
    """The version `pulumi version` printed (`v3.272.0` -> `3.272.0`), or None."""
    for line in output.splitlines():
        match = _SEMVER.fullmatch(line.strip())
        if match:
            return match.group(1)
    return None
