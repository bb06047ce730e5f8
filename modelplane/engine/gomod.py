"""Reading upstream go.mod files and writing the wrapper modules' go.mod / go.sum (pure text)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

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

    @property
    def module_replaces(self) -> tuple[Replace, ...]:
        """The replaces that point at another module version (the ones to copy)."""
        return tuple(r for r in self.replaces if not r.is_path)


def _strip_comment(line: str) -> str:
    return line.split("//", 1)[0].strip()


def parse_go_mod(text: str) -> GoMod:
    module = ""
    go: str | None = None
    godebug: list[str] = []
    replaces: list[Replace] = []
    block: str | None = None
    for raw in text.splitlines():
        line = _strip_comment(raw)
        if not line:
            continue
        if block is not None:
            if line == ")":
                block = None
            elif block == "replace":
                replaces.append(_parse_replace(line))
            elif block == "godebug":
                godebug.append(line)
            continue
        verb, _, rest = line.partition(" ")
        rest = rest.strip()
        if rest == "(":
            block = verb
        elif verb == "module":
            module = rest.strip('"')
        elif verb == "go":
            go = rest
        elif verb == "godebug":
            godebug.append(rest)
        elif verb == "replace":
            replaces.append(_parse_replace(rest))
    if not module:
        raise ValueError("go.mod has no module line")
    return GoMod(module=module, go=go, godebug=tuple(godebug), replaces=tuple(replaces))


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
    """A generated main module: its go.mod requirements and the upstream go.mods it wraps."""

    path: str
    requires: tuple[tuple[str, str], ...]
    upstream: tuple[GoMod, ...] = field(default=())
    go: str | None = None

    def replaces(self) -> tuple[Replace, ...]:
        """Non-path replaces of every upstream module, the first one winning per module."""
        seen: dict[tuple[str, str | None], Replace] = {}
        for mod in self.upstream:
            for rep in mod.module_replaces:
                seen.setdefault((rep.old, rep.old_version), rep)
        return tuple(seen.values())

    def go_version(self) -> str:
        return self.go or max_go_version(m.go for m in self.upstream)

    def godebug(self) -> tuple[str, ...]:
        lines: list[str] = []
        for mod in self.upstream:
            lines.extend(line for line in mod.godebug if line not in lines)
        return tuple(lines)

    def render(self) -> str:
        out = [f"module {self.path}", "", f"go {self.go_version()}", ""]
        godebug = self.godebug()
        if godebug:
            out += ["godebug (", *(f"\t{line}" for line in godebug), ")", ""]
        out += ["require (", *(f"\t{mod} {ver}" for mod, ver in self.requires), ")", ""]
        for rep in self.replaces():
            out.append(f"replace {rep.render()}")
        if self.replaces():
            out.append("")
        return "\n".join(out)


def merge_go_sum(*sources: Sequence[str] | str) -> str:
    """go.sum text holding every distinct line of the given go.sum texts / line lists, sorted."""
    lines: set[str] = set()
    for source in sources:
        items = source.splitlines() if isinstance(source, str) else source
        lines.update(line.strip() for line in items if line.strip())
    return "".join(f"{line}\n" for line in sorted(lines))
