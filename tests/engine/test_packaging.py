"""A non-editable install works: the wheel carries the CRD bundles and the Go sources.

Fast and offline: the wheel is built from a copy of the source tree without build isolation
(setuptools of this venv), installed with `--no-deps --no-index` into a fresh venv whose
dependencies come from this one (a .pth line, so this venv's editable finder stays out), and
probed from a directory outside the source tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Pulumi.yaml: the root project sits beside pyproject.toml and must not change the wheel.
SOURCES = (
    "pyproject.toml",
    "README.md",
    "Pulumi.yaml",
    "modelplane",
    "stacks",
)
PROBE = textwrap.dedent(
    """
    import json, sys
    import modelplane.components.charts as charts
    import modelplane
    import modelplane.crds as crds
    from modelplane.components.manifests import GKE_NVIDIA_DRIVER_INSTALLER
    from modelplane.devcluster.crds import default_crds_dir
    print(json.dumps({
        "modelplane": modelplane.__file__,
        "crds": str(crds.CRDS_DIR),
        "devcluster": str(default_crds_dir()),
        "gatewayApi": charts.crd_files("gatewayApi", {}),
        "inferenceExtension": charts.crd_files("inferenceExtension", {}),
        "lws": sorted(p.name for p in (crds.CRDS_DIR / "lws-v0.8.0").glob("*.yaml")),
        "gkeDriverInstaller": str(GKE_NVIDIA_DRIVER_INSTALLER),
        "gkeDriverInstallerShipped": GKE_NVIDIA_DRIVER_INSTALLER.is_file(),
    }))
    """
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    import json

    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "rendered", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    dist = work / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-index", "--no-build-isolation", "-w", str(dist), "."],
        cwd=src,
        check=True,
        capture_output=True,
    )
    [wheel] = dist.glob("modelplane-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    venv = work / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True
    )
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "_modelplane_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", site, str(wheel)],
        check=True,
        capture_output=True,
    )
    out = subprocess.run(
        [str(python), "-c", PROBE], cwd=work, check=True, capture_output=True, text=True
    )
    return {"site": site, "wheel": names, "python": str(python), **json.loads(out.stdout)}


def test_wheel_install_is_not_the_source_tree(installed: dict[str, object]) -> None:
    site = str(installed["site"])
    assert str(installed["modelplane"]).startswith(site)
    assert str(installed["crds"]).startswith(site)
    assert installed["devcluster"] == installed["crds"]


def test_wheel_carries_the_crd_bundles(installed: dict[str, object]) -> None:
    site = str(installed["site"])
    for key, folder in (
        ("gatewayApi", "gateway-api-v1.5.1-standard"),
        ("inferenceExtension", "gaie-v1.0.1"),
    ):
        files = installed[key]
        assert isinstance(files, list) and files
        expected = sorted(p.name for p in (ROOT / "modelplane" / "crds" / folder).glob("*.yaml"))
        assert [Path(f).name for f in files] == expected
        assert all(f.startswith(site) for f in files)
    assert installed["lws"] == ["leaderworkerset.x-k8s.io_leaderworkersets.yaml"]


def test_wheel_carries_the_gke_cloud_driver_installer(installed: dict[str, object]) -> None:
    """The GKE serving stack applies the vendored COS driver installer from package data."""
    assert installed["gkeDriverInstallerShipped"] is True
    assert str(installed["gkeDriverInstaller"]).startswith(str(installed["site"]))


def test_the_wheel_installs_one_package_and_no_project(installed: dict[str, object]) -> None:
    """Only `modelplane` lands in site-packages (no generic `components`, `stacks`, `crds`),
    with the program's entry point; the repository's projects stay out."""
    names = installed["wheel"]
    assert isinstance(names, list) and "modelplane/program/__main__.py" in names
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"modelplane"}, sorted(tops)
    assert not [n for n in names if Path(n).name.startswith("Pulumi.")]


@pytest.mark.engine
def test_an_installed_modelplane_runs_the_program_from_a_folder_in_the_fleet(
    installed: dict[str, object], tmp_path: Path, engine_root: Path
) -> None:
    """No checkout around the package: the driver writes the program's entry point into the
    fleet's workspaces (a real folder, not a link into site-packages) and the renderTo path
    the state records is relative to it, so the fleet can move."""
    import json

    from modelplane.driver.workspace import ENTRY_POINT
    from tests.fixtures.engine import LOCAL, copy_fleet, engine_env, manifests

    fleet = copy_fleet(LOCAL, tmp_path / "fleet")
    env = {k: v for k, v in engine_env(tmp_path).items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(installed["python"]), "-m", "modelplane", "up", str(fleet), "--yes", "-o", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert {s["result"] for s in json.loads(done.stdout)["stacks"]} == {"succeeded"}
    entry = fleet / ".modelplane" / "workspaces" / "program"
    assert not entry.is_symlink() and (entry / "__main__.py").read_text() == ENTRY_POINT
    project = (fleet / ".modelplane" / "workspaces" / "cluster-local" / "Pulumi.yaml").read_text()
    assert "main: ../program" in project
    assert manifests(fleet / "rendered")
    state = fleet / ".modelplane" / "state" / ".pulumi" / "stacks"
    (checkpoint,) = state.glob("*/cluster-local.json")
    resources = json.loads(checkpoint.read_text())["checkpoint"]["latest"]["resources"]
    (provider,) = [r for r in resources if r["type"] == "pulumi:providers:kubernetes"]
    assert provider["inputs"]["renderYamlToDirectory"] == "../../../rendered"
