"""The components against the provider SDKs' own type hints (mypy; strict on modelplane/components/cloud/).

The cloud components only ever run under Pulumi mocks, which accept any argument; mypy is what
catches an argument name or input type that pulumi-gcp, pulumi-aws, pulumi-eks or
pulumi-kubernetes would reject. pyproject.toml has mypy read only the SDK modules the
components use (reading all of pulumi-aws and pulumi-gcp takes minutes and gigabytes), so a
component reaching into another SDK module must add it there (checked below).

A cold run takes about a minute of CPU; the cache in .mypy_cache makes later runs seconds.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SDKS = ("pulumi_aws", "pulumi_gcp", "pulumi_kubernetes", "pulumi_eks")


def mypy(*files: Path) -> subprocess.CompletedProcess[str]:
    """mypy with the project's configuration and cache (the configured files when none given)."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml")]
        + [str(f) for f in files],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )


def test_the_components_match_the_provider_sdks() -> None:
    done = mypy()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success"), done.stdout


# Each probe is one call a component could make; `None` marks a correct call (no error).
PROBES = [
    (
        "aws argument name",
        'aws.ec2.LaunchTemplate("x", instance_typ="p5.48xlarge")',
        "LaunchTemplate",
    ),
    (
        "aws input type",
        'aws.ec2.LaunchTemplate("x", update_default_version="yes")',
        "LaunchTemplate",
    ),
    (
        "aws nested args",
        'aws.ec2.LaunchTemplateMetadataOptionsArgs(http_token="required")',
        "http_token",
    ),
    (
        "aws correct",
        'aws.ec2.LaunchTemplate("x", instance_type="p5.48xlarge", update_default_version=True)',
        None,
    ),
    ("gcp argument name", 'gcp.container.NodePool("x", cluster="c", node_cont=1)', "NodePool"),
    ("gcp input type", 'gcp.container.NodePool("x", cluster="c", node_count="one")', "NodePool"),
    ("gcp correct", 'gcp.container.NodePool("x", cluster="c", node_count=1)', None),
    (
        "eks argument name",
        'eks.Cluster("x", skip_default_node_grop=True)',
        "skip_default_node_grop",
    ),
    (
        "eks input type",
        'eks.AccessPolicyAssociationArgs(policy_arn="a", access_scope={"type": "cluster"})',
        "access_scope",
    ),
    (
        "eks correct",
        'eks.AccessPolicyAssociationArgs(policy_arn="a", access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"))',
        None,
    ),
    ("kubernetes argument name", 'k8s.helm.v3.Release("x", chart="c", namespce="n")', "Release"),
    ("kubernetes correct", 'k8s.helm.v3.Release("x", chart="c", namespace="n")', None),
]


def test_a_wrong_argument_fails_the_check(tmp_path: Path) -> None:
    header = (
        "import pulumi_aws as aws\nimport pulumi_eks as eks\nimport pulumi_gcp as gcp\n"
        "import pulumi_kubernetes as k8s\n\n"
    )
    files = []
    for i, (_what, call, _expect) in enumerate(PROBES):
        path = tmp_path / f"probe_{i}.py"
        path.write_text(header + call + "\n")
        files.append(path)
    done = mypy(*files)
    errors: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        match = re.match(r"^.*?(probe_\d+)\.py:\d+: error: (.*)$", line)
        if match:
            errors.setdefault(match[1], []).append(match[2])
    for i, (what, _call, expect) in enumerate(PROBES):
        found = errors.get(f"probe_{i}", [])
        if expect is None:
            assert found == [], (what, found)
        else:
            assert any(expect in e for e in found), (what, found, done.stdout[-2000:])


def _followed() -> set[str]:
    """The SDK module patterns mypy reads (the rest of the SDKs is skipped)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    followed: set[str] = set()
    for override in config.get("overrides", []):
        if override.get("follow_imports") == "silent":
            modules = override["module"]
            followed.update([modules] if isinstance(modules, str) else modules)
    return followed


def _used_sdk_modules() -> set[str]:
    """`<sdk>.<submodule>` for every SDK submodule the components name."""
    used: set[str] = set()
    for path in sorted((REPO / "modelplane" / "components").rglob("*.py")):
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in SDKS:
                        aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[0] in SDKS:
                    used.add(".".join(node.module.split(".")[:2]))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                sdk = aliases[node.value.id]
                spec = importlib.util.find_spec(sdk)
                assert spec is not None and spec.submodule_search_locations
                root = Path(next(iter(spec.submodule_search_locations)))
                if (root / node.attr).is_dir() or (root / f"{node.attr}.py").is_file():
                    used.add(f"{sdk}.{node.attr}")
    return used


def test_every_sdk_module_the_components_use_is_type_checked() -> None:
    used = _used_sdk_modules()
    assert "pulumi_aws.ec2" in used and "pulumi_gcp.container" in used  # the scan sees them
    followed = _followed()
    unchecked = sorted(
        m
        for m in used
        if not m.startswith("pulumi_eks") and m not in followed and f"{m}.*" not in followed
    )
    assert unchecked == [], f"add {unchecked} to the follow_imports=silent override"


@pytest.mark.parametrize("sdk", ["pulumi_aws", "pulumi_gcp", "pulumi_kubernetes"])
def test_each_sdk_package_itself_is_read(sdk: str) -> None:
    assert sdk in _followed()
