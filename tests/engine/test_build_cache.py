"""The one lock-build-publish path of the Go build wing (`modelplane.gobuild.cache`), which
every set goes through: one process builds under the set's lock, the set appears in one rename
with its manifest, a failed build leaves nothing, and folders built before the wing (with
``build-info.json`` or ``engine.json``) still count."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from modelplane.gobuild import cache
from modelplane.gobuild.gomod import Replace, WrapperModule, parse_go_mod
from modelplane.gobuild.gotool import GoError, GoTool, find_go


def go_or_skip() -> None:
    try:
        find_go()
    except GoError as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))


def executable(path: Path) -> Path | None:
    return path if path.is_file() and os.access(path, os.X_OK) else None


def write_tool(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "tool").write_text("#!/bin/sh\n")
    (bin_dir / "tool").chmod(0o755)


def built(go: GoTool, staging: Path) -> cache.Manifest:
    go.progress("building the set")
    go.output(["env", "GOVERSION"], staging, "go env")  # something in build.log
    write_tool(staging / "bin")
    (staging / "src").mkdir()
    return cache.Manifest(set="set", versions={"set": "1.0"}, details={"tags": ["a", "b"]})


def failed(go: GoTool, staging: Path) -> cache.Manifest:
    built(go, staging)
    raise GoError("compiling failed")


@pytest.mark.parametrize(("build", "error"), [(built, None), (failed, "compiling failed")])
def test_build_into_publishes_the_staging_folder_with_its_manifest(
    tmp_path: Path, build, error: str | None
) -> None:
    go_or_skip()
    said: list[str] = []
    root = tmp_path / "sets" / "set-v1"

    def run() -> Path:
        return cache.build_into(root, build, said.append, what="the set")

    if error:
        with pytest.raises(GoError, match=error):
            run()
        assert not root.exists()
        assert (root.parent / cache.FAILED_LOG).is_file()
        assert (
            said[-1]
            == f"build failed; the Go commands' output is in {root.parent / cache.FAILED_LOG}"
        )
    else:
        assert run() == root
        assert executable(root / "bin" / "tool") is not None
        assert (root / "build.log").is_file() and (root / "src").is_dir()
        manifest = cache.read_manifest(root)
        assert manifest.set == "set" and manifest.versions == {"set": "1.0"}
        assert manifest.details == {"tags": ["a", "b"]} and manifest.source == "go-build"
        assert manifest.go and manifest.go[0].isdigit() and manifest.seconds >= 0
        assert said[-1].startswith("built the set in ") and said[-1].endswith(f": {root}/bin")
    assert said[0] == "building the set"
    assert [p.name for p in root.parent.iterdir() if p.name.startswith(".")] == []


def test_a_set_built_before_the_wing_reads_its_build_info(tmp_path: Path) -> None:
    root = tmp_path / "kube" / "k8s-v1.35.8-kine-v0.16.4"
    root.mkdir(parents=True)
    info = {
        "kubernetes_version": "1.35.8",
        "kine_version": "0.16.4",
        "go": "go1.26.8",
        "seconds": 1500.2,
        "built_at": "2026-11-25T21:10:00Z",
    }
    (root / "build-info.json").write_text(json.dumps(info))
    assert cache.has_manifest(root)
    manifest = cache.read_manifest(root, "kube")
    assert manifest.set == "kube" and manifest.go == "go1.26.8" and manifest.seconds == 1500.2
    assert manifest.versions == {"kubernetes_version": "1.35.8", "kine_version": "0.16.4"}


def fake_build(calls: list[Path], error: bool = False):
    def build(go: GoTool, staging: Path) -> cache.Manifest:
        calls.append(staging)
        if not error:
            write_tool(staging / "bin")
        return cache.Manifest(set="set", versions={})

    return build


@pytest.mark.parametrize(
    ("cached_first", "builds", "error"),
    [(True, 0, None), (False, 1, None), (False, 1, "build finished but {bin} has no tool")],
    ids=["cached", "built", "built-nothing"],
)
def test_ensure_built_builds_only_what_is_not_cached(
    tmp_path: Path, cached_first: bool, builds: int, error: str | None
) -> None:
    if builds:
        go_or_skip()
    root = tmp_path / "cache" / "set-v1"
    tool = root / "bin" / "tool"
    if cached_first:
        write_tool(root / "bin")
    calls: list[Path] = []

    def ensure() -> Path:
        build = fake_build(calls, error=error is not None)
        return cache.ensure_built(
            root, lambda: executable(tool), build, None, what="the set", missing="has no tool"
        )

    if error:
        with pytest.raises(GoError) as raised:
            ensure()
        assert str(raised.value) == error.format(bin=root / "bin")
    else:
        assert ensure() == tool
    assert len(calls) == builds
    assert all(c.parent == root.parent and c.name.startswith(".staging-set-v1-") for c in calls)


def test_ensure_built_concurrent_callers_wait_for_the_one_build_and_name_the_set(
    tmp_path: Path,
) -> None:
    go_or_skip()
    root = tmp_path / "set-v1"
    tool = root / "bin" / "tool"
    building, release = threading.Event(), threading.Event()
    calls: list[Path] = []
    said: list[str] = []

    def build(go: GoTool, staging: Path) -> cache.Manifest:
        calls.append(staging)
        building.set()
        assert release.wait(30)
        write_tool(staging / "bin")
        return cache.Manifest(set="prometheus", versions={})

    found: dict[str, Path] = {}

    def ensure(name: str) -> None:
        found[name] = cache.ensure_built(
            root, lambda: executable(tool), build, said.append, what="the dev fleet's Prometheus"
        )

    first = threading.Thread(target=ensure, args=("first",))
    first.start()
    assert building.wait(30)
    second = threading.Thread(target=ensure, args=("second",))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # waiting on the lock
    release.set()
    first.join(30)
    second.join(30)
    assert found == {"first": tool, "second": tool}
    assert len(calls) == 1
    assert said[0] == (
        "another process is building the dev fleet's Prometheus; "
        f"waiting for {tmp_path / 'set-v1.lock'}"
    )


def test_every_set_keeps_its_cache_folder_and_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folders `make setup` filled before the wing are the ones found now (no rebuild)."""
    from modelplane.engine.bootstrap import cache_base, lock_path
    from modelplane.gobuild.fleet_versions import fleet_cache_dir, prometheus_cache_dir
    from modelplane.gobuild.kube_versions import kube_cache_dir

    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path))
    sets = {
        "kube": kube_cache_dir(),
        "devfleet": fleet_cache_dir(),
        "prometheus": prometheus_cache_dir(),
    }
    assert {name: str(path.relative_to(tmp_path)) for name, path in sets.items()} == {
        "kube": "kube/k8s-v1.35.8-kine-v0.16.4",
        "devfleet": "devfleet/kwok-v0.8.0-lws-v0.8.0-traefik-v3.7.13",
        "prometheus": "devfleet/prometheus-v3.16.0",
    }
    assert cache.lock_path(sets["kube"]) == tmp_path / "kube" / "k8s-v1.35.8-kine-v0.16.4.lock"
    assert lock_path(cache_base()) == tmp_path / "engine" / ".lock"


