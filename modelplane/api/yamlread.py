"""Read YAML spec text fast and strictly: libyaml's parser, node marks, bounded aliases.

`read_yaml` parses with PyYAML's C loader (`CSafeLoader`), walks each composed
document once to reject duplicate mapping keys (merge keys `<<` excepted), to
bound the document's size once aliases are expanded, and to build its value. The
line and column of every field path are noted from the kept node tree when first
asked for (only documents with errors need them). Problems come back as
`YamlProblem`s, never raised.

A document without anchors, merge keys, complex keys or non-default collection
tags (what specs are) takes a short walk that only builds the value, checks keys
and counts nodes; any other document, and any document where that walk finds a
problem, takes the full walk (`_Walk`), which also tracks aliases and reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from modelplane.api.paths import join_path
from modelplane.errors import ModelplaneError

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
# Scalars whose constructed value is immutable and depends only on tag and text: built
# once per (tag, text), as spec files repeat the same numbers and flags many times.
_MEMO_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "null"))
_SCALARS: dict[tuple[str, str], Any] = {}

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVED: dict[tuple[str, tuple[bool, bool]], str] = {}  # plain scalar -> its implicit tag


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """The C loader with scalar tag resolution memoised (PyYAML resolves every scalar with
    Python regexes; spec files repeat the same keys and values thousands of times)."""

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        if not self.yaml_path_resolvers:  # none on the safe loader: BaseResolver's defaults
            if kind is MappingNode:
                return _MAP
            if kind is SequenceNode:
                return _SEQ
            if not implicit[0]:
                return _STR  # quoted (or not plain): a string, no pattern applies
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


class _Text:
    """A file's text, composed again for marks when they are first asked for: only
    documents with errors need marks, and keeping every node tree alive instead would
    cost memory and the garbage collector's time."""

    def __init__(self, text: str | bytes) -> None:
        self.text = text
        self.nodes: list[Node] | None = None

    def node(self, index: int) -> Node | None:
        if self.nodes is None:
            self.nodes = []
            loader = _Loader(self.text)
            try:
                while loader.check_node():
                    self.nodes.append(loader.get_node())
            except yaml.YAMLError:  # pragma: no cover - the text composed the first time
                pass
            finally:
                loader.dispose()
        return self.nodes[index] if index < len(self.nodes) else None


@dataclass
class YamlDocument:
    index: int
    body: Any
    text: _Text | None = field(default=None, repr=False)  # the file, for marks
    known: dict[str, tuple[int, int]] | None = field(default=None, repr=False)

    @property
    def marks(self) -> dict[str, tuple[int, int]]:
        """(line, column) of every field path, worked out once, when first asked for."""
        if self.known is None:
            node = self.text.node(self.index) if self.text is not None else None
            self.known = _marks(node) if node is not None else {}
        return self.known

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
            value = node.value if node.tag == _STR else self._scalar(node, path)
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

    def _scalar(self, node: Node, path: str | None) -> Any:
        try:
            return self.loader.construct_object(node)
        except ValueError as exc:  # an integer past Python's digit limit, a date like 02-30
            self.problems.append(
                YamlProblem(self.index, path or "", _unreadable(node, exc), *_pos(node))
            )
            return None

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


def _unreadable(node: Node, exc: ValueError) -> str:
    kind = node.tag.rsplit(":", 1)[-1]
    text = node.value if len(node.value) <= 40 else node.value[:40] + "..."
    if kind == "int":
        return f"integer {text} has {len(node.value):,} characters: too long (at most 4,300 digits)"
    return f"cannot read {text!r} as a {kind}: {exc}"


class _TooLarge(ModelplaneError):
    pass


class _Unusual(ModelplaneError):
    """The short walk met something only the full walk handles (or reports)."""


def _short_walk(loader: Any, root: Node) -> Any:
    """The value of a tree of plain maps, lists and scalars (no aliases: the caller
    checked the text has no anchor or no alias), as `_Walk` would build it; raises `_Unusual` on a
    key that is not a plain string (merge, complex, int, bool...), a duplicate key, a
    tagged collection or too many nodes."""
    count = 0
    construct = loader.construct_object

    def scalar(node: Node) -> Any:
        if node.tag not in _MEMO_TAGS or len(node.value) > 64:
            return construct(node)
        key = (node.tag, node.value)
        try:
            return _SCALARS[key]
        except KeyError:
            if len(_SCALARS) > 65536:
                _SCALARS.clear()
            value = _SCALARS[key] = construct(node)
            return value

    def visit(node: Node) -> Any:
        nonlocal count
        count += 1
        kind = type(node)
        if kind is ScalarNode:
            return node.value if node.tag == _STR else scalar(node)
        if kind is MappingNode:
            if node.tag != _MAP:
                raise _Unusual
            out: dict[Any, Any] = {}
            for k, v in node.value:
                if type(k) is not ScalarNode or k.tag != _STR or k.value in out:
                    raise _Unusual  # merge, complex, non-string or duplicate key
                count += 1
                out[k.value] = visit(v)
            return out
        if kind is SequenceNode and node.tag == _SEQ:
            return [visit(item) for item in node.value]
        raise _Unusual

    try:
        value = visit(root)
    except ValueError:
        raise _Unusual from None  # an unreadable scalar: the full walk reports it
    finally:
        # `visit` refers to itself (through its closure cell) and, through `scalar`, to
        # the loader: without this, every file's loader and its C parser buffers would
        # live until a cyclic collection, which the pure verbs never run.
        visit = None  # type: ignore[assignment]
    if count > MAX_EXPANDED_NODES:
        raise _Unusual
    return value


def _marks(root: Node) -> dict[str, tuple[int, int]]:
    """Path -> (line, column), recorded as `_Walk.visit` meets paths (first one wins; a
    node met again through an alias is not descended again; merged fields have none)."""
    marks: dict[str, tuple[int, int]] = {}
    done: set[int] = set()

    def visit(node: Node, path: str | None) -> None:
        if path is not None and path not in marks:
            marks[path] = _pos(node)
        if id(node) in done:
            return
        done.add(id(node))
        if type(node) is MappingNode:
            for k, v in node.value:
                sub = None
                if type(k) is ScalarNode and k.tag == MERGE_TAG:
                    pass
                else:
                    if type(k) is ScalarNode and path is not None:
                        sub = join_path(path, k.value)
                    visit(k, None)
                visit(v, sub)
        elif type(node) is SequenceNode:
            for i, item in enumerate(node.value):
                visit(item, f"{path}[{i}]" if path is not None else None)

    visit(root, "")
    return marks


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
    source = _Text(text)
    index = 0
    # An alias (`*name`) needs an anchor (`&name`): a text without both is a tree.
    amp, star = ("&", "*") if isinstance(text, str) else (b"&", b"*")
    short = amp not in text or star not in text  # type: ignore[operator]
    try:
        while loader.check_node():
            node = loader.get_node()
            if short:
                try:
                    body = _short_walk(loader, node)
                except (_Unusual, RecursionError):
                    pass
                else:
                    loader.constructed_objects = {}
                    if body is not None:
                        docs.append(YamlDocument(index, body, source))
                    index += 1
                    continue
                loader.constructed_objects = {}
                loader.recursive_objects = {}
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
                    docs.append(YamlDocument(index, body, source, walk.marks))
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
