"""Security M7 (docs/architecture.md, "Secrets" and "Security"): what a spec's secretRef may
reach. `file:` paths stay inside the fleet folder (or the dev fleet's state); a secret one use
names (a kubeconfig, a caller's key) is not named by a later one (a ModelCache's token, which
`up` copies into a namespace the spec author reads); `modelplane-front-door` is reserved;
`.modelplane/` is read for callers' keys only. `validate` reports each as an error naming
file, object and field; the resolution refuses them again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from modelplane.api.loader import load_fleet
from modelplane.api.secret_refs import confined_file, file_problem
from modelplane.secrets import SecretNotFound, resolve_secret

ROOT = Path(__file__).resolve().parents[2]
STATE = "${MODELPLANE_DEV_FLEET_STATE}"

FILES = [
    # (path after `file:`, refused because ... or None)
    ("keys/team-a", None),
    (".modelplane/callers/ops", None),
    (f"{STATE}/dev-1/kubeconfig", None),
    ("/proc/self/environ", "relative to the fleet folder"),
    ("/etc/shadow", "relative to the fleet folder"),
    ("~/.kube/config", "'~'"),
    ("~root/.ssh/id_rsa", "'~'"),
    ("../other-fleet/.modelplane/callers/ops", "'..'"),
    ("keys/../../x", "'..'"),
    (f"{STATE}/../x", "'..'"),
    ("$HOME/.kube/config", "no variable"),
    ("${HOME}/.kube/config", "no variable"),
    (f"keys/{STATE}/x", "no variable"),
    ("C:\\Users\\x", "relative to the fleet folder"),
    ("", "names no file"),
    (STATE + "/", "names no file"),
]


@pytest.mark.parametrize(("path", "why"), FILES, ids=[f[0] or "<empty>" for f in FILES])
def test_security_file_refs_stay_in_the_fleet_folder(path: str, why: str | None) -> None:
    problem = file_problem(path)
    assert (problem is None) if why is None else (why in (problem or "")), problem


def test_security_file_ref_through_a_symlink_is_confined(tmp_path: Path) -> None:
    fleet, state = tmp_path / "fleet", tmp_path / "state"
    (fleet / "keys").mkdir(parents=True)
    state.mkdir()
    (fleet / "keys" / "a").write_text("k")
    (fleet / "inside").symlink_to(fleet / "keys")
    (fleet / "out").symlink_to("/proc/self")
    (state / "kc").write_text("k")
    assert confined_file("inside/a", fleet, state) == (fleet / "keys" / "a").resolve()
    assert confined_file(f"{STATE}/kc", fleet, state) == (state / "kc").resolve()
    with pytest.raises(ValueError, match="leaves the fleet folder"):
        confined_file("out/environ", fleet, state)
    # The resolution refuses it too, whatever validation said.
    for name in ("file:out/environ", "file:/proc/self/environ", "file:~/.bashrc"):
        with pytest.raises(SecretNotFound, match="no file"):
            resolve_secret(name, "k", config=lambda _: None, env={}, base_dir=fleet)


CACHE = """---
apiVersion: modelplane.ai/v1alpha1
kind: ModelCache
metadata: {name: weights, namespace: demo}
spec:
  source: HuggingFace
  huggingFace:
    repo: meta-llama/Llama-3.1-8B-Instruct
    authSecret: %s
  sizeGiB: 40
