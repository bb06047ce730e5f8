"""Where each engine binary comes from on the Go module proxy.

The exact versions are wanted (the CLI of the installed `pulumi` package, the provider of the
installed `pulumi-kubernetes` package). The module proxy reachable from the project's machines
does not serve every module version, so a pinned fallback, known to build from what it does
serve, is used when an exact version is refused:

- `github.com/pulumi/pulumi/pkg/v3` v3.272.0 (the Python SDK's release) is not served; v3.274.1
  is, with every dependency (checked 2026-11-25), so it is the preferred fallback: a CLI newer
  than the SDK is what Pulumi supports. When a proxy refuses v3.274.1 the build falls back once
  more, to v3.259.0 (served everywhere the project has run).
- `github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3` has no tags and no
  pseudo-version is served, so modelplane builds its own small language host (gosrc/langhost)
  on sdk/v3 of the CLI's release; the Python exec shim is copied from sdk/v3 of the installed
  `pulumi` package's release, which is served.
- `github.com/pulumi/pulumi-kubernetes/provider/v4` has no tags; the one pseudo-version served
  is the v4.25.0 release commit (2026-01-15, the commit pulumi/crd2pulumi took for v4.25.0),
  paired with `sdk/v4 v4.25.0`. The checksum database does not know it, so its go.sum lines
  are pinned here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources

from .versions import EngineVersions, strip_v

PKG_MODULE = "github.com/pulumi/pulumi/pkg/v3"
SDK_MODULE = "github.com/pulumi/pulumi/sdk/v3"
CLI_PACKAGE = "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
HOST_MODULE = "github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3"
K8S_ROOT_MODULE = "github.com/pulumi/pulumi-kubernetes"
K8S_PROVIDER_MODULE = "github.com/pulumi/pulumi-kubernetes/provider/v4"
K8S_SDK_MODULE = "github.com/pulumi/pulumi-kubernetes/sdk/v4"
K8S_CMD_DIR = "cmd/pulumi-resource-kubernetes"

PULUMI_VERSION_VAR = "github.com/pulumi/pulumi/sdk/v3/go/common/version.Version"
K8S_VERSION_VAR = "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version"

#: Build tags of Pulumi's release builds (.goreleaser.yml) for the CLI and language hosts.
PULUMI_BUILD_TAGS = ("osusergo", "grpcnotrace")

EXEC_SHIM_PATH = "python/cmd/pulumi-language-python-exec"


@dataclass(frozen=True)
class ProviderSource:
    """The Kubernetes provider: a provider/v4 module version, its sdk/v4, and the version stamp."""

    module_version: str
    sdk_version: str
    stamp: str


@dataclass(frozen=True)
class EngineSources:
    """Everything one engine build needs from the module proxy."""

    cli_version: str  # pkg/v3 release without `v`, also the sdk/v3 release of the language host
    exec_shim_sdk_version: str  # sdk/v3 release the Python exec shim is copied from
    host_module_version: str | None  # upstream host pseudo-version, None = modelplane's host
    provider: ProviderSource
    pinned_sums: tuple[str, ...] = field(default=())

    @property
    def versions(self) -> EngineVersions:
        host = "" if self.host_module_version else modelplane_host_digest()
        return EngineVersions(
            pulumi=self.cli_version, kubernetes=strip_v(self.provider.stamp), host=host
        )


def modelplane_host_sources() -> dict[str, str]:
    """modelplane's language host: its Go files (gosrc/langhost/*.go) by name."""
    directory = resources.files("modelplane.engine").joinpath("gosrc", "langhost")
    return {
        entry.name: entry.read_text()
        for entry in sorted(directory.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".go")
    }


def modelplane_host_digest() -> str:
    """The first 8 hex digits of the SHA-256 of modelplane's language host source (its Go
    files, by name and content)."""
    digest = hashlib.sha256()
    for name, text in modelplane_host_sources().items():
        digest.update(f"{name}\0{len(text)}\0{text}".encode())
    return digest.hexdigest()[:8]


#: go.sum lines for module versions the checksum database does not know (hashes taken from the
#: module proxy's zip and go.mod, the same bytes `go mod download` verifies against them).
FALLBACK_PINNED_SUMS: tuple[str, ...] = (
    "github.com/pulumi/pulumi-kubernetes/provider/v4 v4.0.0-20260115033456-f47bc2d6f199 "
    "h1:j2bphCf7c2YhnBrhwht2f3TNRRgcMImltUlAgzxr9H4=",
    "github.com/pulumi/pulumi-kubernetes/provider/v4 v4.0.0-20260115033456-f47bc2d6f199/go.mod "
    "h1:61at6ZXhz4COFbTksqENrBzq5VUQ/LV8sdZ7WJt9KT4=",
)

#: Fallback CLI releases, preferred first; the last one is used without asking the proxy.
FALLBACK_CLI_VERSIONS = ("3.274.1", "3.259.0")
FALLBACK_CLI_VERSION = FALLBACK_CLI_VERSIONS[0]
FALLBACK_PROVIDER = ProviderSource(
    module_version="v4.0.0-20260115033456-f47bc2d6f199",
    sdk_version="v4.25.0",
    stamp="4.25.0",
)


def fallback_sources(
    wanted: EngineVersions, cli_version: str = FALLBACK_CLI_VERSION
) -> EngineSources:
    """The pinned sources that build from what the project's module proxy serves."""
    return EngineSources(
        cli_version=cli_version,
        exec_shim_sdk_version=wanted.pulumi,
        host_module_version=None,
        provider=FALLBACK_PROVIDER,
        pinned_sums=FALLBACK_PINNED_SUMS,
    )


def pseudo_version(major: str, time_rfc3339: str, commit: str) -> str:
    """A Go pseudo-version for an untagged module: `v3.0.0-20260820084410-a05d88f24d05`."""
    stamp = "".join(ch for ch in time_rfc3339 if ch.isdigit())[:14]
    if len(stamp) != 14 or len(commit) < 12:
        raise ValueError(f"cannot make a pseudo-version from {time_rfc3339!r} and {commit!r}")
    return f"{major}.0.0-{stamp}-{commit[:12]}"


def all_fallback_sources(wanted: EngineVersions) -> list[EngineSources]:
    """Every pinned fallback, preferred first."""
    return [fallback_sources(wanted, version) for version in FALLBACK_CLI_VERSIONS]