def test_cached_sets_are_found_without_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from modelplane.gobuild.fleet import FleetBinaries, ensure_fleet_binaries
    from modelplane.gobuild.fleet_versions import KWOK_STAGE_FILES, fleet_cache_dir

    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MODELPLANE_DEVFLEET_BIN_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-go"))
    monkeypatch.setenv("MODELPLANE_GO", str(tmp_path / "no-go" / "go"))
    bin_dir = fleet_cache_dir() / "bin"
    for name in FleetBinaries.COMMANDS:
        write_tool(bin_dir)
        (bin_dir / "tool").rename(bin_dir / name)
    for stage in KWOK_STAGE_FILES:
        (bin_dir / "stages").mkdir(exist_ok=True)
        (bin_dir / "stages" / Path(stage).name).write_text("kind: Stage\n")
    said: list[str] = []
    assert ensure_fleet_binaries(progress=said.append) == FleetBinaries(bin_dir)
    assert said == []


@pytest.mark.parametrize(
    ("text", "field", "want"),
    [
        ("module m\ngo 1.25.0\n", "go", "1.25.0"),
        ("module m\nrequire x.io/a v1.0.0 // indirect\n", "requires", (("x.io/a", "v1.0.0"),)),
        (
            "module m\nrequire (\n\tx.io/a v1\n\ty.io/b v2\n)\n",
            "requires",
            (("x.io/a", "v1"), ("y.io/b", "v2")),
        ),
        (
            "module m\nexclude\tx.io/a  v3.0.83+incompatible\n",
            "excludes",
            ("x.io/a v3.0.83+incompatible",),
        ),
        ("module m\nexclude (\n\tx.io/a v1\n)\n", "excludes", ("x.io/a v1",)),
        (
            "module m\ngodebug (\n\tdefault=go1.25\n\twinsymlink=0\n)\n",
            "godebug",
            ("default=go1.25", "winsymlink=0"),
        ),
        (
            "module m\ntool (\n\tx.io/a/cmd\n)\nreplace x.io/a => ./a\n",
            "replaces",
            (Replace("x.io/a", "./a"),),
        ),
    ],
    ids=[
        "go",
        "require-line",
        "require-block",
        "exclude-tab",
        "exclude-block",
        "godebug-block",
        "tool-then-replace",
    ],
)
def test_one_go_mod_reader_for_every_set(text: str, field: str, want: object) -> None:
    assert getattr(parse_go_mod(text), field) == want


def test_a_wrapper_bumps_the_go_line_for_tool_directives_and_renders_one_shape() -> None:
    wrapper = WrapperModule(
        path="modelplane.local/build/x",
        go="1.22",
        requires=(("x.io/a", "v1.0.0"),),
        tools=("x.io/a/cmd",),
        excludes=("x.io/b v0.1.0",),
        comment="Generated.",
    )
    assert wrapper.render() == (
        "// Generated.\nmodule modelplane.local/build/x\n\ngo 1.24\n\ntool x.io/a/cmd\n\n"
        "require (\n\tx.io/a v1.0.0\n)\n\nexclude (\n\tx.io/b v0.1.0\n)\n"
    )
    assert parse_go_mod(wrapper.render()).requires == (("x.io/a", "v1.0.0"),)
