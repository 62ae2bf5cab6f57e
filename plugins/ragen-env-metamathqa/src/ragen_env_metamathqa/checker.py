"""Answer checkers: the reference's exact match and a math-aware one (the default).

``exact_match`` is the reference rule (spec 13.5): lower-case both strings, delete all
whitespace, compare. ``math_equal`` reads the final answer out of a reply and decides whether it
is the same number or expression as the label:

1. **Exact first.** Anything the reference rule accepts is accepted, so the math checker never
   marks wrong what the exact rule marks right.
2. **Extract** (:func:`extract_answer`): the last ``\\boxed{...}`` / ``\\fbox{...}`` (braces
   matched; a box inside a box is part of its answer), else the text after the last "answer is" /
   "answer:", else the whole reply. Boxes that state different answers (``\\boxed{30}`` ...
   ``\\boxed{31}``) must each match: a hedge is wrong (:func:`stated_answers`). An equation keeps
   its right-hand side when the label has none (``x = 5``).
3. **Normalise** both sides (:func:`normalize`): decimal digits of any script and full-width
   forms, Unicode minus signs, ``×``/``÷``/``π``/``√``/superscripts/vulgar fractions, ``$``,
   ``\\left``/``\\right``, spacing commands, ``\\text{...}`` wrappers, ``\\dfrac``/``\\tfrac``,
   degree signs (``degrees`` after a number that ends the answer, dropped elsewhere), ``\\%``.
4. **Plain numbers** (:func:`fast_values`) in exact rational arithmetic: integers, decimals,
   signs, thousands separators (``1,500``), ``a/b``, ``\\frac{a}{b}``, mixed numbers (``1 1/2``),
   scientific notation, a trailing percent (``25%`` reads as 25 and as 0.25; ``25 percent`` too),
   number words that change the value (``2 thousand``, ``5 dozen``, ``18 squared``, ``2 thirds``)
   and trailing unit words, with a power (``18 dollars``, ``1.5 million dollars``, ``18 m^2``).
   A word of two or more letters after a number is a unit or a counted noun and is dropped
   (``5 apples`` is 5); a single letter is dropped only when it is a unit symbol in its own case
   (``m g s h l L V W J N K C F``): any other letter is a variable, so ``4 b`` is the product
   4b and matches neither ``4`` nor ``4 c``. Two lower-case letters that end the answer are two
   variables too (``7 ab`` is 7ab), unless a unit, an abbreviation or a short word
   (``5 ft``, ``7 am``, ``5 of``; :data:`_TWO_LETTER_WORDS`); ``A`` is a variable, not amperes
   (an area, a matrix, a point or an option far more often than a current). Degree marks
   (``°``, ``^\\circ``, ``^{\\circ}``, ``\\degree``, ``℃``) after a number that ends the answer are
   spelt ``degrees`` (step 3), so every spelling is one unit. When both sides state a common
   unit (:func:`unit_of`) it must be the same quantity: ``4 s`` is not ``4 h``, ``15 degrees`` is not ``15 cm``, and a temperature
   scale counts (``15 °F`` is not ``15^\\circ C``; a degree without a scale takes either).
   Two stated units of one scale are converted, exactly (``Fraction``): ``1 hour`` is
   ``60 minutes``, ``2 km`` is ``2000 m``, ``1 m^2`` is ``10000 cm^2``; a decimal is rounded in its own unit (``0.33 hours`` is ``20 minutes``), only
   for a value that unit cannot write exactly and to two significant digits or more (``0.33 km`` is
   not ``333 m``, ``0.00 hours`` not ``10 seconds``); metric and imperial units
   do not convert into each other, nor the clock into the calendar (:data:`_UNIT_SIZES`), and
   temperatures are never converted. A side without a unit is never converted:
   ``3 hours and 20 minutes`` is not ``200`` (the label does not say its unit, so a conversion
   would be a guess, and each reading of an answer in other units (200, 3 1/3, 12000) would be
   one more label it is paid for); for the same reason degrees are not converted to radians
   (a radian is never written as a unit, so ``\\frac{\\pi}{4}`` states none and ``45^\\circ`` is
   not it). A comma between digits is a thousands separator only before groups of three digits
   (``1,500``); ``1,5`` is not read as a decimal comma, since it is also the pair 1, 5 (MATH
   labels list their answers so) and ``1,500`` would then be 1.5 or 1500. Equal values match.
   A decimal with ``d >= 2`` decimals also matches a value no decimal writes exactly (a fraction
   such as 1/3, or in step 5 an irrational) that rounds to it at ``d`` decimals, with two
   significant digits or more: ``0.33`` is 1/3 and ``1.41`` is sqrt(2), but ``0.3`` is not 1/3,
   ``0.13`` is not 1/8 (``0.125`` writes it) and ``0.00`` is not 1/300. Two decimals, or two exact
   values, must be equal. Step 5 applies the same rule to a label written as an expression: one
   of rationals is computed exactly (``0.13`` is not ``2^{-3}``), and ``0.00`` is not ``\\frac{\\sqrt{2}}{1000}``.
5. **Expressions** (:func:`expression_value`): tuples and intervals compare item by item
   (brackets must agree; ``x \\in [2, 5]`` is the interval ``[2, 5]``); a sign choice ``\\pm 3``
   matches the bare pair ``3, -3`` in either order, and the other way round; anything else
   (``2\\sqrt{2}``, ``\\frac{\\pi}{4}``, ``x^2+1``) is parsed and evaluated at three fixed
   points of its free symbols, to 128 bits, and matches when the symbols are the same and every value agrees within ``1e-9`` relative (distinct
   closed-form answers are never that close; 128-bit evaluation errs by ~1e-38) or ``1e-32``
   absolute (expressions that cancel to 0, such as ``\\sqrt{2}^2-2``, leave noise of that size).
   Values that differ decide "not equal". Values that agree are then checked *exactly* by
   sympy (:mod:`ragen_env_metamathqa.symbolic`): the parser also records each expression as a
   tree of whitelisted nodes, and a sympy worker process decides whether the two trees are the
   same expression (``1+10^{-12}`` is not 1; an identity must hold for every real value of its
   symbols, not at three points). It is skipped for two rationals (already exact) and for the
   rounding rule below; when sympy cannot decide within ``symbolic_time_limit_s`` (the worker
   is then killed and restarted), the numeric verdict stands.
6. **Prose fallback.** When the extracted text cannot be read at all ("I think it is 18"), the
   last stand-alone number in it is compared instead. Text that *can* be read and differs is
   wrong: ``2x+3`` never falls back to ``3``, and neither does an operation written in words
   after a number (``18 plus one`` is not 18), nor prose that hedges or negates (``31 or 30``,
   ``not 30``), puts a relation, bound or sign choice right before the number (``x \\neq 30``, ``at
   least 30``, ``\\pm 30``, ``about 30``; an approximation of a decimal is read) or joins it to another
   number as an alternative (``29 and 30``, ``29; 30``, ``x = 29, x = 30``), ends a compound
   quantity (``3 hours and 20 minutes``, ``5 feet 3 inches``) or is followed by a variable
   (``so it is 4 b``, ``so it is 7 ab``): a policy must not be paid for naming two answers, or for an answer that
   is not one value. Numbers earlier in a
   sentence do not matter (``In 5 years, Tom will be 18``). A label of several boxes (a MATH
   solution with two answers) wants all of them, in any order.

Why this shape: a step must not hang on a hostile reply, yet a thread cannot be killed, a
subprocess per check costs milliseconds (the goal is 5,000 checks/s), and ``signal``
alarms only work in the main thread (pools step envs in threads). So the cost is bounded by
construction, with a clock only as a backstop:

* Typical answers are plain numbers and never leave step 4: a few regular expressions and a
  ``Fraction`` comparison (20-30 µs for a whole check of a typical reply), with literals
  capped at :data:`MAX_DIGITS` digits so ``int()`` never sees a huge digit string.
* Expressions are evaluated while they are parsed, by our own recursive-descent parser over a
  whitelist (numbers, one-letter symbols, ``+ - * / ^``, brackets, ``|x|``, ``\\frac``,
  ``\\sqrt``, ``\\pi``, a dozen functions), in mpmath -- sympy's own arbitrary-precision
  engine -- with a private context per thread (``mpmath.mp`` is global). We first built
  unevaluated sympy trees (``evaluate=False``) and called ``evalf``, but ``evalf`` takes time
  exponential in the nesting of unevaluated products (measured: ``1/1/.../1`` with 18 slashes
  took 15 s), and evaluating sympy trees eagerly may factor integers and expand powers;
  ``sympy.parse_expr`` also runs Python ``eval`` on the transformed text. Evaluating each node
  once is linear in the input, and no text is ever ``eval``-ed. sympy then only sees trees
  built by this parser, in a process that a deadline can kill (step 5), and only for answers
  whose values already agree with the label.
* Hard limits keep each node cheap: at most :data:`MAX_EXPR_CHARS` characters,
  :data:`MAX_NODES` nodes, :data:`MAX_DEPTH` nesting levels, 40-digit literals, exponents at
  most :data:`MAX_EXPONENT` in magnitude and function arguments at most 1e6 at every point (no
  power towers, no ``sin(10^{4000})`` argument reduction). mpmath numbers carry exponents of any
  size at a fixed mantissa, so ``(10^{40})^{1000}`` costs the same as ``2^3``.
* A cooperative deadline (``time_limit_s``, checked at every parser step) is the backstop:
  when it passes, the answer is judged wrong. The slowest hostile reply measured (a megabyte of
  unclosed ``\\boxed{``) costs about 50 ms, spent scanning the text.

Parsed labels and answers are cached per normalised string (a group's episodes share labels).
"""

