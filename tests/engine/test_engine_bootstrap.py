"""The engine bootstrap: pure parts (versions, cache layout, wrapper modules, preference order)
and, marked `engine`, the built binaries themselves (no network: they come from the cache,
which `ensure_engine()` fills the first time, as set-up)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from modelplane.engine import bootstrap, gobuild, sources
from modelplane.engine.__main__ import main as engine_main
from modelplane.engine.bootstrap import SETUP_COMMAND, EngineNotFound, candidate_keys, find_engine
from modelplane.engine.installed import find_installed
from modelplane.engine.versions import (
    EngineVersions,
    cache_key,
    parse_cli_version,
    wanted_versions,
)
from modelplane.gobuild import cache
from modelplane.gobuild.gomod import (
    GoMod,
    Replace,
    WrapperModule,
    go_version_at_least,
    merge_go_sum,
    parse_go_mod,
)
from modelplane.gobuild.gotool import GoError, go_env
from tests.fixtures.engine import project_cli

WANTED = EngineVersions(pulumi="3.272.0", kubernetes="4.34.2")
GO = shutil.which("go")  # before any fixture empties PATH


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_pulumi(bin_dir: Path, version: str) -> Path:
    """A `pulumi` script printing `version`, with the language host and shim beside it."""
    executable(bin_dir / "pulumi-language-python", "#!/bin/sh\nexit 0\n")
    executable(bin_dir / "pulumi-language-python-exec", "#!/bin/sh\nexit 0\n")
    return executable(bin_dir / "pulumi", f"#!/bin/sh\necho {version}\n")


def fake_engine(root: Path, pulumi: str = "3.272.0", kubernetes: str = "4.34.2") -> Path:
    for name in bootstrap.BINARIES:
        executable(root / "bin" / name, "#!/bin/sh\nexit 0\n")
    versions = {"pulumi": pulumi, "kubernetes": kubernetes}
    cache.Manifest(set="engine", versions=versions, source="test").write(root)
    return root


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty engine cache and a PATH with no pulumi on it."""
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / "cache"))
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path / "pulumi-home"))
    return tmp_path / "cache" / "engine"


# -- versions and cache layout ------------------------------------------------------------------


def test_cache_key_names_both_versions() -> None:
    assert cache_key("3.272.0", "4.34.2") == "pulumi-v3.272.0-k8s-v4.34.2"
    assert cache_key("v3.272.0", "v4.34.2") == "pulumi-v3.272.0-k8s-v4.34.2"
    assert WANTED.key == "pulumi-v3.272.0-k8s-v4.34.2"


def test_an_engine_with_modelplanes_host_is_named_by_the_hosts_source(tmp_path: Path) -> None:
    # A changed host source is another engine: machines with the old one build the new one.
    digest = sources.modelplane_host_digest()
    assert len(digest) == 8 and int(digest, 16) >= 0
    with_host = EngineVersions("3.274.1", "4.25.0", host=digest)
    assert with_host.key == f"pulumi-v3.274.1-k8s-v4.25.0-mphost-{digest}"
    assert EngineVersions("3.274.1", "4.25.0").key == "pulumi-v3.274.1-k8s-v4.25.0"


def test_wanted_versions_are_the_installed_packages() -> None:
    wanted = wanted_versions()
    assert wanted.pulumi == importlib.metadata.version("pulumi")
    assert wanted.kubernetes == importlib.metadata.version("pulumi-kubernetes")


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("v3.272.0\n", "3.272.0"),
        ("warning: something\nv3.1.0\n", "3.1.0"),
        ("v3.273.0-alpha.1+dirty\n", "3.273.0-alpha.1+dirty"),
        ("\n", None),
        ("not a version\n", None),
    ],
)
def test_parse_cli_version(output: str, version: str | None) -> None:
    assert parse_cli_version(output) == version


