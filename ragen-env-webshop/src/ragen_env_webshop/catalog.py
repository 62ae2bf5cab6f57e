"""Products of the shop: a generated catalog (the offline default) or the real WebShop files.

Both give a list of :class:`Product`. Everything random is drawn from generators keyed by the
catalog seed and the product's ASIN (:func:`ragen_core.seeding.make_rng`), never from global
state, so a catalog, its prices and its goals are the same in every process (the reference
drew prices and goal bounds from the unseeded global generator).

The generated catalog has five departments, each with product types, brands, attributes and
option dimensions of its own. Many products share a type and differ by attributes, options and
price, so finding the instruction's product needs search and reading, as in the real shop.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen_core.datafiles import json_kind
from ragen_core.errors import ConfigError
from ragen_core.seeding import make_rng

#: Price of a product the data gives no price for (the reference's rule).
DEFAULT_PRICE = 100.0


@dataclass(frozen=True)
class Product:
    """One product as the shop shows and scores it (field meanings follow the WebShop data)."""

    asin: str
    title: str
    """Shown on results and item pages; the reference's ``Title`` (= ``name``)."""
    category: str
    """Department (``beauty``, ``fashion``, ...)."""
    query: str
    """The search phrase the product was scraped under; the type reward compares it."""
    product_category: str
    """Breadcrumb path, levels joined by `` › ``."""
    price: float
    """The price this shop sells at (drawn once from a price range, seeded)."""
    description: str = ""
    features: tuple[str, ...] = ()
    """Bullet points."""
    reviews: tuple[str, ...] = ()
    rating: str = "N.A."
    attributes: tuple[str, ...] = ()
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Option name -> values, all lower-case (``{"color": ("black", "red")}``)."""
    instruction: str | None = None
    """Goal text of this product without options and price (``None``: not a goal product)."""
    instruction_attributes: tuple[str, ...] = ()

    def search_text(self) -> str:
        """What the search index reads: title, description, features and option values."""
        opts = " ".join(v for values in self.options.values() for v in values)
        return " ".join([self.title, self.description, *self.features, opts])


def catalog_fingerprint(products: list[Product]) -> str:
    """A short hash of the catalog (asins, titles, prices) that names its cached index."""
    h = hashlib.sha256()
    for p in products:
        h.update(f"{p.asin}\t{p.title}\t{p.price:.2f}\n".encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- generated catalog
# (department, breadcrumb root, types as (type phrase, breadcrumb tail), attributes, options)
_DEPARTMENTS: dict[str, dict[str, Any]] = {
    "beauty": {
        "root": "Beauty & Personal Care",
        "types": [("shampoo", "Hair Care › Shampoo"), ("face moisturizer", "Skin Care › Face › Moisturizers"),
                  ("lip balm", "Skin Care › Lips › Balms"), ("body wash", "Bath & Body › Body Wash"),
                  ("nail polish", "Foot, Hand & Nail Care › Nail Polish"), ("eye shadow palette", "Makeup › Eyes › Palettes"),
                  ("hair mask", "Hair Care › Treatments › Masks"), ("sunscreen lotion", "Skin Care › Sun › Sunscreens")],
        "attributes": ["paraben free", "cruelty free", "sensitive skin", "long lasting", "natural ingredients",
                       "travel size", "dry skin", "tea tree", "fragrance free", "easy apply", "vegan", "hyaluronic acid"],
        "options": {"size": ["1 fl oz", "2 fl oz", "4 fl oz", "8 fl oz", "16 fl oz"],
                    "scent": ["lavender", "coconut", "unscented", "citrus", "rose", "eucalyptus"]},
        "brands": ["Luma", "Verdel", "Oaklen", "Pureva", "Sorrel & Fig", "Kivu"],
        "prices": (4.0, 60.0),
    },
    "fashion": {
        "root": "Clothing, Shoes & Jewelry",
        "types": [("running shoes", "Men › Shoes › Athletic › Running"), ("t-shirt", "Women › Clothing › Tops › T-Shirts"),
                  ("hoodie", "Men › Clothing › Sweatshirts › Hoodies"), ("yoga pants", "Women › Clothing › Active › Leggings"),
                  ("rain jacket", "Women › Clothing › Coats › Rain Jackets"), ("ankle socks", "Men › Clothing › Socks"),
                  ("denim jeans", "Men › Clothing › Jeans"), ("summer dress", "Women › Clothing › Dresses")],
        "attributes": ["machine wash", "slim fit", "quick dry", "moisture wicking", "non slip", "cotton spandex",
                       "relaxed fit", "button closure", "elastic waist", "lightweight", "water resistant", "long sleeve"],
        "options": {"color": ["black", "white", "navy blue", "heather grey", "red", "olive green", "pink", "khaki"],
                    "size": ["x-small", "small", "medium", "large", "x-large", "xx-large"]},
        "brands": ["Northtrail", "Urbano", "Fieldwren", "Maple Row", "Kestrel", "Bayside"],
        "prices": (8.0, 90.0),
    },
    "garden": {
        "root": "Home & Kitchen",
        "types": [("console table", "Furniture › Living Room Furniture › Tables › Console Tables"),
                  ("throw pillow cover", "Home Decor › Pillows › Throw Pillow Covers"),
                  ("table lamp", "Lighting › Lamps › Table Lamps"), ("bed sheet set", "Bedding › Sheets & Pillowcases › Sheet Sets"),
                  ("blackout curtains", "Home Decor › Window Treatments › Curtains"),
                  ("storage basket", "Storage & Organization › Baskets"), ("bath towel set", "Bath › Towels › Towel Sets"),
                  ("area rug", "Home Decor › Rugs › Area Rugs")],
        "attributes": ["easy clean", "solid wood", "living room", "space saving", "easy assemble", "machine washable",
                       "eco friendly", "mid century", "stainless steel", "super soft", "heavy duty", "bedroom"],
        "options": {"color": ["white", "black", "grey", "beige", "walnut", "navy", "sage green"],
                    "size": ["twin", "full", "queen", "king", "18 x 18 inch", "20 x 20 inch"]},
        "brands": ["Hearthly", "Cobalt Lane", "Willowmere", "Nestwell", "Arbor & Oak", "Linden"],
        "prices": (12.0, 400.0),
    },
    "electronics": {
        "root": "Electronics",
        "types": [("wireless earbuds", "Headphones › Earbud Headphones"), ("phone case", "Cell Phones & Accessories › Cases"),
                  ("usb c cable", "Computers & Accessories › Cables › USB Cables"),
                  ("bluetooth speaker", "Portable Audio & Video › Portable Speakers"),
                  ("power bank", "Cell Phones & Accessories › Chargers › Portable Power Banks"),
                  ("hdmi cable", "Television & Video › Accessories › Cables › HDMI Cables"),
                  ("wireless mouse", "Computers & Accessories › Mice"), ("smart watch band", "Wearable Technology › Bands")],
        "attributes": ["fast charging", "noise cancelling", "high speed", "water resistant", "long battery life",
                       "easy install", "shockproof", "hands free", "usb port", "high definition", "compact size", "dual band"],
        "options": {"color": ["black", "white", "silver", "blue", "rose gold", "space grey"],
                    "style": ["standard", "pro", "mini", "2 pack", "3 pack"]},
        "brands": ["Voltiq", "Sonara", "Pixelnest", "Amperly", "Tekra", "Quillon"],
        "prices": (6.0, 150.0),
    },
    "grocery": {
        "root": "Grocery & Gourmet Food",
        "types": [("ground coffee", "Beverages › Coffee › Ground Coffee"), ("green tea", "Beverages › Tea › Green Tea"),
                  ("protein bar", "Snack Foods › Bars › Protein Bars"), ("trail mix", "Snack Foods › Nuts & Seeds › Trail Mix"),
                  ("olive oil", "Pantry Staples › Oils › Olive Oil"), ("dark chocolate", "Snack Foods › Candy › Chocolate"),
                  ("granola", "Breakfast Foods › Cereals › Granola"), ("hot sauce", "Pantry Staples › Condiments › Hot Sauce")],
        "attributes": ["gluten free", "non gmo", "low sugar", "keto friendly", "usda organic", "high protein",
                       "sugar free", "plant based", "kosher certified", "ready eat", "dairy free", "low carb"],
        "options": {"flavor": ["original", "vanilla", "dark roast", "peanut butter", "sea salt", "mint", "honey"],
                    "size": ["pack of 1", "pack of 2", "pack of 6", "12 ounce", "2 pound"]},
        "brands": ["Goldfield", "Harvest Kin", "Peak & Pantry", "Sunmill", "Brindle Farm", "Tallgrass"],
        "prices": (3.0, 45.0),
    },
}
_TITLE_WORDS = ["premium", "classic", "everyday", "deluxe", "essential", "signature", "original", "modern", "ultra", "select"]
_INSTRUCTION_FORMS = ["i need {a} {t}", "i am looking for {a} {t}", "find me {a} {t}", "i want to buy {a} {t}",
                      "looking for {a} {t}"]
_REVIEW_FORMS = ["Exactly what I needed, the {t} arrived quickly.", "Good value for the price; the {a} part is true.",
                 "Returned it: not as {a} as described.", "Second time buying this {t}. Recommended.",
                 "Works fine, packaging could be better."]
_ASIN_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _join_attrs(attrs: list[str]) -> str:
    return attrs[0] if len(attrs) == 1 else ", ".join(attrs[:-1]) + " and " + attrs[-1]


def generate_catalog(num_products: int, seed: int = 0) -> list[Product]:
    """``num_products`` products made from the department tables above; one generator per product.

    Product ``i`` depends only on ``(seed, i)``, so a larger catalog starts with the smaller one.
    """
    departments = sorted(_DEPARTMENTS)
    products: list[Product] = []
    seen: set[str] = set()
    for i in range(num_products):
        rng = make_rng(seed, "webshop-product", i)
        dept_name = departments[i % len(departments)]
        dept = _DEPARTMENTS[dept_name]
        type_phrase, tail = dept["types"][int(rng.integers(len(dept["types"])))]
        brand = dept["brands"][int(rng.integers(len(dept["brands"])))]
        n_attr = int(rng.integers(2, 5))
        attrs = [dept["attributes"][j] for j in sorted(rng.choice(len(dept["attributes"]), n_attr, replace=False))]
        word = _TITLE_WORDS[int(rng.integers(len(_TITLE_WORDS)))]
        model = f"{_ASIN_CHARS[int(rng.integers(10, 36))]}{int(rng.integers(100, 1000))}"
        title_attrs = ", ".join(a.title() for a in attrs[:2])
        title = f"{brand} {word.title()} {type_phrase.title()} {model}, {title_attrs}"
        options: dict[str, tuple[str, ...]] = {}
        for name in sorted(dept["options"]):
            values = dept["options"][name]
            if rng.random() < 0.75:
                k = int(rng.integers(2, min(5, len(values)) + 1))
                options[name] = tuple(values[j] for j in sorted(rng.choice(len(values), k, replace=False)))
        low, high = dept["prices"]
        price = round(float(low * (high / low) ** rng.random()), 2)
        while True:
            asin = "B0" + "".join(_ASIN_CHARS[int(x)] for x in rng.integers(0, 36, 8))
            if asin not in seen:
                break
        seen.add(asin)
        n_goal_attrs = int(rng.integers(1, min(3, n_attr) + 1))
        goal_attrs = tuple(attrs[j] for j in sorted(rng.choice(n_attr, n_goal_attrs, replace=False)))
        form = _INSTRUCTION_FORMS[int(rng.integers(len(_INSTRUCTION_FORMS)))]
        instruction = form.format(a=_join_attrs(list(goal_attrs)), t=type_phrase)
        features = (f"{attrs[0].capitalize()}: made for everyday use", f"Brand: {brand}",
                    *(f"{a.capitalize()} design" for a in attrs[1:]), f"Model {model}")
        reviews = tuple(_REVIEW_FORMS[int(j)].format(t=type_phrase, a=attrs[int(j) % n_attr])
                        for j in rng.choice(len(_REVIEW_FORMS), int(rng.integers(1, 4)), replace=False))
        rating = f"{float(rng.uniform(3.0, 5.0)):.1f}"
        description = (f"The {brand} {type_phrase} {model} is {_join_attrs(attrs)}. "
                       f"A {word} choice from our {dept['root'].lower()} range.")
        products.append(Product(
            asin=asin, title=title, category=dept_name, query=type_phrase,
            product_category=f"{dept['root']} › {tail}", price=price, description=description,
            features=features, reviews=reviews, rating=rating, attributes=tuple(attrs), options=options,
            instruction=instruction, instruction_attributes=goal_attrs,
        ))
    return products


# --------------------------------------------------------------------------- real WebShop files
def _draw_price(pricing: Any, seed: int, asin: str) -> float:
    """The shop price: the only price, a seeded uniform draw inside a range, or 100 when absent."""
    values = [float(p) for p in pricing] if isinstance(pricing, list) else []
    if not values:
        return DEFAULT_PRICE
    if len(values) == 1:
        return round(values[0], 2)
    low, high = min(values[:2]), max(values[:2])
    return round(float(make_rng(seed, "webshop-price", asin).uniform(low, high)), 2)


def _options_of(raw: Any) -> dict[str, tuple[str, ...]]:
    """``customization_options`` (``{"Color": [{"value": ...}, ...]}``) -> lower-case values."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for name, entries in raw.items():
        if not isinstance(entries, list):
            continue
        values: list[str] = []
        for entry in entries:
            value = entry.get("value") if isinstance(entry, dict) else entry
            if isinstance(value, str) and value.strip() and value.strip().lower() not in values:
                values.append(value.strip().lower())
        if values:
            out[str(name).strip().lower()] = tuple(values)
    return out