from __future__ import annotations

import functools
import re
import threading
import time
import unicodedata
import zlib
from collections import deque
from collections.abc import Callable
from fractions import Fraction
from typing import Any, NamedTuple

from ragen_env_metamathqa.symbolic import Tree, is_plain_number, worker

#: Longest extracted answer that is examined at all (a label is a few dozen characters).
MAX_ANSWER_CHARS = 1_000
#: Longest normalised expression the expression parser reads.
MAX_EXPR_CHARS = 200
#: Longest number literal (digits) read by either path.
MAX_DIGITS = 40
#: Most operations one expression may contain.
MAX_NODES = 300
#: Deepest bracket / sub-expression nesting.
MAX_DEPTH = 40
#: Largest exponent magnitude, checked numerically at every evaluation point.
MAX_EXPONENT = 1_000
#: Largest argument magnitude of sin, cos, exp, log, ...
MAX_FUNCTION_ARG = 1e6
#: Default wall-clock budget of one check, in seconds (a backstop; see the module docstring).
DEFAULT_TIME_LIMIT_S = 0.25
#: Default wall-clock limit of the exact sympy check of one pair (``symbolic.py``); past it the
#: numeric verdict stands.
DEFAULT_SYMBOLIC_TIME_LIMIT_S = 1.0
#: Evaluation precision and tolerances of the expression path (see the module docstring, step 5).
PRECISION_BITS = 128
REL_TOL = 1e-9
ABS_TOL = 1e-32


# ------------------------------------------------------------------ the reference rule
def exact_match(answer: str, label: str) -> bool:
    """The reference rule: equal after lower-casing and deleting all whitespace."""
    return _squash(answer) == _squash(label)


def _squash(text: str) -> str:
    return "".join(text.lower().split())


# ------------------------------------------------------------------ extraction
_BOX = re.compile(r"\\(?:boxed|fbox)\b")
_MARKER = re.compile(r"answer\s*(?:is\s*:?|:)", re.IGNORECASE)


def _braced(text: str, start: int) -> str | None:
    """Content of the ``{...}`` group opening at ``text[start]``; None if it does not close
    within :data:`MAX_ANSWER_CHARS` characters (unbalanced, or too long to be an answer)."""
    depth = 0
    for i in range(start, min(len(text), start + MAX_ANSWER_CHARS + 2)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def _boxes(text: str) -> list[tuple[int, int, str]]:
    r"""``(start, end, content)`` of the well-formed ``\boxed{...}`` (or ``\boxed x``) among the
    last eight boxes, in order of their start.

    Only the last eight boxes are tried, each scanned for at most MAX_ANSWER_CHARS characters,
    so a reply of a million unclosed boxes costs linear time.
    """
    found: list[tuple[int, int, str]] = []
    for match in deque(_BOX.finditer(text), maxlen=8):  # (a list of every match cost 2x on 100k boxes)
        pos = match.end()
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if pos < len(text) and text[pos] == "{":
            group = _braced(text, pos)
            if group is not None:
                found.append((match.start(), pos + len(group) + 2, group))
        elif pos < len(text):
            word = re.match(r"[^\s$]+", text[pos:pos + MAX_ANSWER_CHARS])
            if word:
                found.append((match.start(), pos + word.end(), word.group(0)))
    return found


def _outer_boxes(text: str) -> list[str]:
    r"""Contents of the boxes of ``text`` that are not inside another, in order, without the
    inner boxes' commands (``\boxed{\boxed{5} or 6}`` states "{5} or 6", not 5)."""
    boxes = _boxes(text) if "box" in text else []
    return [content.replace("\\boxed", "").replace("\\fbox", "")  # the inner boxes' own words go
            for start, end, content in boxes if not any(s < start and end <= e for s, e, _ in boxes)]


def _tidy(found: str) -> str:
    return found.strip().strip("$").strip().rstrip(".;,!? ").strip()


def extract_answer(reply: str) -> str | None:
    r"""The final-answer text of ``reply``: last ``\boxed{}``, else after "answer is", else all.

    Returns None when nothing is left (empty reply, empty box).
    """
    if not isinstance(reply, str):
        return None
    return _answer_text(reply, _outer_boxes(reply))


def _answer_text(reply: str, boxes: list[str]) -> str | None:
    """:func:`extract_answer` of ``reply`` given its :func:`_outer_boxes` ``boxes``."""
    if boxes:
        found = boxes[-1]
    else:
        markers = list(_MARKER.finditer(reply[-20_000:]))
        if markers:
            tail = reply[-20_000:][markers[-1].end():]
            found = tail.strip().split("\n", 1)[0]
        else:
            found = reply
    return _tidy(found) or None


def stated_answers(reply: str) -> list[str]:
    r"""Every final answer ``reply`` states: the distinct contents of its boxes when it has
    several (``\boxed{30}`` then ``\boxed{31}``: a hedge, each is checked), else
    :func:`extract_answer`'s one; empty when nothing is left. Boxes nested in a box are read
    with it (``\boxed{\boxed{5}}`` states 5 once)."""
    if not isinstance(reply, str):
        return []
    boxes = _outer_boxes(reply)  # once: a reply of 100k boxes costs ~30 ms a scan
    distinct = list(dict.fromkeys(t for t in map(_tidy, boxes) if t))
    if len(distinct) > 1:
        return distinct
    found = _answer_text(reply, boxes)
    return [found] if found is not None else []


# ------------------------------------------------------------------ normalisation
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUPER_RUN = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_VULGAR = "¼½¾⅐⅑⅒⅓⅔⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞"
_UNICODE_OPS = {
    "−": "-", "–": "-", "—": "-", "‐": "-", "‑": "-", "﹣": "-",
    "×": "*", "⋅": "*", "·": "*", "∙": "*", "∗": "*", "÷": "/", "⁄": "/", "∕": "/",
    "π": "\\pi ", "∞": "\\infty ", "٫": ".", "٬": ",", "٪": "%", "°": "^\\circ ", "℃": "^\\circ C", "℉": "^\\circ F",
}
_LATEX_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}")
_LATEX_DROP = re.compile(
    r"\\left\b|\\right\b|\\displaystyle\b|\\[,;:! ]|\\q?quad\b|\^\s*\{\s*\\circ\s*\}|\^\s*\\circ\b|\\circ\b|\\degree\b|~"
)
#: A degree mark after a number that ends the answer (or an item of a tuple), with an optional scale
#: letter: spelt ``degrees`` so that every spelling of a degree is one unit (``15°C``, ``15^{\\circ} C``,
#: ``15 degrees C``). A degree mark elsewhere (``(2x+10)^\\circ``) is dropped.
_RE_DEGREE_MARK = re.compile(r"(\d)\s*(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![a-zA-Z])|\\circ(?![a-zA-Z])|\\degree(?![a-zA-Z]))"
                             r"\s*([CFK](?![a-zA-Z]))?(?=\s*(?:[a-zA-Z]|[,;)\]]|$))")
