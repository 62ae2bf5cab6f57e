"""The HTTP shop: same episodes as in process, HTML showing the text pages' strings, no 5xx on junk.

One real server (uvicorn on loopback, started as a child through ``ragen_core.services``)
serves every test here; requests go through ``urllib`` (no HTTP library beyond the package's).
"""

from __future__ import annotations

import html.parser
import json
import string
import urllib.error
import urllib.request
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ragen_env_webshop.config import CatalogConfig, WebShopConfig
from ragen_env_webshop.engine import SEP, Location, engine_for, parse_action
from ragen_env_webshop.env import WebShopEnv, shop_service

from ragen_core.errors import EnvError
from ragen_core.seeding import make_rng
from ragen_core.services import acquire

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Answer:
    def __init__(self, status: int, content_type: str, text: str) -> None:
        self.status_code, self.text = status, text
        self.headers = {"content-type": content_type}

    def json(self):
        return json.loads(self.text)


class Client:
    """GET / POST against the running shop; HTTP errors come back as answers, not exceptions."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _send(self, req: urllib.request.Request) -> Answer:
        try:
            with _OPENER.open(req, timeout=30) as resp:
                return Answer(resp.status, resp.headers.get("content-type", ""), resp.read().decode())
        except urllib.error.HTTPError as e:
            return Answer(e.code, e.headers.get("content-type", ""), e.read().decode())

    def get(self, path: str, params=None) -> Answer:
        if params:
            path += ("&" if "?" in path else "?") + urlencode(params if isinstance(params, list) else list(params.items()))
        return self._send(urllib.request.Request(self.url + path))

    def post(self, path: str, body: object) -> Answer:
        return self.post_raw(path, json.dumps(body).encode())

    def post_raw(self, path: str, data: bytes) -> Answer:
        return self._send(urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"}))


@pytest.fixture(scope="module")
def engine():
    return engine_for(CatalogConfig())


@pytest.fixture(scope="module")
def client(engine):
    with acquire(shop_service(WebShopConfig())) as shop:
        yield Client(shop.ensure_ready())


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


def test_every_seed_a_reset_takes_plays_the_same_goal_over_http(client, engine):
    """A seed of 2**63 or more (a run's base seed near the top plus its group: ragen_core takes seeds to
    2**64 - 1) was refused by the server with HTTP 422, an EnvError, while the in-process shop played it."""
    for seed in (2**63 - 1, 2**63, 2**64 - 1):
        for mode in ("train", "val"):
            answer = client.post("/api/reset", body={"seed": seed, "mode": mode})
            assert answer.status_code == 200, answer.text
            assert answer.json()["goal"] == engine.goal_index(seed, mode)
    assert client.get("/", params={"seed": 2**64 - 1}).status_code == 200  # the redirect to the test split's goal
    assert client.post("/api/reset", body={"seed": 2**64}).status_code == 422  # beyond what any reset takes


def buy_another_product(env: WebShopEnv, seed: int):
    """Search the goal's instruction, open a product other than the goal's, buy it: the last step."""
    env.reset(seed)
    goal = engine_for(env.config.catalog).goals[env._require_reset()]
    env.step(f"search[{goal.instruction}]")
    other = next(a for a in env.available_actions() if a.startswith("click[b0") and a != f"click[{goal.asin.lower()}]")
    env.step(other)
    return env.step("click[buy now]")


@pytest.mark.parametrize("purchase_reward", ["binary", "score"])
def test_the_purchase_reward_is_the_same_in_both_shops(client, purchase_reward):
    """A bought product that matches part of the goal: reward = its score under ``score``, 0 under
    ``binary`` (the default), in process, from the server the env starts and from one reached by
    URL; success still means score 1, and nothing more is paid once bought."""
    assert WebShopConfig().purchase_reward == "binary"
    envs = [WebShopEnv(purchase_reward=purchase_reward), WebShopEnv(shop="server", purchase_reward=purchase_reward),
            WebShopEnv(shop="server", server={"url": client.url}, purchase_reward=purchase_reward)]
    try:
        for seed in (4, 5):
            results = [buy_another_product(env, seed) for env in envs]
            raw = results[0].info["raw_reward"]
            assert 0.0 < raw < 1.0
            for result in results:
                assert result.done and result.info["raw_reward"] == raw
                assert result.reward == result.info["reward"] == (raw if purchase_reward == "score" else 0.0)
                assert not result.info["success"] and result.info["success_purchase"]
        for env in envs:
            after = env.step("click[back to search]")
            assert after.done and after.reward == 0.0 and not after.info["success"]
        assert envs[1]._http is not None and envs[1]._http.handle.pid is not None  # a real child served it
    finally:
        for env in envs:
            env.close()


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
    q = "blackout+curtains"
    asin = engine.products[engine.hits("blackout curtains")[0]].asin
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
    assert client.post("/api/step", body={"goal": 0, "location": {"options": [1]}}).status_code == 422
    assert client.post("/api/step", body={"goal": -1}).status_code == 404
    assert client.post("/api/reset", body={"seed": -1}).status_code == 422
    assert client.get("/health").json()["ok"] is True


def test_a_lone_surrogate_is_read_alike_by_both_shops_and_never_a_5xx(client):
    """search[\\udcff] over HTTP got HTTP 500, an EnvError ending the run (in-process it was a
    search), with a hint about server.url when no url was set."""
    raw = '{"goal": 0, "action": "search[\\udcff]", "location": {"kind": "search", "query": "\\ud800"}}'
    answer = client.post_raw("/api/step", raw.encode())
    assert answer.status_code == 200, answer.text
    local, remote = WebShopEnv(), WebShopEnv(shop="server")
    try:
        for env in (local, remote):
            env.reset(1)
        assert remote.step("search[\udcff blue]") == local.step("search[\udcff blue]")
        with pytest.raises(EnvError) as err:
            remote._shop()._call("/api/step", {"goal": "x"})  # a request the server refuses
        assert err.value.hints == [f"the shop server RAGEN started failed on this request: its log {remote._shop().handle.log_path} says why"]
    finally:
        remote.close()
        local.close()


def test_a_megabyte_search_is_an_invalid_action_over_http(client, engine):
    answer = client.post("/api/step", body={"goal": 0, "location": {}, "action": "search[" + "ab " * 350_000 + "]"})
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
    answer = client.post("/api/step", body={"goal": goal, "location": location, "action": action})
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


def _catalog_words():
    """Real names from elsewhere in the shop: every product code, option value and title."""
    engine = engine_for(CatalogConfig())
    codes = [p.asin.lower() for p in engine.products[:300]]
    values = sorted({v for p in engine.products for vs in p.options.values() for v in vs})
    titles = [p.title for p in engine.products[:100]]
    return codes, values, titles


CODES, VALUES, TITLES = _catalog_words()
NOT_HERE = st.one_of(st.sampled_from(CODES), st.sampled_from(VALUES), st.sampled_from(TITLES),
                     st.sampled_from(["price", "rating: 4.5", "instruction:", "webshop", "page 1", "selected", "search"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), depth=st.integers(0, 3), word=NOT_HERE)
@example(seed=39, depth=3, word="b0j1i8fnuc")  # a goal without options: its oracle buys on the third action
def test_real_items_and_options_not_on_the_page_are_invalid(seed, depth, word):
    """Product codes not listed here, option values of other products, page text that is not a
    button: clicking any of them is invalid, at any depth of the oracle's path before it buys."""
    env = WebShopEnv()
    env.reset(seed)
    for action in (env.oracle_actions() or [])[:-1][:depth]:  # (its last action buys: the episode is over)
        env.step(action)
    before = env.render()
    offered = f"click[{word.lower()}]" in env.available_actions()
    obs, reward, done, info = env.step(f"click[{word}]")
    assert info["action_is_valid"] == offered
    if not offered:
        assert (obs, reward, done) == (before, 0.0, False)