def _reviews_of(raw: Any) -> tuple[str, ...]:
    out = []
    for r in raw if isinstance(raw, list) else []:
        if isinstance(r, dict):
            text = " ".join(str(r.get(k, "")).strip() for k in ("title", "body") if r.get(k))
            if r.get("score") not in (None, ""):
                text = f"{text} ({r['score']}/5)" if text else f"{r['score']}/5"
            if text:
                out.append(text)
        elif isinstance(r, str) and r.strip():
            out.append(r.strip())
    return tuple(out)


def product_from_raw(raw: dict[str, Any], attrs: dict[str, Any] | None, seed: int) -> Product:
    """One real product (an ``items_shuffle`` entry, or the ``product`` of a search document)."""
    asin = str(raw.get("asin") or raw.get("id") or "").strip().upper()
    title = str(raw.get("name") or raw.get("Title") or "").strip()
    if not asin or not title:
        raise ValueError("product without asin or name")
    features = raw.get("small_description") or raw.get("BulletPoints") or []
    if isinstance(features, str):
        features = [features]
    attrs = attrs or {}
    rating = raw.get("average_rating") or raw.get("Rating") or "N.A."
    return Product(
        asin=asin, title=title, category=str(raw.get("category") or ""), query=str(raw.get("query") or "").lower().strip(),
        product_category=str(raw.get("product_category") or ""), price=_draw_price(raw.get("pricing"), seed, asin),
        description=str(raw.get("full_description") or raw.get("Description") or "").strip(),
        features=tuple(str(f).strip() for f in features if str(f).strip()), reviews=_reviews_of(raw.get("Reviews") or raw.get("reviews")),
        rating=str(rating), attributes=tuple(str(a) for a in attrs.get("attributes") or raw.get("Attributes") or []),
        options=_options_of(raw.get("customization_options")),
        instruction=(str(attrs["instruction"]).strip() or None) if attrs.get("instruction") else None,
        instruction_attributes=tuple(str(a) for a in attrs.get("instruction_attributes") or []),
    )


