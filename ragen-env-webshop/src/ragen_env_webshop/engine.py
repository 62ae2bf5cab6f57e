"""The shop itself: pages, clickables and the page-to-page moves, as pure functions of a location.

A shopping session is a goal index plus a :class:`Location` (which page: the search page, a
results page of a query, an item page with the options picked so far, one of its description /
features / reviews pages, or the purchase page). :meth:`ShopEngine.step` takes a location and an
action string and returns the next location and its :class:`Page`. Nothing else is kept, so
one engine serves any number of sessions, the HTTP server is stateless, and an episode over
HTTP is the same as one in process.

A :class:`Page` is rendered two ways from the same data: :meth:`Page.parts` lists its visible
strings in reading order (the reference's "simple text" mode joins them with `` [SEP] ``), and
the HTML templates (:mod:`ragen_env_webshop.server`) show the same strings in the same order.

Actions (spec 13.6): ``search[words]`` on the search page (non-empty, at most
``max_query_chars``), ``click[x]`` for a clickable of the page other than ``search``; the text
in brackets is lower-cased. On a results page past the last hit, ``next >`` is not offered
(``end_of_page``). Anything else is invalid and changes nothing.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from ragen_env_webshop.catalog import Product, catalog_fingerprint, generate_catalog, load_products
from ragen_env_webshop.config import CatalogConfig
from ragen_env_webshop.goals import Goal, GoalSplit, make_goals
from ragen_env_webshop.scoring import Score, binary_reward, score
from ragen_env_webshop.search import index_for

SEP = " [SEP] "
BACK, PREV, NEXT, BUY = "back to search", "< prev", "next >", "buy now"
SUBPAGES = ("description", "features", "reviews")
_ACTION = re.compile(r"\s*([A-Za-z_]+)\s*\[(.*)\]\s*", re.DOTALL)


@dataclass(frozen=True)
class Location:
    """Where a session is; JSON-able (``asdict`` / ``Location.from_json``)."""

    kind: str = "search"
    """``search``, ``results``, ``item``, ``sub`` or ``done``."""
    query: str = ""
    page: int = 1
    asin: str = ""
    sub: str = ""
    options: tuple[tuple[str, str], ...] = ()
    """Options picked on the item page, ``(name, value)`` sorted by name."""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "query": self.query, "page": self.page, "asin": self.asin, "sub": self.sub,
                "options": [list(pair) for pair in self.options]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Location:
        opts = tuple((str(n), str(v)) for n, v in data.get("options") or ())
        return cls(kind=str(data.get("kind", "search")), query=str(data.get("query", "")), page=int(data.get("page", 1)),
                   asin=str(data.get("asin", "")), sub=str(data.get("sub", "")), options=opts)


@dataclass(frozen=True)
class Hit:
    asin: str
    title: str
    price: float


@dataclass
class Page:
    """Everything one page shows; :meth:`parts` and the HTML templates render it."""

    kind: str
    goal: str
    query: str = ""
    page: int = 1
    total: int = 0
    hits: list[Hit] = field(default_factory=list)
    product: Product | None = None
    selected: dict[str, str] = field(default_factory=dict)
    sub: str = ""
    lines: list[str] = field(default_factory=list)
    score: Score | None = None

    @property
    def clickables(self) -> list[str]:
        """Lower-cased texts a ``click[...]`` may name, in page order (``search`` is the search button)."""
        if self.kind == "search":
            return ["search"]
        if self.kind == "results":
            return [BACK, *([PREV] if self.page > 1 else []), NEXT, *(h.asin.lower() for h in self.hits)]
        if self.kind == "item":
            assert self.product is not None
            values = [v for vs in self.product.options.values() for v in vs]
            return list(dict.fromkeys([BACK, PREV, *values, *SUBPAGES, BUY]))  # a value two options share: once
        if self.kind == "sub":
            return [BACK, PREV]
        return []

    @property
    def has_search_bar(self) -> bool:
        return self.kind == "search"

    @property
    def end_of_page(self) -> bool:
        """A results page with no hits left (only back / prev / next to click)."""
        return self.kind == "results" and not self.hits

    def available_clicks(self) -> list[str]:
        """Clickables offered to the agent: all but ``search``, and no ``next >`` past the end."""
        return [c for c in self.clickables if c != "search" and not (c == NEXT and self.end_of_page)]

    def parts(self) -> list[str]:
        """The visible strings of the page in reading order (the HTML shows exactly these)."""
        head = ["Instruction:", self.goal]
        if self.kind == "search":
            return ["WebShop", *head, "Search"]
        if self.kind == "results":
            out = [*head, "Back to Search", f"Page {self.page} (Total results: {self.total})"]
            out += ["< Prev"] if self.page > 1 else []
            out.append("Next >")
            for h in self.hits:
                out += [h.asin, h.title, f"${h.price:.2f}"]
            return out
        p = self.product
        if self.kind == "item" and p is not None:
            out = [*head, "Back to Search", "< Prev"]
            for name, values in p.options.items():
                out += [name, *values]
            if self.selected:
                out.append("Selected: " + ", ".join(f"{k}: {v}" for k, v in self.selected.items()))
            return [*out, p.title, f"Price: ${p.price:.2f}", f"Rating: {p.rating}", "Description", "Features", "Reviews",
                    "Buy Now"]
        if self.kind == "sub":
            return [*head, "Back to Search", "< Prev", *self.lines]
        assert p is not None and self.score is not None
        chosen = ", ".join(f"{k}: {v}" for k, v in self.selected.items()) or "none"
        return ["Thank you for shopping with us!", "Purchased", p.asin, p.title, f"Options: {chosen}",
                f"Price: ${p.price:.2f}", "Your score (min 0.0, max 1.0)", f"{self.score.raw:.4f}"]

    def text(self) -> str:
        return SEP.join(self.parts())


@dataclass(frozen=True)
class Outcome:
    """Result of one action: where the session is now and what the step earned."""

    location: Location
    page: Page
    valid: bool
    done: bool = False
    raw_reward: float = 0.0

    @property
    def reward(self) -> float:
        return binary_reward(self.raw_reward) if self.done else 0.0

    def view(self) -> dict[str, Any]:
        """What an env needs of the outcome, JSON-able (the server's ``/api/step`` answer)."""
        page = self.page
        return {"location": self.location.to_json(), "text": page.text(), "search_bar": page.has_search_bar,
                "clicks": page.available_clicks(), "end_of_page": page.end_of_page, "valid": self.valid,
                "done": self.done, "raw_reward": self.raw_reward, "reward": self.reward}


def parse_action(action: Any) -> tuple[str, str] | None:
    """``name[arg]`` -> ``(name, arg)`` with both lower-cased and ``arg`` stripped; else None."""
    if not isinstance(action, str):
        return None
    m = _ACTION.fullmatch(action)
    if m is None:
        return None
    return m.group(1).lower(), m.group(2).strip().lower()


def well_formed_action(action: Any, max_query_chars: int) -> tuple[str, str] | None:
    """``(name, arg)`` when ``action`` has the shape of a WebShop action, whether or not a page offers
    it: ``search[...]`` with 1 to ``max_query_chars`` characters (stripped) or ``click[...]`` naming
    something; else None."""
    parsed = parse_action(action)
    if parsed is None or not parsed[1]:
        return None
    name, arg = parsed
    if name == "click" or (name == "search" and len(arg) <= max_query_chars):
        return parsed
    return None


class ShopEngine:
    """Catalog, goals and search of one shop; pure page functions over :class:`Location`."""

    def __init__(self, catalog: CatalogConfig, *, limit_goals: int = -1, top_k: int = 50, per_page: int = 10) -> None:
        if catalog.product_path:
            limit = catalog.num_products if catalog.limit_real_products else None
            self.products = load_products(catalog.product_path, catalog.attribute_path, catalog.seed, limit)
        else:
            self.products = generate_catalog(catalog.num_products, catalog.seed)
        self.by_asin = {p.asin: p for p in self.products}
        goals = make_goals(self.products, catalog.seed)
        self.goals: list[Goal] = goals[:limit_goals] if limit_goals > 0 else goals
        self.split = GoalSplit(len(self.goals))
        self.index = index_for(self.products, catalog.index_cache_dir)
        self.top_k, self.per_page = top_k, per_page
        self.fingerprint = catalog_fingerprint(self.products)

    def info(self) -> dict[str, Any]:
        return {"products": len(self.products), "goals": len(self.goals), "fingerprint": self.fingerprint,
                "top_k": self.top_k, "per_page": self.per_page}

    def goal_index(self, seed: int, mode: str) -> int:
        return self.split.index(seed, mode)

    # ------------------------------------------------------------------ pages
    def hits(self, query: str) -> list[int]:
        return list(self.index.search(query, self.top_k))

    def page(self, goal_idx: int, loc: Location) -> Page:
        """The page at ``loc``; an unknown product or sub-page falls back to the search page."""
        goal = self.goals[goal_idx].instruction
        product = self.by_asin.get(loc.asin)
        if loc.kind == "results":
            found = self.hits(loc.query)
            start = (max(1, loc.page) - 1) * self.per_page
            hits = [Hit(self.products[i].asin, self.products[i].title, self.products[i].price)
                    for i in found[start : start + self.per_page]]
            return Page("results", goal, query=loc.query, page=max(1, loc.page), total=len(found), hits=hits)
        if product is not None and loc.kind in ("item", "sub", "done"):
            selected = {n: v for n, v in loc.options if v in product.options.get(n, ())}
            if loc.kind == "item":
                return Page("item", goal, query=loc.query, page=loc.page, product=product, selected=selected)
            if loc.kind == "sub" and loc.sub in SUBPAGES:
                lines = {"description": [product.description or "No description."],
                         "features": list(product.features) or ["No features listed."],
                         "reviews": list(product.reviews) or ["No reviews yet."]}[loc.sub]
                return Page("sub", goal, query=loc.query, page=loc.page, product=product, selected=selected, sub=loc.sub,
                            lines=lines)
            if loc.kind == "done":
                return Page("done", goal, product=product, selected=selected,
                            score=score(product, selected, self.goals[goal_idx]))
        return Page("search", goal)

    def start(self, goal_idx: int) -> Outcome:
        loc = Location()
        return Outcome(loc, self.page(goal_idx, loc), valid=True)

    def step(self, goal_idx: int, loc: Location, action: Any, max_query_chars: int = 500) -> Outcome:
        """Apply ``action`` at ``loc``; an invalid action returns ``loc`` unchanged."""
        page = self.page(goal_idx, loc)
        parsed = well_formed_action(action, max_query_chars)
        if parsed is None or page.kind == "done":
            return Outcome(loc, page, valid=False)
        name, arg = parsed
        nxt: Location | None = None
        if name == "search":
            if page.has_search_bar:
                nxt = Location("results", query=arg, page=1)
        elif arg in page.available_clicks():
            nxt = self._click(loc, page, arg)
        if nxt is None:
            return Outcome(loc, page, valid=False)
        new_page = self.page(goal_idx, nxt)
        if nxt.kind == "done":
            assert new_page.score is not None
            return Outcome(nxt, new_page, valid=True, done=True, raw_reward=new_page.score.raw)
        return Outcome(nxt, new_page, valid=True)

    @staticmethod
    def _click(loc: Location, page: Page, arg: str) -> Location:
        if arg == BACK:
            return Location()
        if page.kind == "results":
            if arg == NEXT:
                return Location("results", query=loc.query, page=loc.page + 1)
            if arg == PREV:
                return Location("results", query=loc.query, page=loc.page - 1)
            return Location("item", query=loc.query, page=loc.page, asin=arg.upper())
        if page.kind == "sub":  # PREV: back to the item, options kept
            return Location("item", query=loc.query, page=loc.page, asin=loc.asin, options=loc.options)
        # item page
        if arg == PREV:
            return Location("results", query=loc.query, page=loc.page)
        if arg in SUBPAGES:
            return Location("sub", query=loc.query, page=loc.page, asin=loc.asin, sub=arg, options=loc.options)
        if arg == BUY:
            return Location("done", query=loc.query, page=loc.page, asin=loc.asin, options=loc.options)
        assert page.product is not None
        name = next(n for n, vs in page.product.options.items() if arg in vs)
        options = dict(loc.options)
        options[name] = arg
        return Location("item", query=loc.query, page=loc.page, asin=loc.asin, options=tuple(sorted(options.items())))

    # ------------------------------------------------------------------ solver
    def oracle_actions(self, goal_idx: int, loc: Location) -> list[str]:
        """Actions that buy the goal's product with its options, starting from ``loc``.

        It searches the product's title, pages forward to the page listing it, clicks it,
        picks each goal option and buys. Empty when the title search does not list it.
        """
        goal = self.goals[goal_idx]
        actions = [] if loc.kind == "search" else [f"click[{BACK}]"]
        found = [self.products[i].asin for i in self.hits(self.by_asin[goal.asin].title)]
        if goal.asin not in found:
            return []
        actions.append(f"search[{self.by_asin[goal.asin].title.lower()}]")
        actions += [f"click[{NEXT}]"] * (found.index(goal.asin) // self.per_page)
        actions.append(f"click[{goal.asin.lower()}]")
        actions += [f"click[{v}]" for v in goal.options.values()]
        actions.append(f"click[{BUY}]")
        return actions


_ENGINES: dict[str, ShopEngine] = {}
_ENGINE_LOCK = threading.Lock()


def engine_key(catalog: CatalogConfig, limit_goals: int, top_k: int, per_page: int) -> str:
    return json.dumps([catalog.model_dump(mode="json"), limit_goals, top_k, per_page], sort_keys=True)


def engine_for(catalog: CatalogConfig, *, limit_goals: int = -1, top_k: int = 50, per_page: int = 10) -> ShopEngine:
    """The process-wide engine for these settings (built once; envs and the server share it)."""
    key = engine_key(catalog, limit_goals, top_k, per_page)
    with _ENGINE_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = ShopEngine(catalog, limit_goals=limit_goals, top_k=top_k, per_page=per_page)
        return _ENGINES[key]
