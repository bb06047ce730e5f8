"""The pure core imports no Pulumi and no cloud SDK (checked two ways)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