def _entry_problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with one attribute-file entry's fields (None: nothing). ``attributes`` and
    ``instruction_attributes`` are lists of strings, ``instruction`` is a string; each may be
    absent or null, and other keys are ignored. ``instruction`` and ``instruction_attributes``
    come together: a product's goal needs both."""
    for name in ("attributes", "instruction_attributes"):
        value = entry.get(name)
        if value is None:
            continue
        if not isinstance(value, list):
            return f"{name!r} is a JSON {json_kind(value)}, not a list of strings"
        bad = next((i for i, item in enumerate(value) if not isinstance(item, str)), None)
        if bad is not None:
            return f"{name!r} item {bad + 1} is a JSON {json_kind(value[bad])}, not a string"
    value = entry.get("instruction")
    if value is not None and not isinstance(value, str):
        return f"'instruction' is a JSON {json_kind(value)}, not a string"
    has_text, has_attrs = bool((value or "").strip()), bool(entry.get("instruction_attributes"))
    if has_text != has_attrs:  # either alone gave the product no goal, and nothing said so
        given, lacking = ("instruction", "instruction_attributes") if has_text else ("instruction_attributes", "instruction")
        return f"{given!r} is set but {lacking!r} is missing or empty: a goal needs both (or neither, for no goal)"
    return None


