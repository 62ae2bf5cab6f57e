"""The HTTP shop: same episodes as in process, HTML showing the text pages' strings, no 5xx on junk.

The child-process and URL modes start one real server (uvicorn, loopback) through
``ragen_core.services``; HTML and fuzz tests use FastAPI's in-memory test client.
"""

from __future__ import annotations

import html.parser
import string

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ragen_env_webshop.config import CatalogConfig
from ragen_env_webshop.engine import SEP, Location, engine_for, parse_action
from ragen_env_webshop.env import WebShopEnv
from ragen_env_webshop.server import create_app

from ragen_core.seeding import make_rng


@pytest.fixture(scope="module")
def engine():
    return engine_for(CatalogConfig())


@pytest.fixture(scope="module")
def client(engine):
    return TestClient(create_app(engine))


def play(env: WebShopEnv, seed: int, steps: int = 9) -> list:
    """An episode of random available actions (sometimes junk), then the oracle on a second goal."""
    rng = make_rng(seed, "test-play")
    trace = [env.reset(seed, mode="val" if seed % 3 == 0 else "train")]
    for _ in range(steps):
        action = env.random_action(rng) if rng.random() < 0.8 else "click[not there]"
        result = env.step(action)
        trace.append((action, result))
        if result.done:
            break
    env.reset(seed + 1000)
    for action in env.oracle_actions() or []:
        trace.append((action, env.step(action)))
    return trace


def test_in_process_and_http_episodes_are_identical():
    local, remote = WebShopEnv(), WebShopEnv(shop="server")
    try:
        for seed in range(12):
            assert play(remote, seed) == play(local, seed)
        assert remote._http is not None and remote._http.handle.pid is not None  # a real child served it
        # URL mode: a second env reaches the same server by its address, and sees the same shop
        url_env = WebShopEnv(shop="server", server={"url": remote._http.handle.ensure_ready()})
        assert play(url_env, 5) == play(local, 5)
        url_env.close()
        assert remote._http.handle.alive  # closing a URL-mode env leaves the server running
    finally:
        remote.close()
        local.close()


