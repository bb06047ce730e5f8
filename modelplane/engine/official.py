"""Preference 2: Pulumi's official release archives, when get.pulumi.com answers.

These are the archives Pulumi's installer script (get.pulumi.com/install.sh) downloads; taking
them directly needs no shell and puts the files straight into the engine's bin/.
"""

from __future__ import annotations

import io
import platform
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from modelplane.errors import EnvironmentProblem

from .versions import EngineVersions

Progress = Callable[[str], None]

INSTALLER_URL = "https://get.pulumi.com/"
RELEASES = "https://get.pulumi.com/releases"
PROBE_TIMEOUT = 3.0
DOWNLOAD_TIMEOUT = 120.0


class OfficialUnavailable(EnvironmentProblem, RuntimeError):
    """The official archives could not be fetched."""


def installer_reachable(url: str = INSTALLER_URL, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether the installer's host answers at all within `timeout` seconds."""
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError):
        return False


def _platform() -> tuple[str, str, str]:
    """(os, cli arch, plugin arch) in the release archives' naming."""
    system = platform.system().lower()
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return system, "x64", "amd64"
    if machine in ("aarch64", "arm64"):
        return system, "arm64", "arm64"
    raise OfficialUnavailable(f"no official Pulumi archive for {system}/{machine}")


def archive_urls(wanted: EngineVersions) -> tuple[str, str]:
    system, cli_arch, plugin_arch = _platform()
    cli = f"{RELEASES}/sdk/pulumi-v{wanted.pulumi}-{system}-{cli_arch}.tar.gz"
    provider = (
        f"{RELEASES}/plugins/pulumi-resource-kubernetes-v{wanted.kubernetes}-"
        f"{system}-{plugin_arch}.tar.gz"
    )
    return cli, provider


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            return bytes(response.read())
    except (OSError, ValueError) as exc:
        raise OfficialUnavailable(f"could not download {url}: {exc}") from exc


def _extract(archive: bytes, members: dict[str, str], bin_dir: Path) -> None:
    """Extract archive members (by base name) into bin_dir under the given names."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        by_name = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
        for member_name, target in members.items():
            member = by_name.get(member_name)
            if member is None:
                raise OfficialUnavailable(f"the archive has no {member_name}")
            data = tar.extractfile(member)
            assert data is not None
            path = bin_dir / target
            path.write_bytes(data.read())
            path.chmod(0o755)


def install_official(wanted: EngineVersions, bin_dir: Path, progress: Progress = print) -> None:
    cli_url, provider_url = archive_urls(wanted)
    progress(f"[engine] downloading {cli_url}")
    names = ("pulumi", "pulumi-language-python", "pulumi-language-python-exec")
    _extract(_fetch(cli_url), {n: n for n in names}, bin_dir)
    progress(f"[engine] downloading {provider_url}")
    _extract(
        _fetch(provider_url), {"pulumi-resource-kubernetes": "pulumi-resource-kubernetes"}, bin_dir
    )
