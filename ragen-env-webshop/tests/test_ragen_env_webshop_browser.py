"""A real browser opens the served shop: screenshots of the search and an item page, and their DOM.

Needs a Chromium-family browser (Debian package ``chromium``, installed by ``make setup`` as
root); skipped with the reason where there is none. The pixel checks also need Pillow (an
optional test dependency: it decodes the PNGs). With ``RAGEN_SCREENSHOT_DIR`` set, the
screenshots are copied there (CI keeps them as artifacts).
"""

from __future__ import annotations

import html
import os
import shutil
import struct
from urllib.parse import urlencode

import pytest
from ragen_env_webshop.browser import dump_dom, find_browser, screenshot
from ragen_env_webshop.config import WebShopConfig
from ragen_env_webshop.engine import engine_for
from ragen_env_webshop.env import shop_service

from ragen_core.services import acquire

pytestmark = pytest.mark.skipif(find_browser() is None, reason="no Chromium browser on PATH (apt-get install chromium)")

SIZE = (1000, 700)
HEADER = (0x1F, 0x29, 0x37)  # the page header's background (#1f2937)
BLUE = (0x25, 0x63, 0xEB)  # button blue (#2563eb): Search, Buy Now
AMBER = (0xFB, 0xBF, 0x24)  # a picked option (#fbbf24)


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """Screenshots and DOM dumps of the search page and of the goal product's page, options picked."""
    config = WebShopConfig()
    engine = engine_for(config.catalog)
    out = tmp_path_factory.mktemp("shots")
    with acquire(shop_service(config)) as shop:
        url = shop.ensure_ready()
        goal = engine.goal_index(1, "test")
        target = engine.goals[goal]
        pages = {"search": f"{url}/g/{goal}",
                 "item": f"{url}/g/{goal}/item/{target.asin}?" + urlencode([("opt", f"{k}:{v}") for k, v in target.options.items()])}
        result = {"engine": engine, "goal": target}
        for name, page in pages.items():
            png = out / f"webshop-{name}.png"
            screenshot(page, str(png), width=SIZE[0], height=SIZE[1])
            result[name] = (png, html.unescape(dump_dom(page)))
            if os.environ.get("RAGEN_SCREENSHOT_DIR"):
                os.makedirs(os.environ["RAGEN_SCREENSHOT_DIR"], exist_ok=True)
                shutil.copy(png, os.environ["RAGEN_SCREENSHOT_DIR"])
    return result


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_search_page_is_rendered_with_the_goal(shots):
    png, dom = shots["search"]
    assert png_size(png) == SIZE and png.stat().st_size > 10_000  # a blank page compresses to far less
    assert shots["goal"].instruction in dom and '<input type="text" name="q"' in dom and ">Search</button>" in dom


def test_item_page_is_rendered_with_the_product_and_picked_options(shots):
    png, dom = shots["item"]
    product = shots["engine"].by_asin[shots["goal"].asin]
    assert png_size(png) == SIZE and png.stat().st_size > 10_000
    assert product.title in dom and f"Price: ${product.price:.2f}" in dom and "Buy Now" in dom
    assert dom.count('class="option selected"') == len(shots["goal"].options)
    assert all(f">{value}</a>" in dom for value in shots["goal"].options.values())


def test_screenshots_show_the_header_buttons_and_highlights(shots):
    image = pytest.importorskip("PIL.Image")  # Pillow is optional: it only decodes the PNGs here

    def colours(path) -> set[tuple[int, int, int]]:
        with image.open(path) as img:
            return {c for _, c in img.convert("RGB").getcolors(maxcolors=1 << 20)}

    search, item = colours(shots["search"][0]), colours(shots["item"][0])
    assert HEADER in search and BLUE in search and len(search) > 20  # header bar, Search button, anti-aliased text
    assert HEADER in item and BLUE in item and AMBER in item


def test_the_screenshot_command_saves_a_results_page(tmp_path, capsys):
    from ragen_env_webshop.cli import main

    out = tmp_path / "results.png"
    main(["screenshot", str(out), "--page", "results", "--width", "800", "--height", "600"])
    assert png_size(out) == (800, 600) and out.stat().st_size > 10_000
    assert "/search?q=" in capsys.readouterr().out
