"""The HTTP shop: HTML pages for people, the same pages as simple text, and the env's JSON API.

Built with FastAPI and served by uvicorn; pages come from the Jinja2 templates next to this
module. Every page is a pure function of its URL (goal index, query, page number, product,
options picked), so the server keeps no sessions and any number of envs and browsers can use
it at once.

Routes:
    ``GET /health``                                   readiness probe (``ragen_core.services``)
    ``GET /``                                         redirect to the shop of goal ``?seed=`` (test split)
    ``GET /g/{goal}``                                 search page
    ``GET /g/{goal}/search?q=&page=``                 results page
    ``GET /g/{goal}/item/{asin}?q=&page=&opt=name:value``        item page (options picked so far)
    ``GET /g/{goal}/item/{asin}/{description|features|reviews}``  sub-pages
    ``GET /g/{goal}/buy/{asin}?opt=...``             purchase page with the score
    Any page with ``?format=text``: the simple-text form (`` [SEP] ``-joined strings).
    ``GET /api/info``, ``POST /api/reset``, ``POST /api/step``, ``POST /api/oracle``: the env's calls.

Run: ``ragen-webshop serve`` (see :mod:`ragen_env_webshop.cli`), or as the env's child process:
``python -m ragen_env_webshop.server --host H --port P --settings JSON``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel, Field, model_validator

from ragen_core.errors import RagenError
from ragen_env_webshop.config import CatalogConfig
from ragen_env_webshop.engine import SUBPAGES, Location, Page, ShopEngine, engine_for

TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).with_name("templates")),
                        autoescape=select_autoescape(["html"]))


def _utf8(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings as "?": JSON may carry one (``"\\udcff"``),
    UTF-8 cannot, and the page that echoes it failed to encode (HTTP 500)."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, list):
        return [_utf8(v) for v in value]
    if isinstance(value, dict):
        return {_utf8(k): _utf8(v) for k, v in value.items()}
    return value


class _Request(BaseModel):
    @model_validator(mode="before")
    @classmethod
    def _no_lone_surrogates(cls, data: Any) -> Any:
        return _utf8(data)


class ResetRequest(BaseModel):
    seed: int = Field(ge=0, le=2**64 - 1)  # every seed Env.reset takes (ragen_core.seeding.check_key)
    mode: str = "train"


class StepRequest(_Request):
    goal: int
    location: dict[str, Any] = Field(default_factory=dict)
    action: str = ""
    max_query_chars: int = Field(default=500, ge=1)


class OracleRequest(_Request):
    goal: int
    location: dict[str, Any] = Field(default_factory=dict)


def _swatch(asin: str) -> str:
    """A product's picture stand-in: a gradient whose hues come from its ASIN (no image files)."""
    h = hashlib.sha256(asin.encode()).digest()
    return f"linear-gradient(135deg, hsl({h[0] * 360 // 256},70%,60%), hsl({h[1] * 360 // 256},60%,40%))"


def _opts_query(options: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("opt", f"{n}:{v}") for n, v in options]


def _url(path: str, params: list[tuple[str, Any]]) -> str:
    params = [(k, v) for k, v in params if v not in ("", None)]
    return path + ("?" + urlencode(params) if params else "")


def render_html(page: Page, goal: int, loc: Location) -> str:
    """The HTML of ``page``: the same visible strings as :meth:`Page.parts`, in the same order."""
    base = f"/g/{goal}"
    state = [("q", loc.query), ("page", loc.page)]
    links: dict[str, str] = {"search": f"{base}/search", "back": base}
    ctx: dict[str, Any] = {"page": page, "links": links}
    if page.kind == "results":
        links["prev"] = _url(f"{base}/search", [("q", loc.query), ("page", page.page - 1)])
        links["next"] = _url(f"{base}/search", [("q", loc.query), ("page", page.page + 1)])
        ctx["hits"] = [{"asin": h.asin, "title": h.title, "price": h.price, "swatch": _swatch(h.asin),
                        "href": _url(f"{base}/item/{quote(h.asin)}", state)} for h in page.hits]
    elif page.kind in ("item", "sub"):
        p = page.product
        assert p is not None
        item = f"{base}/item/{quote(p.asin)}"
        picked = list(loc.options)
        links["prev"] = (_url(f"{base}/search", state) if page.kind == "item"
                         else _url(item, state + _opts_query(picked)))
        for sub in SUBPAGES:
            links[sub] = _url(f"{item}/{sub}", state + _opts_query(picked))
        links["buy"] = _url(f"{base}/buy/{quote(p.asin)}", state + _opts_query(picked))
        options = []
        for name, values in p.options.items():
            rows = []
            for v in values:
                new = sorted({**dict(picked), name: v}.items())
                rows.append({"value": v, "selected": page.selected.get(name) == v,
                             "href": _url(item, state + _opts_query(new))})
            options.append((name, rows))
        ctx.update(options=options, swatch=_swatch(p.asin),
                   selected_text="Selected: " + ", ".join(f"{k}: {v}" for k, v in page.selected.items()) if page.selected else "")
    elif page.kind == "done":
        ctx["parts"] = page.parts()
    return TEMPLATES.get_template(f"{page.kind}.html").render(**ctx)


