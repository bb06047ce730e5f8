"""JSON Schemas for editors: one per kind, and one combined schema that dispatches on ``kind``.

The combined schema (``modelplane.schema.json``) validates any document of a fleet, so one
``# yaml-language-server: $schema=...`` line covers a multi-document file with several kinds
(yaml-language-server applies it to every document). Every document must carry ``apiVersion``
and ``kind``; field descriptions come from the models' docstrings and ``Field`` descriptions.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from modelplane.api.base import Strict

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


@cache
def _docstrings(cls: type) -> dict[str, str]:
    """The attribute docstrings of cls's own body: a string right after `name: type`."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = ast.parse(source).body[0]
    docs: dict[str, str] = {}
    if not isinstance(body, ast.ClassDef):
        return docs
    for stmt, nxt in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _strict_models() -> dict[str, type[BaseModel]]:
    """Every spec model by class name (the name of its JSON Schema definition)."""
    found: dict[str, type[BaseModel]] = {}
    todo: list[type[BaseModel]] = [Strict]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return found


def _field_descriptions(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Each field's docstring as its property's description, unless the field has one
    (`Field(description=...)`): what pydantic's `use_attribute_docstrings` would give,
    read here rather than at every import of the models (modelplane.api.base.Strict)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not issubclass(model, Strict):
        return
    for name, info in model.model_fields.items():
        prop = properties.get(info.alias or name)
        if not isinstance(prop, dict) or "description" in prop or info.description:
            continue
        for cls in model.__mro__:
            text = (
                _docstrings(cls).get(name) if name in vars(cls).get("__annotations__", {}) else None
            )
            if text:
                prop["description"] = text
                break


def _describe_fields(
    schema: dict[str, Any], model: type[BaseModel] | None = None
) -> dict[str, Any]:
    """Field descriptions filled in on the top-level model (when given) and every `$defs`
    entry that is a spec model."""
    if model is not None:
        _field_descriptions(schema, model)
    models = _strict_models()
    for name, sub in schema.get("$defs", {}).items():
        if name in models:
            _field_descriptions(sub, models[name])
    return schema


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
    doc = _describe_fields(model.model_json_schema(by_alias=True, mode="validation"), model)
    if kind != "PlacementLock":
        doc = _describe_envelope(doc)
    doc["$schema"] = DRAFT
    doc["$id"] = f"{kind}.schema.json"
    return _tidy(doc)


def combined_schema(kinds: dict[str, type[BaseModel]]) -> dict[str, Any]:
    """One schema for any spec document: ``kind`` selects the kind's schema."""
    keys = [(model, "validation") for model in kinds.values()]
    refs, top = models_json_schema(keys, by_alias=True)  # type: ignore[arg-type]
    top = _describe_fields(top)
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
