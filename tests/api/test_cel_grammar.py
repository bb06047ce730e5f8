"""The generated CEL parser tables: current with celpy's grammar, and parsing alike."""

from __future__ import annotations

import pytest

from modelplane.cel import parser_tables
from modelplane.cel.grammar import (
    build_parser,
    cel_parser,
    grammar_digest,
    grammar_text,
    tables_module,
)


def test_tables_are_current():
    """Regenerate with `make cel-tables` when this fails (celpy's grammar changed)."""
    assert parser_tables.GRAMMAR_SHA256 == grammar_digest(grammar_text())
    namespace: dict = {}
    exec(tables_module(), namespace)  # the generator runs and names the same grammar
    assert namespace["GRAMMAR_SHA256"] == parser_tables.GRAMMAR_SHA256


EXPRESSIONS = [
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("16Gi")) >= 0',
    "[1, 2, 3].all(i, i > 0) && !false || true ? -1 : 2 % 3",
    '{"k": 1.5, "j": b"x"}["k"] in [1u, 2.0] && r"raw" + """ml""" != "x"',
    "a.b.c(d, e)[0] <= f / g * h - i",
    "true == false",  # BOOL_LIT through the IDENT lexer callback
    "null",
]


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_tables_parse_like_the_grammar(expr):
    assert cel_parser().parse(expr) == build_parser().parse(expr)


@pytest.mark.parametrize("expr", ["a ==", "(", "a.b(", "1 +* 2", "@"])
def test_tables_reject_like_the_grammar(expr):
    errors = []
    for parser in (cel_parser(), build_parser()):
        with pytest.raises(Exception) as info:
            parser.parse(expr)
        errors.append(type(info.value))
    assert errors[0] is errors[1]


def test_a_changed_grammar_builds_instead(monkeypatch):
    monkeypatch.setattr(parser_tables, "GRAMMAR_SHA256", "0" * 64)
    assert cel_parser().parse("a == 1") == build_parser().parse("a == 1")
