"""The safe template language: what it computes and what it refuses."""

from __future__ import annotations

import re

import pytest

from purlin_bench.spec.expr import ExprError, parse

NAMES = frozenset({"r", "R", "root", "i", "j"})


def ev(text: str, **env: int):
    return parse(text, NAMES)({"r": 0, "R": 1, "root": 0, "i": 0, "j": 0, **env})


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("1 + 2 * 3", {}, 7),
        ("(1 + 2) * 3", {}, 9),
        ("r + 1", {"r": 4}, 5),
        ("(r + 1) % R", {"r": 7, "R": 8}, 0),
        ("R // 2", {"R": 7}, 3),
        ("R / 2", {"R": 7}, 3.5),
        ("-r", {"r": 3}, -3),
        ("+r", {"r": 3}, 3),
        ("2 * i + j", {"i": 3, "j": 1}, 7),
        ("r if r < R else 0", {"r": 2, "R": 4}, 2),
    ],
)
def test_arithmetic(text, env, expected):
    assert ev(text, **env) == expected


@pytest.mark.parametrize(("r", "R", "expected"), [(0, 8, 7), (3, 8, 2), (0, 1, 0), (1, 3, 0)])
def test_mod_of_negative_follows_python(r, R, expected):
    # (r - 1) % R must never be negative: index arithmetic relies on it.
    assert ev("(r - 1) % R", r=r, R=R) == expected
    assert ev("-7 // 2") == -4


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("r == root", {"r": 2, "root": 2}, True),
        ("r != root", {"r": 2, "root": 2}, False),
        ("r < R", {"r": 1, "R": 2}, True),
        ("r <= R - 2", {"r": 1, "R": 2}, False),
        ("0 <= r < R", {"r": 1, "R": 2}, True),
        ("0 <= r < R", {"r": 2, "R": 2}, False),
        ("r > 0 and r < R - 1", {"r": 1, "R": 3}, True),
        ("r > 0 and r < R - 1", {"r": 2, "R": 3}, False),
        ("r == 0 or r == R - 1", {"r": 2, "R": 3}, True),
        ("not r == root", {"r": 1, "root": 0}, True),
        ("not (r >= 0)", {"r": 1}, False),
    ],
)
def test_comparisons_and_logic(text, env, expected):
    assert ev(text, **env) is expected


def test_min_max_abs():
    assert ev("min(r, R - 1)", r=9, R=4) == 3
    assert ev("max(r, 2, i)", r=1, i=5) == 5
    assert ev("abs(r - R)", r=1, R=4) == 3


def test_int_and_bool_conversions():
    assert parse("R / 2", NAMES).int({"R": 8}) == 4
    with pytest.raises(ExprError, match="whole number"):
        parse("R / 2", NAMES).int({"R": 7})
    with pytest.raises(ExprError, match="whole number"):
        parse("r == 0", NAMES).int({"r": 0})
    assert parse("r", NAMES).bool({"r": 0}) is False


def test_names_read_are_recorded():
    assert parse("(r + i) % R", NAMES).names == {"r", "i", "R"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("r.real", "not allowed"),
        ("().__class__", "not allowed"),
        ("__import__('os')", "not allowed"),
        ("print(r)", "not allowed"),
        ("min(r, key=abs)", "not allowed"),
        ("min()", "not allowed"),
        ("(lambda: 1)()", "not allowed"),
        ("lambda: 1", "not allowed"),
        ("'abc'", "only numbers"),
        ("True", "only numbers"),
        ("[r, R]", "not allowed"),
        ("r ** 2", "not allowed"),
        ("r << 1", "not allowed"),
        ("r in R", "not allowed"),
        ("x + 1", "unknown name 'x'"),
        ("__builtins__", "unknown name '__builtins__'"),
        ("r +", "cannot parse"),
        ("r = 1", "cannot parse"),
        ("", "empty expression"),
    ],
)
def test_rejections(text, fragment):
    with pytest.raises(ExprError, match=re.escape(fragment)):
        parse(text, NAMES)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ExprError) as info:
        parse("k + 1", frozenset({"r", "R"}))
    assert "known: R, r" in str(info.value)


def test_division_by_zero_names_expression_and_values():
    expr = parse("r // (R - R)", NAMES)
    with pytest.raises(ExprError) as info:
        expr({"r": 3, "R": 4})
    message = str(info.value)
    assert "division by zero" in message
    assert "'r // (R - R)'" in message
    assert "R=4" in message and "r=3" in message
    with pytest.raises(ExprError, match="division by zero"):
        parse("r % 0", NAMES)({"r": 1})
