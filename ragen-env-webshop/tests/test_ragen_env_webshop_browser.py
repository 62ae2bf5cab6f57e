"""A real browser opens the served shop: screenshots of the search and an item page, and their DOM.

Needs a Chromium-family browser (Debian package ``chromium``, installed by ``make setup`` as
root); skipped with the reason where there is none. With ``RAGEN_SCREENSHOT_DIR`` set, the
screenshots are also copied there (CI keeps them as artifacts).
"""

from __future__ import annotations

import html
import os
import shutil
from urllib.parse import urlencode

import pytest
from PIL import Image
from ragen_env_webshop.browser import dump_dom, find_browser, screenshot
from ragen_env_webshop.config import WebShopConfig
from ragen_env_webshop.engine import engine_for
from ragen_env_webshop.env import shop_service

from ragen_core.services import acquire

pytestmark = pytest.mark.skipif(find_browser() is None, reason="no Chromium browser on PATH (apt-get install chromium)")

HEADER = (0x1F, 0x29, 0x37)  # the page header's background (#1f2937)
BUY = (0x25, 0x63, 0xEB)  # button blue (#2563eb)


@pytest.fixture(scope="module")
def shop():
    config = WebShopConfig()
    engine = engine_for(config.catalog)
    with acquire(shop_service(config)) as handle:
        yield handle.ensure_ready(), engine


def colours(path) -> set[tuple[int, int, int]]:
    with Image.open(path) as img:
        rgb = img.convert("RGB")
        assert rgb.size == (1000, 700)
        return {c for _, c in rgb.getcolors(maxcolors=1 << 20)}


def keep(path) -> None:
    out = os.environ.get("RAGEN_SCREENSHOT_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        shutil.copy(path, out)


def test_search_page_screenshot_and_dom(shop, tmp_path):
    url, engine = shop
    goal = engine.goal_index(0, "test")
    png = tmp_path / "webshop-search.png"
    screenshot(f"{url}/g/{goal}", str(png), width=1000, height=700)
    seen = colours(png)
    assert HEADER in seen and BUY in seen and len(seen) > 20  # header bar, Search button, anti-aliased text
    dom = html.unescape(dump_dom(f"{url}/g/{goal}"))
    assert engine.goals[goal].instruction in dom and '<input type="text" name="q"' in dom
    keep(png)


def test_item_page_screenshot_and_dom(shop, tmp_path):
    url, engine = shop
    goal = engine.goal_index(1, "test")
    target = engine.goals[goal]
    product = engine.by_asin[target.asin]
    page = f"{url}/g/{goal}/item/{target.asin}?" + urlencode([("opt", f"{k}:{v}") for k, v in target.options.items()])
    png = tmp_path / "webshop-item.png"
    screenshot(page, str(png), width=1000, height=700)
    seen = colours(png)
    assert HEADER in seen and BUY in seen
    assert (0xFB, 0xBF, 0x24) in seen  # a picked option is highlighted amber (#fbbf24)
    dom = html.unescape(dump_dom(page))
    assert product.title in dom and f"Price: ${product.price:.2f}" in dom and "Buy Now" in dom
    assert dom.count('class="option selected"') == len(target.options)
    assert all(f">{value}</a>" in dom for value in target.options.values())
    keep(png)