def _read_raw_products(path: Path) -> list[dict[str, Any]]:
    """A JSON list of products, or JSON lines (products or ``{"product": ...}`` documents)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.split("\n"), 1):  # json's own line is 1 on every line: the file's is named
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"line {number} is not JSON: {e.msg} (column {e.colno})") from None
    else:
        data = json.loads(text)
        rows = data if isinstance(data, list) else list(data.values()) if isinstance(data, dict) else []
    return [r["product"] if isinstance(r, dict) and isinstance(r.get("product"), dict) else r for r in rows]


def load_products(product_path: str, attribute_path: str | None, seed: int = 0, limit: int | None = None) -> list[Product]:
    """Read real WebShop product (and attribute) files; rows without asin or name are skipped.

    Raises:
        ConfigError: a file is missing or unreadable, or no product could be read.
    """
    path = Path(product_path).expanduser()
    hint = ["catalog.product_path: items_shuffle*.json or a documents .jsonl; catalog.attribute_path: items_ins_v2*.json"]
    for setting, file in (("catalog.product_path", path), ("catalog.attribute_path", attribute_path)):
        if file is not None and Path(file).expanduser().is_dir():
            raise ConfigError(f"{setting} {file} is a folder: the WebShop catalog is read from files", hint)
    try:
        rows = _read_raw_products(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the WebShop products of catalog.product_path {path} ({e})", hint) from None
    try:
        attr_map = json.loads(Path(attribute_path).expanduser().read_text(encoding="utf-8")) if attribute_path else {}
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the WebShop attributes of catalog.attribute_path {attribute_path} ({e})", hint) from None
    shape = ["catalog.attribute_path takes items_ins_v2*.json: a JSON object mapping each ASIN to an object of its attributes "
             '({"B0...": {"attributes": [...], "instruction": "...", "instruction_attributes": [...]}})']
    if not isinstance(attr_map, dict):  # was AttributeError: 'list' object has no attribute 'get'
        raise ConfigError(f"catalog.attribute_path {attribute_path} holds a JSON {json_kind(attr_map)}, "
                          "not an object mapping each ASIN to its attributes", shape)
    bad = next((k for k, v in attr_map.items() if v is not None and not isinstance(v, dict)), None)
    if bad is not None:
        raise ConfigError(f"catalog.attribute_path {attribute_path}: the entry of {bad!r} is a JSON "
                          f"{json_kind(attr_map[bad])}, not an object of attributes", shape)
    for asin, entry in attr_map.items():
        problem = _entry_problem(entry) if entry else None
        if problem is not None:  # a string's letters became its attributes; a number was a TypeError traceback
            raise ConfigError(f"catalog.attribute_path {attribute_path}: the entry of {asin!r}: {problem}", shape)
    products: list[Product] = []
    seen: set[str] = set()
    for raw in rows:
        if not isinstance(raw, dict):
            continue
        asin = str(raw.get("asin") or raw.get("id") or "").upper()
        try:
            product = product_from_raw(raw, attr_map.get(asin), seed)
        except ValueError:
            continue
        if product.asin in seen:
            continue
        seen.add(product.asin)
        products.append(product)
        if limit is not None and len(products) >= limit:
            break
    if not products:
        raise ConfigError(f"no products in {product_path}", ["each product needs an asin and a name"])
    return products
