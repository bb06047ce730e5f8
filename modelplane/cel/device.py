"""The device a DRA selector is evaluated against."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from modelplane.cel.quantity import Quantity, parse_quantity
from modelplane.cel.semver import Semver, parse_semver

__all__ = ["AttributeValue", "Device", "split_name"]

AttributeValue = str | bool | int | Semver
ATTRIBUTE_KINDS: Final = ("string", "version", "bool", "int")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def split_name(name: str, driver: str) -> tuple[str, str]:
    """(domain, id) of an attribute or capacity name: ``domain/id`` splits at the
    first ``/``; a bare name takes the driver as domain."""
    domain, sep, ident = name.partition("/")
    if not sep:
        domain, ident = driver, name
    if not domain or not ident:
        raise ValueError(f"invalid attribute or capacity name {name!r}")
    return domain, ident


def _check_attribute(domain: str, ident: str, value: object) -> AttributeValue:
    if isinstance(value, bool | str | Semver):
        return value
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"attribute {domain}/{ident}: int {value} is outside int64")
        return value
    raise TypeError(
        f"attribute {domain}/{ident}: expected str, bool, int or Semver, not {type(value).__name__}"
    )


def _value_key(value: AttributeValue | Quantity) -> tuple[object, ...]:
    # Tagged so True and 1, or 1.0.0+a and 1.0.0+b, stay distinct devices.
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, Semver):
        return ("v", str(value))
    return ("q", value.value, value.format)


def _freeze(
    table: Mapping[str, Mapping[str, Any]], kind: str, check: Any
) -> tuple[Mapping[str, Mapping[str, Any]], tuple[object, ...]]:
    frozen: dict[str, Mapping[str, Any]] = {}
    key: list[object] = []
    for domain in sorted(table):
        inner = table[domain]
        if not isinstance(domain, str) or not isinstance(inner, Mapping):
            raise TypeError(f"{kind} must map domain (str) to a mapping of id to value")
        values: dict[str, Any] = {}
        for ident in sorted(inner):
            if not isinstance(ident, str):
                raise TypeError(f"{kind} ids must be strings, got {ident!r}")
            values[ident] = check(domain, ident, inner[ident])
        frozen[domain] = MappingProxyType(values)
        key.append((domain, tuple((i, _value_key(v)) for i, v in values.items())))
    return MappingProxyType(frozen), tuple(key)


def _check_capacity(domain: str, ident: str, value: object) -> Quantity:
    if not isinstance(value, Quantity):
        raise TypeError(f"capacity {domain}/{ident}: expected Quantity, not {type(value).__name__}")
    return value


@dataclass(frozen=True, eq=False)
class Device:
    """A device as CEL sees it: attributes and capacity keyed by domain, then id.

    Immutable and hashable (by content), so it can key a memo of selector results.
    """

    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]] = field(default_factory=dict)
    capacity: Mapping[str, Mapping[str, Quantity]] = field(default_factory=dict)
    _key: tuple[object, ...] = field(init=False, repr=False, compare=False)
    _hash: int = field(init=False, repr=False, compare=False)
    _cel: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.driver, str):
            raise TypeError("driver must be a string")
        attributes, attr_key = _freeze(self.attributes, "attributes", _check_attribute)
        capacity, cap_key = _freeze(self.capacity, "capacity", _check_capacity)
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "capacity", capacity)
        key = (self.driver, attr_key, cap_key)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Device):
            return self is other or (self._hash == other._hash and self._key == other._key)
        return NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[Device], tuple[object, ...]]:
        # Mapping proxies do not pickle or deepcopy; plain dicts are re-frozen on load.
        plain = lambda t: {d: dict(v) for d, v in t.items()}  # noqa: E731
        return (Device, (self.driver, plain(self.attributes), plain(self.capacity)))

    @classmethod
    def from_class_device(
        cls,
        driver: str,
        attributes: Mapping[str, Any] | None = None,
        capacity: Mapping[str, Any] | None = None,
    ) -> Device:
        """Build a Device from an InferenceClass device's spec.

        ``attributes`` maps a name to ``(kind, value)`` or ``{kind: value}``
        (kind: string | version | bool | int; versions are parsed strictly);
        ``capacity`` maps a name to a quantity string, a Quantity or
        ``{"value": ...}``. Bare names take ``driver`` as domain; ``domain/id``
        names split at the first ``/``. Raises ValueError (or TypeError) on a
        malformed value or a name given twice.
        """
        attrs: dict[str, dict[str, AttributeValue]] = {}
        for name, spec in (attributes or {}).items():
            domain, ident = split_name(name, driver)
            kind, raw = _attribute_spec(name, spec)
            bucket = attrs.setdefault(domain, {})
            if ident in bucket:
                raise ValueError(f"attribute {domain}/{ident} is given twice")
            bucket[ident] = _attribute_value(name, kind, raw)
        caps: dict[str, dict[str, Quantity]] = {}
        for name, spec in (capacity or {}).items():
            domain, ident = split_name(name, driver)
            bucket_q = caps.setdefault(domain, {})
            if ident in bucket_q:
                raise ValueError(f"capacity {domain}/{ident} is given twice")
            bucket_q[ident] = _capacity_value(name, spec)
        return cls(driver=driver, attributes=attrs, capacity=caps)


def _plain(spec: Any) -> Any:
    dump = getattr(spec, "model_dump", None)  # a pydantic model
    if callable(dump):
        return dump(exclude_none=True)
    return spec


def _attribute_spec(name: str, spec: Any) -> tuple[str, object]:
    spec = _plain(spec)
    if isinstance(spec, Mapping):
        items = [(k, v) for k, v in spec.items() if v is not None]
        if len(items) != 1:
            raise ValueError(f"attribute {name}: exactly one of {', '.join(ATTRIBUTE_KINDS)}")
        return items[0]
    if isinstance(spec, tuple) and len(spec) == 2:
        return spec[0], spec[1]
    raise TypeError(f"attribute {name}: expected (kind, value) or {{kind: value}}")


def _attribute_value(name: str, kind: str, raw: object) -> AttributeValue:
    if kind == "string" and isinstance(raw, str):
        return raw
    if kind == "version":
        if isinstance(raw, Semver):
            return raw
        if isinstance(raw, str):
            try:
                return parse_semver(raw)
            except ValueError:
                raise ValueError(f"attribute {name}: invalid semantic version {raw!r}") from None
    if kind == "bool" and isinstance(raw, bool):
        return raw
    if kind == "int" and isinstance(raw, int) and not isinstance(raw, bool):
        if not _INT64_MIN <= raw <= _INT64_MAX:
            raise ValueError(f"attribute {name}: int {raw} is outside int64")
        return raw
    if kind not in ATTRIBUTE_KINDS:
        raise ValueError(f"attribute {name}: unknown kind {kind!r}")
    raise ValueError(f"attribute {name}: {raw!r} is not a valid {kind}")


def _capacity_value(name: str, spec: Any) -> Quantity:
    spec = _plain(spec)
    if isinstance(spec, Mapping):
        if set(spec) != {"value"}:
            raise ValueError(f"capacity {name}: expected {{value: <quantity>}}")
        spec = spec["value"]
    if isinstance(spec, Quantity):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        return Quantity(spec)
    if isinstance(spec, str):
        try:
            return parse_quantity(spec)
        except ValueError as exc:
            raise ValueError(f"capacity {name}: {exc}") from None
    raise TypeError(f"capacity {name}: expected a quantity, not {type(spec).__name__}")
