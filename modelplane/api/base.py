"""Shared building blocks of the spec models: strict camelCase models, metadata, selectors."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

API_VERSION = "modelplane.ai/v1alpha1"
RESERVED_PREFIX = "modelplane.ai/"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base of every spec model: camelCase on the wire, unknown fields are errors, scalars
    strict like Kubernetes' decoding: an integer field takes a YAML integer only (not `"2"`,
    `yes` or `2.0`), a boolean field a YAML boolean only (not `"yes"`), a number field an
    integer or a finite float (not `.nan`, `.inf` or a string). Ranges: `modelplane.api.limits`.

    Each field's docstring is its description in the JSON Schemas (`modelplane schema`):
    `modelplane.cli.schema` reads them from the source when it writes the schemas. Pydantic's
    `use_attribute_docstrings` would parse every model's source at import, in every process
    (~0.2 s of `validate`/`plan` start-up), for text only the schemas use."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        validate_default=True,
        strict=True,
        allow_inf_nan=False,
    )


def no_repeats(names: Iterable[str], rule: str) -> None:
    """A ValueError ``<rule>; repeated: a, b`` when a name stands more than once (for the
    list validators: device, pool, container names, metric types)."""
    seen = list(names)
    dupes = sorted({n for n in seen if seen.count(n) > 1})
    if dupes:
        raise ValueError(f"{rule}; repeated: {', '.join(dupes)}")


def trusted_builder(cls: type[M]) -> Callable[..., M]:
    """A faster `cls.model_construct` for values known valid that name every field, in
    field order (positionally): the same instance (fields, fields set, no extra or private
    state), without model_construct's per-field alias and default handling. For models
    built by the ten thousand (the scheduler's locked replicas)."""
    names = tuple(cls.model_fields)
    if cls.__pydantic_post_init__ or cls.__pydantic_root_model__:  # pragma: no cover
        raise TypeError(f"{cls.__name__} needs model_construct")
    new, setattr_ = cls.__new__, object.__setattr__

    def build(*values: Any) -> M:
        m = new(cls)
        setattr_(m, "__dict__", dict(zip(names, values, strict=True)))
        setattr_(m, "__pydantic_fields_set__", set(names))
        setattr_(m, "__pydantic_extra__", None)
        setattr_(m, "__pydantic_private__", None)
        return m

    return build


def check_dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label (lower-case alphanumerics and '-', "
            "starting and ending alphanumeric, at most 63 characters)"
        )
    return value


def check_dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{value!r} is not a DNS-1123 subdomain")
    return value


def check_label_key(key: str) -> str:
    prefix, sep, name = key.rpartition("/")
    if sep and not prefix:
        raise ValueError(f"label key {key!r} has an empty prefix")
    if prefix:
        check_dns_subdomain(prefix)
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(
            f"label key {key!r}: the name part must be 1-63 alphanumerics, '-', '_' or '.'"
        )
    return key


def check_label_value(value: str) -> str:
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        raise ValueError(f"label value {value!r} is not a valid label value")
    return value


DNSLabel = Annotated[str, AfterValidator(check_dns_label)]
DNSSubdomain = Annotated[str, AfterValidator(check_dns_subdomain)]
LabelKey = Annotated[str, AfterValidator(check_label_key)]
LabelValue = Annotated[str, AfterValidator(check_label_value)]
Labels = dict[LabelKey, LabelValue]


def check_no_reserved_labels(labels: dict[str, str]) -> dict[str, str]:
    reserved = sorted(k for k in labels if k.startswith(RESERVED_PREFIX))
    if reserved:
        raise ValueError(
            f"label(s) {', '.join(reserved)} use the reserved prefix {RESERVED_PREFIX!r}"
        )
    return labels


#: The labels modelplane writes itself (docs/api.md, "Labels modelplane owns").
OWNED_LABELS = frozenset(
    RESERVED_PREFIX + name
    for name in ("pool", "deployment", "replica", "cluster", "replica-index", "role")
)


def check_no_owned_labels(labels: dict[str, str]) -> dict[str, str]:
    owned = sorted(k for k in labels if k in OWNED_LABELS)
    if owned:
        raise ValueError(f"label(s) {', '.join(owned)} are set by modelplane, not by users")
    return labels


UserLabels = Annotated[Labels, AfterValidator(check_no_reserved_labels)]


class ObjectMeta(Strict):
    name: DNSLabel
    """The object's name: a DNS-1123 label of at most 63 characters."""
    namespace: DNSLabel | None = None
    """The namespace of a namespaced kind (default `default`); cluster-scoped kinds have none."""
    labels: Labels = Field(default_factory=dict)
    """Free-form labels: the matching surface of selectors (clusterSelector, ModelService
    endpoints).
    """
    annotations: dict[str, str] = Field(default_factory=dict)
    """Free-form annotations, kept with the object and not interpreted."""


class Namespaced(Strict):
    """A namespaced kind (ModelDeployment, ModelService, ModelEndpoint, ModelCache): ``key``,
    ``<namespace>/<name>``, names it across the fleet. No field of its own: each kind
    declares its ``metadata`` (the schemas keep their field order)."""

    if TYPE_CHECKING:
        metadata: ObjectMeta

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


class LabelSelectorRequirement(Strict):
    key: LabelKey
    """The label key the requirement applies to."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """In, NotIn (need values), Exists or DoesNotExist (take none)."""
    values: list[str] = Field(default_factory=list)
    """The values for In and NotIn; empty for Exists and DoesNotExist."""

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(Strict):
    """A Kubernetes LabelSelector. An empty selector matches everything."""

    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    """Labels that must all be present with exactly these values."""
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)
    """Requirements that must all hold (ANDed with matchLabels)."""

    def matches(self, labels: dict[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and (not present or labels[req.key] not in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        for req in self.match_expressions:
            if req.operator in ("In", "NotIn"):
                parts.append(f"{req.key} {req.operator.lower()} ({','.join(req.values)})")
            elif req.operator == "Exists":
                parts.append(req.key)
            else:
                parts.append(f"!{req.key}")
        return ",".join(parts) or "<everything>"


class LocalObjectReference(Strict):
    name: DNSSubdomain
    """The name of the referenced object in the same namespace."""


class SecretKeyRef(Strict):
    """Where a secret value comes from (see architecture.md, "Secrets")."""

    name: str = Field(min_length=1, max_length=253)
    """The secret's name: stack config `modelplane:secrets.<name>.<key>`, env
    `MODELPLANE_SECRET_<NAME>_<KEY>`, or `file:<path>`.
    """
    key: str = Field(min_length=1, max_length=253)
    """The key within the secret."""