"""
KUBECONFIG = f"file:{STATE}/dev-1/kubeconfig"

# (the ModelCache's authSecret, the error on spec.huggingFace.authSecret or None)
CACHE_SECRETS = [
    ("{name: hf-token, key: token}", None),
    ("{name: 'file:keys/hf', key: token}", None),
    # Another use's secret: a cluster's kubeconfig, a caller's key.
    (f"{{name: '{KUBECONFIG}', key: kubeconfig}}", "dev fleet's state"),
    ("{name: 'file:./kube//dev-3', key: token}", "names the secret of InferenceCluster dev-3"),
    ("{name: dev-2-kube, key: kubeconfig}", "names the secret of InferenceCluster dev-2"),
    # The same environment variable, spelled otherwise: MODELPLANE_SECRET_DEV_2_KUBE_KUBECONFIG.
    ("{name: dev, key: 2-kube-kubeconfig}", "names the secret of InferenceCluster dev-2"),
    (f"{{name: 'file:{STATE}/callers/dev', key: key}}", "dev fleet's state"),
    ("{name: 'file:.modelplane/callers/ops', key: key}", ".modelplane/ holds modelplane's state"),
    ("{name: 'file:.modelplane/state/x.json', key: k}", ".modelplane/ holds modelplane's state"),
    ("{name: modelplane-front-door, key: key}", "modelplane's own front-door key"),
    ("{name: modelplane, key: front-door-key}", "modelplane's own front-door key"),
    ("{name: 'file:/proc/self/environ', key: k}", "relative to the fleet folder"),
    ("{name: 'file:../../.kube/config', key: k}", "'..'"),
]


def _fleet(tmp_path: Path, cache_secret: str) -> Path:
    target = tmp_path / "fleet"
    shutil.copytree(ROOT / "specs" / "dev", target)
    fleet = target / "fleet.yaml"
    text = fleet.read_text()
    # dev-2's kubeconfig from the environment (a name the cache could spell otherwise).
    text = text.replace('"file:${MODELPLANE_DEV_FLEET_STATE}/dev-2/kubeconfig"', "dev-2-kube")
    # dev-3's from a file in the fleet folder (the cache could name it by another spelling).
    text = text.replace(
        '"file:${MODELPLANE_DEV_FLEET_STATE}/dev-3/kubeconfig"', "'file:kube/dev-3'"
    )
    fleet.write_text(text + CACHE % cache_secret)
    return target


@pytest.mark.parametrize(("secret", "why"), CACHE_SECRETS, ids=[c[0] for c in CACHE_SECRETS])
def test_security_model_cache_token_cannot_copy_another_secret(
    tmp_path: Path, secret: str, why: str | None
) -> None:
    errors = [e for e in load_fleet(_fleet(tmp_path, secret)).errors]
    ours = [e for e in errors if e.path == "spec.huggingFace.authSecret"]
    if why is None:
        assert ours == [], ours
        return
    [error] = ours
    assert why in error.message, error.message
    # File, object and field, and the line of the field.
    assert error.file.endswith("fleet.yaml") and error.object == "ModelCache demo/weights"
    assert error.line > 0


@pytest.mark.parametrize(
    ("old", "new", "path", "why"),
    [
        # TLS naming a kubeconfig; a caller's key naming a kubeconfig.
        (
            "  cluster: {inferenceClusterRef: dev-1}\n",
            "  cluster: {inferenceClusterRef: dev-1}\n  tls:\n"
            f"    certificate: {{name: '{KUBECONFIG}', key: kubeconfig}}\n"
            "    privateKey: {name: tls, key: key}\n",
            "spec.tls.certificate",
            "names the secret of InferenceCluster dev-1",
        ),
        (
            'secretRef: {name: "file:${MODELPLANE_DEV_FLEET_STATE}/callers/batch", key: key}',
            f"secretRef: {{name: '{KUBECONFIG}', key: kubeconfig}}",
            "spec.auth.callers[1].secretRef",
            "names the secret of InferenceCluster dev-1",
        ),
        (
            'secretRef: {name: "file:${MODELPLANE_DEV_FLEET_STATE}/callers/batch", key: key}',
            "secretRef: {name: 'file:/root/.modelplane/callers/batch', key: key}",
            "spec.auth.callers[1].secretRef",
            "relative to the fleet folder",
        ),
    ],
    ids=["tls-kubeconfig", "caller-kubeconfig", "caller-absolute"],
)
def test_security_gateway_secrets_confined(
    tmp_path: Path, old: str, new: str, path: str, why: str
) -> None:
    target = _fleet(tmp_path, "{name: hf-token, key: token}")
    fleet = target / "fleet.yaml"
    assert old in fleet.read_text()
    fleet.write_text(fleet.read_text().replace(old, new))
    [error] = [e for e in load_fleet(target).errors if e.path == path]
    assert why in error.message and error.object == "InferenceGateway default"


def test_security_shipped_fleets_stay_valid() -> None:
    """Every fleet under specs/ keeps to the rules (its secrets are its own)."""
    for fleet in sorted(p for p in (ROOT / "specs").iterdir() if p.is_dir()):
        errors = load_fleet(fleet).errors
        assert not errors, (fleet.name, [str(e) for e in errors])
