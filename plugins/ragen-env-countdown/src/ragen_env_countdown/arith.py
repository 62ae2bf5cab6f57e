"""Safe arithmetic for Countdown: number-use check, evaluator and exhaustive solver.

Model text is never passed to ``eval``. :func:`evaluate` is a recursive-descent parser over
integer literals, ``+ - * /``, unary signs and parentheses, computing exactly with
:class:`fractions.Fraction`. Anything else (``**``, ``//``, names, calls, floats) is a
:class:`ArithmeticParseError`. Inputs are bounded before any work is done: expression length,
nesting depth, literal length and intermediate magnitude all have caps, so a megabyte reply or
``2**999999`` costs microseconds, not minutes.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction
from itertools import combinations

#: Longest expression we parse. Real answers are a few dozen characters.
MAX_EXPR_CHARS = 2_000
#: Deepest nesting of parentheses and unary signs.
MAX_DEPTH = 64
#: Longest integer literal (digits).
MAX_LITERAL_DIGITS = 18
#: Largest |numerator| or denominator allowed in any intermediate result.
MAX_MAGNITUDE = 10**30

#: Same digit-run rule as the reference check (``\d`` also matches non-ASCII decimal digits,
#: which then fail to parse: format ok, evaluation error).
_DIGIT_RUN = re.compile(r"\d+")
_OPS = "+-*/()"


class ArithmeticParseError(ValueError):
    """The text is not a plain integer arithmetic expression (or breaks a size cap)."""


def uses_numbers_exactly(expression: str, nums: list[int]) -> bool:
    """True if the digit runs of ``expression`` are exactly the multiset ``nums``.

    This is the reference's format check: every number used once, no other numbers.
    """
    want = Counter(int(n) for n in nums)
    found: list[int] = []
    for match in _DIGIT_RUN.finditer(expression):
        text = match.group()
        # Stop early on junk: more runs than numbers, or runs too long to be any of them
        # (int() of a 5,000-digit run would also hit Python's int-parsing guard).
        if len(found) >= len(nums) or len(text) > MAX_LITERAL_DIGITS:
            return False
        found.append(int(text))
    return Counter(found) == want


def _check(value: Fraction) -> Fraction:
    if abs(value.numerator) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise ArithmeticParseError("intermediate value too large")
    return value


class _Parser:
    """expr := term (('+'|'-') term)* ; term := unary (('*'|'/') unary)* ;
    unary := ('+'|'-') unary | INT | '(' expr ')'"""

    def __init__(self, text: str) -> None:
        self.tokens = self._tokenize(text)
        self.pos = 0
        self.depth = 0

    @staticmethod
    def _tokenize(text: str) -> list[str]:
        tokens: list[str] = []
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            if ch in " \t\r\n":
                i += 1
            elif ch in _OPS:
                tokens.append(ch)
                i += 1
            elif "0" <= ch <= "9":
                j = i
                while j < n and "0" <= text[j] <= "9":
                    j += 1
                literal = text[i:j]
                if len(literal) > MAX_LITERAL_DIGITS:
                    raise ArithmeticParseError("integer literal too long")
                if len(literal) > 1 and literal[0] == "0":
                    raise ArithmeticParseError("leading zeros are not allowed (as in Python)")
                tokens.append(literal)
                i = j
            else:
                raise ArithmeticParseError(f"unexpected character {ch!r}")
        return tokens

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise ArithmeticParseError("unexpected end of expression")
        self.pos += 1
        return token

    def parse(self) -> Fraction:
        value = self._expr()
        if self._peek() is not None:
            raise ArithmeticParseError(f"unexpected {self._peek()!r}")
        return value

    def _expr(self) -> Fraction:
        value = self._term()
        while self._peek() in ("+", "-"):
            op = self._take()
            rhs = self._term()
            value = _check(value + rhs if op == "+" else value - rhs)
        return value

    def _term(self) -> Fraction:
        value = self._unary()
        while self._peek() in ("*", "/"):
            op = self._take()
            rhs = self._unary()
            if op == "*":
                value = _check(value * rhs)
            elif rhs == 0:
                raise ZeroDivisionError("division by zero")
            else:
                value = _check(value / rhs)
        return value

    def _unary(self) -> Fraction:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ArithmeticParseError("expression nested too deeply")
        try:
            token = self._take()
            if token == "+":
                return self._unary()
            if token == "-":
                return -self._unary()
            if token == "(":
                value = self._expr()
                if self._take() != ")":
                    raise ArithmeticParseError("expected ')'")
                return value
            if token.isdigit():
                return Fraction(int(token))
            raise ArithmeticParseError(f"unexpected {token!r}")
        finally:
            self.depth -= 1


def evaluate(expression: str) -> Fraction:
    """Exact value of an integer arithmetic expression.

    Raises:
        ArithmeticParseError: not a plain ``+ - * /`` expression, or a size cap was hit.
        ZeroDivisionError: the expression divides by zero.
    """
    if len(expression) > MAX_EXPR_CHARS:
        raise ArithmeticParseError(f"expression longer than {MAX_EXPR_CHARS} characters")
    return _Parser(expression).parse()


def equals_target(value: Fraction, target: float) -> bool:
    """The reference's tolerance: ``|value - target| < 1e-5``."""
    return abs(value - Fraction(target)) < Fraction(1, 100_000)


