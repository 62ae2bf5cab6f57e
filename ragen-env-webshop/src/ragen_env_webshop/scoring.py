"""The WebShop score of a purchase (spec 13.6) and the reward RAGEN pays for it.

``raw = r_type * (attributes matched + options matched + [price <= bound]) / (attributes + options + 1)``

* An attribute matches when its fuzzy token-set similarity with one of the product's attributes
  is above 85, or it occurs in the title, the bullet points or the description (lower-cased).
* An option matches when its fuzzy similarity with a chosen option is above 85, after both are
  reduced to a colour name when they contain one.
* ``r_type``: 0 when the product's name shares no noun with the goal product's name, 0.1 when
  under a tenth of the goal's nouns are shared, 0.5 when neither the search query, nor two
  category levels, nor over a fifth of the nouns agree, else 1.

Difference from the reference: it tagged nouns with spaCy; here a name's nouns are its
lower-cased alphabetic words minus stop words, adjectives of colour, size and quality, and
numbers, a rule with no model download. Fuzzy similarity is rapidfuzz's ``token_set_ratio`` on
lower-cased text with punctuation turned into spaces (as the reference's fuzzy matcher did).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rapidfuzz import fuzz, utils

from ragen_env_webshop.catalog import Product
from ragen_env_webshop.goals import Goal

MATCH_THRESHOLD = 85
COLORS = ("beige", "black", "blue", "brown", "burgundy", "camel", "charcoal", "cream", "gold", "gray", "green",
          "grey", "ivory", "khaki", "lavender", "maroon", "navy", "olive", "orange", "pink", "purple", "red",
          "rose", "silver", "tan", "teal", "turquoise", "white", "wine", "yellow")
_NOT_NOUNS = frozenset(
    "a an and the of for with in on to by at from or as is are be this that it its your our my new pack "
    "set size color colour inch inches oz fl ounce pound x s m l xl premium classic everyday deluxe essential "
    "signature original modern ultra select best great high low soft hard large small medium big mini pro free "
    "easy fast long short light heavy super".split()
) | frozenset(COLORS)
_WORD = re.compile(r"[a-z]+")


def _similar(a: str, b: str) -> bool:
    """Fuzzy token-set similarity above 85, after lower-casing and turning punctuation into spaces."""
    return fuzz.token_set_ratio(a, b, processor=utils.default_process) > MATCH_THRESHOLD


def normalize_color(option: str) -> str:
    """The first colour name inside ``option``, or ``option`` unchanged."""
    for color in COLORS:
        if color in option:
            return color
    return option


def name_nouns(name: str) -> set[str]:
    """The words of a product name that count as nouns for the type reward (see module docstring)."""
    return {w for w in _WORD.findall(name.lower()) if len(w) > 1 and w not in _NOT_NOUNS}


def type_reward(product: Product, goal: Goal) -> float:
    """``r_type`` in {0, 0.1, 0.5, 1} (module docstring)."""
    query_match = product.query == goal.query and bool(goal.query)
    levels_p = {x.strip() for x in product.product_category.split("›") if x.strip()}
    levels_g = {x.strip() for x in goal.product_category.split("›") if x.strip()}
    category_match = len(levels_p & levels_g) >= 2
    desired = name_nouns(goal.name)
    title_score = len(name_nouns(product.title) & desired) / len(desired) if desired else 0.2
    if title_score == 0.0:
        return 0.0
    if title_score < 0.1:
        return 0.1
    return 1.0 if (query_match or category_match or title_score > 0.2) else 0.5


def attribute_matches(product: Product, goal: Goal) -> int:
    """How many goal attributes the product has (fuzzy, or as text in title, features, description)."""
    text = " ".join([product.title, " ".join(product.features), product.description]).lower()
    n = 0
    for want in goal.attributes:
        if any(_similar(have, want) for have in product.attributes) or want.lower() in text:
            n += 1
    return n


def option_matches(chosen: dict[str, str], goal: Goal) -> int:
    """How many goal option values are among the chosen ones (fuzzy, colours normalised)."""
    have = [normalize_color(v) for v in chosen.values()]
    return sum(1 for want in goal.options.values()
               if any(_similar(h, normalize_color(want)) for h in have))


@dataclass(frozen=True)
class Score:
    """The parts of one purchase's score."""

    r_type: float
    attributes: int
    options: int
    price_ok: bool
    total: int
    """Number of terms: goal attributes + goal options + 1."""

    @property
    def raw(self) -> float:
        return self.r_type * (self.attributes + self.options + int(self.price_ok)) / self.total


def score(product: Product, chosen: dict[str, str], goal: Goal) -> Score:
    """Score buying ``product`` with options ``chosen`` (name -> value) against ``goal``."""
    return Score(r_type=type_reward(product, goal), attributes=attribute_matches(product, goal),
                 options=option_matches(chosen, goal), price_ok=product.price <= goal.price_upper,
                 total=len(goal.attributes) + len(goal.options) + 1)


def binary_reward(raw: float) -> float:
    """RAGEN's reward: 1 for a perfect purchase, else 0 (partial credit is logged, not paid)."""
    return 1.0 if raw >= 1.0 else 0.0


def purchase_reward(raw: float, kind: str) -> float:
    """The reward of a purchase with score ``raw``: ``binary`` (:func:`binary_reward`, the
    reference) or ``score`` (the score itself, partial credit in [0, 1]; spec 17.5)."""
    if kind == "binary":
        return binary_reward(raw)
    if kind == "score":
        return float(raw)
    raise ValueError(f"unknown purchase_reward {kind!r}: use 'binary' or 'score'")
