"""Synthetic goals (spec 13.6): one per (product, option combination), with a price bound.

A goal's text is the product's instruction, then `` with <option>: <value>, and ...`` for the
chosen options, then ``, and price lower than X dollars`` where X is drawn from the price grid
10, 20, ... 990: two of the first four grid values above the price, the larger kept (no bound
when fewer than two lie above). The draw is seeded by ``(catalog seed, asin)``, where the
reference used unseeded global state. Goals are shuffled with the fixed seed 233; a reset seed
picks one through the mode's split and a fixed permutation (``random.Random(42)``).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass

from ragen_core.errors import ConfigError
from ragen_core.seeding import make_rng
from ragen_env_webshop.catalog import Product

PRICE_GRID = tuple(range(10, 1000, 10))
NO_PRICE_BOUND = 1_000_000.0


@dataclass(frozen=True)
class Goal:
    """What to buy: the product, its options, and the score's terms."""

    asin: str
    instruction: str
    attributes: tuple[str, ...]
    options: dict[str, str]
    price_upper: float
    name: str
    """Title of the goal's product (the type reward compares nouns with it)."""
    query: str
    product_category: str
    weight: float


def _price_upper(product: Product, seed: int) -> float:
    above = [p for p in PRICE_GRID if p > product.price][:4]
    if len(above) < 2:
        return NO_PRICE_BOUND
    picks = make_rng(seed, "webshop-goal-price", product.asin).choice(len(above), 2, replace=False)
    return float(max(above[int(i)] for i in picks))


def make_goals(products: list[Product], seed: int = 0) -> list[Goal]:
    """All synthetic goals of the catalog, shuffled with the fixed seed 233."""
    candidates = [p for p in products if p.instruction and p.instruction_attributes]
    counts = Counter(a for p in candidates for a in p.instruction_attributes)
    goals: list[Goal] = []
    for p in candidates:
        bound = _price_upper(p, seed)
        price_text = "" if bound == NO_PRICE_BOUND else f", and price lower than {bound:.2f} dollars"
        names = sorted(p.options)
        combos = list(itertools.product(*(p.options[n] for n in names)))
        weight = sum(1.0 / counts[a] for a in p.instruction_attributes) / len(combos)
        for combo in combos:
            chosen = dict(zip(names, combo, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in chosen.items())
            text = f"{p.instruction}{' with ' + option_text if option_text else ''}{price_text}"
            goals.append(Goal(asin=p.asin, instruction=text, attributes=p.instruction_attributes, options=chosen,
                              price_upper=bound, name=p.title, query=p.query, product_category=p.product_category,
                              weight=weight))
    random.Random(233).shuffle(goals)
    if not goals:
        raise ConfigError("the catalog has no goal products",
                          ["real catalogs need catalog.attribute_path (items_ins_v2*.json) with instructions"])
    return goals


class GoalSplit:
    """Seed -> goal index, by mode (spec 13.6), for ``n`` goals.

    With more than 1,500 goals: test ``seed % 500``, val ``500 + seed % 1000``, train
    ``1500 + seed % (n - 1500)``. Smaller goal sets (real samples) keep the same order of
    blocks at a tenth each for test and val and the rest for train. The index is then mapped
    through ``random.Random(42)``'s shuffle of ``range(n)``.
    """

    def __init__(self, n: int) -> None:
        if n < 3:
            raise ConfigError(f"only {n} goal(s): the train/val/test split needs at least 3", ["use a larger catalog"])
        self.n = n
        self.permutation = list(range(n))
        random.Random(42).shuffle(self.permutation)
        if n > 1500:
            self.blocks = {"test": (0, 500), "val": (500, 1000), "train": (1500, n - 1500)}
        else:
            tenth = max(1, n // 10)
            self.blocks = {"test": (0, tenth), "val": (tenth, tenth), "train": (2 * tenth, n - 2 * tenth)}

    def index(self, seed: int, mode: str) -> int:
        """The goal index of ``seed`` in ``mode`` (``train``, ``val`` or ``test``)."""
        start, size = self.blocks["train" if mode not in self.blocks else mode]
        return self.permutation[start + seed % size]