_LATEX_SUBS = (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"), ("\\%", "%"), ("\\$", ""),
               ("$", ""), ("\\(", ""), ("\\)", ""), ("\\[", ""), ("\\]", ""), ("\\{", "{"), ("\\}", "}"),
               ("\\cdot", "*"), ("\\times", "*"), ("\\div", "/"), ("\\ast", "*"))


def _unicode_to_ascii(text: str) -> str:
    if text.isascii():
        return text
    text = _SUPER_RUN.sub(lambda m: "^{" + m.group(0).translate(_SUPERSCRIPTS) + "}", text)
    text = re.sub(f"(\\d)([{_VULGAR}])", r"\1 \2", text)  # 1½ is a mixed number, not 11/2
    text = re.sub(r"√\s*(\d+(?:\.\d+)?)", r"\\sqrt{\1}", text)
    text = text.replace("√", "\\sqrt")
    for old, new in _UNICODE_OPS.items():
        text = text.replace(old, new)
    text = unicodedata.normalize("NFKC", text).replace("⁄", "/")
    if not text.isascii():  # decimal digits of other scripts (Arabic-Indic, Devanagari, ...)
        text = "".join(str(unicodedata.decimal(c)) if c.isdecimal() else c for c in text)
    return text


def normalize(text: str) -> str:
    """Canonical ASCII spelling of an answer (see the module docstring, step 3)."""
    text = _unicode_to_ascii(text)
    if "\\" in text or "$" in text or "~" in text:
        for _ in range(3):  # nested wrappers: \text{\textbf{5}}
            text = _LATEX_WRAPPERS.sub(r"\1", text)
        text = _RE_DEGREE_MARK.sub(lambda m: f"{m.group(1)} degrees {m.group(2) or ''}", text)
        text = _LATEX_DROP.sub(" ", text)
        for old, new in _LATEX_SUBS:
            text = text.replace(old, new)
    text = " ".join(text.split())
    return text.strip().rstrip(".;,!?").strip()


# ------------------------------------------------------------------ fast path: plain numbers
class _Num(NamedTuple):
    value: Fraction
    decimals: int | None
    """Digits after the point when written as a decimal, else None (an exact value)."""


_INT = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_DEC = rf"(?:{_INT}(?:\.\d*)?|\.\d+)"
_RE_NUMBER = re.compile(rf"([+-]?)\s*({_DEC})(?:[eE]([+-]?\d{{1,3}}))?")
_RE_SLASH = re.compile(rf"([+-]?)\s*({_DEC})\s*/\s*([+-]?)\s*({_DEC})")
_RE_FRAC = re.compile(rf"([+-]?)\s*\\frac\s*\{{\s*([+-]?)\s*({_DEC})\s*\}}\s*\{{\s*([+-]?)\s*({_DEC})\s*\}}")
_RE_FRAC_DIGITS = re.compile(r"([+-]?)\s*\\frac\s*()(\d)()(\d)")  # \frac12 is 1/2 in LaTeX
_RE_MIXED = re.compile(r"([+-]?)\s*(\d+)\s+(\d+)\s*/\s*(\d+)")
_RE_MIXED_FRAC = re.compile(r"([+-]?)\s*(\d+)\s*\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_RE_UNITS = re.compile(r"(.*?[\d%}])\s+([a-zA-Z][a-zA-Z.\s/]*(?:\^\s*\{?\s*[23]\s*\}?)?)")
#: Common units by their spellings (plural, spelt out, abbreviated): two answers that state
#: different ones of these state different values (``4 s`` is not ``4 h``); other words (``apples``,
#: ``mph``) are not compared.
_UNIT_NAMES = {canon: canon for canon in ("m", "nm", "mm", "cm", "dm", "km", "in", "ft", "yd", "mi", "ns", "ms", "s", "min", "h", "day",
                                           "week", "month", "year", "g", "mg", "kg", "lb", "oz", "l", "ml", "cl", "dl")}
for _canon, _spellings in {
    "m": "meter meters metre metres", "nm": "nanometer nanometers nanometre nanometres",
    "dm": "decimeter decimeters decimetre decimetres", "cm": "centimeter centimeters centimetre centimetres",
    "mm": "millimeter millimeters millimetre millimetres",
    "km": "kilometer kilometers kilometre kilometres", "in": "inch inches", "ft": "foot feet", "yd": "yard yards", "mi": "mile miles",
    "ns": "nsec nsecs nanosecond nanoseconds", "ms": "msec msecs millisecond milliseconds",
    "s": "sec secs second seconds", "min": "mins minute minutes", "h": "hr hrs hour hours", "day": "days", "week": "weeks wk wks",
    "month": "months mo mos", "year": "years yr yrs", "g": "gram grams", "mg": "milligram milligrams mgs",
    "kg": "kilogram kilograms kgs", "lb": "lbs pound pounds", "oz": "ounce ounces", "l": "liter liters litre litres",
    "ml": "milliliter milliliters millilitre millilitres cc", "cl": "centiliter centiliters centilitre centilitres",
    "dl": "deciliter deciliters decilitre decilitres",
}.items():
    _UNIT_NAMES.update(dict.fromkeys(_spellings.split(), _canon))
#: Each common unit's scale and size: two stated units of one scale convert exactly (``1 hour`` is
#: ``60 minutes``, ``2 km`` is ``2000 m``). Scales do not convert into each other: metric and imperial
#: units (exact by definition, but a reply in the other system is a rounded decimal the question did
#: not ask for), and the clock and the calendar (a year is 365 or 366 days, a month 28 to 31).
_UNIT_SIZES: dict[str, tuple[str, Fraction]] = {
    "nm": ("metre", Fraction(1, 10**9)), "mm": ("metre", Fraction(1, 1000)), "cm": ("metre", Fraction(1, 100)),
    "dm": ("metre", Fraction(1, 10)), "m": ("metre", Fraction(1)), "km": ("metre", Fraction(1000)),
    "in": ("inch", Fraction(1)), "ft": ("inch", Fraction(12)), "yd": ("inch", Fraction(36)), "mi": ("inch", Fraction(63_360)),
    "ns": ("second", Fraction(1, 10**9)), "ms": ("second", Fraction(1, 1000)),
    "s": ("second", Fraction(1)), "min": ("second", Fraction(60)), "h": ("second", Fraction(3_600)), "day": ("second", Fraction(86_400)),
    "week": ("second", Fraction(604_800)), "month": ("month", Fraction(1)), "year": ("month", Fraction(12)),
    "mg": ("gram", Fraction(1, 1000)), "g": ("gram", Fraction(1)), "kg": ("gram", Fraction(1000)),
    "oz": ("ounce", Fraction(1)), "lb": ("ounce", Fraction(16)), "ml": ("litre", Fraction(1, 1000)), "cl": ("litre", Fraction(1, 100)),
    "dl": ("litre", Fraction(1, 10)), "l": ("litre", Fraction(1)),
}
#: Lengths, whose power is an area or a volume (``18 m^2``); a time's power only ends a compound
#: unit (``9.8 m/s^2``). Anything else with a power is a variable (``4 a^2``) or a number word.
_LENGTHS = frozenset(word for word, canon in _UNIT_NAMES.items() if _UNIT_SIZES[canon][0] in ("metre", "inch")) | {"unit", "units"}
_TIMES = frozenset(word for word, canon in _UNIT_NAMES.items() if canon in ("s", "min", "h"))
#: A unit's power (``m^2``, ``cm^{3}``): part of the unit, not of the number.
_RE_UNIT_POWER = re.compile(r"\^\s*\{?\s*[23]\s*\}?$")
#: Words that are mathematics, not units, after a number (one letter is covered by :data:`_UNIT_SYMBOLS`).
_NOT_UNITS = frozenset({"pi", "sqrt", "and", "or", "to", "by", "mod"})
#: The one-letter unit symbols, in their own case (SI symbols are case-sensitive). Any other letter after
#: a number is a variable: ``4 b`` is the product 4b, never 4 of a unit b (it was dropped, so ``4 b``
#: matched ``4`` and ``4 c``). ``C``, ``F`` and ``K`` are temperature scales (below).
_UNIT_SYMBOLS = frozenset({"m", "g", "s", "h", "l", "L", "V", "W", "J", "N", "K", "C", "F"})
#: Two lower-case letters that end an answer after a number are two variables (``7 ab`` is the product
#: 7ab; it was read as 7 of a unit "ab"), unless they are one of these: a common unit, an abbreviation
#: or a short word. A word with a capital is a unit symbol (``4 Hz``, ``2 kW``, ``5 MB``).
_TWO_LETTER_WORDS = frozenset(word for word in _UNIT_NAMES if len(word) == 2) | frozenset(
    "am pm pt qt gb mb kb tb hp kw hz ea pc ct cc ms ns nm dm cl dl ha bp px"
    " st nd rd th ok yo is as at be by do go he if it me my no of on or so to up us we".split())
