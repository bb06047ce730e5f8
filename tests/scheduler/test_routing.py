"""ModelService weight algorithm (api.md "Weights")."""

from __future__ import annotations

import pytest

from modelplane.routing import MAX_WEIGHT, WeightedGroup, endpoint_weights

CASES = [
    ("api-md-example", [(80, ["a", "b", "c"]), (20, ["d"])], {"a": 27, "b": 27, "c": 26, "d": 20}),
    ("single", [(5, ["a"])], {"a": 1}),
    ("equal-default", [(1, ["a", "b"])], {"a": 1, "b": 1}),
    (
        "scale-up-so-each-gets-one",
        [(1, ["a", "b", "c"]), (1, ["d"])],
        {"a": 1, "b": 1, "c": 1, "d": 3},
    ),
    ("gcd-divides", [(50, ["a"]), (50, ["b"])], {"a": 1, "b": 1}),
    ("empty-entry-dropped", [(70, []), (30, ["a"])], {"a": 1}),
    ("first-entry-owns-shared", [(10, ["a", "b"]), (10, ["b", "c"])], {"a": 1, "b": 1, "c": 2}),
    ("nothing", [], {}),
]


@pytest.mark.parametrize(("groups", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_weights(groups, expected):
    result = endpoint_weights([WeightedGroup(w, eps) for w, eps in groups])
    assert result == expected
    assert list(result) == list(expected)


def test_cap_at_one_million_keeps_every_endpoint_positive():
    groups = [WeightedGroup(1_000_000, ["big"]), WeightedGroup(1, [f"s{i}" for i in range(3)])]
    result = endpoint_weights(groups)
    assert max(result.values()) == MAX_WEIGHT
    assert min(result.values()) >= 1
    assert result["big"] > result["s0"]
