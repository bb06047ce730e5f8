"""The shared build-into-the-cache steps of the Go toolchain sets (control plane, dev fleet,
Prometheus): one process builds under the set's lock, ``bin/`` appears in one rename with
``build-info.json`` next to it, and a failed build leaves neither."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from modelplane.devcluster.build import KubeBuilder, KubeBuildError, ensure_built, find_go


def go_or_skip() -> None:
    try:
        find_go()
    except KubeBuildError as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))


def executable(path: Path) -> Path | None:
    return path if path.is_file() and os.access(path, os.X_OK) else None


def write_tool(out_dir: Path) -> None:
    (out_dir / "tool").write_text("#!/bin/sh\n")
    (out_dir / "tool").chmod(0o755)


def fail(out_dir: Path) -> None:
    write_tool(out_dir)
    raise KubeBuildError("compiling failed")


@pytest.mark.parametrize(
    ("steps", "built", "error"),
    [(write_tool, True, None), (fail, False, "compiling failed")],
    ids=["built", "failed"],
)
def test_build_into_cache_renames_bin_into_place_and_records_the_build(
    tmp_path: Path, steps, built: bool, error: str | None
) -> None:
    go_or_skip()
    said: list[str] = []
    root = tmp_path / "set-v1"
    builder = KubeBuilder(root, "", "", said.append)

    def build() -> None:
        builder.build_into_cache(
            announce=f"building the set into {root}",
            steps=steps,
            info={"set": "1.0", "tags": ["a", "b"]},
            built="the set",
        )

    if error:
        with pytest.raises(KubeBuildError, match=error):
            build()
    else:
        build()
    assert said[0] == f"building the set into {root}"
    assert (root / "build.log").is_file()
    assert not list(root.glob("bin.tmp-*"))  # the temp dir never stays behind
    assert executable(root / "bin" / "tool") is not None if built else not (root / "bin").exists()
    assert (root / "build-info.json").exists() == built
    if built:
        info = json.loads((root / "build-info.json").read_text())
        assert list(info) == ["set", "tags", "go", "seconds", "built_at"]
        assert info["set"] == "1.0" and info["tags"] == ["a", "b"]
        assert info["go"].startswith("go")
        assert said[-1].startswith("built the set in ") and said[-1].endswith(f"min: {root}/bin")


@pytest.mark.parametrize(
    ("cached_first", "builds", "missing", "error"),
    [
        (True, 0, "is incomplete", None),
        (False, 1, "is incomplete", None),
        (False, 1, "has no prometheus", "build finished but {bin} has no prometheus"),
    ],
    ids=["cached", "built", "built-nothing"],
)
def test_ensure_built_builds_only_what_is_not_cached(
    tmp_path: Path, cached_first: bool, builds: int, missing: str, error: str | None
) -> None:
    root = tmp_path / "cache" / "set-v1"
    tool = root / "bin" / "tool"
    if cached_first:
        (root / "bin").mkdir(parents=True)
        write_tool(root / "bin")
    calls: list[Path] = []

    def build(at: Path, _say: object) -> None:
        calls.append(at)
        if error is None:
            (at / "bin").mkdir(parents=True)
            write_tool(at / "bin")

    def ensure() -> Path:
        return ensure_built(root, lambda: executable(tool), build, None, missing=missing)

    if error:
        with pytest.raises(KubeBuildError) as raised:
            ensure()
        assert str(raised.value) == error.format(bin=root / "bin")
    else:
        assert ensure() == tool
    assert calls == [root] * builds


def test_ensure_built_concurrent_callers_wait_for_the_one_build(tmp_path: Path) -> None:
    root = tmp_path / "set-v1"
    tool = root / "bin" / "tool"
    building, release = threading.Event(), threading.Event()
    calls: list[Path] = []
    said: list[str] = []

    def build(at: Path, _say: object) -> None:
        calls.append(at)
        building.set()
        assert release.wait(30)
        (at / "bin").mkdir(parents=True)
        write_tool(at / "bin")

    found: dict[str, Path] = {}

    def ensure(name: str) -> None:
        found[name] = ensure_built(root, lambda: executable(tool), build, said.append)

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
    assert calls == [root]
    assert said == [
        "another process is building the Kubernetes binaries; "
        f"waiting for {tmp_path / 'set-v1.lock'}"
    ]
