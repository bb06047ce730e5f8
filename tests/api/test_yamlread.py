"""read_yaml builds the values itself in its one walk: they must be what yaml.safe_load gives."""

from __future__ import annotations

import pytest
import yaml

from modelplane.api.yamlread import read_yaml

SAME_AS_SAFE_LOAD = [
    (
        "scalars",
        "s: x\ni: 3\nneg: -4\nhex: 0x1f\nf: 1.5\ninf: .inf\nb: true\nB: False\nn: null\nt: ~\ne:\n",
    ),
    ("quoted stay strings", "a: '3'\nb: \"true\"\nc: 'null'\n"),
    ("timestamps", "d: 2024-01-02\nts: 2024-01-02T03:04:05Z\n"),
    ("binary and explicit tags", "b: !!binary aGVsbG8=\ns: !!str 12\ni: !!int '7'\n"),
    ("nested", "a:\n  b: [1, {c: d}, [x, y]]\n  e: {}\n  f: []\n"),
    ("anchors", "base: &b {x: 1}\nuse: *b\nl: &l [1, 2]\nm: *l\n"),
    ("merge", "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n"),
    ("merge list", "a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: [*a, *b]\n  z: 3\n"),
    ("nested merge", "a: &a {x: 1}\nb: &b {<<: *a, y: 2}\nc: {<<: *b, z: 3}\nd: *b\n"),
    ("null and bool keys", "null: a\ntrue: b\n"),
    ("int keys", "1: a\n2: b\n"),
    ("set and omap", "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\n"),
    ("top-level list", "- a\n- 1\n"),
    ("top-level scalar", "hello\n"),
    ("multi-document", "a: 1\n---\nb: 2\n---\n- c\n"),
]


@pytest.mark.parametrize(
    "text", [c[1] for c in SAME_AS_SAFE_LOAD], ids=[c[0] for c in SAME_AS_SAFE_LOAD]
)
def test_values_are_what_safe_load_gives(text):
    docs, problems = read_yaml(text)
    assert problems == []
    assert [d.body for d in docs] == [d for d in yaml.safe_load_all(text) if d is not None]


def test_aliases_share_one_value():
    docs, _ = read_yaml("a: &a {x: [1]}\nb: *a\n")
    assert docs[0].body["a"] is docs[0].body["b"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: !custom 1\n", "could not determine a constructor"),
        ("a: &a [*a]\n", "too large"),
        ("? {a: 1}\n: 1\n", "unhashable"),
        ("? [a, b]\n: 1\n", "unhashable"),
    ],
)
def test_what_safe_load_refuses_is_a_problem(text, message):
    docs, problems = read_yaml(text)
    assert docs == [] and len(problems) == 1 and message in problems[0].message


def test_marks_follow_the_fields():
    docs, _ = read_yaml("a:\n  b: [x, {c: 1}]\n")
    marks = docs[0].marks
    assert marks["a.b"] == (2, 6) and marks["a.b[1].c"] == (2, 14)


# A `&` and a `*` anywhere in the text (here in a comment) send every document through the
# full walk; without them, alias-free documents take the short walk. Both give the same
# values, marks and problems.
BOTH_WALKS = [
    *[c for c in SAME_AS_SAFE_LOAD if "&" not in c[1]],
    ("duplicate key", "a: 1\nb:\n  c: 2\n  c: 3\n"),
    ("duplicate in a list", "l:\n  - x: 1\n    x: 2\n"),
    ("int and string key alike", "1: a\n'1': b\n"),
    ("inline merge", "a:\n  <<: {x: 1}\n  y: 2\n"),
    ("tagged map", "a: !!map {x: 1}\n"),
    ("deep nesting", "a: " + "[" * 3000 + "]" * 3000 + "\n"),
    ("repeated numbers", "a: [1, 1, 2.5, 2.5, true, true, null, null, 0x10, 0x10]\n"),
]


@pytest.mark.parametrize("text", [c[1] for c in BOTH_WALKS], ids=[c[0] for c in BOTH_WALKS])
def test_short_and_full_walks_agree(text):
    short_docs, short_problems = read_yaml(text)
    full_docs, full_problems = read_yaml(text + "# & *\n")
    assert [d.body for d in short_docs] == [d.body for d in full_docs]
    assert [d.marks for d in short_docs] == [d.marks for d in full_docs]
    assert short_problems == full_problems


def test_marks_of_a_later_document_of_the_file():
    docs, _ = read_yaml("a: 1\n---\n---\nb:\n  c: [x, y]\n")
    assert docs[-1].index == 2 and docs[-1].marks["b.c[1]"] == (5, 10)
