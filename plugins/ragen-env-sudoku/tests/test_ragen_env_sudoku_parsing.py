"""Action parsing: each form fixes its own (number, row, col) order; anything else is rejected."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_env_sudoku.parsing import (
    ParseError,
    Placement,
    parse_in_range,
    parse_placement,
)

CASES = [
    # text, (number, row, col)
    ("place 5 at row 2 col 3", (5, 2, 3)),
    ("Place 5 at Row 2, Column 3", (5, 2, 3)),
    ("place 5 in row 2 col 3.", (5, 2, 3)),
    ("  PLACE 7 AT ROW 9 COL 1  ", (7, 9, 1)),
    ("place 5 at (2,3)", (5, 2, 3)),
    ("place 5 at ( 2 , 3 )", (5, 2, 3)),
    ("place 5 at 2,3", (5, 2, 3)),
    ("5 at 2,3", (5, 2, 3)),
    ("5 at (2, 3)", (5, 2, 3)),
    ("(2,3,5)", (5, 2, 3)),
    ("( 2 , 3 , 5 )", (5, 2, 3)),
    ("2,3,5", (5, 2, 3)),
    ("2, 3, 5!", (5, 2, 3)),
    ("12,1,1", (1, 12, 1)),  # parsed; range check comes later
]

REJECTED = [
    "",
    "   ",
    "place five at row two col three",
    "2,3",
    "2,3,5,7",
    "place 5",
    "at 2,3,5",                    # reference: 'at' anywhere flips the order; here: no form
    "2,3,5 that",                  # reference read this as (N,R,C) = (2,3,5); here rejected
    "what about 2,3,5",
    "place 5 at row 2 col 3 and place 6 at row 1 col 1",
    "place -5 at row 2 col 3",
    "place 5.0 at row 2 col 3",
    "2;3;5",
    "\u0662,\u0663,\u0665",        # Arabic-Indic digits are not ASCII digits
    "99999,1,1",                   # 5 digits: not a number we read
    "1" * 10_000 + ",1,1",
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_accepted_forms(text, expected):
    assert parse_placement(text) == Placement(*expected)


@pytest.mark.parametrize("text", REJECTED)
def test_rejected_forms(text):
    with pytest.raises(ParseError):
        parse_placement(text)


@pytest.mark.parametrize(
    ("text", "field"),
    [("place 0 at row 1 col 1", "number"), ("place 10 at row 1 col 1", "number"),
     ("1,0,3", "column"), ("10,1,3", "row"), ("place 3 at row 1 col 10", "column")],
)
def test_range_check_names_the_field(text, field):
    with pytest.raises(ParseError, match=field):
        parse_in_range(text, 9)


def test_range_check_uses_the_grid_size():
    assert parse_in_range("4,4,4", 4) == Placement(4, 4, 4)
    with pytest.raises(ParseError):
        parse_in_range("place 5 at row 1 col 1", 4)
    assert parse_in_range("16,16,16", 16) == Placement(16, 16, 16)


@pytest.mark.parametrize("value", [None, 5, b"2,3,5", ["2,3,5"]])
def test_non_strings_are_parse_errors(value):
    with pytest.raises(ParseError):
        parse_placement(value)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_parses_or_raises_parse_error_only(text):
    try:
        result = parse_placement(text)
    except ParseError:
        return
    assert all(0 <= v <= 9999 for v in result)