#: The degree unit (``°``, ``^\\circ``, ``\\degree`` are spelt ``degrees`` by :func:`normalize`), and the
#: temperature scales that may follow it in any case (``15 degrees c``). A degree without a scale
#: is either scale; two different scales are different temperatures (15 °C is 59 °F).
_DEGREE_WORDS = frozenset({"degree", "degrees", "deg", "degs"})
_SCALE_NAMES = {"c": "°C", "celsius": "°C", "centigrade": "°C", "f": "°F", "fahrenheit": "°F", "k": "K", "kelvin": "K",
                "kelvins": "K"}
#: Number words right after a number that change its value (``2 thousand``, ``5 dozen``, ``18 squared``,
#: ``2 thirds``): applied, not dropped as a unit ("2 thousand" was read as 2). A unit may follow.
_SCALES = {"hundred": Fraction(100), "thousand": Fraction(10**3), "million": Fraction(10**6), "billion": Fraction(10**9),
           "trillion": Fraction(10**12), "dozen": Fraction(12)}
_POWERS = {"squared": 2, "cubed": 3}
_PARTS = {word: n for n, words in enumerate((("half", "halves"), ("third", "thirds"), ("quarter", "quarters", "fourth", "fourths"),
                                             ("fifth", "fifths"), ("sixth", "sixths"), ("seventh", "sevenths"), ("eighth", "eighths"),
                                             ("ninth", "ninths"), ("tenth", "tenths")), start=2) for word in words}
#: Operations written as words after a number: an answer we cannot read, so wrong (no fall-back to
#: its last number: "18 plus one" is not 18).
#: Prose whose last number is not its answer: alternatives and negations ("31 or 30", "not 30": a
#: policy that hedges must not be paid). No fall-back for these. (A trailing "!" stays an
#: exclamation: "The answer is 30!" is 30.)
_RE_HEDGE = re.compile(r"\b(?:or|nor|not|either|neither|never|except|isn't)\b", re.IGNORECASE)
#: What, written right before the last number of prose, makes it no single value: a relation or a
#: bound (``x \\neq 50``, ``at least 50``), a sign choice (``\\pm 50``), a hedge (``about 50``; an
#: approximation word before a decimal states a rounded value and is read).
_RE_BOUND_BEFORE = re.compile(
    r"(?:\\(?:neq|ne|geq|leq|ge|le|gt|lt|pm|mp)(?![a-zA-Z])|[<>≠≤≥±∓⩽⩾]"
    r"|\b(?:at least|at most|up to|no more than|no less than|less than|more than|greater than|fewer than|over|under|above|below|"
    r"maybe|perhaps|probably))\s*\$?\s*$", re.IGNORECASE)
_RE_APPROX_BEFORE = re.compile(r"(?:\\(?:approx|sim|simeq)(?![a-zA-Z])|[≈~]|\b(?:about|around|approximately|approx\.?|roughly|"
                               r"nearly|almost|circa))\s*\$?\s*$", re.IGNORECASE)
_ARROWS = re.compile(r"=>|->|⇒|→|⟹")
#: The whole text between two numbers that joins them as alternatives or a list (``49 and 50``,
#: ``49; 50``, ``49 \\lor 50``, ``x = 49, x = 50``, a hedge word of another language).
_JOINS = frozenset({"", ",", ";", "/", "&", "and", "or", "nor", "and/or", "ormaybe", "vs", "vs.", "versus", "insteadof", "otherwise",
                    "else", "to", "-", "\\lor", "\\vee", "\\cup", "\\land", "\\wedge", "oder", "und", "ou", "et", "o", "y", "e",
                    "или", "и", "或", "和", "או"})
_ASSIGNED = re.compile(r"[a-z]\s*=", re.IGNORECASE)
#: Units whose number, joined to the next one, makes a compound quantity (``3 hours and 20 minutes``,
#: ``2 dollars and 50 cents``): the common units and a few more of time and money. Any other word
#: between two numbers is prose (``Step 3 gives 45``, ``Adding 20 gives 45``).
_MEASURES = (frozenset(_UNIT_NAMES) - {"in"}) | frozenset(  # (not "in": "It won 3 in 45")
    "day days week weeks month months year years dollar dollars cent cents penny pennies pence euro euros ounce ounces oz".split())


def _one_value_in_prose(pred: str) -> str | None:
    """The last stand-alone number of prose that cannot be read otherwise ("I think it is 18"),
    unless the prose does not state it as the one value: a relation, bound or sign choice right
    before it, or another number joined to it as an alternative (see :data:`_JOINS`). Other
    numbers earlier in a sentence ("In 5 years, Tom will be 18") do not matter. Nor is it read when a
    variable follows it (``so it is 4 b``, ``so it is 7 ab``), or when it ends a compound quantity with the number
    before it (``3 hours and 20 minutes``, ``5 feet 3 inches``: a unit of :data:`_MEASURES`, then a join or nothing).
    A common unit after it is read with it (``It is 18 cm long`` is not ``18 m``)."""
    found = list(_LAST_NUMBER.finditer(pred))
    if not found:
        return None
    last = found[-1]
    before = _ARROWS.sub(" ", pred[max(0, last.start() - 40):last.start()])
    if _RE_BOUND_BEFORE.search(before) or (_RE_APPROX_BEFORE.search(before) and "." not in last.group(0)):
        return None
    letter = re.match(r"\s+([a-zA-Z])(?![a-zA-Z'’]|\.[a-zA-Z])", pred[last.end():])  # not 5 o'clock, 3 p.m., 5 i.e.
    if letter and letter.group(1) not in _UNIT_SYMBOLS | {"a", "A", "I"}:  # an article or "I" is prose, not a variable
        return None
    pair = re.match(r"\s+([a-z]{2})(?:\s*\^|\s+[a-zA-Z](?![a-zA-Z])|[.!?]?\s*$)", pred[last.end():])  # 7 ab, 7 ab^2, 7 ab c (not 5 of them)
    if pair and _two_variables(pair.group(1)):
        return None
    if len(found) > 1:
        gap = _ASSIGNED.sub(",", pred[found[-2].end():last.start()])
        joint = re.sub(r"([,;])[,;]+", r"\1", re.sub(r"\s+|\$|\\text|[{}]", "", gap)).lower()
        if joint in _JOINS or re.fullmatch(r"[^\W\d_]{1,4}", joint):  # one short word: a join of some language ("oder", "или")
            return None
        measure = re.fullmatch(r"\s*([a-zA-Z]+)\.?(.*)", gap, re.DOTALL)  # 3 hours and 20 (minutes); not "Step 3 gives 45"
        if measure and measure.group(1).lower() in _MEASURES and re.sub(r"\s+", "", measure.group(2)).lower() in _JOINS:
            return None
    unit = re.match(r"\s+(?:degrees\s+[a-zA-Z]+|[a-zA-Z]+)(?![a-zA-Z'’])", pred[last.end():])
    if unit and unit_of(last.group(0) + unit.group(0)) is not None:  # read with its unit: 15 degrees F is not 15 degrees C
        return last.group(0) + unit.group(0)
    return last.group(0)


