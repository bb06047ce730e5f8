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

_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

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


class _Walk:
    """One pass over a composed document: marks, duplicate keys, expanded size."""

    def __init__(self, index: int, problems: list[YamlProblem]) -> None:
        self.index = index
        self.problems = problems
        self.marks: dict[str, tuple[int, int]] = {}
        self.sizes: dict[int, int] = {}
        self.active: set[int] = set()

    def size(self, node: Node, path: str | None) -> int:
        """Expanded node count below node; records marks for paths seen the first time."""
        key = id(node)
        if path is not None:
            self.marks.setdefault(path, _pos(node))
        known = self.sizes.get(key)
        if known is not None:
            return known
        if key in self.active:
            raise _TooLarge("a recursive alias")
        self.active.add(key)
        total = 1
        if isinstance(node, MappingNode):
            seen: dict[Any, Node] = {}
            for k, v in node.value:
                sub = None
                if isinstance(k, ScalarNode) and k.tag != MERGE_TAG:
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
                total += self.size(k, None) + self.size(v, sub)
                if total > MAX_EXPANDED_NODES:
                    raise _TooLarge("too many nodes")
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                total += self.size(item, f"{path}[{i}]" if path is not None else None)
                if total > MAX_EXPANDED_NODES:
                    raise _TooLarge("too many nodes")
        self.active.discard(key)
        self.sizes[key] = total
        return total


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
            walk = _Walk(index, problems)
            try:
                walk.size(node, "")
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
            if not any(p.document == index for p in problems):
                body = loader.construct_document(node)
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
