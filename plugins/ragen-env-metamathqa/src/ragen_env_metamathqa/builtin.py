r"""The built-in problem set: short word and arithmetic problems written for this package.

Used when no dataset is configured, so ``ragen run --env metamathqa`` works with no download.
Problem ``i`` is drawn from template ``i mod T`` with a generator seeded by ``i`` alone, so the
set is the same on every machine and growing ``builtin_size`` only appends problems. Answers
are written the way MetaMathQA labels are: integers (``42``), decimals (``12.5``), LaTeX
fractions (``\frac{3}{4}``), radicals (``2\sqrt{3}``) and negative numbers, which gives the
checker's non-integer paths real work.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction

from ragen_core.seeding import make_py_rng
from ragen_env_metamathqa.checker import terminates

_NAMES = ("Ana", "Ben", "Chidi", "Dana", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kira", "Luis", "Mei",
          "Nils", "Omar", "Priya", "Rosa", "Sven", "Tariq", "Uma", "Vera", "Wen", "Yusuf", "Zoe")
_ITEMS = ("notebooks", "pencils", "apples", "stickers", "marbles", "cupcakes", "postcards", "candles")


def _label(value: Fraction, decimal: bool = True) -> str:
    """``12``, ``12.5`` (a terminating value, when ``decimal``), or ``\\frac{7}{3}`` / ``-\\frac{7}{3}``."""
    if value.denominator == 1:
        return str(value.numerator)
    if decimal and terminates(value):
        return f"{float(value):.6f}".rstrip("0")  # exact: the denominators here divide 10**6
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _change(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    count, price = rng.randint(2, 9), rng.randint(2, 15)
    bill = next(b for b in (20, 50, 100, 200) if b > count * price)
    return (f"{name} buys {count} {item} at ${price} each and pays with a ${bill} bill. "
            f"How much change, in dollars, does {name} get back?", str(bill - count * price))


def _speed(rng: random.Random) -> tuple[str, str]:
    speed, hours = rng.randint(30, 90), rng.randint(2, 6)
    later = rng.choice([h for h in range(2, 10) if h != hours])
    return (f"A train covers {speed * hours} kilometres in {hours} hours. At the same speed, "
            f"how many kilometres does it cover in {later} hours?", str(speed * later))


def _fraction_of(rng: random.Random) -> tuple[str, str]:
    den = rng.choice((3, 4, 5, 6, 8))
    num = rng.randint(1, den - 1)
    total = den * rng.randint(3, 12)
    return (f"A school club has {total} members and {num}/{den} of them play chess. "
            f"How many members play chess?", str(total * num // den))


def _discount(rng: random.Random) -> tuple[str, str]:
    price, off = rng.choice((40, 45, 60, 75, 80, 90, 120, 150)), rng.choice((10, 15, 20, 25, 30, 40))
    sale = Fraction(price * (100 - off), 100)
    return (f"A coat costs ${price}. During a sale the price is reduced by {off}%. "
            f"What is the sale price in dollars?", _label(sale))


def _sharing(rng: random.Random) -> tuple[str, str]:
    pizzas, friends = rng.randint(2, 9), rng.randint(3, 12)
    while pizzas % friends == 0:
        friends += 1
    return (f"{pizzas} pizzas are shared equally among {friends} friends. What fraction of a pizza "
            f"does each friend get? Give the answer in lowest terms.", _label(Fraction(pizzas, friends), decimal=False))


def _mean(rng: random.Random) -> tuple[str, str]:
    scores = [rng.randint(55, 100) for _ in range(rng.randint(3, 5))]
    name = rng.choice(_NAMES)
    listed = ", ".join(map(str, scores[:-1])) + f" and {scores[-1]}"
    return (f"{name} scored {listed} on {len(scores)} quizzes. What is the mean score?",
            _label(Fraction(sum(scores), len(scores))))


def _linear(rng: random.Random) -> tuple[str, str]:
    a = rng.choice((2, 3, 4, 5, 6, 7, 8, 9, -2, -3))
    x = Fraction(rng.randint(-12, 12), a)  # any x with a*x an integer
    b = rng.randint(-20, 20)
    c = int(a * x + b)
    sign = "+" if b >= 0 else "-"
    return (f"Solve for x: {a}x {sign} {abs(b)} = {c}.", _label(x))


def _area(rng: random.Random) -> tuple[str, str]:
    length, width = rng.randint(3, 25), rng.randint(2, 18)
    if rng.random() < 0.5:
        return (f"A rectangle is {length} cm long and {width} cm wide. What is its area in square centimetres?",
                str(length * width))
    return (f"A rectangular garden is {length} m long and {width} m wide. How many metres of fence go "
            f"around it?", str(2 * (length + width)))


def _ages(rng: random.Random) -> tuple[str, str]:
    older, younger = rng.sample(_NAMES, 2)
    young, gap, years = rng.randint(3, 30), rng.randint(1, 15), rng.randint(2, 10)
    total = 2 * young + gap + 2 * years
    return (f"{older} is {gap} years older than {younger}. In {years} years the sum of their ages will be "
            f"{total}. How old is {younger} now?", str(young))


def _radical(rng: random.Random) -> tuple[str, str]:
    outer, inner = rng.randint(2, 9), rng.choice((2, 3, 5, 6, 7, 10))
    area = outer * outer * inner
    return (f"A square has an area of {area} square units. What is its side length? "
            f"Write it in simplest radical form.", f"{outer}\\sqrt{{{inner}}}")


def _minutes(rng: random.Random) -> tuple[str, str]:
    hours, minutes = rng.randint(1, 9), rng.randint(1, 59)
    return (f"How many minutes are there in {hours} hours and {minutes} minutes?", str(60 * hours + minutes))


def _temperature(rng: random.Random) -> tuple[str, str]:
    start, drop = rng.randint(-10, 12), rng.randint(5, 25)
    return (f"At noon the temperature was {start} degrees Celsius. By midnight it had fallen by {drop} "
            f"degrees. What was the temperature at midnight, in degrees Celsius?", str(start - drop))


def _power(rng: random.Random) -> tuple[str, str]:
    base, exponent = rng.randint(2, 9), rng.randint(2, 4)
    return (f"What is {base} raised to the power {exponent}?", str(base**exponent))


def _pages(rng: random.Random) -> tuple[str, str]:
    name, per_day, days = rng.choice(_NAMES), rng.randint(8, 40), rng.randint(3, 15)
    return (f"{name} reads {per_day} pages every day and finishes a book in {days} days. "
            f"How many pages does the book have?", str(per_day * days))


def _hypotenuse(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    square = a * a + b * b
    root = math.isqrt(square)
    label = str(root) if root * root == square else f"\\sqrt{{{square}}}"
    return (f"A right triangle has legs of length {a} and {b}. How long is the hypotenuse? "
            f"Give the exact value.", label)


TEMPLATES: tuple[Callable[[random.Random], tuple[str, str]], ...] = (
    _change, _speed, _fraction_of, _discount, _sharing, _mean, _linear, _area, _ages, _radical,
    _minutes, _temperature, _power, _pages, _hypotenuse,
)


def builtin_problem(index: int) -> tuple[str, str]:
    """``(question, answer)`` of built-in problem ``index`` (any non-negative integer)."""
    template = TEMPLATES[index % len(TEMPLATES)]
    return template(make_py_rng(index, "metamathqa-builtin"))