def test_cache_base_precedence(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path / "home")}
    assert bootstrap.cache_base(home) == tmp_path / "home" / ".cache" / "modelplane" / "engine"
    xdg = {**home, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert bootstrap.cache_base(xdg) == tmp_path / "xdg" / "modelplane" / "engine"
    own = {**xdg, "MODELPLANE_CACHE_DIR": str(tmp_path / "own")}
    assert bootstrap.cache_base(own) == tmp_path / "own" / "engine"


def test_publish_is_atomic_and_incomplete_engines_do_not_count(tmp_path: Path) -> None:
    base = tmp_path / "engine"
    with cache.staged(base, "k") as staging:
        assert staging.parent == base and staging.name.startswith(".staging-k-")
        assert not bootstrap.is_complete(staging)  # no binaries, no manifest yet
        for name in bootstrap.BINARIES:
            executable(staging / "bin" / name, "#!/bin/sh\nexit 0\n")
        assert not bootstrap.is_complete(staging)  # binaries, no manifest yet
        manifest = cache.Manifest(set="engine", versions={"pulumi": "3.272.0"})
        root = cache.publish(staging, base / "k", manifest)
    assert root == base / "k" and bootstrap.is_complete(root) and not staging.exists()
    assert cache.read_manifest(root) == manifest
    (root / "bin" / "pulumi").unlink()
    assert not bootstrap.is_complete(root)


def test_an_engine_cached_before_the_build_wing_still_counts(tmp_path: Path) -> None:
    root = tmp_path / "engine" / WANTED.key
    for name in bootstrap.BINARIES:
        executable(root / "bin" / name, "#!/bin/sh\nexit 0\n")
    legacy = {
        "pulumi": "3.274.1",
        "kubernetes": "4.25.0",
        "wanted": {"pulumi": "3.272.0", "kubernetes": "4.34.2"},
        "source": "go-build",
        "seconds": 2400.0,
        "created": "2026-11-25T21:00:00+00:00",
        "details": {"pkg/v3": "v3.274.1"},
    }
    (root / "engine.json").write_text(json.dumps(legacy))
    assert bootstrap.is_complete(root)
    manifest = cache.read_manifest(root)
    assert manifest.set == "engine" and manifest.source == "go-build"
    assert manifest.versions == {"pulumi": "3.274.1", "kubernetes": "4.25.0"}
    assert manifest.built_at == legacy["created"]


def test_stale_staging_folders_are_cleaned(tmp_path: Path) -> None:
    base = tmp_path / "engine"
    stale = base / ".staging-k-1-2"
    (stale / "bin").mkdir(parents=True)
    with cache.locked(base / ".lock", "the engine"):
        cache.clean_stale_staging(base)
    assert not stale.exists()


def test_a_second_bootstrap_waits_for_the_lock_and_says_so(tmp_path: Path) -> None:
    import fcntl
    import threading

    base = tmp_path / "engine"
    base.mkdir()
    holder = open(base / ".lock", "w")  # noqa: SIM115 - released by the timer below
    fcntl.flock(holder, fcntl.LOCK_EX)
    threading.Timer(0.3, holder.close).start()
    messages: list[str] = []
    with cache.locked(base / ".lock", bootstrap.WHAT, messages.append):
        pass
    assert messages == [
        f"another process is building the Pulumi engine; waiting for {base / '.lock'}"
    ]


def test_a_failed_build_leaves_no_engine_behind(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if GO is None:
        pytest.skip("needs the Go toolchain (only `go env` runs: no build, no network)")
    monkeypatch.setenv(bootstrap.SOURCES_ENV, "fallback")
    monkeypatch.setenv(bootstrap.OFFICIAL_ENV, "0")
    monkeypatch.setenv("PATH", str(Path(GO).parent))

    def half_build(self: gobuild.EngineBuilder) -> None:
        executable(self.bin / "pulumi", "#!/bin/sh\necho half\n")
        raise GoError("pulumi: go build failed (simulated)")

    monkeypatch.setattr(gobuild.EngineBuilder, "build_all", half_build)
    with pytest.raises(GoError, match="simulated"):
        bootstrap.ensure_engine(progress=lambda _m: None)
    left = sorted(p.name for p in isolated.iterdir())
    assert left == [".lock", "last-failed-build.log"]


def test_candidate_keys_exact_first_then_pinned_fallbacks_newest_first() -> None:
    keys = candidate_keys(WANTED)
    assert keys[0] == WANTED.key
    host = f"-mphost-{sources.modelplane_host_digest()}"  # the builds carry modelplane's host
    assert keys[1] == WANTED.key + host  # the exact versions with modelplane's host
    assert keys[2:] == [f.versions.key for f in sources.all_fallback_sources(WANTED)]
    assert keys[2] == cache_key("3.274.1", sources.FALLBACK_PROVIDER.stamp) + host
    assert keys[3] == cache_key("3.259.0", sources.FALLBACK_PROVIDER.stamp) + host


# -- wrapper modules ------------------------------------------------------------------------------

UPSTREAM_GO_MOD = """\
module github.com/pulumi/pulumi/pkg/v3

go 1.25.11

replace github.com/pulumi/pulumi/sdk/v3 => ../sdk

replace (
\tgithub.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e
\tgolang.org/x/text v0.1.0 => golang.org/x/text v0.39.0 // pinned
)

require (
\tgithub.com/pulumi/pulumi/sdk/v3 v3.259.0
)
"""


def test_parse_go_mod_separates_path_and_module_replaces() -> None:
    mod = parse_go_mod(UPSTREAM_GO_MOD)
    assert mod.module == "github.com/pulumi/pulumi/pkg/v3"
    assert mod.go == "1.25.11"
    assert [r.old for r in mod.replaces] == [
        "github.com/pulumi/pulumi/sdk/v3",
        "github.com/atotto/clipboard",
        "golang.org/x/text",
    ]
    assert [r.render() for r in mod.module_replaces] == [
        "github.com/atotto/clipboard => github.com/tgummerer/clipboard "
        "v0.0.0-20241001131231-d02d263e614e",
        "golang.org/x/text v0.1.0 => golang.org/x/text v0.39.0",
    ]


def test_wrapper_go_mod_requires_upstream_and_copies_only_module_replaces() -> None:
    pkg = parse_go_mod(UPSTREAM_GO_MOD)
    sdk = GoMod(
        module="github.com/pulumi/pulumi/sdk/v3",
        go="1.26.6",
        replaces=(Replace("github.com/atotto/clipboard", "example.com/other", None, "v1.0.0"),),
    )
    wrapper = WrapperModule.wrapping(
        "modelplane.local/engine/pulumi",
        ((sources.PKG_MODULE, "v3.259.0"), (sources.SDK_MODULE, "v3.259.0")),
        (pkg, sdk),
    )
    text = wrapper.render()
    lines = [line.strip() for line in text.splitlines()]
    assert text.startswith("module modelplane.local/engine/pulumi\n")
    assert "\ngo 1.26.6\n" in text  # the highest upstream go line
    assert "\tgithub.com/pulumi/pulumi/pkg/v3 v3.259.0\n" in text
    assert "\tgithub.com/pulumi/pulumi/sdk/v3 v3.259.0\n" in text
    assert "=> ../sdk" not in text  # path replaces make no sense outside the upstream repo
    assert text.count("github.com/atotto/clipboard =>") == 1  # first upstream wins
    assert "github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e" in text
    assert "golang.org/x/text v0.1.0 => golang.org/x/text v0.39.0" in lines


def test_wrapper_copies_godebug_lines() -> None:
    mod = parse_go_mod("module k8s.io/x\n\ngo 1.24.0\n\ngodebug default=go1.24\n")
    text = WrapperModule.wrapping("w", (("k8s.io/x", "v1.0.0"),), (mod,)).render()
    assert "\ngodebug default=go1.24\n" in text


def test_go_sum_merge_dedupes_and_pins() -> None:
    merged = merge_go_sum("b h1:2=\na h1:1=\n", ["a h1:1=", *sources.FALLBACK_PINNED_SUMS])
    lines = merged.splitlines()
    assert lines == sorted(set(lines)) and "a h1:1=" in lines
    assert all(line in lines for line in sources.FALLBACK_PINNED_SUMS)


def test_go_version_comparison() -> None:
    assert go_version_at_least("1.26.8", "1.26.6")
    assert go_version_at_least("1.26.8", "1.24.7")
    assert not go_version_at_least("1.25.3", "1.26.0")


def test_provider_main_embeds_generated_files() -> None:
    old = gobuild.provider_main_go(with_helm_mapping=False)
    assert (
        "//go:embed schema-embed.json" in old and "//go:embed terraform-mapping-embed.json" in old
    )
    assert 'provider.Serve("kubernetes", version.Version, schema, terraformMapping)' in old
    new = gobuild.provider_main_go(with_helm_mapping=True)
    assert "//go:embed helm-mapping.json" in new and "terraformMapping, helmMapping)" in new


def test_ldflags_and_tools_file() -> None:
    flags = gobuild.ldflags((sources.PULUMI_VERSION_VAR, "v3.259.0"))
    assert flags == f"-s -w -X {sources.PULUMI_VERSION_VAR}=v3.259.0"
    tools = gobuild.tools_go(sources.CLI_PACKAGE)
    assert tools.startswith("//go:build tools\n") and f'_ "{sources.CLI_PACKAGE}"' in tools


def test_go_sources_ship_with_the_package() -> None:
    assert "RegisterLanguageRuntimeServer" in gobuild.go_source("langhost/main.go")
    assert "schema.PackageSpec" in gobuild.go_source("embedgen/main.go")


def test_go_env_is_local_toolchain_without_cgo_and_ignores_the_users_goflags() -> None:
    env = go_env({"GOFLAGS": "-race -mod=vendor", "GOTOOLCHAIN": "auto", "PATH": "/x"})
    assert env["GOTOOLCHAIN"] == "local" and env["CGO_ENABLED"] == "0" and env["GOWORK"] == "off"
    assert env["GOFLAGS"] == "-mod=mod"
    assert env["PATH"] == "/x"


def test_pseudo_version_from_tag_commit() -> None:
    version = sources.pseudo_version(
        "v3", "2026-08-20T08:44:10Z", "a05d88f24d05726fa3beae771bfdedb0c0c6a94a"
    )
    assert version == "v3.0.0-20260820084410-a05d88f24d05"


def test_fallback_sources_are_pinned_and_named_by_what_they_build() -> None:
    fallback = sources.fallback_sources(WANTED)
    assert fallback.exec_shim_sdk_version == WANTED.pulumi  # the shim matches the Python SDK
    assert fallback.host_module_version is None  # modelplane's own host
    assert fallback.versions.key == (
        cache_key(fallback.cli_version, fallback.provider.stamp)
        + f"-mphost-{sources.modelplane_host_digest()}"
    )
    assert any(fallback.provider.module_version in line for line in fallback.pinned_sums)


class FakeGo:
    """`go mod download -json` answers of a module proxy that serves only `served`."""

    log = Path("fake-go.log")

    def __init__(self, served: dict[str, dict[str, object]]) -> None:
        self.served = served

    def try_json(self, args: list[str], cwd: Path) -> dict[str, object] | None:
        return self.served.get(args[-1])


K8S_COMMIT = "b" * 40
PKG_COMMIT = "a" * 40
FULL_PROXY = {
    f"{sources.PKG_MODULE}@v3.272.0": {"Origin": {"Hash": PKG_COMMIT}},
    f"{sources.HOST_MODULE}@{PKG_COMMIT}": {"Version": "v3.0.0-20261022190000-aaaaaaaaaaaa"},
    f"{sources.K8S_ROOT_MODULE}@v4.34.2+incompatible": {"Origin": {"Hash": K8S_COMMIT}},
    f"{sources.K8S_PROVIDER_MODULE}@{K8S_COMMIT}": {
        "Version": "v4.0.0-20260901000000-bbbbbbbbbbbb"
    },
    f"{sources.K8S_SDK_MODULE}@v4.34.2": {"Version": "v4.34.2"},
}


def test_exact_sources_when_the_proxy_serves_everything(tmp_path: Path) -> None:
    from modelplane.engine.resolve import choose_sources

    chosen = choose_sources(FakeGo(FULL_PROXY), WANTED, tmp_path, "auto")  # type: ignore[arg-type]
    assert chosen.versions == WANTED
    assert chosen.host_module_version == "v3.0.0-20261022190000-aaaaaaaaaaaa"
    assert chosen.provider == sources.ProviderSource(
        module_version="v4.0.0-20260901000000-bbbbbbbbbbbb", sdk_version="v4.34.2", stamp="4.34.2"
    )


def test_exact_cli_with_modelplane_host_when_the_host_module_is_refused(tmp_path: Path) -> None:
    from modelplane.engine.resolve import choose_sources

    served = {k: v for k, v in FULL_PROXY.items() if not k.startswith(sources.HOST_MODULE)}
    chosen = choose_sources(FakeGo(served), WANTED, tmp_path, "auto")  # type: ignore[arg-type]
    assert chosen.host_module_version is None
    assert chosen.versions == EngineVersions(
        WANTED.pulumi, WANTED.kubernetes, host=sources.modelplane_host_digest()
    )
    # ... and such an engine is found where the bootstrap looks (right after the exact one).
    assert candidate_keys(WANTED)[:2] == [WANTED.key, chosen.versions.key]


def test_refused_versions_fall_back_unless_exact_is_demanded(tmp_path: Path) -> None:
    from modelplane.engine.resolve import choose_sources

    served = {k: v for k, v in FULL_PROXY.items() if not k.startswith(sources.PKG_MODULE)}
    served[f"{sources.PKG_MODULE}@v3.274.1"] = {"Version": "v3.274.1"}
    fake = FakeGo(served)
    chosen = choose_sources(fake, WANTED, tmp_path, "auto")  # type: ignore[arg-type]
    assert chosen == sources.fallback_sources(WANTED, "3.274.1")
    assert chosen.versions.pulumi == "3.274.1"  # the CLI is newer than the SDK, never older
    with pytest.raises(LookupError, match="does not serve pulumi 3.272.0"):
        choose_sources(fake, WANTED, tmp_path, "exact")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["auto", "fallback"])
def test_a_proxy_without_the_newer_cli_gets_the_older_fallback(tmp_path: Path, mode: str) -> None:
    from modelplane.engine.resolve import choose_sources

    served = {k: v for k, v in FULL_PROXY.items() if not k.startswith(sources.PKG_MODULE)}
    chosen = choose_sources(FakeGo(served), WANTED, tmp_path, mode)  # type: ignore[arg-type]
    assert chosen == sources.fallback_sources(WANTED, "3.259.0")


# -- preference order -----------------------------------------------------------------------------


def test_engine_range_installed_pulumi_below_the_sdk_is_refused_with_the_reason(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "bin"
    fake_pulumi(bin_dir, "v3.1.0")
    messages: list[str] = []
    found = find_installed(
        WANTED, path=str(bin_dir), home=tmp_path / "home", progress=messages.append
    )
    assert found is None
    assert any("version 3.1.0 is below 3.272.0" in m and "SDK" in m for m in messages), messages


@pytest.mark.parametrize(
    ("cli", "cached", "expected"),
    [
        ("v3.272.0", ["4.34.2"], "4.34.2"),  # exactly the SDKs'
        ("v3.280.1", ["4.34.2"], "4.34.2"),  # a newer CLI: the user's own, used
        ("v3.272.0", ["4.30.0", "4.40.1", "4.35.0"], "4.40.1"),  # the newest plugin at or above
        ("v3.272.0", ["4.30.0"], None),  # only an older plugin: refused
        ("v3.271.9", ["4.40.1"], None),  # an older CLI: refused
        ("3.300.0-alpha.1+dirty", ["4.34.2"], "4.34.2"),  # a dev build of a newer CLI
    ],
)
def test_engine_range_any_installed_engine_at_or_above_the_sdks(
    tmp_path: Path, cli: str, cached: list[str], expected: str | None
) -> None:
    bin_dir = tmp_path / "bin"
    fake_pulumi(bin_dir, cli)
    home = tmp_path / "home"
    for version in cached:
        executable(
            home / "plugins" / f"resource-kubernetes-v{version}" / "pulumi-resource-kubernetes",
            "#!/bin/sh\nexit 0\n",
        )
    found = find_installed(WANTED, path=str(bin_dir), home=home, progress=lambda _m: None)
    if expected is None:
        assert found is None
        return
    assert found is not None
    assert found["pulumi-resource-kubernetes"].parent.name == f"resource-kubernetes-v{expected}"


def test_installed_pulumi_of_the_right_version_is_accepted(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    pulumi = fake_pulumi(bin_dir, "v3.272.0")
    home = tmp_path / "home"
    provider = executable(
        home / "plugins" / "resource-kubernetes-v4.34.2" / "pulumi-resource-kubernetes",
        "#!/bin/sh\nexit 0\n",
    )
    found = find_installed(WANTED, path=str(bin_dir), home=home, progress=lambda _m: None)
    assert found == {
        "pulumi": pulumi,
        "pulumi-language-python": bin_dir / "pulumi-language-python",
        "pulumi-language-python-exec": bin_dir / "pulumi-language-python-exec",
        "pulumi-resource-kubernetes": provider,
    }


def test_installed_provider_on_path_must_have_the_right_version(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_pulumi(bin_dir, "v3.272.0")
    provider = executable(bin_dir / "pulumi-resource-kubernetes", "#!/bin/sh\nexit 0\n")
    quiet = {"path": str(bin_dir), "home": tmp_path / "home", "progress": lambda _m: None}
    wrong = find_installed(WANTED, provider_version_of=lambda _p: "4.0.0", **quiet)
    assert wrong is None
    newer = find_installed(WANTED, provider_version_of=lambda _p: "4.40.0", **quiet)
    assert newer is not None and newer["pulumi-resource-kubernetes"] == provider
    right = find_installed(WANTED, provider_version_of=lambda _p: "4.34.2", **quiet)
    assert right is not None and right["pulumi-resource-kubernetes"] == provider


def test_pulumi_from_the_engine_cache_is_not_an_installed_engine(tmp_path: Path) -> None:
    bin_dir = tmp_path / "cache" / "engine" / "some-key" / "bin"
    fake_pulumi(bin_dir, "v3.272.0")

    def must_not_run(_path: Path) -> str | None:
        raise AssertionError("the cache's own pulumi was asked for its version")

    found = find_installed(
        WANTED,
        path=str(bin_dir),
        home=tmp_path,
        progress=lambda _m: None,
        cli_version_of=must_not_run,
        skip_under=tmp_path / "cache" / "engine",
    )
    assert found is None


def test_installed_engine_without_language_host_is_rejected(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    executable(bin_dir / "pulumi", "#!/bin/sh\necho v3.272.0\n")
    found = find_installed(WANTED, path=str(bin_dir), home=tmp_path, progress=lambda _m: None)
    assert found is None


def test_cached_exact_engine_wins_over_path(
    isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_engine(isolated / WANTED.key)
    fake_pulumi(tmp_path / "other", "v3.272.0")
    monkeypatch.setenv("PATH", str(tmp_path / "other"))
    assert find_engine(WANTED, isolated) == isolated / WANTED.key


def test_installed_engine_is_linked_into_the_cache(
    isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "installed"
    fake_pulumi(bin_dir, "v3.272.0")
    plugin_dir = tmp_path / "pulumi-home" / "plugins" / "resource-kubernetes-v4.34.2"
    executable(plugin_dir / "pulumi-resource-kubernetes", "#!/bin/sh\nexit 0\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    root = find_engine(WANTED, isolated)
    assert root == isolated / WANTED.key
    assert (root / "bin" / "pulumi").resolve() == (bin_dir / "pulumi").resolve()
    assert cache.read_manifest(root).source == "installed"


def test_fallback_build_is_used_when_nothing_exact_exists(isolated: Path) -> None:
    newer, older = (f.versions for f in sources.all_fallback_sources(WANTED))
    fake_engine(isolated / older.key, older.pulumi, older.kubernetes)
    assert find_engine(WANTED, isolated) == isolated / older.key
    fake_engine(isolated / newer.key, newer.pulumi, newer.kubernetes)
    assert find_engine(WANTED, isolated) == isolated / newer.key  # the newer one is preferred


def test_engine_root_and_env_without_an_engine_say_what_to_run(isolated: Path) -> None:
    from modelplane.engine import engine_env, engine_root

    with pytest.raises(EngineNotFound, match=SETUP_COMMAND):
        engine_root()
    with pytest.raises(EngineNotFound):
        engine_env()


def test_engine_env_puts_the_bin_dir_first(isolated: Path) -> None:
    from modelplane.engine import engine_env

    root = fake_engine(isolated / wanted_versions().key)
    env = engine_env()
    assert env["PATH"].split(os.pathsep)[0] == str(root / "bin")
    assert env["PULUMI_SKIP_UPDATE_CHECK"] == "true"
    assert env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == "true"


def test_cli_where_without_engine_fails_clearly(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert engine_main(["where"]) == 1
    err = capsys.readouterr().err
    assert SETUP_COMMAND in err and "Traceback" not in err


# -- the built engine (no network: from the cache, built by ensure_engine the first time) --------


@pytest.fixture(scope="session")
def built_engine() -> Path:
    from modelplane.engine import EngineBuildFailed, ensure_engine

    try:
        return ensure_engine(progress=lambda _m: None)
    except (EngineNotFound, EngineBuildFailed, GoError) as exc:
        pytest.fail(f"the Pulumi engine is not set up ({exc}); run `{SETUP_COMMAND}`")


def engine_versions(root: Path) -> EngineVersions:
    versions = cache.read_manifest(root).versions
    return EngineVersions(pulumi=versions["pulumi"], kubernetes=versions["kubernetes"])


def expected_versions(root: Path) -> EngineVersions:
    """The packages' versions, unless this is the pinned fallback build (then its versions)."""
    wanted = wanted_versions()
    if root.name == wanted.key:
        return wanted
    for fallback in sources.all_fallback_sources(wanted):
        if root.name == fallback.versions.key:  # the manifest names the versions, not the host
            return EngineVersions(fallback.versions.pulumi, fallback.versions.kubernetes)
    raise AssertionError(f"unexpected engine folder {root}")


@pytest.mark.engine
def test_built_pulumi_prints_its_stamped_version(built_engine: Path) -> None:
    expected = expected_versions(built_engine)
    assert engine_versions(built_engine) == expected
    proc = subprocess.run(
        [str(built_engine / "bin" / "pulumi"), "version"],
        env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert proc.stdout.strip() == f"v{expected.pulumi}"


@pytest.mark.engine
def test_pulumi_command_passes_the_version_check(
    built_engine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pulumi.automation import PulumiCommand

    from modelplane.engine import engine_root

    monkeypatch.delenv("PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK", raising=False)
    assert engine_root() == built_engine
    command = PulumiCommand(root=str(engine_root()))
    assert command.command == str(built_engine / "bin" / "pulumi")
    assert str(command.version) == expected_versions(built_engine).pulumi


@pytest.mark.engine
def test_plugins_answer_with_their_versions(built_engine: Path) -> None:
    from modelplane.engine.plugininfo import plugin_version

    expected = expected_versions(built_engine)
    bin_dir = built_engine / "bin"
    assert plugin_version(bin_dir / "pulumi-resource-kubernetes", "resource") == expected.kubernetes
    assert plugin_version(bin_dir / "pulumi-language-python", "language") == expected.pulumi
    assert os.access(bin_dir / "pulumi-language-python-exec", os.X_OK)


@pytest.mark.engine
def test_cli_check_passes(built_engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert engine_main(["check"]) == 0
    out = capsys.readouterr().out
    assert f"pulumi version: {expected_versions(built_engine).pulumi}" in out


PROGRAM = """\
import pulumi
import pulumi_kubernetes as k8s

provider = k8s.Provider("render", render_yaml_to_directory={out!r})
k8s.core.v1.ConfigMap(
    "settings",
    metadata={{"name": "settings", "namespace": "default"}},
    data={{"greeting": "hello"}},
    opts=pulumi.ResourceOptions(provider=provider),
)
"""


@pytest.mark.engine
def test_local_python_project_renders_and_destroys_a_manifest(
    built_engine: Path, tmp_path: Path
) -> None:
    """`pulumi up` / `destroy` of a Pulumi.yaml project (the language host path), offline."""
    import sys

    project = tmp_path / "project"
    out = tmp_path / "out"
    project.mkdir()
    venv = Path(sys.prefix)
    (project / "Pulumi.yaml").write_text(
        "name: enginecheck\n"
        f"runtime:\n  name: python\n  options:\n    virtualenv: {json.dumps(str(venv))}\n"
    )
    (project / "__main__.py").write_text(PROGRAM.format(out=str(out)))
    # No KUBECONFIG: the Python SDK forwards $KUBECONFIG as the provider's `kubeconfig`, which
    # provider releases before 4.32 reject next to renderYamlToDirectory.
    run = project_cli(built_engine, tmp_path)

    def pulumi(*args: str) -> str:
        return run(project, *args)

    pulumi("stack", "init", "dev")
    pulumi("up", "--yes", "--skip-preview")
    rendered = out / "1-manifest" / "v1-configmap-default-settings.yaml"
    assert rendered.is_file(), sorted(str(p) for p in out.rglob("*"))
    assert "greeting: hello" in rendered.read_text()
    pulumi("up", "--yes", "--skip-preview")  # a second run keeps the manifest
    assert rendered.is_file()
    pulumi("destroy", "--yes", "--skip-preview")
    assert not rendered.exists()
