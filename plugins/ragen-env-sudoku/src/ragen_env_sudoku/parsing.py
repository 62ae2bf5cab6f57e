"""Reading one placement ("put digit N into row R, column C") out of an action string.

Accepted forms (case-insensitive, surrounding whitespace and one trailing ``.``/``!`` ignored;
every number 1-based):

=============================  =========  ==========================
form                           order      example
=============================  =========  ==========================
``place N at row R col C``     N, R, C    ``place 5 at row 2 col 3`` (also ``column``, a comma)
``place N at (R,C)``           N, R, C    ``place 5 at (2, 3)``
``place N at R,C``             N, R, C    ``place 5 at 2,3``
``N at R,C``                   N, R, C    ``5 at 2,3`` / ``5 at (2,3)``
``(R,C,N)``                    R, C, N    ``(2,3,5)``
``R,C,N``                      R, C, N    ``2,3,5``
=============================  =========  ==========================

The reference reads the triple as (N, R, C) whenever the text contains ``place`` or the
substring ``at`` *anywhere* (so ``"2,3,5 that"`` flips the order) and accepts the pattern
anywhere inside a longer text (spec 17.5). Here each form fixes its own order and the *whole*
action must be one form, so a stray word never reorders numbers. Numbers are ASCII digits only
and at most 4 long: Unicode digits are rejected and ``int()`` never sees a huge string.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_NUM = r"([0-9]{1,4})"
_SEP = r"\s*,\s*"
_TAIL = r"\s*[.!]?"

# (compiled pattern, order) -- order names which group is the number, the row and the column.
_FORMS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern + _TAIL, re.ASCII | re.IGNORECASE), order)
    for pattern, order in (
        (rf"place\s+{_NUM}\s+(?:at|in)\s+row\s*{_NUM}\s*,?\s*(?:and\s+)?col(?:umn)?\s*{_NUM}", "nrc"),
        (rf"place\s+{_NUM}\s+at\s+\(\s*{_NUM}{_SEP}{_NUM}\s*\)", "nrc"),
        (rf"place\s+{_NUM}\s+at\s+{_NUM}{_SEP}{_NUM}", "nrc"),
        (rf"{_NUM}\s+at\s+\(\s*{_NUM}{_SEP}{_NUM}\s*\)", "nrc"),
        (rf"{_NUM}\s+at\s+{_NUM}{_SEP}{_NUM}", "nrc"),
        (rf"\(\s*{_NUM}{_SEP}{_NUM}{_SEP}{_NUM}\s*\)", "rcn"),
        (rf"{_NUM}{_SEP}{_NUM}{_SEP}{_NUM}", "rcn"),
    )
)

#: Longest action text we try to parse; anything longer is rejected without running a regex.
MAX_ACTION_CHARS = 200


class Placement(NamedTuple):
    """A parsed placement, 1-based as written (not yet range-checked)."""

    number: int
    row: int
    col: int


class ParseError(ValueError):
    """The action text is not one of the accepted placement forms, or is out of range."""


def parse_placement(action: object) -> Placement:
    """Parse ``action`` into a :class:`Placement` (1-based, not range-checked).

    Raises:
        ParseError: ``action`` is not a string or matches none of the forms.
    """
    if not isinstance(action, str):
        raise ParseError(f"expected text, got {type(action).__name__}")
    text = action.strip()
    if not text:
        raise ParseError("empty action")
    if len(text) > MAX_ACTION_CHARS:
        raise ParseError(f"action longer than {MAX_ACTION_CHARS} characters")
    for pattern, order in _FORMS:
        match = pattern.fullmatch(text)
        if match:
            values = dict(zip(order, (int(g) for g in match.groups())))
            return Placement(values["n"], values["r"], values["c"])
    raise ParseError(
        "could not read a placement; write it as 'place N at row R col C' or 'R,C,N'"
    )


def parse_in_range(action: object, grid_size: int) -> Placement:
    """Parse ``action`` and check number, row and column are all in ``1..grid_size``.

    Raises:
        ParseError: unparsable, or a value outside ``1..grid_size`` (the message says which).
    """
    placement = parse_placement(action)
    for label, value in (("number", placement.number), ("row", placement.row), ("column", placement.col)):
        if not 1 <= value <= grid_size:
            raise ParseError(f"{label} {value} is outside 1..{grid_size}")
    return placement
