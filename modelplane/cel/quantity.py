"""Kubernetes resource quantities (``resource.Quantity``) with exact arithmetic."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Final, Literal

from modelplane.cel.ordered import KeyOrdered

__all__ = [
    "BINARY_SI",
    "DECIMAL_EXPONENT",
    "DECIMAL_SI",
    "MAX_QUANTITY",
    "Quantity",
    "QuantityFormat",
    "is_quantity",
    "parse_quantity",
]

QuantityFormat = Literal["DecimalSI", "BinarySI", "DecimalExponent"]
DECIMAL_SI: Final = "DecimalSI"
BINARY_SI: Final = "BinarySI"
DECIMAL_EXPONENT: Final = "DecimalExponent"

#: Kubernetes caps a parsed quantity's magnitude at the largest int64.
MAX_QUANTITY: Final = 2**63 - 1
_INT64_MIN: Final = -(2**63)
_NANO: Final = 10**9

_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}
# Canonical output: largest power first.
_DECIMAL_BY_EXP: Final = sorted(((e, s) for s, e in _DECIMAL_SUFFIXES.items()), reverse=True)
_BINARY_BY_EXP: Final = sorted(((e, s) for s, e in _BINARY_SUFFIXES.items()), reverse=True)

# sign, integer digits, fraction digits, suffix. ASCII digits only.
_NUMBER_RE: Final = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)", re.DOTALL)
_EXPONENT_RE: Final = re.compile(r"[eE]([+-]?[0-9]+)")
_INT32_MAX: Final = 2**31 - 1


class Quantity(KeyOrdered):
    """An immutable Kubernetes quantity: an exact rational value plus its format.

    Equality, hashing and ordering use the value only (``1Gi == 1073741824``,
    ``1000m == 1``); the format only shapes ``str()``.
    """

    __slots__ = ("_key", "_format")

    def __init__(self, value: int | Fraction, fmt: QuantityFormat = DECIMAL_SI) -> None:
        if isinstance(value, bool) or not isinstance(value, int | Fraction):
            raise TypeError(f"Quantity value must be int or Fraction, not {type(value).__name__}")
        self._key = Fraction(value)
        self._format: QuantityFormat = fmt

    @property
    def value(self) -> Fraction:
        """The exact numeric value."""
        return self._key

    @property
    def format(self) -> QuantityFormat:
        """DecimalSI, BinarySI or DecimalExponent (from the parsed suffix)."""
        return self._format

    # --- Kubernetes CEL quantity library -------------------------------------------------
    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self._key > 0) - (self._key < 0)

    def is_integer(self) -> bool:
        """True if the value is a whole number that fits an int64."""
        v = self._key
        return v.denominator == 1 and _INT64_MIN <= v.numerator <= MAX_QUANTITY

    def as_integer(self) -> int:
        """The value as an int64; ValueError if it is not one."""
        if not self.is_integer():
            raise ValueError(f"quantity {self} cannot be represented as an int64")
        return self._key.numerator

    def as_approximate_float(self) -> float:
        """The nearest float."""
        return float(self._key)

    def add(self, other: Quantity | int) -> Quantity:
        """Sum with a quantity or an integer (keeps this quantity's format)."""
        return Quantity(self._key + _operand(other), self._format)

    def sub(self, other: Quantity | int) -> Quantity:
        """Difference with a quantity or an integer (keeps this quantity's format)."""
        return Quantity(self._key - _operand(other), self._format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __str__(self) -> str:
        return _format_quantity(self._key, self._format)


def _operand(other: Quantity | int) -> Fraction | int:
    if isinstance(other, Quantity):
        return other._key
    if isinstance(other, int) and not isinstance(other, bool):
        return other
    raise TypeError(f"expected a quantity or an int, not {type(other).__name__}")


def _format_quantity(value: Fraction, fmt: QuantityFormat) -> str:
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mag = abs(value)
    if fmt == BINARY_SI and mag.denominator == 1 and mag >= 1024:
        n = mag.numerator
        for exp, suffix in _BINARY_BY_EXP:
            if n % (1 << exp) == 0:
                return f"{sign}{n >> exp}{suffix}"
        return f"{sign}{n}"
    # Largest multiple-of-three power of ten (at most 10^18) giving a whole mantissa.
    for exp, suffix in _DECIMAL_BY_EXP:
        scaled = mag / (Fraction(10) ** exp)
        if scaled.denominator == 1:
            if fmt == DECIMAL_EXPONENT:
                return f"{sign}{scaled.numerator}" + (f"e{exp}" if exp else "")
            return f"{sign}{scaled.numerator}{suffix}"
    # Finer than a nano (only reachable through arithmetic on Fractions): exact exponent form.
    exp = -9
    while (mag / Fraction(10) ** exp).denominator != 1 and exp > -60:
        exp -= 3
    scaled = mag / Fraction(10) ** exp
    if scaled.denominator != 1:
        return f"{sign}{float(mag)!r}"
    return f"{sign}{scaled.numerator}e{exp}"


def _suffix(suffix: str) -> tuple[int, int, QuantityFormat]:
    """(base, exponent, format) for a suffix; ValueError if unknown."""
    exp = _DECIMAL_SUFFIXES.get(suffix)
    if exp is not None:
        return 10, exp, DECIMAL_SI
    exp = _BINARY_SUFFIXES.get(suffix)
    if exp is not None:
        return 2, exp, BINARY_SI
    m = _EXPONENT_RE.fullmatch(suffix)
    if m is not None:
        exp = int(m.group(1))
        if abs(exp) <= _INT32_MAX:
            return 10, exp, DECIMAL_EXPONENT
    raise ValueError(f"unknown quantity suffix {suffix!r}")


@lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Quantity:
    """Parse a Kubernetes quantity (``128Mi``, ``1.5G``, ``500m``, ``1e3``).

    Follows ``resource.ParseQuantity``: the magnitude is rounded up to a whole
    nano and capped at 2^63-1. Raises ValueError on malformed input.
    """
    if not isinstance(text, str):
        raise TypeError(f"quantity must be a string, not {type(text).__name__}")
    m = _NUMBER_RE.fullmatch(text)
    if m is None:  # pragma: no cover - the pattern matches any string
        raise ValueError(f"invalid quantity {text!r}")
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    if not whole and not frac:
        raise ValueError(f"invalid quantity {text!r}: expected a number")
    try:
        base, exp, fmt = _suffix(suffix)
    except ValueError:
        raise ValueError(f"invalid quantity {text!r}: unknown suffix {suffix!r}") from None
    mantissa = int(whole + frac) if (whole + frac) else 0
    if mantissa == 0:
        return Quantity(0, fmt)
    if base == 2:
        mag = Fraction(mantissa << exp, 10 ** len(frac))
    else:
        power = exp - len(frac)
        magnitude_log10 = len(str(mantissa)) - 1 + power
        if magnitude_log10 >= 19:  # at least 1e19 > 2^63-1: capped (avoids huge powers)
            mag = Fraction(MAX_QUANTITY)
        elif magnitude_log10 < -10:  # below a nano: rounds up to one nano
            mag = Fraction(1, _NANO)
        elif power >= 0:
            mag = Fraction(mantissa * 10**power)
        else:
            mag = Fraction(mantissa, 10**-power)
    if mag.denominator != 1 and (mag * _NANO).denominator != 1:
        mag = Fraction(math.ceil(mag * _NANO), _NANO)
    if mag > MAX_QUANTITY:
        mag = Fraction(MAX_QUANTITY)
    return Quantity(-mag if sign == "-" else mag, fmt)


def is_quantity(text: str) -> bool:
    """True if ``text`` parses as a quantity."""
    try:
        parse_quantity(text)
    except (ValueError, TypeError):
        return False
    return True
