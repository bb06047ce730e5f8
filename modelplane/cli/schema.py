"""JSON Schemas for editors: one per kind, and one combined schema that dispatches on ``kind``.

The combined schema (``modelplane.schema.json``) validates any document of a fleet, so one
``# yaml-language-server: $schema=...`` line covers a multi-document file with several kinds
(yaml-language-server applies it to every document). Every document must carry ``apiVersion``
and ``kind``; field descriptions come from the models' docstrings and ``Field`` descriptions.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

DRAFT = "https://json-schema.org/draft/2020-12/schema"
COMBINED = "modelplane.schema.json"
API_VERSION = "modelplane.ai/v1alpha1"
ENVELOPE = {
    "apiVersion": f"The API version of modelplane specs: always {API_VERSION}.",
    "kind": "The kind of object this document describes; selects the schema of the rest.",
    "metadata": "The object's name (and namespace, for namespaced kinds) and labels.",
    "spec": "The desired state of the object.",
}


def _tidy(node: Any) -> Any:
    """Descriptions as prose: a docstring's line breaks inside a paragraph become spaces."""
    if isinstance(node, dict):
        tidy = {k: _tidy(v) for k, v in node.items()}
        if isinstance(tidy.get("description"), str):
            paragraphs = tidy["description"].split("\n\n")
            tidy["description"] = "\n\n".join(" ".join(p.split()) for p in paragraphs).strip()
        return tidy
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    return node


def _describe_envelope(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties", {})
    for name, text in ENVELOPE.items():
        if name in properties and "description" not in properties[name]:
            properties[name]["description"] = text
    required = [r for r in ("apiVersion", "kind") if r not in schema.get("required", [])]
    schema["required"] = [*required, *schema.get("required", [])]
    return schema


def kind_schema(kind: str, model: type[BaseModel]) -> dict[str, Any]:
    """The schema of one kind (apiVersion and kind required)."""
    doc = model.model_json_schema(by_alias=True, mode="validation")
    if kind != "PlacementLock":
        doc = _describe_envelope(doc)
    doc["$schema"] = DRAFT
    doc["$id"] = f"{kind}.schema.json"
    return _tidy(doc)


def combined_schema(kinds: dict[str, type[BaseModel]]) -> dict[str, Any]:
    """One schema for any spec document: ``kind`` selects the kind's schema."""
    keys = [(model, "validation") for model in kinds.values()]
    refs, top = models_json_schema(keys, by_alias=True)  # type: ignore[arg-type]
    defs: dict[str, Any] = top.get("$defs", {})
    branches = []
    for kind, model in kinds.items():
        ref = refs[(model, "validation")]["$ref"]
        name = ref.rsplit("/", 1)[-1]
        defs[name] = _describe_envelope(defs[name])
        branches.append(
            {
                "if": {
                    "properties": {"kind": {"const": kind, "description": ENVELOPE["kind"]}},
                    "required": ["kind"],
                },
                "then": {"$ref": ref},
            }
        )
    return _tidy(
        {
            "$schema": DRAFT,
            "$id": COMBINED,
            "title": "modelplane spec document",
            "description": "Any modelplane spec document; its kind selects the schema.",
            "type": "object",
            "required": ["apiVersion", "kind"],
            "properties": {
                "apiVersion": {"const": API_VERSION, "description": ENVELOPE["apiVersion"]},
                "kind": {"enum": sorted(kinds), "description": ENVELOPE["kind"]},
            },
            "allOf": branches,
            "$defs": defs,
        }
    )