def create_app(engine: ShopEngine) -> FastAPI:
    """The FastAPI app serving ``engine``'s shop."""
    app = FastAPI(title="WebShop", docs_url=None, redoc_url=None, openapi_url=None)

    def check_goal(goal: int) -> None:
        if not 0 <= goal < len(engine.goals):
            raise HTTPException(404, f"no goal {goal} (0..{len(engine.goals) - 1})")

    def show(goal: int, loc: Location, fmt: str | None) -> Response:
        check_goal(goal)
        page = engine.page(goal, loc)
        if loc.kind in ("item", "sub", "done") and page.kind == "search":
            raise HTTPException(404, "no such product or page")
        if fmt == "text":
            return PlainTextResponse(page.text())
        return HTMLResponse(render_html(page, goal, loc))

    def location(data: dict[str, Any]) -> Location:
        try:
            return Location.from_json(data)
        except (TypeError, ValueError) as e:
            raise HTTPException(422, f"bad location: {e}") from None

    def opts(values: list[str]) -> tuple[tuple[str, str], ...]:
        pairs = {}
        for v in values[:20]:
            name, _, value = v.partition(":")
            pairs[name.strip().lower()] = value.strip().lower()
        return tuple(sorted(pairs.items()))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, **engine.info()}

    @app.get("/api/info")
    async def info() -> dict[str, Any]:
        return engine.info()

    @app.post("/api/reset")
    async def api_reset(req: ResetRequest) -> dict[str, Any]:
        goal = engine.goal_index(req.seed, req.mode)
        return {"goal": goal, "view": engine.start(goal).view()}

    @app.post("/api/step")
    async def api_step(req: StepRequest) -> dict[str, Any]:
        check_goal(req.goal)
        return engine.step(req.goal, location(req.location), req.action, req.max_query_chars).view()

    @app.post("/api/oracle")
    async def api_oracle(req: OracleRequest) -> dict[str, Any]:
        check_goal(req.goal)
        return {"actions": engine.oracle_actions(req.goal, location(req.location))}

    @app.get("/")
    async def root(seed: int = Query(0, ge=0, le=2**64 - 1)) -> RedirectResponse:
        return RedirectResponse(f"/g/{engine.goal_index(seed, 'test')}")

    @app.get("/g/{goal}")
    async def search_page(goal: int, format: str | None = None) -> Response:
        return show(goal, Location(), format)

    @app.get("/g/{goal}/search")
    async def results(goal: int, q: str = Query("", max_length=10_000), page: int = Query(1, ge=1, le=1000),
                format: str | None = None) -> Response:
        q = q.strip().lower()
        return show(goal, Location("results", query=q, page=page) if q else Location(), format)

    @app.get("/g/{goal}/item/{asin}")
    async def item(goal: int, asin: str, q: str = "", page: int = Query(1, ge=1, le=1000), opt: list[str] = Query([]),  # noqa: B008
             format: str | None = None) -> Response:
        return show(goal, Location("item", query=q, page=page, asin=asin.upper(), options=opts(opt)), format)

    @app.get("/g/{goal}/item/{asin}/{sub}")
    async def sub_page(goal: int, asin: str, sub: str, q: str = "", page: int = Query(1, ge=1, le=1000),
                 opt: list[str] = Query([]), format: str | None = None) -> Response:  # noqa: B008
        return show(goal, Location("sub", query=q, page=page, asin=asin.upper(), sub=sub, options=opts(opt)), format)

    @app.get("/g/{goal}/buy/{asin}")
    async def buy(goal: int, asin: str, q: str = "", page: int = Query(1, ge=1, le=1000), opt: list[str] = Query([]),  # noqa: B008
            format: str | None = None) -> Response:
        return show(goal, Location("done", query=q, page=page, asin=asin.upper(), options=opts(opt)), format)

    return app


def engine_from_settings(settings: dict[str, Any]) -> ShopEngine:
    """The engine the env's child-process command line describes (``--settings`` JSON)."""
    return engine_for(CatalogConfig(**settings.get("catalog", {})), limit_goals=int(settings.get("limit_goals", -1)),
                      top_k=int(settings.get("top_k", 50)), per_page=int(settings.get("per_page", 10)))


def serve(engine: ShopEngine, host: str, port: int, log_level: str = "warning") -> None:
    import uvicorn

    uvicorn.run(create_app(engine), host=host, port=port, log_level=log_level, access_log=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="WebShop server (the env's child process)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--settings", default="{}", help="JSON: catalog, limit_goals, top_k, per_page")
    args = parser.parse_args(argv)
    try:
        engine = engine_from_settings(json.loads(args.settings))
    except RagenError as e:  # a catalog that does not load: its one line (the service's error quotes the last output)
        print(f"ragen-webshop-server: {type(e).__name__}: {e.message}", file=sys.stderr)
        return 2
    serve(engine, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
