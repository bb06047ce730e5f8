"""modelplane's components from another Pulumi program (issue 34), on the real engine: a fresh
Python project runs `pulumi package add <repo>/provider` (the engine runs the plugin through
the language host's RunPlugin for its schema, then the host's GeneratePackage writes the SDK
into sdks/modelplane and Link adds it to requirements.txt and installs it), then `pulumi up`
of a program that constructs `modelplane:index:WorkloadGateway` through the plugin on a
Kubernetes provider that renders its manifests. No network: the project's virtualenv sees the
repository's .venv through a .pth file and pip installs the SDK with no index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from modelplane.engine.plugins import pinned_plugins
from tests.fixtures.engine import REPO, manifests

pytestmark = pytest.mark.engine

PROGRAM = """\
import pulumi
import pulumi_kubernetes as kubernetes
import pulumi_modelplane as modelplane

render = kubernetes.Provider("render", render_yaml_to_directory={rendered!r})
gateway = modelplane.WorkloadGateway(
    "edge",
    private_to=["hub"],
    await_address=False,
    opts=pulumi.ResourceOptions(providers=[render]),
)
pulumi.export("gatewayName", gateway.gateway_name)
pulumi.export("namespace", gateway.namespace)
"""


BAD_SERVING_STACK = """\
import pulumi
import pulumi_kubernetes as kubernetes
import pulumi_modelplane as modelplane

render = kubernetes.Provider("render", render_yaml_to_directory={rendered!r})
modelplane.ServingStack(
    "serving", versions={{"nope": "1"}}, opts=pulumi.ResourceOptions(providers=[render])
)
"""


def consumer_venv(project: Path) -> Path:
    """A virtualenv of the project's own that sees the repository's packages (pulumi,
    pulumi-kubernetes, setuptools, pip) through a .pth file: what the SDK installs lands here,
    never in the repository's .venv."""
    venv = project / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(sysconfig.get_paths()["purelib"])
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "repository-venv.pth").write_text(f"{purelib}\n")
    return venv


def seed_plugin_cache(pulumi_home: Path, engine_root: Path) -> None:
    """`package add <dir>` installs the plugin's own environment first, with every resource
    plugin its packages name (the repository's .venv: kubernetes, and the clouds' aws, eks,
    gcp), downloading what the plugin cache lacks, whatever PULUMI_DISABLE_AUTOMATIC_PLUGIN_
    ACQUISITION says. The cache gets the engine's Kubernetes provider; the cloud plugins, which
    this machine cannot download and nothing here runs, get empty entries (on a machine with
    the network, `python -m modelplane.engine install` puts the real ones there)."""
    for plugin in pinned_plugins().values():
        entry = pulumi_home / "plugins" / f"resource-{plugin.name}-v{plugin.version}"
        entry.mkdir(parents=True, exist_ok=True)
        if plugin.name == "kubernetes":
            (entry / plugin.binary).symlink_to(engine_root / "bin" / plugin.binary)


Pulumi = Callable[..., subprocess.CompletedProcess[str]]


