"""The package the Pulumi way (issue 34): version ranges in pyproject.toml, the exact versions
in constraints.txt (what `make` and CI install), the cloud SDKs as the `gke` / `eks` extras,
and a fleet whose cloud's extra is missing refused with the extra to install."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
CLOUD_SDKS = {"pulumi-gcp", "pulumi-aws", "pulumi-eks"}


def _constraints() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def _requirements() -> list[tuple[str, Requirement]]:
    """Every direct requirement with where it is declared (the extras' self-reference aside)."""
    found = [("dependencies", Requirement(r)) for r in PROJECT["dependencies"]]
    for extra, reqs in PROJECT["optional-dependencies"].items():
        found += [(f"extra {extra}", Requirement(r)) for r in reqs]
    return [(where, r) for where, r in found if canonicalize_name(r.name) != "modelplane"]


@pytest.mark.parametrize(
    ("where", "requirement"), _requirements(), ids=lambda v: str(v) if isinstance(v, str) else ""
)
def test_pulumi_way_each_requirement_is_a_range_and_its_pin_is_inside(
    where: str, requirement: Requirement
) -> None:
    lowers = [s for s in requirement.specifier if s.operator == ">="]
    assert lowers and not any(s.operator == "==" for s in requirement.specifier), (
        f"{where}: {requirement} must be a range with a lower bound (exact pins: constraints.txt)"
    )
    pins = _constraints()
    name = canonicalize_name(requirement.name)
    assert name in pins, f"{where}: {requirement.name} is not pinned in constraints.txt"
    assert requirement.specifier.contains(pins[name], prereleases=True), (
        f"constraints.txt pins {name}=={pins[name]}, outside {where}'s {requirement}"
    )


def test_pulumi_way_constraints_pin_only_direct_requirements_and_make_installs_them() -> None:
    direct = {canonicalize_name(r.name) for _, r in _requirements()}
    assert set(_constraints()) == direct
    makefile = (REPO / "Makefile").read_text()
    assert "pip install --quiet -c constraints.txt -e '.[dev]'" in makefile
    assert "$(STAMP): pyproject.toml constraints.txt" in makefile


def test_pulumi_way_this_environment_has_the_pinned_versions() -> None:
    """`make` built this environment from constraints.txt: each pin is what is installed."""
    wrong = {
        name: (str(pin), importlib.metadata.version(name))
        for name, pin in _constraints().items()
        if Version(importlib.metadata.version(name)) != pin
    }
    assert not wrong, wrong


def test_pulumi_way_cloud_sdks_are_the_gke_and_eks_extras() -> None:
    def names(reqs: list[str]) -> set[str]:
        return {canonicalize_name(Requirement(r).name) for r in reqs}

    extras = PROJECT["optional-dependencies"]
    assert not names(PROJECT["dependencies"]) & CLOUD_SDKS
    assert names(extras["gke"]) == {"pulumi-gcp"}
    assert names(extras["eks"]) == {"pulumi-aws", "pulumi-eks"}
    assert names(extras["policy"]) == {"pulumi-policy"}
    assert "modelplane[gke,eks,policy]" in extras["dev"]  # the tests render both clouds


# A Python that cannot import the named SDKs, as where the extra was never installed: the
# finder answers as the import system does for a module that is not there.
HIDE = """
import sys
HIDDEN = set({hidden!r})
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hide())
"""


def _without(tmp_path: Path, hidden: set[str]) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE.format(hidden=sorted(hidden)))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(site)
    env["PULUMI_CONFIG_PASSPHRASE"] = "modelplane-local"
    # Plugins are another check (tests/driver/test_pulumi_way.py): here only the SDKs count.
    env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] = "false"
    env.pop("PULUMI_BACKEND_URL", None)
    return env


def _fleet(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(
        REPO / "specs" / name,
        target,
        ignore=shutil.ignore_patterns(".modelplane", "rendered", "Pulumi.*.yaml"),
    )
    return target


def _preview(fleet: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modelplane", "preview", str(fleet)],
        env={**env, "COLUMNS": "400", "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("fleet", "hidden", "stack", "extra", "package"),
    [
        ("quickstart", {"pulumi_gcp"}, "cluster-gke-us-central", "gke", "pulumi-gcp"),
        ("multicloud", {"pulumi_aws", "pulumi_eks"}, "cluster-eks-us-west", "eks", "pulumi-aws"),
    ],
)
def test_pulumi_way_a_fleet_without_its_clouds_extra_is_told_which_to_install(
    tmp_path: Path, fleet: str, hidden: set[str], stack: str, extra: str, package: str
) -> None:
    done = _preview(_fleet(fleet, tmp_path), _without(tmp_path, hidden))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    said = f"stack {stack} needs the Python SDK(s) {package}"
    assert said in out and f"pip install 'modelplane[{extra}]'" in out, out[-3000:]
    # A stack downstream of it says the same (its preview renders the cluster offline).
    downstream = [ln for ln in out.splitlines() if "offline render failed" in ln]
    assert downstream and all(said in ln for ln in downstream), out[-3000:]


def test_pulumi_way_a_fleet_of_existing_clusters_needs_no_cloud_extra(tmp_path: Path) -> None:
    env = _without(tmp_path, {"pulumi_gcp", "pulumi_aws", "pulumi_eks"})
    done = _preview(_fleet("local", tmp_path), env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "cluster-local" in out and "failed" not in out, out[-3000:]
    # No module of modelplane imports a cloud SDK before a cloud cluster is built.
    probe = (
        "import sys, modelplane.cli.commands, modelplane.driver.fleet, modelplane.program, "
        "modelplane.components.inference_cluster, modelplane.components.cloud.gke_args, modelplane.components.cloud.eks_args\n"
        "print(sorted(m for m in sys.modules if m.startswith(('pulumi_gcp', 'pulumi_aws'))))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False
    )
    assert imported.returncode == 0 and imported.stdout.strip() == "[]", imported.stderr[-2000:]