_RE_NEXT_EQUATION = re.compile(r"[,;]\s*[A-Za-z\\]")
_RE_JOINED = re.compile(r"\b(?:and|vs|versus)\b|;|\\(?:lor|vee|cup|pm)(?![a-zA-Z])|±")
_RE_WORD_OPERATION = re.compile(r"[\d}]\s+(?:plus|minus|times|over|divided|multiplied|less|more|squared|cubed)\b", re.IGNORECASE)


def _decimal(literal: str) -> tuple[Fraction, int | None] | None:
    literal = literal.replace(",", "")
    if len(literal) > MAX_DIGITS:
        return None
    whole, dot, frac = literal.partition(".")
    return Fraction(literal if (whole or frac) else "0"), (len(frac) if dot and frac else None)


def _sign(text: str) -> int:
    return -1 if text == "-" else 1


def _unit_words(unit: str, *, keep_case: bool = False) -> list[str]:
    """The words of a unit after a number, lower case, without its power (``m/s^2`` -> ``m``, ``s``;
    ``a.m.`` -> ``am``)."""
    unit = re.sub(r"\b([ap])\.\s*m\b\.?", r"\1m", _RE_UNIT_POWER.sub("", unit), flags=re.IGNORECASE)
    words = unit.replace(".", " ").replace("/", " ").split()
    return words if keep_case else [word.lower() for word in words]


def _names_a_variable(unit: str) -> bool:
    """Whether the words after a number hold a letter that is no unit symbol (``4 b``, ``4 b c``), or
    are two lower-case letters that are no word of :data:`_TWO_LETTER_WORDS` (``7 ab``): variables, so the
    answer is a product, not a number with a unit (``15 degrees C`` and ``5 ft`` are units)."""
    words = _unit_words(unit, keep_case=True)
    if len(words) == 1 and _two_variables(words[0]):
        return True
    return any(len(word) == 1 and word not in _UNIT_SYMBOLS
               and not (i and words[i - 1].lower() in _DEGREE_WORDS and word.lower() in _SCALE_NAMES)
               for i, word in enumerate(words))


def _two_variables(word: str) -> bool:
    """``ab`` after a number: two lower-case letters that are no unit, abbreviation or short word."""
    return len(word) == 2 and word.isascii() and word.isalpha() and word.islower() and word not in _TWO_LETTER_WORDS


def _same_unit(one: tuple[str, int], other: tuple[str, int]) -> bool:
    """Two stated common units are the same one; a degree without a scale is any temperature scale."""
    return one == other or {one[0], other[0]} <= {"°", "°C", "°F", "K"} and "°" in (one[0], other[0])


def _unit_ratio(one: tuple[str, int], other: tuple[str, int]) -> Fraction | None:
    """How many of unit ``one`` make one of unit ``other`` (``("min", 1)``, ``("h", 1)`` -> 60), exactly;
    None when they are not of one scale and power (:data:`_UNIT_SIZES`): such quantities differ."""
    (name, power), (other_name, other_power) = one, other
    if name not in _UNIT_SIZES or other_name not in _UNIT_SIZES or power != other_power:
        return None
    (scale, size), (other_scale, other_size) = _UNIT_SIZES[name], _UNIT_SIZES[other_name]
    return (other_size / size) ** power if scale == other_scale else None


def _converted_equal(a: _Num, b: _Num, ratio: Fraction) -> bool:
    """:func:`_num_equal` of ``a`` and ``b``, where one of ``b``'s unit is ``ratio`` of ``a``'s. The
    exact side is converted into the unit of a written decimal, so the rounding rule reads a
    decimal in its own unit (``0.33 hours`` is ``20 minutes``), but only for a value that unit cannot
    write exactly, rounded to two significant digits or more: ``333 m`` is ``0.333 km``, not
    ``0.33 km``, and ``0.01 km`` (1 digit) is not ``14 m`` nor ``0.00 hours`` ``10 seconds``."""
    if a.decimals is not None and b.decimals is not None or a.decimals is None and b.decimals is None:
        return _num_equal(a, _Num(b.value * ratio, b.decimals))  # equality only
    approx, exact = (b, a.value / ratio) if b.decimals is not None else (a, b.value * ratio)
    return _num_equal(_Num(exact, None), approx)


def terminates(value: Fraction) -> bool:
    """Whether ``value`` is a decimal with finitely many digits (its denominator has no prime but 2 and 5)."""
    den = value.denominator
    for prime in (2, 5):
        while den % prime == 0:
            den //= prime
    return den == 1


def unit_of(text: str) -> tuple[str, int] | None:
    """The common unit a plain-number answer states, as ``(canonical name, power)``:
    ``18 centimeters`` and ``18 \\text{ cm}`` -> ``("cm", 1)``, ``12 sq ft`` and ``12 ft^{2}`` ->
    ``("ft", 2)``. None when it states none, or one that is not a common unit (``5 apples``, ``9.8 m/s^2``)."""
    units = _RE_UNITS.fullmatch(text)
    if units is None or fast_values(text) is None:
        return None
    unit = units.group(2).lower()
    power = _RE_UNIT_POWER.search(unit)
    words = _unit_words(unit)
    n = int(re.sub(r"\D", "", power.group())) if power else 1
    if words and words[0] in _DEGREE_WORDS and len(words) <= 2 and not power:  # 15 degrees, 15 degrees C
        return ("°", 1) if len(words) == 1 else (_SCALE_NAMES[words[1]], 1) if words[1] in _SCALE_NAMES else None
    if len(words) == 1 and words[0] in _SCALE_NAMES:  # 15 C, 15 Celsius (a lower-case c is a variable)
        return _SCALE_NAMES[words[0]], 1
    if words and words[0] in ("sq", "square", "cubic") and len(words) == 2 and not power:
        n, words = (3 if words[0] == "cubic" else 2), words[1:]
    return (_UNIT_NAMES[words[0]], n) if len(words) == 1 and words[0] in _UNIT_NAMES else None


@functools.lru_cache(maxsize=8192)
def fast_values(text: str) -> tuple[_Num, ...] | None:
    """The value(s) of a plain-number answer, or None when it is not one.

    A percentage gives two readings (``25%`` -> 25 and 0.25); anything else gives one.
    """
    if len(text) > 2 * MAX_DIGITS + 20:
        return None
    units = _RE_UNITS.fullmatch(text)
    word = ""
    if units:
        words = _unit_words(units.group(2))
        if (set(words) & _NOT_UNITS or _names_a_variable(units.group(2))
                or _RE_WORD_OPERATION.search(text) and words[0] not in _POWERS
                or _RE_UNIT_POWER.search(units.group(2))  # 18 m^2, 9.8 m/s^2; not 4 a^2, 4 h^2, 18 squared^2
                and not (words[-1] in _LENGTHS or len(words) > 1 and words[-1] in _TIMES)):
            units = None
        else:
            text, word = units.group(1), words[0]
            if word in ("percent", "pct") or words[:2] == ["per", "cent"]:
                text, word = text + "%", ""
    percent = text.endswith("%")
    if percent:
        text = text[:-1].rstrip()
    num = _read_number(text)
    if num is None:
        return None
    if word in _SCALES:
        num = _Num(num.value * _SCALES[word], None)
    elif word in _POWERS:
        num = _Num(num.value ** _POWERS[word], None)
    elif word in _PARTS:
        num = _Num(num.value / _PARTS[word], None)
    if not percent:
        return (num,)
    return (num, _Num(num.value / 100, (num.decimals or 0) + 2))


