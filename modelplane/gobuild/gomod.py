"""Reading upstream go.mod files and writing wrapper modules' go.mod / go.sum (pure text).

Every set modelplane builds (the engine, the Kubernetes control plane, the dev fleet,
Prometheus) is built from a generated *wrapper* main module: upstream main modules carry
``replace`` directives, so ``go install pkg@version`` refuses them, and a dependency's
``replace``, ``exclude`` and ``godebug`` lines are ignored. The wrapper requires the upstream
module(s) and copies what the build needs of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

_REPLACE_LINE = re.compile(r"^(\S+)(?:\s+(\S+))?\s+=>\s+(\S+)(?:\s+(\S+))?$")


@dataclass(frozen=True)
class Replace:
    """One `replace old [oldver] => new [newver]` directive."""

    old: str
    new: str
    old_version: str | None = None
    new_version: str | None = None

    @property
    def is_path(self) -> bool:
        """A replacement by a local directory: meaningless outside the upstream repository."""
        return self.new_version is None

    def render(self) -> str:
        left = f"{self.old} {self.old_version}" if self.old_version else self.old
        right = f"{self.new} {self.new_version}" if self.new_version else self.new
        return f"{left} => {right}"


@dataclass(frozen=True)
class GoMod:
    """The parts of an upstream go.mod a wrapper module copies."""

    module: str
    go: str | None = None
    godebug: tuple[str, ...] = ()
    replaces: tuple[Replace, ...] = ()
    requires: tuple[tuple[str, str], ...] = ()
    excludes: tuple[str, ...] = ()

    @property
    def module_replaces(self) -> tuple[Replace, ...]:
        """The replaces that point at another module version (the ones to copy)."""
        return tuple(r for r in self.replaces if not r.is_path)

    def required_version(self, module: str) -> str | None:
        """The version this go.mod requires of ``module`` (None: not required)."""
        return next((version for path, version in self.requires if path == module), None)


def _strip_comment(line: str) -> str:
    return line.split("//", 1)[0].strip()


def parse_go_mod(text: str) -> GoMod:
    """The module, go, godebug, require, replace and exclude directives (lines and blocks)."""
    module = ""
    go: str | None = None
    entries: dict[str, list[str]] = {"godebug": [], "replace": [], "require": [], "exclude": []}
    block: str | None = None
    for raw in text.splitlines():
        line = _strip_comment(raw)
        if not line:
            continue
        if block is not None:
            if line == ")":
                block = None
            elif block in entries:
                entries[block].append(line)
            continue
        verb, *tail = line.split(maxsplit=1)
        rest = tail[0].strip() if tail else ""
        if rest == "(":
            block = verb
        elif verb == "module":
            module = rest.strip('"')
        elif verb == "go":
            go = rest
        elif verb in entries:
            entries[verb].append(rest)
    if not module:
        raise ValueError("go.mod has no module line")
    split = [entry.split() for entry in entries["require"]]
    requires = tuple((parts[0], parts[1]) for parts in split if len(parts) >= 2)
    return GoMod(
        module=module,
        go=go,
        godebug=tuple(entries["godebug"]),
        replaces=tuple(_parse_replace(spec) for spec in entries["replace"]),
        requires=requires,
        excludes=tuple(" ".join(e.split()) for e in entries["exclude"]),
    )


def _parse_replace(spec: str) -> Replace:
    match = _REPLACE_LINE.match(" ".join(spec.split()))
    if not match:
        raise ValueError(f"cannot parse replace directive {spec!r}")
    old, old_version, new, new_version = match.groups()
    return Replace(old=old, old_version=old_version, new=new, new_version=new_version)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def max_go_version(versions: Iterable[str | None]) -> str:
    present = [v for v in versions if v]
    if not present:
        raise ValueError("no go version given")
    return max(present, key=_version_key)


def go_version_at_least(have: str, need: str) -> bool:
    return _version_key(have) >= _version_key(need)


@dataclass(frozen=True)
class WrapperModule:
    """A generated main module's go.mod: what it requires, builds (``tool``) and copies."""

    path: str
    go: str
    requires: tuple[tuple[str, str], ...]
    tools: tuple[str, ...] = ()
    replaces: tuple[Replace, ...] = ()
    godebug: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    comment: str = ""

    @classmethod
    def wrapping(
        cls,
        path: str,
        requires: Sequence[tuple[str, str]],
        upstream: Sequence[GoMod],
        *,
        replaces: Sequence[Replace] = (),
        **fields: Any,
    ) -> WrapperModule:
        """The wrapper of ``upstream``: the highest go line, every godebug line, and the
        non-path replaces (``replaces`` first, then the first upstream's per module)."""
        seen: dict[tuple[str, str | None], Replace] = {}
        for rep in [*replaces, *(r for mod in upstream for r in mod.module_replaces)]:
            seen.setdefault((rep.old, rep.old_version), rep)
        godebug: list[str] = []
        for mod in upstream:
            godebug.extend(line for line in mod.godebug if line not in godebug)
        fields.setdefault("go", max_go_version(m.go for m in upstream))
        return cls(
            path=path,
            requires=tuple(requires),
            replaces=tuple(seen.values()),
            godebug=tuple(godebug),
            **fields,
        )

    def go_version(self) -> str:
        """The go line; at least 1.24 when the module has ``tool`` directives."""
        if self.tools and not go_version_at_least(self.go, "1.24"):
            return "1.24"
        return self.go

    def render(self) -> str:
        out = [f"// {line}" if line else "//" for line in self.comment.splitlines()]
        out += [f"module {self.path}", "", f"go {self.go_version()}", ""]
        out += _directive("godebug", self.godebug)
        out += _directive("tool", self.tools)
        out += _directive("require", [f"{mod} {ver}" for mod, ver in self.requires], block=True)
        out += _directive("replace", [r.render() for r in self.replaces], block=True)
        out += _directive("exclude", self.excludes, block=True)
        return "\n".join(out)


def _directive(verb: str, entries: Sequence[str], block: bool = False) -> list[str]:
    """``verb entry`` for one entry, a ``verb ( ... )`` block for several (or if ``block``)."""
    if not entries:
        return []
    if len(entries) == 1 and not block:
        return [f"{verb} {entries[0]}", ""]
    return [f"{verb} (", *(f"\t{entry}" for entry in entries), ")", ""]


def merge_go_sum(*sources: Sequence[str] | str) -> str:
    """go.sum text holding every distinct line of the given go.sum texts / line lists, sorted."""
    lines: set[str] = set()
    for source in sources:
        items = source.splitlines() if isinstance(source, str) else source
        lines.update(line.strip() for line in items if line.strip())
    return "".join(f"{line}\n" for line in sorted(lines))
