"""Validate Kubernetes manifests against the real schemas, offline.

- CRD kinds: the `openAPIV3Schema` of the served version in the repository's
  `modelplane/crds/` (LeaderWorkerSet, Gateway API, Inference Extension), made strict the
  way a structural schema is enforced by the API server with strict field
  validation: every object with `properties` rejects unknown fields unless it
  says `x-kubernetes-preserve-unknown-fields`. `metadata` is checked against
  the built-in ObjectMeta schema.
- Built-in kinds: the Kubernetes OpenAPI schema as JSON Schema, from the PyPI
  package `kubernetes-validate` (its `v<k8s>-local-strict` set: closed objects,
  includes `resource.k8s.io/v1`).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "modelplane" / "crds"
# Test-only CRDs (too large for every dev cluster to install): Envoy Gateway's policy kinds.
TEST_CRDS = ROOT / "tests" / "data" / "envoy-gateway-v1.8.3"
# and Envoy AI Gateway's route kinds (an Envoy front door's OpenAI base URL).
AI_GATEWAY_CRDS = ROOT / "tests" / "data" / "envoy-ai-gateway-v1.1.0"
K8S_VERSION = "1.35.0"
OBJECT_META = "/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SchemaMissing(LookupError):
    pass


def _k8s_dir() -> Path:
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = base / f"v{K8S_VERSION}-local-strict"
    if not path.is_dir():
        raise SchemaMissing(f"kubernetes-validate has no schemas for {K8S_VERSION}")
    return path


@cache
def _k8s_registry() -> tuple[Registry, dict[str, Any]]:
    defs = json.loads((_k8s_dir() / "_definitions.json").read_text())
    resource = Resource.from_contents(defs)
    registry = Registry().with_resource("/api/_definitions.json", resource)
    registry = registry.with_resource(defs.get("$id", "_definitions.json"), resource)
    return registry, defs


@cache
def _builtin_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = _k8s_dir() / f"{kind.lower()}-{group_version}.json"
    if not path.exists():
        raise SchemaMissing(f"no built-in schema for {api_version} {kind}")
    schema = json.loads(path.read_text())
    registry, _ = _k8s_registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _strict(schema: Any) -> Any:
    """OpenAPI v3 (structural) -> JSON Schema with closed objects."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserve = out.get("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


@cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in [
        *sorted(CRDS.rglob("*.yaml")),
        *sorted(TEST_CRDS.glob("*.yaml")),
        *sorted(AI_GATEWAY_CRDS.glob("*.yaml")),
    ]:
        # libyaml's loader where PyYAML has it: the CRDs are megabytes of YAML.
        for doc in yaml.load_all(path.read_text(), Loader=_SAFE_LOADER):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                if not version.get("served"):
                    continue
                api_version = f"{spec['group']}/{version['name']}"
                schema = _strict(version["schema"]["openAPIV3Schema"])
                schema["properties"]["metadata"] = {"$ref": OBJECT_META}
                schema["properties"]["apiVersion"] = {"const": api_version}
                schema["properties"]["kind"] = {"const": spec["names"]["kind"]}
                schema["required"] = sorted(
                    {*schema.get("required", []), "apiVersion", "kind", "metadata"}
                )
                found[(api_version, spec["names"]["kind"])] = schema
    return found


@cache
def _crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = _crd_schemas()[(api_version, kind)]
    registry, _ = _k8s_registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validator_for(manifest: dict[str, Any]) -> jsonschema.protocols.Validator:
    api_version, kind = manifest.get("apiVersion", ""), manifest.get("kind", "")
    if (api_version, kind) in _crd_schemas():
        return _crd_validator(api_version, kind)
    return _builtin_validator(api_version, kind)


def errors(manifest: dict[str, Any]) -> list[str]:
    """Every schema violation of one manifest, as `path: message`."""
    validator = validator_for(manifest)
    out = []
    for err in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.path))):
        where = ".".join(str(p) for p in err.path) or "<root>"
        out.append(f"{where}: {err.message[:300]}")
    return out
