"""Semantic versions (SemVer 2.0.0), strict or Kubernetes-normalized parsing."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Final

from modelplane.cel.ordered import KeyOrdered

__all__ = ["Semver", "is_semver", "parse_semver"]

_UINT64_MAX: Final = 2**64 - 1
_NUM: Final = r"0|[1-9][0-9]*"
_PRE_ID: Final = r"0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*"
_SEMVER_RE: Final = re.compile(
    rf"({_NUM})\.({_NUM})\.({_NUM})"
    rf"(?:-((?:{_PRE_ID})(?:\.(?:{_PRE_ID}))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)

PrereleaseId = int | str


class Semver(KeyOrdered):
    """An immutable semantic version.

    Equality, hashing and ordering follow SemVer precedence: build metadata is
    ignored, a pre-release sorts before its release, numeric identifiers sort
    numerically and before alphanumeric ones.
    """

    __slots__ = ("major", "minor", "patch", "prerelease", "build", "_key")

    major: int
    minor: int
    patch: int
    prerelease: tuple[PrereleaseId, ...]
    build: tuple[str, ...]
    _key: tuple[Any, ...]

    def __init__(
        self,
        major: int,
        minor: int,
        patch: int,
        prerelease: tuple[PrereleaseId, ...] = (),
        build: tuple[str, ...] = (),
    ) -> None:
        for part in (major, minor, patch):
            if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part <= _UINT64_MAX:
                raise ValueError(f"invalid version component {part!r}")
        pre_key: tuple[Any, ...]
        if prerelease:
            pre_key = (
                0,
                tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in prerelease),
            )
        else:
            pre_key = (1,)
        set_ = object.__setattr__
        set_(self, "major", major)
        set_(self, "minor", minor)
        set_(self, "patch", patch)
        set_(self, "prerelease", tuple(prerelease))
        set_(self, "build", tuple(build))
        set_(self, "_key", (major, minor, patch, pre_key))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Semver is immutable")

    def __reduce__(self) -> tuple[type[Semver], tuple[object, ...]]:
        return (Semver, (self.major, self.minor, self.patch, self.prerelease, self.build))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(p) for p in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"


def _normalize(text: str) -> str:
    """Kubernetes' tolerant form: drop a leading ``v``, leading zeros, pad to x.y.z."""
    if text.startswith("v"):
        text = text[1:]
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or not part[0].isdigit():
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise ValueError(
                f"invalid version {text!r}: a short version cannot carry "
                "pre-release or build metadata"
            )
        parts.extend("0" * (3 - len(parts)))
    return ".".join(parts)


@lru_cache(maxsize=4096)
def parse_semver(text: str, normalize: bool = False) -> Semver:
    """Parse a SemVer 2.0.0 string; ValueError if invalid.

    Strict by default (``1.2`` and ``v1.2.3`` are errors). With ``normalize``,
    a leading ``v`` and leading zeros are dropped and a missing minor or patch
    is taken as 0, as Kubernetes' ``semver(s, true)`` does.
    """
    if not isinstance(text, str):
        raise TypeError(f"version must be a string, not {type(text).__name__}")
    original = text
    if normalize:
        text = _normalize(text)
    m = _SEMVER_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid semantic version {original!r}")
    major, minor, patch = (int(m.group(i)) for i in (1, 2, 3))
    prerelease: list[PrereleaseId] = []
    pre = m.group(4)
    for ident in pre.split(".") if pre else ():
        if ident.isdigit():
            n = int(ident)
            if n > _UINT64_MAX:
                raise ValueError(f"invalid semantic version {original!r}: identifier too large")
            prerelease.append(n)
        else:
            prerelease.append(ident)
    build = tuple(m.group(5).split(".")) if m.group(5) else ()
    if max(major, minor, patch) > _UINT64_MAX:
        raise ValueError(f"invalid semantic version {original!r}: component too large")
    return Semver(major, minor, patch, tuple(prerelease), build)


def is_semver(text: str, normalize: bool = False) -> bool:
    """True if ``text`` parses (see ``parse_semver``)."""
    try:
        parse_semver(text, normalize)
    except (ValueError, TypeError):
        return False
    return True
