"""Values compared by one key: a Quantity by its exact value, a Semver by SemVer precedence."""

from __future__ import annotations

from typing import Any


class KeyOrdered:
    """Equality, hashing, ordering and ``compare`` (CEL's ``compareTo``) by ``_key``, between
    values of the same class only: any other operand is NotImplemented (``compare``: a
    TypeError)."""

    __slots__ = ()
    _key: Any

    def compare(self, other: Any) -> int:
        """-1, 0 or 1 as this is less than, equal to or greater than ``other``."""
        if not isinstance(other, type(self)):
            raise TypeError(f"cannot compare {type(self).__name__} with {type(other).__name__}")
        a, b = self._key, other._key
        return (a > b) - (a < b)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)):
            return self._key == other._key
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key)

    def __lt__(self, other: Any) -> bool:
        if isinstance(other, type(self)):
            return self._key < other._key
        return NotImplemented

    def __le__(self, other: Any) -> bool:
        if isinstance(other, type(self)):
            return self._key <= other._key
        return NotImplemented

    def __gt__(self, other: Any) -> bool:
        if isinstance(other, type(self)):
            return self._key > other._key
        return NotImplemented

    def __ge__(self, other: Any) -> bool:
        if isinstance(other, type(self)):
            return self._key >= other._key
        return NotImplemented
