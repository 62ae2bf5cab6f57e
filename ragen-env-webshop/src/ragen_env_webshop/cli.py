"""``ragen-webshop``: open the shop in a browser, or take screenshots of it.

    ragen-webshop serve [--port 8000] [--num-products 1000] [--product-path F --attribute-path F]
    ragen-webshop screenshot OUT.png [--page search|results|item] [--query WORDS]

``serve`` prints the address of the shop's first goal; every page links onward, and ``?seed=N``
on ``/`` opens another goal. ``screenshot`` starts the shop on a free loopback port, has headless
Chromium photograph one page, and stops it.
"""

from __future__ import annotations

import argparse
import sys

from ragen_core.errors import RagenError
from ragen_env_webshop.config import CatalogConfig


def _catalog(args: argparse.Namespace) -> CatalogConfig:
    return CatalogConfig(product_path=args.product_path, attribute_path=args.attribute_path,
                         num_products=args.num_products, seed=args.seed)


def _screenshot(args: argparse.Namespace) -> None:
    from urllib.parse import urlencode

    from ragen_core.services import acquire
    from ragen_env_webshop.browser import screenshot
    from ragen_env_webshop.config import WebShopConfig
    from ragen_env_webshop.engine import engine_for
    from ragen_env_webshop.env import shop_service

    engine = engine_for(_catalog(args))
    goal = engine.goal_index(args.seed_goal, "test")
    target = engine.goals[goal]
    query = args.query or target.query
    with acquire(shop_service(WebShopConfig(catalog=_catalog(args)))) as shop:
        base = f"{shop.ensure_ready()}/g/{goal}"
        url = {"search": base, "results": f"{base}/search?" + urlencode({"q": query}),
               "item": f"{base}/item/{target.asin}?" + urlencode([("q", query), *(("opt", f"{k}:{v}") for k, v in
                                                                              list(target.options.items())[:1])])}[args.page]
        screenshot(url, args.out, width=args.width, height=args.height)
    print(f"saved {args.out} ({url})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ragen-webshop", description="The WebShop env's shop, for people.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("serve", "serve the shop over HTTP"), ("screenshot", "save a PNG of a shop page")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--num-products", type=int, default=1000, help="size of the generated catalog")
        p.add_argument("--seed", type=int, default=0, help="catalog seed")
        p.add_argument("--product-path", default=None, help="real WebShop product file instead of the generated catalog")
        p.add_argument("--attribute-path", default=None, help="real items_ins_v2 attribute file")
    serve_p = sub.choices["serve"]
    serve_p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve_p.add_argument("--port", type=int, default=8000)
    shot = sub.choices["screenshot"]
    shot.add_argument("out")
    shot.add_argument("--page", choices=["search", "results", "item"], default="item")
    shot.add_argument("--query", default=None, help="search words (default: the goal product's type)")
    shot.add_argument("--seed-goal", type=int, default=0, help="test-split seed of the goal shown")
    shot.add_argument("--width", type=int, default=1200)
    shot.add_argument("--height", type=int, default=800)
    args = parser.parse_args(argv)
    if args.attribute_path and not args.product_path:  # the generated catalog would never read it
        parser.error("--attribute-path needs --product-path (the matching items_shuffle*.json)")
    try:
        if args.command == "serve":
            from ragen_env_webshop.engine import engine_for
            from ragen_env_webshop.server import serve

            engine = engine_for(_catalog(args))
            print(f"WebShop: {len(engine.products)} products, {len(engine.goals)} goals; "
                  f"open http://{args.host}:{args.port}/ (Ctrl-C stops)", flush=True)
            serve(engine, args.host, args.port, log_level="info")
        else:
            _screenshot(args)
    except (RagenError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