class _Visible(html.parser.HTMLParser):
    """Text nodes of the body, stripped, in document order (what a person reads)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("head", "style", "script", "title")

    def handle_endtag(self, tag):
        self._skip -= tag in ("head", "style", "script", "title")

    def handle_data(self, data):
        if not self._skip and data.strip():
            self.parts.append(data.strip())


def visible(text: str) -> list[str]:
    parser = _Visible()
    parser.feed(text)
    return parser.parts


def test_html_pages_show_exactly_the_strings_of_the_text_pages(client, engine):
    goal = engine.goal_index(0, "test")
    target = engine.goals[goal]
    q = "blackout curtains"
    asin = engine.products[engine.hits(q)[0]].asin
    opts = [("opt", f"{k}:{v}") for k, v in target.options.items()]
    urls = [f"/g/{goal}", f"/g/{goal}/search?q={q}", f"/g/{goal}/search?q={q}&page=2", f"/g/{goal}/search?q={q}&page=9",
            f"/g/{goal}/item/{asin}?q={q}", f"/g/{goal}/item/{asin}/description?q={q}",
            f"/g/{goal}/item/{asin}/features", f"/g/{goal}/item/{asin}/reviews", f"/g/{goal}/buy/{asin}"]
    urls += [f"/g/{goal}/item/{target.asin}", f"/g/{goal}/buy/{target.asin}"]
    for url in urls:
        page = client.get(url)
        text = client.get(url + ("&" if "?" in url else "?") + "format=text")
        assert page.status_code == text.status_code == 200, url
        assert page.headers["content-type"].startswith("text/html")
        assert SEP.join(visible(page.text)) == text.text, url
    with_opts = client.get(f"/g/{goal}/item/{target.asin}", params=opts + [("format", "text")]).text
    assert "Selected: " + ", ".join(f"{k}: {v}" for k, v in target.options.items()) in with_opts
    bought = client.get(f"/g/{goal}/buy/{target.asin}", params=opts + [("format", "text")]).text
    assert bought.endswith("Your score (min 0.0, max 1.0) [SEP] 1.0000")


def test_html_links_lead_where_the_text_actions_go(client, engine):
    goal = engine.goal_index(1, "test")
    page = client.get(f"/g/{goal}/search", params={"q": "green tea"}).text
    assert f'href="/g/{goal}/search?q=green+tea&amp;page=2"' in page  # next >
    first = engine.products[engine.hits("green tea")[0]].asin
    assert f'href="/g/{goal}/item/{first}?q=green+tea&amp;page=1"' in page


def test_errors_are_4xx(client, engine):
    assert client.get("/g/999999999").status_code == 404
    assert client.get("/g/0/item/NOPE").status_code == 404
    assert client.get(f"/g/0/item/{engine.products[0].asin}/nonsense").status_code == 404
    assert client.get("/g/0/search", params={"page": "-3", "q": "x"}).status_code == 422
    assert client.post("/api/step", json={"goal": 0, "location": {"options": [1]}}).status_code == 422
    assert client.post("/api/step", json={"goal": -1}).status_code == 404
    assert client.post("/api/reset", json={"seed": -1}).status_code == 422
    assert client.get("/health").json()["ok"] is True


def test_a_megabyte_search_is_an_invalid_action_over_http(client, engine):
    answer = client.post("/api/step", json={"goal": 0, "location": {}, "action": "search[" + "ab " * 350_000 + "]"})
    assert answer.status_code == 200 and answer.json()["valid"] is False
    big = client.get("/g/0/search", params={"q": "x" * 9000})
    assert big.status_code == 200


# ------------------------------------------------------------------ fuzzing the action parser
WORDS = st.text(alphabet=string.ascii_letters + string.digits + " []<>-_:,.'\"\\/\x00é中", max_size=40)
ACTIONS = st.one_of(
    st.text(max_size=80),
    st.builds(lambda w: f"click[{w}]", WORDS),
    st.builds(lambda w: f"search[{w}]", WORDS),
    st.builds(lambda n, w: f"{n}[{w}]", st.sampled_from(["Click", "SEARCH", "buy", "click ", " search"]), WORDS),
    st.sampled_from(["click[buy now]", "click[< prev]", "click[next >]", "click[description]", "click[search]", "search[x]"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(ACTIONS, max_size=6), seed=st.integers(0, 10**6))
def test_fuzzed_actions_never_raise_and_junk_is_invalid(engine, actions, seed):
    env = WebShopEnv()
    env.reset(seed)
    for action in actions:
        before = env.render()
        clicks = set(env.available_actions())
        obs, reward, done, info = env.step(action)
        parsed = parse_action(action)
        name, arg = parsed if parsed else ("", "")
        legal = (name == "search" and bool(arg) and len(arg) <= 500 and "search[<content>]" in clicks) or (
            name == "click" and f"click[{arg}]" in clicks)
        assert info["action_is_valid"] == legal, action
        if not legal:
            assert obs == before and reward == 0.0 and not done
        if done:
            break


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(location=st.dictionaries(st.sampled_from(["kind", "query", "page", "asin", "sub", "options"]),
                                st.one_of(st.text(max_size=20), st.integers(-5, 10**12), st.lists(st.text(max_size=5), max_size=3),
                                          st.none())),
       action=ACTIONS, goal=st.integers(-3, 10**7))
def test_fuzzed_api_requests_never_get_a_5xx(client, location, action, goal):
    answer = client.post("/api/step", json={"goal": goal, "location": location, "action": action})
    assert answer.status_code < 500, answer.text
    if answer.status_code == 200:
        assert set(answer.json()) >= {"valid", "text", "clicks", "location"}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(asin=st.text(alphabet=string.ascii_letters + string.digits + "-_.~", min_size=1, max_size=12),
       sub=st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=12), q=st.text(max_size=30),
       opts=st.lists(st.text(max_size=15), max_size=4), page=st.integers(-2, 2000))
def test_fuzzed_page_urls_never_get_a_5xx(client, engine, asin, sub, q, opts, page):
    params = [("q", q), ("page", page), *(("opt", o) for o in opts)]
    for path in (f"/g/0/item/{asin}", f"/g/0/item/{asin}/{sub}", f"/g/0/buy/{asin}", "/g/0/search"):
        assert client.get(path, params=params).status_code < 500, path
    real = engine.products[0].asin
    assert client.get(f"/g/0/item/{real}", params=params).status_code in (200, 422)


def test_location_round_trips_through_json():
    loc = Location("item", query="q", page=2, asin="B0X", options=(("color", "red"), ("size", "m")))
    assert Location.from_json(loc.to_json()) == loc
