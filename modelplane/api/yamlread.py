"""Read YAML spec text fast and strictly: libyaml's parser, node marks, bounded aliases.

`read_yaml` parses with PyYAML's C loader (`CSafeLoader`), walks each composed
document once to reject duplicate mapping keys (merge keys `<<` excepted), to
bound the document's size once aliases are expanded, and to note the line and
column of every field path. Problems come back as `YamlProblem`s, never raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from modelplane.api.paths import join_path

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVED: dict[tuple[str, tuple[bool, bool]], str] = {}  # plain scalar -> its implicit tag


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """The C loader with scalar tag resolution memoised (PyYAML resolves every scalar with
    Python regexes; spec files repeat the same keys and values thousands of times)."""

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        if kind is not ScalarNode or len(value) > 64:
            return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]
        key = (value, implicit)
        tag = _RESOLVED.get(key)
        if tag is None:
            if len(_RESOLVED) > 65536:
                _RESOLVED.clear()
            tag = _RESOLVED[key] = super().resolve(kind, value, implicit)
        return tag


MAX_FILE_BYTES = 8 * 1024 * 1024  # one spec file
MAX_EXPANDED_NODES = 1_000_000  # one document, counting every alias use in full
MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class YamlProblem:
    document: int
    path: str
    message: str
    line: int = 0  # 1-based; 0 when unknown
    column: int = 0


@dataclass
class YamlDocument:
    index: int
    body: Any
    marks: dict[str, tuple[int, int]] = field(default_factory=dict)

    def mark(self, path: str) -> tuple[int, int]:
        """(line, column) of path, or of its nearest ancestor that has one."""
        while True:
            found = self.marks.get(path)
            if found is not None:
                return found
            if not path:
                return (0, 0)
            path = _parent(path)


_LAST = re.compile(r"(\.[^.\[]*|\[\d+\])$")


def _parent(path: str) -> str:
    cut = _LAST.search(path)
    return path[: cut.start()] if cut else ""


def _pos(node: Node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


class _Walk:
    """One pass over a composed document: marks, duplicate keys, expanded size, and the
    Python value (plain str/map/seq built here; other tags, merge keys and complex keys by
    the loader's SafeConstructor, so the result is what `yaml.safe_load` gives)."""

    def __init__(self, loader: Any, index: int, problems: list[YamlProblem]) -> None:
        self.loader = loader
        self.index = index
        self.problems = problems
        self.marks: dict[str, tuple[int, int]] = {}
        self.sizes: dict[int, int] = {}
        self.values: dict[int, Any] = {}
        self.active: set[int] = set()
        self.total = 0

    def visit(self, node: Node, path: str | None) -> Any:
        """The value of node; records marks for paths seen the first time and counts the
        expanded size (every alias use in full) into self.total."""
        key = id(node)
        if path is not None and path not in self.marks:
            self.marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        known = self.sizes.get(key)
        if known is not None:
            self._count(known)
            return self.values[key]
        if key in self.active:
            raise _TooLarge("a recursive alias")
        self.active.add(key)
        before = self.total
        self._count(1)
        value: Any
        if type(node) is ScalarNode:
            value = node.value if node.tag == _STR else self.loader.construct_object(node)
        elif type(node) is MappingNode:
            value = self._mapping(node, path)
        elif type(node) is SequenceNode:
            sub = f"{path}[%d]" if path is not None else None
            items = [
                self.visit(item, sub % i if sub is not None else None)
                for i, item in enumerate(node.value)
            ]
            value = items if node.tag == _SEQ else self._construct(node)
        else:  # pragma: no cover - the composer makes only these three
            value = self._construct(node)
        self.active.discard(key)
        self.sizes[key] = self.total - before
        self.values[key] = value
        return value

    def _count(self, n: int) -> None:
        self.total += n
        if self.total > MAX_EXPANDED_NODES:
            raise _TooLarge("too many nodes")

    def _mapping(self, node: MappingNode, path: str | None) -> Any:
        seen: dict[Any, Node] = {}
        out: dict[Any, Any] = {}
        plain = node.tag == _MAP
        for k, v in node.value:
            sub = None
            if type(k) is ScalarNode and k.tag != MERGE_TAG:
                if k.value in seen:
                    first = _pos(seen[k.value])
                    where = join_path(path or "", k.value) if path is not None else k.value
                    self.problems.append(
                        YamlProblem(
                            self.index,
                            where,
                            f"duplicate key {k.value!r} (first at line {first[0]}, "
                            f"column {first[1]})",
                            *_pos(k),
                        )
                    )
                else:
                    seen[k.value] = k
                if path is not None:
                    sub = join_path(path, k.value)
            else:
                plain = False  # a merge or a complex key: the constructor's rules
            if type(k) is ScalarNode and k.tag == MERGE_TAG:
                self._count(1)  # the `<<` itself has no value of its own
                kv = None
            else:
                kv = self.visit(k, None)
            vv = self.visit(v, sub)
            if plain:
                out[kv] = vv
        return out if plain else self._construct(node)

    def _construct(self, node: Node) -> Any:
        return self.loader.construct_object(node, deep=True)


class _TooLarge(Exception):
    pass


def read_yaml(text: str | bytes) -> tuple[list[YamlDocument], list[YamlProblem]]:
    """Every document of text (empty ones skipped) and every problem found."""
    docs: list[YamlDocument] = []
    problems: list[YamlProblem] = []
    if len(text) > MAX_FILE_BYTES:
        problems.append(
            YamlProblem(0, "", f"file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        )
        return docs, problems
    loader = _Loader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            walk = _Walk(loader, index, problems)
            try:
                body = walk.visit(node, "")
            except _TooLarge as exc:
                problems.append(
                    YamlProblem(
                        index,
                        "",
                        f"document is too large once aliases are expanded ({exc}; the limit is "
                        f"{MAX_EXPANDED_NODES:,} nodes)",
                        *_pos(node),
                    )
                )
                index += 1
                continue
            except RecursionError:
                problems.append(
                    YamlProblem(index, "", "document is nested too deeply", *_pos(node))
                )
                index += 1
                continue
            loader.constructed_objects = {}  # the constructor's own per-document memo
            loader.recursive_objects = {}
            if not any(p.document == index for p in problems):
                if body is not None:
                    docs.append(YamlDocument(index, body, walk.marks))
            index += 1
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or str(exc)
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        problems.append(YamlProblem(index, "", f"invalid YAML: {problem}", line, col))
    except yaml.YAMLError as exc:
        problems.append(YamlProblem(index, "", f"invalid YAML: {exc}"))
    except RecursionError:
        problems.append(YamlProblem(index, "", "document is nested too deeply"))
    finally:
        loader.dispose()
    return docs, problems
