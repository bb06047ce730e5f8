"""The pure core imports no Pulumi and no cloud SDK (checked two ways); the packages are
layered (the import-linter contracts in pyproject.toml, which `make test` runs here)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE = [
    "modelplane/api",
    "modelplane/cel",
    "modelplane/scheduler",
    "modelplane/lock.py",
    "modelplane/routing.py",
    "modelplane/stacks.py",
    "modelplane/planning.py",
    "modelplane/secrets.py",
]
FORBIDDEN = (
    "pulumi",
    "pulumi_kubernetes",
    "pulumi_gcp",
    "pulumi_aws",
    "pulumi_eks",
    "boto3",
    "google.cloud",
    "kubernetes",
)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("target", PURE)
def test_pure_modules_import_no_pulumi(target):
    path = ROOT / target
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
    assert files or target.endswith("secrets.py"), f"{target} is missing"
    for file in files:
        bad = {n for n in _imports(file) if n.split(".")[0] in FORBIDDEN or n.startswith(FORBIDDEN)}
        assert not bad, f"{file.relative_to(ROOT)} imports {sorted(bad)}"


def test_pure_core_loads_without_pulumi_in_a_fresh_interpreter():
    code = (
        "import sys\n"
        "import modelplane.api.loader, modelplane.scheduler, modelplane.lock, modelplane.routing\n"
        "import modelplane.planning, modelplane.stacks, modelplane.cel\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pulumi','pulumi_kubernetes','pulumi_gcp','pulumi_aws','pulumi_eks'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_import_linter_contract():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a dev dependency"
    result = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _layers_contract(container: str) -> dict:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [
        c
        for c in config["contracts"]
        if c["type"] == "layers" and c.get("containers") == [container]
    ]
    return contract


@pytest.mark.parametrize(
    ("extra", "kept"),
    [
        (None, True),
        (("errors", "cli"), False),  # an upward import
        (("engine", "driver"), False),  # the one the engine had (not ignored here)
        (("driver", "devfleet"), False),  # two packages of one floor
        (("cli", "api"), True),  # skipping floors is fine
    ],
    ids=["floors-down", "upward", "engine-to-driver", "same-floor", "skip-floors"],
)
def test_the_layers_contract_catches_upward_imports(
    tmp_path: Path, extra: tuple[str, str] | None, kept: bool
) -> None:
    """The contract in pyproject.toml, run on a miniature of the house: one module per
    package, each importing the floor below it, plus `extra`."""
    contract = _layers_contract("modelplane")
    floors = [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]
    package = tmp_path / "mini"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for upper, lower in zip(floors, floors[1:] + [[]], strict=True):
        for module in upper:
            lines = [f"import mini.{below}" for below in lower[:1]]
            if extra and extra[0] == module:
                lines.append(f"import mini.{extra[1]}")
            (package / f"{module}.py").write_text("\n".join(lines) + "\n")
    layers = ",\n".join(f'  "{layer}"' for layer in contract["layers"])
    (tmp_path / "lint.toml").write_text(
        '[tool.importlinter]\nroot_packages = ["mini"]\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "mini"\ntype = "layers"\ncontainers = ["mini"]\n'
        f"layers = [\n{layers}\n]\n"
    )
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a dev dependency"
    result = subprocess.run(
        [lint, "--config", "lint.toml", "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
    )
    assert (result.returncode == 0) is kept, result.stdout + result.stderr
