"""The WebShop score, case by case, against values worked out by hand.

One goal: two attributes, two options, a price bound of 30, goal product "Sunmill Classic
Granola Q123" (nouns: sunmill, granola). raw = r_type * (attrs + options + price) / 5. All
expected values are exact fractions of small integers, compared with ``==`` after the same
division the score does (``n / 5``), so no tolerance is needed.
"""

from __future__ import annotations

import dataclasses

import pytest
from ragen_env_webshop.catalog import Product
from ragen_env_webshop.goals import Goal
from ragen_env_webshop.scoring import binary_reward, name_nouns, normalize_color, score

GOAL = Goal(asin="B0GOAL0001", instruction="i need gluten free, low sugar granola", attributes=("gluten free", "low sugar"),
            options={"flavor": "vanilla", "size": "pack of 2"}, price_upper=30.0, name="Sunmill Classic Granola Q123",
            query="granola", product_category="Grocery & Gourmet Food › Breakfast Foods › Cereals › Granola", weight=1.0)
PRODUCT = Product(asin="B0GOAL0001", title="Sunmill Classic Granola Q123", category="grocery", query="granola",
                  product_category=GOAL.product_category, price=20.0, description="Crunchy oats.",
                  features=("Baked slowly",), attributes=("gluten free", "low sugar"),
                  options={"flavor": ("vanilla", "honey"), "size": ("pack of 1", "pack of 2")})
RIGHT = {"flavor": "vanilla", "size": "pack of 2"}
OTHER_CATEGORY = "Electronics › Computers & Accessories › Mice"


def product(**changes) -> Product:
    return dataclasses.replace(PRODUCT, **changes)


# (case, product, options chosen, r_type, attributes matched, options matched, price ok, raw)
TABLE = [
    ("everything right", PRODUCT, RIGHT, 1.0, 2, 2, True, 5 / 5),
    ("price exactly at the bound", product(price=30.0), RIGHT, 1.0, 2, 2, True, 5 / 5),
    ("over the price bound", product(price=30.01), RIGHT, 1.0, 2, 2, False, 4 / 5),
    ("one option of two", PRODUCT, {"flavor": "honey", "size": "pack of 2"}, 1.0, 2, 1, True, 4 / 5),
    ("no option chosen", PRODUCT, {}, 1.0, 2, 0, True, 3 / 5),
    ("one attribute of two", product(attributes=("gluten free",)), RIGHT, 1.0, 1, 2, True, 4 / 5),
    ("no attribute, no option, over price", product(attributes=("kosher",), price=31.0), {}, 1.0, 0, 0, False, 0 / 5),
    ("no attribute, no option, under price", product(attributes=()), {}, 1.0, 0, 0, True, 1 / 5),
    ("attribute found in the description only", product(attributes=(), description="Low sugar, gluten free oats."),
     RIGHT, 1.0, 2, 2, True, 5 / 5),
    ("attribute found in a bullet point", product(attributes=("gluten free",), features=("Low Sugar recipe",)),
     RIGHT, 1.0, 2, 2, True, 5 / 5),
    ("fuzzy attribute (punctuation, case)", product(attributes=("Gluten-Free", "LOW SUGAR")), RIGHT, 1.0, 2, 2, True, 5 / 5),
    # type reward: query equal, and the names share every noun
    ("type: query match", product(product_category=OTHER_CATEGORY), RIGHT, 1.0, 2, 2, True, 5 / 5),
    # query differs, two category levels shared, 1 of 2 nouns shared (0.5 > 0.2 anyway)
    ("type: category match", product(query="cereal"), RIGHT, 1.0, 2, 2, True, 5 / 5),
    # nothing shared by the names: r_type 0 whatever else matches
    ("type: no shared noun", product(title="Voltiq Wireless Mouse"), RIGHT, 0.0, 2, 2, True, 0.0),
]


@pytest.mark.parametrize(("case", "prod", "chosen", "r_type", "attrs", "opts", "price_ok", "raw"), TABLE,
                         ids=[row[0] for row in TABLE])
def test_score_table(case, prod, chosen, r_type, attrs, opts, price_ok, raw):
    s = score(prod, chosen, GOAL)
    assert (s.r_type, s.attributes, s.options, s.price_ok, s.total) == (r_type, attrs, opts, price_ok, 5)
    assert s.raw == raw
    assert binary_reward(s.raw) == (1.0 if raw == 1.0 else 0.0)


# Type-reward cases that need other goal names: (goal name, product title, query equal, category equal, r_type)
LONG = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima"  # 12 nouns
FIVE = "alpha bravo charlie delta echo"
TYPE_TABLE = [
    ("1 of 12 nouns (< 0.1)", LONG, "alpha zulu", True, True, 0.1),
    ("1 of 5 nouns (0.2), nothing else matches", FIVE, "alpha zulu", False, False, 0.5),
    ("1 of 5 nouns, query matches", FIVE, "alpha zulu", True, False, 1.0),
    ("1 of 5 nouns, category matches", FIVE, "alpha zulu", False, True, 1.0),
    ("2 of 5 nouns (0.4 > 0.2)", FIVE, "alpha bravo zulu", False, False, 1.0),
    ("goal name without nouns counts 0.2", "the classic", "zulu", False, False, 0.5),
]


@pytest.mark.parametrize(("case", "goal_name", "title", "same_query", "same_category", "r_type"), TYPE_TABLE,
                         ids=[row[0] for row in TYPE_TABLE])
def test_type_reward_cases(case, goal_name, title, same_query, same_category, r_type):
    goal = dataclasses.replace(GOAL, name=goal_name)
    prod = product(title=title, query="granola" if same_query else "mouse",
                   product_category=GOAL.product_category if same_category else OTHER_CATEGORY)
    s = score(prod, RIGHT, goal)
    assert s.r_type == r_type
    assert s.raw == r_type * (2 + 2 + 1) / 5


def test_colour_options_are_normalised_before_matching():
    goal = dataclasses.replace(GOAL, options={"color": "black"})
    assert score(PRODUCT, {"color": "jet black"}, goal).options == 1
    assert score(PRODUCT, {"color": "white"}, goal).options == 0
    assert normalize_color("Jet black matte".lower()) == "black" and normalize_color("walnut") == "walnut"


def test_sizes_sharing_most_words_match_fuzzily():
    """The spec's fuzzy rule, kept as is: "pack of" is shared by both sizes, so the token-set
    ratio is 88.9 (> 85) and buying "pack of 1" satisfies a goal of "pack of 2"."""
    assert score(PRODUCT, {"flavor": "vanilla", "size": "pack of 1"}, GOAL).options == 2


def test_name_nouns_drop_stop_words_colours_and_sizes():
    assert name_nouns("The Classic Black Granola Bar, Pack of 6") == {"granola", "bar"}


def test_binary_reward_discards_partial_credit():
    assert [binary_reward(x) for x in (0.0, 0.5, 0.999999, 1.0)] == [0.0, 0.0, 0.0, 1.0]
