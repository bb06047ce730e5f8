"""Security M10 (docs/architecture.md, "Security"): the supply chain of the auth path and the
ModelCache download. The hydration Job installs only the pinned, hashed wheels of
modelplane/components/manifests/hydrate-requirements.txt (`--require-hashes --only-binary=:all:`), from a
ConfigMap; no rendered manifest runs `pip install` otherwise; `InferenceGateway.spec.version`
is one of the chart versions modelplane knows to work; modelplane's own images are the
documented tags unless the platform pins them by digest (`spec.images`), which then reach
every container. Offline: nothing here reaches PyPI or a registry. Select with
`pytest -k security`."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.tags import Tag, cpython_tags, parse_tag
from typer.testing import CliRunner

from modelplane.api.inference_gateway import GATEWAY_CHART_VERSIONS
from modelplane.api.loader import load_fleet
from modelplane.cli import app, commands  # noqa: F401  (registers every verb)
from modelplane.components.images import FRONT_DOOR_IMAGE, MODEL_CACHE_IMAGE
from modelplane.components.manifests.hydrate_requirements import (
    PIN,
    PLATFORMS,
    REQUIREMENTS,
    parse,
    render,
)
from modelplane.components.model_cache import (
    REQUIREMENTS_DIR,
    REQUIREMENTS_FILE,
    cache_jobs,
    requirements_manifest,
    requirements_name,
)
from modelplane.render import render_fleet
from modelplane.rollout import CacheUse

ROOT = Path(__file__).resolve().parents[2]
OBJECT = "InferenceGateway default"
REQUIREMENT = re.compile(r"^([a-z0-9-]+)==([^ ;\\]+)( ;[^\\]*)? \\$")


# --- the pinned requirements -----------------------------------------------------------------


def _requirements() -> list[tuple[str, str, list[str]]]:
    """(project, version, hashes) of every requirement of the file (logical lines)."""
    found: list[tuple[str, str, list[str]]] = []
    for line in REQUIREMENTS.read_text().splitlines():
        if not line or line.lstrip().startswith("#"):
            continue
        if line.startswith("    --hash="):
            assert found, line
            found[-1][2].append(line.strip().removesuffix("\\").strip())
            continue
        match = REQUIREMENT.match(line)
        assert match, f"not a pinned requirement: {line!r}"
        found.append((match[1], match[2], []))
    return found


def test_security_every_requirement_is_pinned_with_hashes() -> None:
    requirements = _requirements()
    assert requirements
    for project, version, hashes in requirements:
        assert version and "*" not in version, project
        assert hashes, f"{project} has no hash"
        for h in hashes:
            assert re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", h), (project, h)
    # The top-level pin, the `hf` CLI's package, is one of them.
    name, _, version = PIN.partition("==")
    assert (name.replace("_", "-"), version) in {(p, v) for p, v, _ in requirements}


def test_security_requirements_are_what_the_generator_renders() -> None:
    """The file is `render` of the wheels it records (the generator's input), byte for byte:
    nobody edited a pin or a hash by hand."""
    text = REQUIREMENTS.read_text()
    assert render(parse(text)) == text


def _compatible(machine: str) -> set[Tag]:
    platforms = [f"manylinux_2_{minor}_{machine}" for minor in range(17, 35)]
    platforms += [f"manylinux2014_{machine}"]
    if machine == "x86_64":
        platforms += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    return set(cpython_tags((3, 12), platforms=platforms)) | {
        Tag(py, "none", "any") for py in ("py3", "py312", "cp312")
    }


@pytest.mark.parametrize("machine", sorted(PLATFORMS))
def test_security_requirements_cover_cpython_312_on_each_platform(machine: str) -> None:
    """Every requirement has a wheel for CPython 3.12 on linux x86_64 and aarch64 (the image
    is multi-arch), and every wheel recorded for a platform installs there."""
    wheels = parse(REQUIREMENTS.read_text())
    compatible = _compatible(machine)
    projects = {p for p, _, _ in _requirements()}
    covered = set()
    for wheel in wheels:
        if machine not in wheel.platforms:
            continue
        tags = parse_tag("-".join(wheel.filename.removesuffix(".whl").split("-")[-3:]))
        assert tags & compatible, f"{wheel.filename} does not install on cp312 {machine}"
        covered.add(wheel.project)
    assert covered == projects


# --- the hydration Job -------------------------------------------------------------------------


def _cache() -> Any:
    fleet = load_fleet(ROOT / "specs" / "frontier").fleet
    return next(iter(fleet.caches.values()))


def test_security_hydrate_job_installs_with_require_hashes_from_the_pinned_file() -> None:
    cache = _cache()
    use = CacheUse((f"{cache.spec.hugging_face.repo}@{cache.spec.hugging_face.revision}",), False)
    jobs = cache_jobs(cache, {}, use, with_token=True)
    hydrate = [j for j in jobs if "-hydrate-" in j["metadata"]["name"]]
    assert hydrate
    text = REQUIREMENTS.read_text()
    configmap = requirements_manifest(cache, {})
    assert configmap["metadata"]["name"] == requirements_name(cache.metadata.name)
    assert configmap["data"] == {REQUIREMENTS_FILE: text}
    for job in hydrate:
        pod = job["spec"]["template"]
        [container] = pod["spec"]["containers"]
        script = container["command"][-1]
        [install] = [line for line in script.splitlines() if "pip install" in line]
        for flag in ("--require-hashes", "--only-binary=:all:", "--no-cache-dir"):
            assert flag in install.split(), flag
        assert f"-r {REQUIREMENTS_DIR}/{REQUIREMENTS_FILE}" in install
        assert "huggingface_hub" not in install  # nothing resolved by name at run time
        assert "hf download" in script
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["requirements"] == {
            "name": "requirements",
            "mountPath": REQUIREMENTS_DIR,
            "readOnly": True,
        }
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["requirements"]["configMap"]["name"] == configmap["metadata"]["name"]
        digest = hashlib.sha256(text.encode()).hexdigest()
        assert pod["metadata"]["annotations"]["modelplane.ai/requirements-sha256"] == digest
    # Deterministic: the same spec twice.
    assert cache_jobs(cache, {}, use, with_token=True) == jobs


def test_security_no_pip_install_without_hashes_in_components() -> None:
    """The sources: every `pip install` in modelplane/components/ requires hashes."""
    for path in sorted((ROOT / "modelplane" / "components").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "pip install" in line and "--require-hashes" not in line:
                # A line that only continues onto the next one still names the flag there.
                rest = path.read_text().splitlines()[number : number + 2]
                assert any("--require-hashes" in r for r in rest), f"{path}:{number}: {line}"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for fleet in ("multicloud", "frontier"):
        target = tmp_path_factory.mktemp(f"render-{fleet}")
        render_fleet(ROOT / "specs" / fleet, target)
        out[fleet] = target
    return out


def _manifests(root: Path) -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted(root.glob("*/manifests/*.yaml"))]


def _containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container and init container of a manifest's pod templates (any depth)."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("containers", "initContainers"):
                if isinstance(node.get(key), list):
                    found.extend(c for c in node[key] if isinstance(c, dict) and "image" in c)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(manifest)
    return found


@pytest.mark.parametrize("fleet", ["multicloud", "frontier"])
def test_security_rendered_fleets_pip_install_only_hashed_requirements(
    fleet: str, rendered: dict[str, Path]
) -> None:
    manifests = _manifests(rendered[fleet])
    text = REQUIREMENTS.read_text()
    installs = 0
    for manifest in manifests:
        dumped = yaml.safe_dump(manifest, width=10_000)
        if manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"].endswith(
            "-requirements"
        ):
            assert manifest["data"] == {REQUIREMENTS_FILE: text}
            continue
        for container in _containers(manifest):
            for line in "\n".join(map(str, container.get("command", []))).splitlines():
                if "pip install" in line or "pip3 install" in line:
                    installs += 1
                    assert "--require-hashes" in line and "--only-binary=:all:" in line, line
                    assert f"-r {REQUIREMENTS_DIR}/{REQUIREMENTS_FILE}" in line, line
        # Nothing else in a manifest installs from PyPI by name.
        assert "huggingface_hub[cli]" not in dumped, manifest["metadata"]["name"]
    assert installs, f"{fleet}: no hydration Job rendered"


# --- spec.version ------------------------------------------------------------------------------


def gateway_fleet(tmp_path: Path, lines: str, backend: str = "Traefik") -> Path:
    """specs/dev with ``lines`` added to its InferenceGateway's spec and its backend set."""
    target = tmp_path / "fleet"
    shutil.copytree(ROOT / "specs" / "dev", target)
    fleet = target / "fleet.yaml"
    text = fleet.read_text()
    assert text.count("  backend: Traefik\n") == 1
    fleet.write_text(text.replace("  backend: Traefik\n", f"  backend: {backend}\n{lines}"))
    return target


TRAEFIK_PIN, ENVOY_PIN = GATEWAY_CHART_VERSIONS["Traefik"][0], "v1.8.3"
VERSION_ERROR = ("spec.version", "allowed: ")
NOT_BY_DIGEST = "is not pinned by digest"
DIGEST = "sha256:" + "ab" * 32
# (id, spec lines, backend, errors as (field, message part))
CASES = [
    ("no-version", "", "Traefik", []),
    ("traefik-pin", f"  version: {TRAEFIK_PIN}\n", "Traefik", []),
    ("traefik-older-chart", "  version: 39.0.0\n", "Traefik", [VERSION_ERROR]),
    ("traefik-any-string", "  version: latest\n", "Traefik", [VERSION_ERROR]),
    ("envoy-pin", f"  version: {ENVOY_PIN}\n", "EnvoyGateway", []),
    ("envoy-previous-pin", "  version: v1.8.1\n", "EnvoyGateway", []),
    ("envoy-with-traefik-version", f"  version: {TRAEFIK_PIN}\n", "EnvoyGateway", [VERSION_ERROR]),
    ("traefik-with-envoy-version", f"  version: {ENVOY_PIN}\n", "Traefik", [VERSION_ERROR]),
    (
        "images-by-digest",
        f"  images:\n    frontDoor: mirror.example.com/python:3.12-alpine@{DIGEST}\n"
        f"    modelCache: python@{DIGEST}\n",
        "Traefik",
        [],
    ),
    (
        "images-by-tag",
        "  images: {frontDoor: 'python:3.12-alpine', modelCache: 'python:3.12-slim'}\n",
        "Traefik",
        [("spec.images.frontDoor", NOT_BY_DIGEST), ("spec.images.modelCache", NOT_BY_DIGEST)],
    ),
]


@pytest.mark.parametrize(
    ("lines", "backend", "errors"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_security_gateway_version_allowlist(
    tmp_path: Path, lines: str, backend: str, errors: list[tuple[str, str]]
) -> None:
    result = load_fleet(gateway_fleet(tmp_path, lines, backend))
    found = [e for e in result.errors if e.object == OBJECT]
    if backend == "EnvoyGateway":  # specs/dev has auth, which needs Traefik: reported too
        found = [e for e in found if "auth needs backend Traefik" not in e.message]
    assert [e.path for e in found] == [path for path, _ in errors], found
    for error, (_, part) in zip(found, errors, strict=True):
        assert part in error.message, error.message
        assert error.file.endswith("fleet.yaml")
    if VERSION_ERROR in errors:
        [error] = [e for e in found if e.path == "spec.version"]
        for allowed in GATEWAY_CHART_VERSIONS[backend]:
            assert allowed in error.message


def test_security_gateway_version_reported_with_every_other_problem(tmp_path: Path) -> None:
    """All errors at once: a version off the list beside a Traefik-only `auth` on Envoy."""
    result = load_fleet(gateway_fleet(tmp_path, "  version: v9.9.9\n", "EnvoyGateway"))
    paths = [e.path for e in result.errors if e.object == OBJECT]
    assert "spec.version" in paths and "spec" in paths, result.errors


def test_security_gateway_version_validate_names_file_object_field(tmp_path: Path) -> None:
    target = gateway_fleet(tmp_path, "  version: 39.0.0\n")
    result = CliRunner().invoke(app, ["validate", str(target), "-o", "json"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [error] = [e for e in json.loads(result.stdout)["errors"] if e["object"] == OBJECT]
    assert error["path"] == "spec.version"
    assert error["file"].endswith("fleet.yaml") and error["line"] > 1
    assert TRAEFIK_PIN in error["message"]


def test_security_chart_pins_are_the_allowlists_first() -> None:
    from modelplane.components.charts import CHARTS
    from modelplane.components.gateway import ENVOY, TRAEFIK

    assert TRAEFIK["version"] == GATEWAY_CHART_VERSIONS["Traefik"][0]
    assert ENVOY["version"] == GATEWAY_CHART_VERSIONS["EnvoyGateway"][0]
    assert ENVOY["version"] == CHARTS["envoyGateway"].version  # one Envoy Gateway per cluster


# --- images --------------------------------------------------------------------------------------

OURS = {"authz", "router", "hydrate", "prune", "wait-for-model-cache"}


@pytest.mark.parametrize("fleet", ["multicloud", "frontier"])
def test_security_own_images_are_the_documented_defaults(
    fleet: str, rendered: dict[str, Path]
) -> None:
    """No override: modelplane's containers run the documented default tags (the decision
    in docs/architecture.md, "Security", M10), the auth path on the alpine one."""
    seen: dict[str, set[str]] = {}
    for manifest in _manifests(rendered[fleet]):
        for container in _containers(manifest):
            if container["name"] in OURS:
                seen.setdefault(container["name"], set()).add(container["image"])
    assert {"authz", "hydrate", "prune", "wait-for-model-cache"} <= set(seen), seen
    for name, images in seen.items():
        want = FRONT_DOOR_IMAGE if name in ("authz", "router") else MODEL_CACHE_IMAGE
        assert images == {want}, (name, images)


def test_security_pinned_images_reach_every_container(tmp_path: Path) -> None:
    """With `spec.images`, every container of modelplane's own runs the pinned reference, on
    every cluster: the auth path (authz, router) and the cache (download, prune, wait)."""
    front = f"mirror.example.com/library/python:3.12-alpine@sha256:{'1' * 64}"
    cache = f"mirror.example.com/library/python:3.12-slim@sha256:{'2' * 64}"
    target = tmp_path / "fleet"
    shutil.copytree(ROOT / "specs" / "frontier", target, ignore=shutil.ignore_patterns(".*"))
    fleet = target / "fleet.yaml"
    text = fleet.read_text()
    anchor = "kind: InferenceGateway\nmetadata:\n  name: default\nspec:\n"
    assert anchor in text
    fleet.write_text(
        text.replace(
            anchor, f"{anchor}  images:\n    frontDoor: {front}\n    modelCache: {cache}\n"
        )
    )
    out = tmp_path / "out"
    render_fleet(target, out)
    seen: dict[str, set[str]] = {}
    for manifest in _manifests(out):
        for container in _containers(manifest):
            image = container["image"]
            assert not image.startswith("python:"), (container["name"], image)
            if container["name"] in OURS:
                seen.setdefault(container["name"], set()).add(image)
    assert {"authz", "hydrate", "prune", "wait-for-model-cache"} <= set(seen), seen
    for name, images in seen.items():
        assert images == {front if name in ("authz", "router") else cache}, (name, images)
