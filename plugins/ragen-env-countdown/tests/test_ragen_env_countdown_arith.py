"""The safe evaluator, number-use check and solver, with hand-computed values."""

from __future__ import annotations

import itertools
import time
from fractions import Fraction

import pytest
from ragen_env_countdown.arith import (
    ArithmeticParseError,
    equals_target,
    evaluate,
    plus_minus_solvable,
    solve,
    uses_numbers_exactly,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1+2*3", 7),
        ("(1+2)*3", 9),
        ("10 - 2 - 3", 5),  # left associative
        ("48 / 4 / 2", 6),
        ("8/3", Fraction(8, 3)),
        ("2 * 3 / 4", Fraction(3, 2)),
        ("-3 + 10", 7),
        ("-(2 - 5) * +4", 12),
        ("\t( ( 7 ) )\n", 7),
        ("0", 0),
    ],
)
def test_evaluate_follows_python_arithmetic(text, value):
    assert evaluate(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "2**3", "7//2", "2 ^ 3", "1.5 + 2", "abs(3)", "(1 + 2", "1 + 2)", "1 +", "* 2", "3 4", "07 + 1",
     "1e3", "x", "3 × 5", "３ + 1", "__import__('os')", "1" * 19],
)
def test_evaluate_rejects_anything_but_integer_arithmetic(text):
    with pytest.raises(ArithmeticParseError):
        evaluate(text)


def test_division_by_zero_is_reported():
    with pytest.raises(ZeroDivisionError):
        evaluate("6 / (3 - 3)")


def test_caps_make_hostile_input_cheap():
    start = time.perf_counter()
    for text in ["(" * 100 + "1" + ")" * 100, "(" * 500_000, "1+" * 10_000 + "1", "9" * 1_000_000]:
        with pytest.raises(ArithmeticParseError):
            evaluate(text)
    with pytest.raises(ArithmeticParseError):  # 18-digit literals multiplied past the magnitude cap
        evaluate(" * ".join(["999999999999999999"] * 3))
    assert time.perf_counter() - start < 5.0  # generous: a hang would take minutes
    assert evaluate("(" * 30 + "5" + ")" * 30) == 5


def test_tolerance_is_the_reference_one():
    assert equals_target(Fraction(22), 22)
    assert equals_target(Fraction(22) + Fraction(1, 10**6), 22)
    assert not equals_target(Fraction(22) + Fraction(1, 10**4), 22)


@pytest.mark.parametrize(
    ("text", "nums", "ok"),
    [
        ("3 * 5 + 7", [3, 5, 7], True),
        ("7 + 5 * 3", [3, 5, 7], True),
        ("3 * 5 + 7 + 7", [3, 5, 7], False),  # reused number
        ("3 * 5", [3, 5, 7], False),  # missing number
        ("3 * 5 + 8", [3, 5, 7], False),  # wrong number
        ("3 * 5 + 7 = 22", [3, 5, 7], False),  # the target counts as a number
        ("３ * 5 + 7", [3, 5, 7], True),  # Unicode digit runs count, as in the reference
        ("", [3], False),
        ("1" * 100_000, [1], False),
        ("1 " * 100_000, [1], False),
    ],
)
def test_number_use_check(text, nums, ok):
    assert uses_numbers_exactly(text, nums) is ok


def test_solver_finds_expressions_using_every_number():
    for nums, target in [([3, 5, 7], 22), ([4, 6, 1, 5], 24), ([44, 19, 35], 98), ([1, 5, 5, 5], 24), ([3, 3, 8, 8], 24)]:
        expr = solve(nums, target)
        assert expr is not None and uses_numbers_exactly(expr, nums) and equals_target(evaluate(expr), target)
    assert solve([1, 1, 1], 100) is None
    assert solve([2, 3], 6, ops="+-") is None
    assert solve([2, 3], 6) == "2 * 3"


def test_plus_minus_filter_matches_brute_force_signs():
    cases = [([44, 19, 35], 98), ([63, 95, 96], 64), ([3, 5, 7], 22), ([10, 4, 3, 1], 2), ([5, 5], 0)]
    for nums, target in cases:
        padded = nums + [0] * (4 - len(nums))
        brute = any(sum(s * n for s, n in zip(signs, padded)) == target for signs in itertools.product((1, -1), repeat=4))
        assert plus_minus_solvable(nums, target) is brute
    assert plus_minus_solvable([44, 19, 35], 98) and not plus_minus_solvable([3, 5, 7], 22)