def test_a_dead_url_is_a_one_line_error_naming_the_server():
    from ragen_core.errors import RagenError
    from ragen_core.services import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RagenError, match=f"{url}.*was not ready"):
        WebShopEnv(shop="server", server={"url": url, "ready_timeout_s": 0.3}).reset(0)


def test_a_server_of_another_shop_is_reported(client):
    from ragen_core.errors import EnvError

    env = WebShopEnv(shop="server", server={"url": client.url})
    env.reset(0)
    env._goal = 10**9  # a goal this server does not have
    with pytest.raises(EnvError, match="answered HTTP 404"):
        env.step("search[x]")
    env.close()


def test_a_request_cut_off_by_the_servers_death_is_sent_again_to_the_restarted_server(monkeypatch, caplog):
    """The shop server killed while it answered a step stopped the whole run ("Connection reset by
    peer"); every request is a pure function of its body, so it goes once more to the restarted server."""
    import os
    import signal

    from ragen_env_webshop import env as env_mod

    local, remote = WebShopEnv(), WebShopEnv(shop="server")
    try:
        assert remote.reset(3) == local.reset(3)
        handle = remote._http.handle
        old = handle.pid
        real_open = env_mod._OPENER.open
        cut = []

        def dying_open(req, timeout=None):  # the server dies while this request is in flight
            if not cut:
                cut.append(req.full_url)
                os.kill(old, signal.SIGKILL)
                raise ConnectionResetError(104, "Connection reset by peer")
            return real_open(req, timeout=timeout)

        monkeypatch.setattr(env_mod._OPENER, "open", dying_open)
        with caplog.at_level("WARNING", logger="ragen_core.services"):
            assert remote.step("search[shirt]") == local.step("search[shirt]")
        assert cut and cut[0].endswith("/api/step") and handle.pid != old
        assert any(f"(pid {old}) died (killed by SIGKILL); restarting it" in r.getMessage() for r in caplog.records)
    finally:
        local.close()
        remote.close()
