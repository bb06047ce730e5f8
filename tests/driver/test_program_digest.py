"""The program part of a stack's fingerprint: what changes it (sources, vendored files, SDK
versions) and what does not (caches, docs). Issue 34, "honest skipping"."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from modelplane.driver import fingerprint


def _tree(root: Path) -> dict[str, list[Path]]:
    package = root / "modelplane"
    (package / "components" / "manifests").mkdir(parents=True)
    (package / "components" / "gateway.py").write_text("X = 1\n")
    (package / "components" / "manifests" / "installer.yaml").write_text("kind: DaemonSet\n")
    (package / "components" / "README.md").write_text("docs\n")
    (package / "crds" / "gateway-api").mkdir(parents=True)
    (package / "crds" / "gateway-api" / "standard.yaml").write_text("kind: CRD\n")
    return {"modelplane": [package]}


def _edit(path: str, text: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    return edit


@pytest.mark.parametrize(
    ("edit", "changes"),
    [
        (_edit("modelplane/components/gateway.py", "X = 2\n"), True),
        (_edit("modelplane/components/manifests/installer.yaml", "kind: Job\n"), True),
        (_edit("modelplane/crds/gateway-api/standard.yaml", "kind: CRD2\n"), True),
        (_edit("modelplane/components/new_module.py", ""), True),
        (_edit("modelplane/components/values.json", "{}"), True),
        (_edit("modelplane/components/README.md", "other docs\n"), False),
        (_edit("modelplane/components/__pycache__/gateway.cpython-311.pyc", "bytes"), False),
        (_edit("modelplane/components/__pycache__/stale.py", "X = 3\n"), False),
    ],
    ids=[
        "source",
        "vendored manifest",
        "vendored CRD",
        "new module",
        "json data",
        "readme",
        "bytecode",
        "pycache",
    ],
)
def test_what_changes_the_program(
    tmp_path: Path, edit: Callable[[Path], None], changes: bool
) -> None:
    roots = _tree(tmp_path)
    before = fingerprint.tree_digest(roots)
    edit(tmp_path)
    assert (fingerprint.tree_digest(roots) != before) is changes


def test_a_missing_package_is_part_of_the_digest(tmp_path: Path) -> None:
    roots = _tree(tmp_path)
    assert fingerprint.tree_digest({**roots, "stacks": []}) != fingerprint.tree_digest(roots)


def test_an_sdk_upgrade_changes_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    fingerprint.program_digest.cache_clear()
    before = fingerprint.program_digest()
    versions = {**fingerprint.sdk_versions(), "pulumi-kubernetes": "9.9.9"}
    monkeypatch.setattr(fingerprint, "sdk_versions", lambda: versions)
    fingerprint.program_digest.cache_clear()
    try:
        assert fingerprint.program_digest() != before
    finally:
        fingerprint.program_digest.cache_clear()


def test_the_program_covers_the_packages_a_stack_reads() -> None:
    # One package holds the program, the components and the vendored CRDs and manifests.
    assert fingerprint.PROGRAM_PACKAGES == ("modelplane",)
    spec = importlib.util.find_spec("modelplane")
    assert spec is not None and spec.submodule_search_locations
    (folder,) = (Path(p) for p in spec.submodule_search_locations)
    for part in ("program/__main__.py", "components/gateway.py", "crds/__init__.py"):
        assert (folder / part).is_file(), part
    assert set(fingerprint.SDK_DISTRIBUTIONS) >= {"pulumi", "pulumi-kubernetes"}
    assert all(v for k, v in fingerprint.sdk_versions().items() if k == "pulumi")
