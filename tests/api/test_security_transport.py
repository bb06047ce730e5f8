"""Security M5 (docs/architecture.md, "Security"; docs/api.md "TLS"): callers' keys never
travel in cleartext unless a fleet says so. `spec.auth` without `spec.tls` is a validation
error, and so is `tls.http: Redirect` with auth (the first plain request carries the key
before the 301), unless `spec.auth.allowInsecure: true`; with auth, `tls.http` defaults to
Refuse. Every error at once, naming file, object and field, no traceback. Select with
`pytest -k security`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modelplane.api.loader import load_fleet
from modelplane.cli import app, commands  # noqa: F401  (registers every verb)

ROOT = Path(__file__).resolve().parents[2]
OBJECT = "InferenceGateway default"

AUTH = "  auth:\n    callers:\n    - {name: a, secretRef: {name: keys, key: a}}\n"
INSECURE_AUTH = (
    "  auth:\n    allowInsecure: true\n    callers:\n"
    "    - {name: a, secretRef: {name: keys, key: a}}\n"
)
TLS = "  tls:\n    certificate: {name: tls, key: crt}\n    privateKey: {name: tls, key: key}\n"
NO_TLS_ERROR = ("spec.tls", "required with spec.auth")
REDIRECT_ERROR = ("spec.tls.http", "Redirect with spec.auth keeps plain HTTP open")

# (id, the InferenceGateway's spec lines, backend, errors as (field, message part), tls.http)
CASES = [
    ("auth-without-tls", AUTH, "Traefik", [NO_TLS_ERROR], None),
    ("auth-without-tls-allowed-insecure", INSECURE_AUTH, "Traefik", [], None),
    ("auth-tls-defaults-to-refuse", AUTH + TLS, "Traefik", [], "Refuse"),
    ("auth-tls-refuse", AUTH + TLS + "    http: Refuse\n", "Traefik", [], "Refuse"),
    ("auth-tls-redirect", AUTH + TLS + "    http: Redirect\n", "Traefik", [REDIRECT_ERROR], None),
    (
        "auth-tls-redirect-allowed-insecure",
        INSECURE_AUTH + TLS + "    http: Redirect\n",
        "Traefik",
        [],
        "Redirect",
    ),
    # allowInsecure allows; it does not weaken a default: Refuse still.
    ("auth-allowed-insecure-tls-default", INSECURE_AUTH + TLS, "Traefik", [], "Refuse"),
    # No keys to leak: the default stays Redirect, and no tls is fine.
    ("no-auth-tls-defaults-to-redirect", TLS, "Traefik", [], "Redirect"),
    ("no-auth-no-tls", "", "Traefik", [], None),
    # Every problem at once.
    (
        "auth-envoy-without-tls",
        AUTH,
        "EnvoyGateway",
        [("spec", "auth needs backend Traefik"), NO_TLS_ERROR],
        None,
    ),
    (
        "allow-insecure-not-a-boolean",
        AUTH.replace("  auth:\n", "  auth:\n    allowInsecure: 'yes'\n"),
        "Traefik",
        [("spec.auth.allowInsecure", "must be a boolean")],
        None,
    ),
]


def gateway_fleet(tmp_path: Path, gateway_spec: str, backend: str = "Traefik") -> Path:
    """specs/dev with its InferenceGateway's `auth` replaced by ``gateway_spec``."""
    target = tmp_path / "fleet"
    shutil.copytree(ROOT / "specs" / "dev", target)
    fleet = target / "fleet.yaml"
    lines = fleet.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("  auth:"))
    end = start + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    text = "".join(lines[:start] + [gateway_spec] + lines[end:])
    fleet.write_text(text.replace("backend: Traefik", f"backend: {backend}"))
    return target


@pytest.mark.parametrize(
    ("spec", "backend", "errors", "http"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_security_transport_validation(
    tmp_path: Path, spec: str, backend: str, errors: list[tuple[str, str]], http: str | None
) -> None:
    result = load_fleet(gateway_fleet(tmp_path, spec, backend))
    found = [e for e in result.errors if e.object == OBJECT]
    assert [e.path for e in found] == [path for path, _ in errors], found
    for error, (_, part) in zip(found, errors, strict=True):
        assert part in error.message, error.message
        assert error.file.endswith("fleet.yaml")
    if not errors:
        assert not result.errors, result.errors
        gateway = result.fleet.gateway
        assert gateway is not None
        assert (gateway.spec.tls.http if gateway.spec.tls else None) == http


def test_security_transport_validate_reports_field_without_traceback(tmp_path: Path) -> None:
    """`modelplane validate` names file, object and field and exits 2, no traceback."""
    target = gateway_fleet(tmp_path, AUTH + TLS + "    http: Redirect\n")
    result = CliRunner().invoke(app, ["validate", str(target), "-o", "json"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [error] = [e for e in json.loads(result.stdout)["errors"] if e["object"] == OBJECT]
    assert error["path"] == "spec.tls.http"
    assert error["file"].endswith("fleet.yaml") and error["line"] > 1
    assert "allowInsecure" in error["message"]


def _shipped() -> list[str]:
    return sorted(p.name for p in (ROOT / "specs").iterdir() if p.is_dir())


@pytest.mark.parametrize("fleet", _shipped())
def test_security_transport_shipped_fleets_send_keys_over_tls(fleet: str) -> None:
    """Every shipped fleet with callers refuses plain HTTP, but the dev fleet, which says so:
    it is one network namespace on one machine (docs/architecture.md, "The dev fleet")."""
    result = load_fleet(ROOT / "specs" / fleet)
    assert not result.errors, result.errors
    gateway = result.fleet.gateway
    if gateway is None or gateway.spec.auth is None:
        return
    if fleet == "dev":
        assert gateway.spec.auth.allow_insecure and gateway.spec.tls is None
        return
    assert not gateway.spec.auth.allow_insecure
    assert gateway.spec.tls is not None and gateway.spec.tls.http == "Refuse"