def consumer_project(
    tmp_path: Path, env: dict[str, str], engine_root: Path, program: str
) -> tuple[Path, Path, Pulumi]:
    """A fresh Python Pulumi project (file backend, passphrase secrets, its own virtualenv)
    running `program`; returns its directory, its virtualenv and a `pulumi` runner there."""
    project = tmp_path / "consumer"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "consumer",
                "runtime": {
                    "name": "python",
                    "options": {"toolchain": "pip", "virtualenv": "venv"},
                },
            }
        )
    )
    (project / "requirements.txt").write_text("pulumi>=3.0.0,<4.0.0\n")
    (project / "__main__.py").write_text(program)
    venv = consumer_venv(project)
    cli_env = {
        **env,
        "PULUMI_BACKEND_URL": (tmp_path / "state").as_uri(),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PATH": f"{engine_root / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        # No network: pip finds the SDK's requirements installed, builds it with the
        # environment's setuptools, and never asks an index.
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    (tmp_path / "state").mkdir()
    seed_plugin_cache(Path(env["PULUMI_HOME"]), engine_root)

    def pulumi(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(engine_root / "bin" / "pulumi"), *args, "--non-interactive"],
            cwd=project,
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if ok:
            assert done.returncode == 0, f"pulumi {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    return project, venv, pulumi


def test_package_add_then_up_constructs_the_component_through_the_plugin(
    tmp_path: Path, env: dict[str, str], engine_root: Path
) -> None:
    rendered = tmp_path / "rendered"
    project, venv, pulumi = consumer_project(
        tmp_path, env, engine_root, PROGRAM.format(rendered=str(rendered))
    )

    added = pulumi("package", "add", str(REPO / "provider"))
    said = added.stdout + added.stderr
    assert "import pulumi_modelplane as modelplane" in said, said
    # The SDK, generated by the host from the plugin's inferred schema, linked and installed.
    sdk = project / "sdks" / "modelplane"
    assert (sdk / "pulumi_modelplane" / "workload_gateway.py").is_file()
    assert (sdk / "pulumi_modelplane" / "serving_stack.py").is_file()
    assert "sdks/modelplane" in (project / "requirements.txt").read_text()
    packages = yaml.safe_load((project / "Pulumi.yaml").read_text())["packages"]
    assert packages["modelplane"] == str(REPO / "provider"), packages
    installed = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import pulumi_modelplane; print(pulumi_modelplane.__file__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert installed.startswith(str(venv)), installed  # installed into the project's venv

    pulumi("stack", "init", "dev")
    pulumi("up", "--yes", "--skip-preview")
    state = json.loads(pulumi("stack", "export").stdout)
    resources = state["deployment"]["resources"]
    by_type: dict[str, list[dict[str, object]]] = {}
    for resource in resources:
        by_type.setdefault(resource["type"], []).append(resource)
    (component,) = by_type["modelplane:index:WorkloadGateway"]
    assert str(component["urn"]).endswith("::edge")
    # The component's own registered outputs, and the SDK's outputs the program exported.
    assert component["outputs"]["gateway_name"] == "inference-gateway"
    children = {r["type"] for r in resources if r.get("parent") == component["urn"]}
    assert children == {
        "kubernetes:core/v1:NamespacePatch",
        "kubernetes:gateway.networking.k8s.io/v1:GatewayClass",
        "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy",
        "kubernetes:gateway.networking.k8s.io/v1:Gateway",
    }
    # The children are on the caller's render provider, not a default one.
    (gateway,) = by_type["kubernetes:gateway.networking.k8s.io/v1:Gateway"]
    assert "::render::" in str(gateway["provider"]), gateway["provider"]
    assert "pulumi:providers:modelplane" in by_type  # the plugin's own provider
    (stack,) = by_type["pulumi:pulumi:Stack"]
    assert stack["outputs"] == {
        "gatewayName": "inference-gateway",
        "namespace": "modelplane-system",
    }

    files = manifests(rendered)
    gateway_yaml = [yaml.safe_load(text) for text in files.values() if "kind: Gateway\n" in text]
    assert len(gateway_yaml) == 1, sorted(files)
    assert gateway_yaml[0]["metadata"]["annotations"] == {"modelplane.ai/private-network": "hub"}
    assert gateway_yaml[0]["spec"]["gatewayClassName"] == "envoy"
    kinds = {yaml.safe_load(text)["kind"] for text in files.values()}
    assert {"Gateway", "GatewayClass", "EnvoyProxy", "Namespace"} <= kinds, kinds

    # ServingStack through the plugin: its args become modelplane's validated model there, so
    # a spec error is the component's error (its Helm releases cannot be created, nor its CRD
    # bundle rendered, without a cluster: docs/architecture.md).
    (project / "__main__.py").write_text(BAD_SERVING_STACK.format(rendered=str(rendered)))
    refused = pulumi("preview", ok=False)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0, said
    assert "unknown component(s) nope" in said, said