def _ratio(sign: int, num: str, den: str) -> _Num | None:
    a, b = _decimal(num), _decimal(den)
    if a is None or b is None or b[0] == 0:
        return None
    return _Num(sign * a[0] / b[0], None)


def _read_number(text: str) -> _Num | None:
    """One plain number: ``-1,234.50``, ``1e3``, ``3/4``, ``\\frac{3}{4}``, ``1 1/2``."""
    if m := _RE_NUMBER.fullmatch(text):
        parsed = _decimal(m.group(2))
        if parsed is None:
            return None
        value, decimals = parsed
        if m.group(3):  # scientific notation is read as an exact value
            value, decimals = value * Fraction(10) ** int(m.group(3)), None
        return _Num(_sign(m.group(1)) * value, decimals)
    if m := _RE_SLASH.fullmatch(text):
        return _ratio(_sign(m.group(1)) * _sign(m.group(3)), m.group(2), m.group(4))
    if m := _RE_FRAC.fullmatch(text) or _RE_FRAC_DIGITS.fullmatch(text):
        return _ratio(_sign(m.group(1)) * _sign(m.group(2)) * _sign(m.group(4)), m.group(3), m.group(5))
    if m := _RE_MIXED.fullmatch(text) or _RE_MIXED_FRAC.fullmatch(text):
        part = _ratio(1, m.group(3), m.group(4))
        whole = _decimal(m.group(2))
        if part is None or whole is None:
            return None
        return _Num(_sign(m.group(1)) * (whole[0] + part.value), None)
    return None


def _num_equal(a: _Num, b: _Num) -> bool:
    if a.value == b.value:
        return True
    if (a.decimals is None) == (b.decimals is None):
        return False  # two decimals, or two exact values: only equality counts
    approx, exact = (a, b) if a.decimals is not None else (b, a)
    assert approx.decimals is not None
    # a rounded decimal stands for a value no decimal writes exactly, to two significant digits or more:
    # 0.33 is 1/3, but 0.13 is not 1/8 (0.125 writes it) and 0.00 is not 1/300
    return (approx.decimals >= 2 and not terminates(exact.value) and abs(approx.value) >= Fraction(10, 10**approx.decimals)
            and abs(approx.value - exact.value) <= Fraction(1, 2 * 10**approx.decimals))


# ------------------------------------------------------------------ slow path: guarded mpmath
class _Unreadable(Exception):
    """The text is outside the parser's grammar or limits (deterministic: cached)."""


class _OutOfTime(Exception):
    """The deadline passed (not cached: the same text may fit the next time)."""


_state = threading.local()


def _check_deadline() -> None:
    deadline = getattr(_state, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise _OutOfTime


def _context() -> Any:
    """This thread's mpmath context (``mpmath.mp`` is global: its precision is not thread-safe)."""
    ctx = getattr(_state, "ctx", None)
    if ctx is None:
        started = time.monotonic()
        import mpmath  # first import ~0.1 s, kept out of the time budget

        ctx = _state.ctx = mpmath.MPContext()
        ctx.prec = PRECISION_BITS
        if getattr(_state, "deadline", None) is not None:
            _state.deadline += time.monotonic() - started
    return ctx


_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)|(\\[a-zA-Z]+)|([a-zA-Z]+)|(\*\*|[-+*/^_()\[\]{}|]))")
_FUNCTIONS = {"sin": "sin", "cos": "cos", "tan": "tan", "cot": "cot", "sec": "sec", "csc": "csc",
              "arcsin": "asin", "arccos": "acos", "arctan": "atan", "ln": "ln", "log": "ln", "exp": "exp"}
_CLOSE = {"(": ")", "[": "]", "{": "}"}
#: Points at which expressions are evaluated (each free symbol gets one value per point).
POINTS = 3


