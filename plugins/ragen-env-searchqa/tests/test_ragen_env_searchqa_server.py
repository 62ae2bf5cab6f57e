"""The retrieval server: bad input gets a 4xx with a message and the server lives on; liveness is
not readiness; concurrent requests are searched in shared batches."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_env_searchqa.index import Hit
from ragen_env_searchqa.server import MAX_QUERY_CHARS, MAX_TOP_K, BadRequest, Batcher, _parse, create_app

from ragen_core.services import ServiceSpec, acquire


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    spec = ServiceSpec(name="searchqa-test-server", health_path="/ready",
                       command=(sys.executable, "-m", "ragen_env_searchqa.server", "serve", "--host", "{host}", "--port", "{port}",
                                "--world-size", "40", "--cache-dir", str(tmp_path_factory.mktemp("cache"))))
    with acquire(spec) as handle:
        yield handle


BAD = [
    (b"{not json", 400, "not valid JSON"),
    (b"\xff\xfe", 400, "not valid JSON"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (b"{}", 400, "exactly one of 'query'"),
    (json.dumps({"query": "a", "queries": ["b"]}).encode(), 400, "exactly one of"),
    (json.dumps({"query": ""}).encode(), 400, "query is empty"),
    (json.dumps({"query": "   "}).encode(), 400, "query is empty"),
    (json.dumps({"query": "x" * 1_000_000}).encode(), 400, "1000000 characters long"),
    (json.dumps({"query": 42}).encode(), 400, "query must be a string, got int"),
    (json.dumps({"query": None}).encode(), 400, "must be a string"),
    (json.dumps({"query": "a", "top_k": 0}).encode(), 400, "top_k must be an integer from 1 to 100, got 0"),
    (json.dumps({"query": "a", "top_k": 10000}).encode(), 400, "got 10000"),
    (json.dumps({"query": "a", "top_k": "5"}).encode(), 400, "got '5'"),
    (json.dumps({"query": "a", "top_k": 2.5}).encode(), 400, "got 2.5"),
    (json.dumps({"query": "a", "top_k": True}).encode(), 400, "got True"),
    (json.dumps({"query": "a", "top_k": 1, "k": 2}).encode(), 400, "one of top_k, k, topk"),
    (json.dumps({"queries": []}).encode(), 400, "non-empty list"),
    (json.dumps({"queries": "abc"}).encode(), 400, "non-empty list"),
    (json.dumps({"queries": ["ok", 3]}).encode(), 400, "queries[1] must be a string"),
    (json.dumps({"queries": ["q"] * 2000}).encode(), 400, "2000 queries"),
    (json.dumps({"queries": ["q"], "return_scores": "yes"}).encode(), 400, "return_scores must be true or false"),
    (b'{"query": "' + b"y" * (5 * 1024 * 1024) + b'"}', 413, "at most"),
]


@pytest.mark.parametrize(("body", "status", "message"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_is_a_4xx_with_a_message_and_the_server_lives(server, body, status, message):
    url = server.ensure_ready()
    response = httpx.post(f"{url}/retrieve", content=body, headers={"content-type": "application/json"}, timeout=30)
    assert response.status_code == status
    assert message in response.json()["detail"]
    assert httpx.get(f"{url}/health", timeout=5).json()["status"] == "healthy"
    assert server.alive


def test_both_request_shapes(server):
    url = server.ensure_ready()
    single = httpx.post(f"{url}/retrieve", json={"query": "river city founded", "k": 3}).json()
    assert single["method"] == "bm25" and single["num_results"] == 3 == len(single["results"])
    assert set(single["results"][0]) == {"id", "title", "content", "score"}
    scores = [r["score"] for r in single["results"]]
    assert scores == sorted(scores, reverse=True)
    batched = httpx.post(f"{url}/retrieve", json={"queries": ["river city", "company founded"], "topk": 2, "return_scores": True}).json()
    assert [len(row) for row in batched["result"]] == [2, 2]
    assert set(batched["result"][0][0]) == {"document", "score"} and set(batched["result"][0][0]["document"]) == {"id", "contents"}
    plain = httpx.post(f"{url}/retrieve", json={"queries": ["river city"], "topk": 2}).json()
    assert plain["result"][0][0] == batched["result"][0][0]["document"]
    # a query of stopwords or unknown words matches nothing: an empty list, not an error
    assert httpx.post(f"{url}/retrieve", json={"query": "the of and"}).json()["num_results"] == 0


class _SlowIndex:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def __len__(self) -> int:
        return 10

    def search(self, queries, k):
        self.calls.append(len(queries))
        time.sleep(0.05)
        return [[Hit(i % 10, 1.0)] * k for i in range(len(queries))]

    def close(self) -> None:
        pass


def test_liveness_is_not_readiness():
    gate = threading.Event()

    def load():
        gate.wait(10)
        return _SlowIndex()

    with TestClient(create_app(load)) as client:
        assert client.get("/health").json() == {"status": "loading", "index_loaded": False, "corpus_size": 0,
                                                "index_type": "bm25", "error": None,
                                                "batches": 0, "batched_queries": 0, "search_s": 0.0}
        assert client.get("/ready").status_code == 503
        assert client.post("/retrieve", json={"query": "x"}).status_code == 503
        gate.set()
        deadline = time.monotonic() + 10
        while client.get("/ready").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.get("/ready").json() == {"ready": True, "corpus_size": 10}


def test_a_failed_load_is_reported_and_the_server_stays_up():
    def load():
        raise FileNotFoundError("no such index")

    with TestClient(create_app(load)) as client:
        deadline = time.monotonic() + 10
        while client.get("/health").json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.get("/health").json()["status"] == "error"
        assert "no such index" in client.get("/ready").json()["detail"]
        assert client.get("/ready").status_code == 500  # never ready: whoever started it stops waiting


def test_concurrent_requests_share_batches():
    index = _SlowIndex()

    async def main():
        batcher = Batcher(index.search, max_batch=256)
        return await asyncio.gather(*(batcher.submit([f"q{i}"], 1 + i % 3) for i in range(20))), batcher

    rows, batcher = asyncio.run(main())
    assert sum(index.calls) == 20 and len(index.calls) == batcher.batches
    assert batcher.batches <= 3  # the first request runs alone; the other 19 queue behind it, at most 2 batches
    assert [len(r[0]) for r in rows] == [1 + i % 3 for i in range(20)]  # each request gets its own top_k


def test_one_bad_query_fails_only_its_own_request():
    def search(queries, k):
        if "boom" in queries:
            raise RuntimeError("cannot search boom")
        return [[Hit(0, 1.0)] * k for _ in queries]

    async def main():
        batcher = Batcher(search, max_batch=256)
        return await asyncio.gather(*(batcher.submit([q], 1) for q in ["a", "boom", "b"]), return_exceptions=True)

    a, boom, b = asyncio.run(main())
    assert a == [[Hit(0, 1.0)]] and b == [[Hit(0, 1.0)]]
    assert isinstance(boom, RuntimeError) and str(boom) == "cannot search boom"


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
_FIELDS = st.fixed_dictionaries({}, optional={"query": _JSON, "queries": _JSON, "top_k": _JSON, "k": _JSON, "topk": _JSON,
                                              "return_scores": _JSON})


@given(st.one_of(_JSON, _FIELDS))
@settings(max_examples=300, deadline=None)
def test_any_json_body_is_parsed_or_refused_with_a_message(body):
    """No request body reaches the index unchecked: it parses to valid queries and k, or is a 4xx."""
    try:
        queries, k, batched, scores = _parse(json.dumps(body).encode(), MAX_TOP_K, MAX_QUERY_CHARS)
    except BadRequest as e:
        assert e.status in (400, 413) and e.detail
        return
    assert queries and all(isinstance(q, str) and q.strip() for q in queries)
    assert isinstance(k, int) and 1 <= k <= MAX_TOP_K and isinstance(scores, bool) and isinstance(batched, bool)


def test_a_lone_surrogate_in_a_query_is_a_400_not_a_500():
    """JSON may spell "\\ud800"; echoing that string back failed to encode and the server answered 500."""
    with pytest.raises(BadRequest) as info:
        _parse(b'{"query": "a\\u0000\\ud800"}', MAX_TOP_K, MAX_QUERY_CHARS)
    assert info.value.status == 400 and "lone UTF-16 surrogate" in info.value.detail
    assert _parse(b'{"query": "caf\\u00e9 \\ud83d\\ude00"}', MAX_TOP_K, MAX_QUERY_CHARS)[0] == ["café 😀"]  # a pair is fine