# --------------------------------------------------------------------- printing and solving
#: An expression under construction: (value, text, precedence); atoms 3, * / 2, + - 1.
Node = tuple[Fraction, str, int]


def combine(left: Node, op: str, right: Node) -> Node | None:
    """``left op right`` with the fewest parentheses that keep the meaning; None for x/0."""
    lv, lt, lp = left
    rv, rt, rp = right
    if op in "+-":
        prec = 1
        lt_ok, rt_ok = True, rp > 1 or op == "+"
        value = lv + rv if op == "+" else lv - rv
    else:
        if op == "/" and rv == 0:
            return None
        prec = 2
        lt_ok, rt_ok = lp > 1, rp > 2 or (op == "*" and rp > 1)
        value = lv * rv if op == "*" else lv / rv
    text = f"{lt if lt_ok else f'({lt})'} {op} {rt if rt_ok else f'({rt})'}"
    return value, text, prec


def solve(nums: list[int], target: int, ops: str = "+-*/") -> str | None:
    """An expression using every number of ``nums`` exactly once that equals ``target``.

    Exhaustive search over pairs to merge (the classic "24 game" recursion); fine for up to
    about six numbers. Returns ``None`` when no such expression exists.
    """
    start: list[Node] = [(Fraction(n), str(n), 3) for n in nums]
    seen: set[tuple[Fraction, ...]] = set()

    def search(pool: list[Node]) -> str | None:
        if len(pool) == 1:
            return pool[0][1] if equals_target(pool[0][0], target) else None
        key = tuple(sorted(node[0] for node in pool))
        if key in seen:
            return None
        seen.add(key)
        for i, j in combinations(range(len(pool)), 2):
            rest = [pool[k] for k in range(len(pool)) if k not in (i, j)]
            a, b = pool[i], pool[j]
            candidates = []
            for op in ops:
                candidates.append(combine(a, op, b))
                if op in "-/":
                    candidates.append(combine(b, op, a))
            for node in candidates:
                if node is not None and abs(node[0].numerator) <= MAX_MAGNITUDE:
                    found = search([*rest, node])
                    if found is not None:
                        return found
        return None

    return search(start)


def plus_minus_solvable(nums: list[int], target: int) -> bool:
    """The reference filter: some choice of signs makes ``sum(sign * n) == target``.

    (The reference pads to four numbers with zeros first, which changes nothing.)
    """
    sums = {0}
    for n in nums:
        sums = {s + n for s in sums} | {s - n for s in sums}
    return target in sums