def _symbol_values(name: str) -> tuple[Fraction, ...]:
    """Fixed, name-dependent values of a free symbol: non-integers of both signs, never 0."""
    h = zlib.crc32(name.encode())
    values = []
    for k in range(POINTS):
        value = Fraction(3 + (h + 7_919 * k) % 97, 29 + (h // 97 + 5 * k) % 13)
        values.append(-value if (h + k) % 3 == 0 else value)
    return tuple(values)


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _Unreadable(f"unexpected {text[pos]!r}")
        kind = "num" if m.group(1) else "cmd" if m.group(2) else "word" if m.group(3) else "op"
        tokens.append((kind, m.group(m.lastindex or 0)))
        pos = m.end()
    return tokens


class _V(NamedTuple):
    """A sub-expression's values (mpmath real or complex) and its symbols: one value per
    evaluation point, or a single value for a constant."""

    values: tuple[Any, ...]
    symbols: frozenset[str]
    tree: Tree
    """The same expression as a tree of whitelisted nodes, for the exact sympy check."""


class _Parser:
    """Recursive descent over a whitelist grammar, evaluating as it parses (one pass, linear).

    expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor | factor)* (juxtaposition
    multiplies: ``2\\sqrt{3}``, ``3(x+1)``, ``2x``) ; factor := ('+'|'-') factor | power ;
    power := atom ('^' factor)? ; atom := number | symbol | pi | '(' expr ')' | '|' expr '|' |
    \\frac arg arg | \\sqrt ('[' n ']')? arg | function arg ; arg := '{' expr '}' | atom.
    Every value is a tuple of mpmath complex numbers, one per evaluation point; a value that
    is undefined at any point (division by zero) makes the text unreadable.
    """

    def __init__(self, tokens: list[tuple[str, str]], ctx: Any) -> None:
        self.ctx = ctx
        self.tokens = tokens
        self.pos = 0
        self.nodes = 0
        self.depth = 0

    # -- token helpers
    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise _Unreadable("unexpected end")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def expect(self, value: str) -> None:
        if self.take()[1] != value:
            raise _Unreadable(f"expected {value!r}")

    def make(self, node: tuple[Any, ...], op: Callable[..., Any], *args: _V) -> _V:
        """Apply ``op`` pointwise (a constant's one value stands for all points); count the
        node; reject non-finite results. ``node`` heads the tree node (its children follow)."""
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Unreadable("too many nodes")
        width = max(len(a.values) for a in args)
        columns = [a.values * width if len(a.values) == 1 else a.values for a in args]
        values = tuple(op(*vals) for vals in zip(*columns))
        if not all(self.ctx.isfinite(z) for z in values):
            raise _Unreadable("undefined value")
        return _V(values, frozenset().union(*(a.symbols for a in args)), node + tuple(a.tree for a in args))

    def const(self, value: Any, tree: Tree) -> _V:
        """A constant: one value, the same at every point."""
        return _V((self.ctx.mpf(value),), frozenset(), tree)

    # -- grammar
    def parse(self) -> _V:
        value = self.expr()
        if self.peek() is not None:
            raise _Unreadable(f"unexpected {self.peek()!r}")
        return value

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Unreadable("too deep")
        _check_deadline()

    def expr(self) -> _V:
        self.enter()
        left = self.term()
        while (tok := self.peek()) in ("+", "-"):
            self.take()
            right = self.term()
            left = self.make((tok,), (lambda a, b: a + b) if tok == "+" else (lambda a, b: a - b), left, right)
        self.depth -= 1
        return left

    def term(self) -> _V:
        left = self.factor()
        while True:
            tok = self.peek()
            if tok in ("*", "/"):
                self.take()
            elif not (tok is not None and (self.tokens[self.pos][0] in ("word", "cmd") or tok in ("(", "[", "{"))):
                return left
            right = self.factor()
            left = self.make(("/" if tok == "/" else "*",), (lambda a, b: a / b) if tok == "/" else (lambda a, b: a * b), left, right)

    def factor(self) -> _V:
        if (tok := self.peek()) in ("+", "-"):
            self.take()
            inner = self.factor()
            return inner if tok == "+" else self.make(("neg",), lambda a: -a, inner)
        return self.power()

    def power(self) -> _V:
        base = self.atom()
        if self.peek() in ("^", "**"):
            self.take()
            exponent = self.factor()
            self.bounded(exponent, MAX_EXPONENT, "exponent")
            return self.make(("^",), self.ctx.power, base, exponent)
        return base

    def bounded(self, value: _V, limit: float, what: str) -> None:
        if any(abs(z) > limit for z in value.values):
            raise _Unreadable(f"{what} larger than {limit:g}")

    def group(self, opener: str) -> _V:
        self.enter()
        inner = self.expr()
        self.expect(_CLOSE[opener])
        self.depth -= 1
        return inner

    def arg(self) -> _V:
        """A LaTeX argument: a braced group, or the next atom (``\\sqrt2``, ``\\frac 1 2``)."""
        if self.peek() == "{":
            self.take()
            return self.group("{")
        return self.atom()

    def atom(self) -> _V:
        self.enter()
        kind, value = self.take()
        if kind == "num":
            if len(value) > MAX_DIGITS + 1:
                raise _Unreadable("literal too long")
            exact = Fraction(value)
            result = self.const(self.ctx.mpf(exact.numerator) / exact.denominator, ("n", exact.numerator, exact.denominator))
        elif value in _CLOSE:
            result = self.group(value)
        elif value == "|":
            inner = self.expr()
            self.expect("|")
            result = self.make(("abs",), abs, inner)
        elif kind == "cmd":
            result = self.command(value[1:])
        elif kind == "word" and (value in _FUNCTIONS or value in ("sqrt", "pi")):
            result = self.command(value)
        elif kind == "word" and len(value) == 1:  # longer words are prose ("it is 18"), not x*y
            result = self.symbol(value)
        else:
            raise _Unreadable(f"unexpected {value!r}")
        self.depth -= 1
        return result

    def symbol(self, name: str) -> _V:
        if self.peek() == "_":  # subscript: x_1, a_{n}
            self.take()
            sub = self.take()[1]
            if sub == "{":
                parts = []
                while (inner := self.take()[1]) != "}":
                    parts.append(inner)
                sub = "".join(parts)
            if not re.fullmatch(r"[A-Za-z0-9]{1,6}", sub):
                raise _Unreadable("bad subscript")
            name = f"{name}_{sub}"
        values = tuple(self.ctx.mpf(v.numerator) / v.denominator for v in _symbol_values(name))
        return _V(values, frozenset({name}), ("s", name))

    def command(self, name: str) -> _V:
        ctx = self.ctx
        if name == "pi":
            return self.const(ctx.pi, ("pi",))
        if name == "frac":
            num, den = self.arg(), self.arg()
            return self.make(("/",), lambda a, b: a / b, num, den)
        if name == "sqrt":
            n = 2
            if self.peek() == "[":
                self.take()
                index = self.group("[")
                z = index.values[0]
                if index.symbols or z.imag != 0 or z.real != int(z.real) or not 2 <= int(z.real) <= 100:
                    raise _Unreadable("root index must be an integer 2..100")
                n = int(z.real)
            radicand = self.arg()

            def root(a: Any) -> Any:  # odd roots of negative reals are real: \sqrt[3]{-8} = -2
                if n % 2 == 1 and a.imag == 0 and a.real < 0:
                    return -ctx.root(-a.real, n)
                return ctx.root(a, n)

            return self.make(("root", n), root, radicand)
        if name not in _FUNCTIONS:
            raise _Unreadable(f"unsupported \\{name}")
        base = None
        if name == "log" and self.peek() == "_":
            self.take()
            base = self.arg()
            self.bounded(base, MAX_FUNCTION_ARG, "log base")
        argument = self.arg()
        self.bounded(argument, MAX_FUNCTION_ARG, f"argument of {name}")
        value = self.make(("f", _FUNCTIONS[name]), getattr(ctx, _FUNCTIONS[name]), argument)
        return value if base is None else self.make(("logb",), lambda a, b: a / ctx.ln(b), value, base)


@functools.lru_cache(maxsize=4096)
def expression_value(text: str) -> _V | None:
    """``text`` parsed and evaluated at the fixed points, or None outside the grammar or limits."""
    if len(text) > MAX_EXPR_CHARS:
        return None
    ctx = _context()
    text = re.sub(r"(\d),(\d{3})(?!\d)", r"\1\2", text)  # thousands separators
    text = re.sub(r"\\frac\s*(\d)(\d)", r"\\frac{\1}{\2}", text)  # \frac12 is 1/2 in LaTeX
    text = re.sub(r"(\d)\s+degrees$", r"\1", text)  # 2 \cdot 45^\circ (a degree without a scale is a number)
    try:
        return _Parser(_tokenize(text), ctx).parse()
    except (_Unreadable, RecursionError, ValueError, TypeError, ZeroDivisionError, OverflowError, ArithmeticError):
        return None


#: Bits of a power's result above which :func:`_rational` gives up (the float path compares it).
_MAX_RATIONAL_BITS = 4_096


def _rational(tree: Tree) -> Fraction | None:
    """The exact value of an expression of rationals, ``+ - * /``, integer powers and ``| |``;
    None for anything else (pi, a root, a function, a symbol) or a power too large to compute."""
    head = tree[0]
    if head == "n":
        return Fraction(tree[1], tree[2])
    if head in ("neg", "abs"):
        inner = _rational(tree[1])
        return None if inner is None else -inner if head == "neg" else abs(inner)
    if head not in ("+", "-", "*", "/", "^"):
        return None
    left, right = _rational(tree[1]), _rational(tree[2])
    if left is None or right is None:
        return None
    if head == "^":
        size = max(left.numerator.bit_length(), left.denominator.bit_length())
        if right.denominator != 1 or (left == 0 and right < 0) or size * abs(right.numerator) > _MAX_RATIONAL_BITS:
            return None
        return left ** int(right)
    if head == "/":
        return None if right == 0 else left / right
    return left + right if head == "+" else left - right if head == "-" else left * right


def _values_close(a: Any, b: Any, decimals: int | None) -> bool:
    tolerance = REL_TOL * max(abs(a), abs(b)) + ABS_TOL
    if decimals is not None and decimals >= 2:
        tolerance = max(tolerance, 0.5 * 10.0**-decimals * (1 + 1e-12))
    return bool(abs(a - b) <= tolerance)


def _expression_equal(
    pred: str, gold: str, pred_num: tuple[_Num, ...] | None, gold_num: tuple[_Num, ...] | None
) -> bool | None:
    a, b = expression_value(pred), expression_value(gold)
    if a is None:
        return None
    if b is None or a.symbols != b.symbols:
        return False
    # the rounding rule (step 4) when exactly one side is a written decimal
    decimals = None
    for num in (pred_num, gold_num):
        if num is not None and len(num) == 1 and num[0].decimals is not None:
            decimals = num[0].decimals if decimals is None else None
    if decimals is not None and decimals >= 2:  # step 4's rule: the expression is the exact side
        nums = pred_num if pred_num is not None else gold_num  # (step 4 took two plain numbers: one side is an expression)
        assert nums is not None
        written = nums[0]
        exact = _rational((b if pred_num is not None else a).tree)
        if exact is not None:  # 2^{-3} is 1/8, which 0.125 writes: 0.13 is not it
            return _num_equal(_Num(exact, None), written)
        if abs(written.value) < Fraction(10, 10**decimals):  # one significant digit: 0.00 is not \frac{\sqrt2}{1000}
            decimals = None
    if not all(_values_close(x, y, decimals) for x, y in zip(a.values, b.values)):
        return False  # a point where they differ by more than the tolerance: sound
    limit = getattr(_state, "symbolic", None)
    if (decimals is not None and decimals >= 2) or limit is None or (is_plain_number(a.tree) and is_plain_number(b.tree)):
        return True  # the rounding rule is numeric by design; two rationals were compared exactly
    verdict = worker().equal(a.tree, b.tree, limit)
    return True if verdict is None else verdict


# ------------------------------------------------------------------ sequences (tuples, intervals)
def _split_sequence(text: str) -> tuple[str, list[str], str] | None:
    """``(open, items, close)`` for ``(1, 2)``, ``[0, 1)``, ``1, 2``; None without top-level commas."""
    if "," not in text:
        return None
    opener, closer = "", ""
    body = text
    if len(text) >= 2 and text[0] in "([{" and text[-1] in ")]}":
        opener, closer, body = text[0], text[-1], text[1:-1]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    items.append(body[start:].strip())
    if len(items) < 2 or depth != 0:
        return None
    return opener, items, closer


# ------------------------------------------------------------------ the math checker
#: A stand-alone number in prose: after a space, ``$``, ``(`` or ``:``, before a space or punctuation.
_LAST_NUMBER = re.compile(rf"(?<![^\s$(:])[+-]?{_DEC}(?:/{_DEC})?%?(?=[\s.,;:!?)]|$)")


def _compare(pred: str, gold: str, depth: int = 0) -> bool | None:
    """True/False when ``pred`` could be read; None when it could not (prose)."""
    if _squash(pred) == _squash(gold):
        return True
    pred_num, gold_num = fast_values(pred), fast_values(gold)
    if pred_num is not None and gold_num is not None:
        pred_unit, gold_unit = unit_of(pred), unit_of(gold)
        if pred_unit and gold_unit and not _same_unit(pred_unit, gold_unit):  # 4 s is not 4 h, 18 cm not 18 m (a bare side takes either)
            # (only common units are compared: 18 centimeters is 18 \text{ cm}, 5 apples is 5 apple)
            ratio = _unit_ratio(pred_unit, gold_unit)  # 60 minutes is 1 hour: converted when both sides state the unit
            return ratio is not None and any(_converted_equal(a, b, ratio) for a in pred_num for b in gold_num)
        return any(_num_equal(a, b) for a in pred_num for b in gold_num)
    pred_seq, gold_seq = _split_sequence(pred), _split_sequence(gold)
    if gold_seq is not None:  # a tuple or interval: same length, same brackets, equal items
        if pred_seq is None or depth > 3:
            return False if pred_num is not None or expression_value(pred) is not None else None
        (po, pi, pc), (go, gi, gc) = pred_seq, gold_seq
        if len(pi) != len(gi) or (po and go and (po, pc) != (go, gc)):
            return False
        return all(_compare(x, y, depth + 1) is True for x, y in zip(pi, gi))
    if pred_seq is not None:  # several values for one: wrong, unless it is prose with commas
        readable = all(fast_values(x) is not None or expression_value(x) is not None for x in pred_seq[1])
        return False if readable else None
    return _expression_equal(pred, gold, pred_num, gold_num)


#: ``x \\in S``: membership, read as the interval ``S`` (``\\infty`` is not ``\\in``).
_RE_MEMBER = re.compile(r"[a-zA-Z]\s*\\in(?![a-zA-Z])\s*(.+)")
#: A sign choice ``\\pm X`` (``±X``), the whole answer.
_RE_SIGN_CHOICE = re.compile(r"(?:\\pm(?![a-zA-Z])|±)\s*(.+)")


def _prepare(pred: str, gold: str) -> tuple[str, str]:
    pred, gold = normalize(pred), normalize(gold)
    pred = _ARROWS.sub(" ", pred)  # "total => 18": an arrow, not an equation with a ">" after it
    member = _RE_MEMBER.fullmatch(pred)
    if member and gold[:1] in "([" and member.group(1)[:1] in "([":  # an interval for an interval: not for a list of values
        pred = member.group(1)
    if "=" in pred and "=" not in gold:
        # a chain (x = 3 + 15 = 18) states its last side; two equations (x = 49, x = 50; x = 49 or
        # x = 50) do not: they stay whole, and are read as what they are (two values, a hedge)
        between = pred.split("=")[1:-1]
        if not any(_RE_HEDGE.search(m) or _RE_JOINED.search(m) or _RE_NEXT_EQUATION.search(m) for m in between):
            pred = pred.rsplit("=", 1)[1].strip()
    return pred, gold


def _both_signs(pred: str, gold: str) -> bool | None:
    """``\\pm X`` against a bare pair (``X, -X`` in either order), either way round; None otherwise.

    A bracketed pair stays a tuple or an interval, and ``\\pm X`` against one value stays wrong.
    """
    for choice, pair in ((pred, gold), (gold, pred)):
        sign = _RE_SIGN_CHOICE.fullmatch(choice)
        seq = _split_sequence(pair)
        if sign is None or seq is None or seq[0] or len(seq[1]) != 2:
            continue
        x = sign.group(1).strip()
        neg = x[1:].strip() if x.startswith("-") else "-" + x
        a, b = seq[1]
        return ((_compare(x, a) is True and _compare(neg, b) is True)
                or (_compare(x, b) is True and _compare(neg, a) is True))
    return None


def _states_label(found: str, gold: str) -> bool:
    """One extracted answer against the label (inside :func:`math_equal`'s deadline)."""
    if "box" in found:  # nested boxes: \\boxed{\\boxed{5}} reads as 5
        found = found.replace("\\boxed", "").replace("\\fbox", "")
    pred, gold = _prepare(found, gold)
    if not pred:
        return False
    both_signs = _both_signs(pred, gold)
    if both_signs is not None:
        return both_signs
    verdict = _compare(pred, gold)
    if verdict is None and not _RE_WORD_OPERATION.search(pred) and not _RE_HEDGE.search(pred):
        number = _one_value_in_prose(pred)
        verdict = _compare(normalize(number), gold) if number is not None else False
    return bool(verdict)


def math_equal(
    answer: str,
    label: str,
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    symbolic: bool = True,
    symbolic_time_limit_s: float = DEFAULT_SYMBOLIC_TIME_LIMIT_S,
) -> bool:
    """True when ``answer`` (a reply or its ``<answer>`` text) states the same value as ``label``.

    Never raises and never runs long on hostile text; see the module docstring for the rules.
    ``symbolic=False`` skips the exact sympy check (step 5) and keeps the numeric verdict.
    """
    if not isinstance(answer, str) or not isinstance(label, str):
        return False
    if exact_match(answer, label):
        return True
    stated = stated_answers(answer)
    golds = stated_answers(label) if "box" in label else [label.strip()]
    if not stated or not all(golds) or any(len(found) > MAX_ANSWER_CHARS for found in stated):
        return False
    _state.deadline = time.monotonic() + time_limit_s  # one deadline for all the answers a reply states
    _state.symbolic = symbolic_time_limit_s if symbolic else None
    try:
        if len(golds) == 1:
            return all(_states_label(found, golds[0]) for found in stated)  # a policy is not paid for naming two answers
        # a label of several boxes ("the solutions are \boxed{2} and \boxed{3}"): the same answers, in any order,
        # as boxes or as one list
        return ((all(any(_states_label(f, g) for g in golds) for f in stated) and all(any(_states_label(f, g) for f in stated) for g in golds))
                or (len(stated) == 1 and _states_label(stated[0], ", ".join(golds))))
    except _OutOfTime:
        return False
    finally:
        _state.deadline = None

