"""renderTo on the real engine: the path the Kubernetes provider records is relative to the
program's folder, so a moved project previews no change; and the state an older modelplane
left (an absolute path) moves to it without losing a manifest (the provider replaces its
resources when the directory changes, and modelplane's render provider is replaced
delete-before-replace: created first, a replacement's file would be deleted by the old one).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.fixtures.engine import project_cli

pytestmark = pytest.mark.engine

PROGRAM = """\
import os

import pulumi
import pulumi_kubernetes as k8s

from modelplane.components.providers import cluster_provider

out = os.path.join(os.path.dirname(os.getcwd()), "out")
if pulumi.Config().get_bool("absolute"):  # as modelplane recorded it before
    provider = k8s.Provider("render", render_yaml_to_directory=out, kubeconfig="")
else:
    provider = cluster_provider("render", kubeconfig=None, render_to=out, opts=None)
for name in ("settings", "more"):
    k8s.core.v1.ConfigMap(
        name,
        metadata={"name": name, "namespace": "default"},
        data={"greeting": "hello"},
        opts=pulumi.ResourceOptions(provider=provider),
    )
"""

RENDERED = ("v1-configmap-default-settings.yaml", "v1-configmap-default-more.yaml")


def project_in(base: Path) -> Path:
    project = base / "project"
    project.mkdir(parents=True)
    (project / "Pulumi.yaml").write_text(
        "name: renderpaths\n"
        "runtime:\n  name: python\n  options:\n"
        f"    virtualenv: {json.dumps(sys.prefix)}\n"
    )
    (project / "__main__.py").write_text(PROGRAM)
    return project


def rendered(base: Path) -> dict[str, str]:
    folder = base / "out" / "1-manifest"
    return {name: (folder / name).read_text() for name in RENDERED if (folder / name).is_file()}


def test_render_paths_move_with_the_project_and_an_absolute_state_keeps_every_manifest(
    engine_root: Path, tmp_path: Path
) -> None:
    pulumi = project_cli(engine_root, tmp_path)
    base = tmp_path / "checkout"
    project = project_in(base)
    pulumi(project, "stack", "init", "dev")

    # The state an older modelplane left: an absolute directory.
    pulumi(project, "config", "set", "absolute", "true")
    pulumi(project, "up", "--yes", "--skip-preview")
    before = rendered(base)
    assert sorted(before) == sorted(RENDERED)

    # This one records it relative to the program's folder: every resource is replaced once
    # (the provider's rule), and every manifest is still there afterwards.
    pulumi(project, "config", "set", "absolute", "false")
    out = pulumi(project, "up", "--yes", "--skip-preview")
    assert "3 replaced" in out, out
    assert rendered(base) == before
    exported = json.loads(pulumi(project, "stack", "export"))
    (provider,) = [
        r for r in exported["deployment"]["resources"] if r["type"] == "pulumi:providers:kubernetes"
    ]
    assert provider["inputs"]["renderYamlToDirectory"] == "../out"
    assert str(tmp_path) not in json.dumps(exported)

    # The checkout moved (another machine's CI on the same state): nothing to change.
    moved = tmp_path / "elsewhere" / "checkout"
    moved.parent.mkdir()
    base.rename(moved)
    pulumi(moved / "project", "preview", "-s", "dev", "--expect-no-changes")
    pulumi(moved / "project", "up", "-s", "dev", "--yes", "--skip-preview")
    assert rendered(moved) == before
