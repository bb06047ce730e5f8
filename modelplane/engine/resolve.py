"""Choosing the Go module sources of a build: the exact versions if the proxy serves them."""

from __future__ import annotations

from pathlib import Path

from modelplane.gobuild.gotool import GoTool

from . import sources as src
from .versions import EngineVersions


def exact_sources(go: GoTool, wanted: EngineVersions, cwd: Path) -> src.EngineSources | None:
    """Sources for exactly the wanted versions, or None if the module proxy refuses any of them.

    The CLI is `pkg/v3@v<pulumi>`; the upstream language host is reached by the pseudo-version of
    the pkg/v3 tag's commit (modelplane's own host otherwise); the provider by the pseudo-version
    of the root tag `v<kubernetes>`'s commit (the proxy's `+incompatible` view of the tag).
    """
    cwd.mkdir(parents=True, exist_ok=True)
    pulumi_tag = f"v{wanted.pulumi}"
    pkg = go.try_json(["mod", "download", "-json", f"{src.PKG_MODULE}@{pulumi_tag}"], cwd)
    if pkg is None:
        return None
    host_version = _pseudo_for(go, src.HOST_MODULE, pkg, cwd)

    k8s_tag = f"v{wanted.kubernetes}"
    root = go.try_json(
        ["mod", "download", "-json", f"{src.K8S_ROOT_MODULE}@{k8s_tag}+incompatible"], cwd
    )
    if root is None:
        return None
    provider_version = _pseudo_for(go, src.K8S_PROVIDER_MODULE, root, cwd)
    if provider_version is None:
        return None
    sdk = go.try_json(["mod", "download", "-json", f"{src.K8S_SDK_MODULE}@{k8s_tag}"], cwd)
    if sdk is None:
        return None
    return src.EngineSources(
        cli_version=wanted.pulumi,
        exec_shim_sdk_version=wanted.pulumi,
        host_module_version=host_version,
        provider=src.ProviderSource(
            module_version=provider_version, sdk_version=k8s_tag, stamp=wanted.kubernetes
        ),
    )


def _pseudo_for(go: GoTool, module: str, tag_info: dict[str, object], cwd: Path) -> str | None:
    """The version of `module` at the commit of an already resolved tag (via Origin.Hash)."""
    origin = tag_info.get("Origin")
    commit = origin.get("Hash") if isinstance(origin, dict) else None
    if not isinstance(commit, str) or not commit:
        return None
    found = go.try_json(["mod", "download", "-json", f"{module}@{commit}"], cwd)
    version = found.get("Version") if found else None
    return version if isinstance(version, str) else None


def choose_sources(go: GoTool, wanted: EngineVersions, cwd: Path, mode: str) -> src.EngineSources:
    """`mode`: `auto` (exact if served, else the pinned fallback), `exact` or `fallback`."""
    if mode == "fallback":
        return fallback_served(go, wanted, cwd)
    exact = exact_sources(go, wanted, cwd)
    if exact is not None:
        return exact
    if mode == "exact":
        raise LookupError(
            f"the Go module proxy does not serve pulumi {wanted.pulumi} / pulumi-kubernetes "
            f"{wanted.kubernetes} (see {go.log})"
        )
    return fallback_served(go, wanted, cwd)


def fallback_served(go: GoTool, wanted: EngineVersions, cwd: Path) -> src.EngineSources:
    """The first pinned fallback whose CLI release the proxy serves (the last one regardless)."""
    *preferred, last = src.all_fallback_sources(wanted)
    cwd.mkdir(parents=True, exist_ok=True)
    for candidate in preferred:
        tag = f"{src.PKG_MODULE}@v{candidate.cli_version}"
        if go.try_json(["mod", "download", "-json", tag], cwd) is not None:
            return candidate
    return last
