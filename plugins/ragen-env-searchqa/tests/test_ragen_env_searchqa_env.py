"""SearchQA episodes (spec 13.8) against the server the env starts, and the sharing of that server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import uvicorn
from fastapi import FastAPI, Request  # module level: FastAPI resolves the handler's annotations here
from fastapi.responses import JSONResponse
from ragen_env_searchqa import client as client_mod
from ragen_env_searchqa.client import Document, format_results
from ragen_env_searchqa.config import SearchQAConfig
from ragen_env_searchqa.data import load_splits, question_key
from ragen_env_searchqa.env import AVAILABLE, SearchQAEnv

from ragen_core.errors import ConfigError, EnvError
from ragen_core.services import ServiceConfig, ServiceError, free_port


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    return SearchQAConfig(retriever={"cache_dir": str(tmp_path_factory.mktemp("index-cache"))})


@pytest.fixture(scope="module")
def env(cfg):
    e = SearchQAEnv(cfg)
    yield e
    e.close()


def test_reset_shows_the_question_and_search_finds_its_passage(env):
    obs = env.reset(5)
    q = env.question
    assert obs == f"Question: {q.question}\n{AVAILABLE}"
    obs, reward, done, info = env.step(f"search[{q.question}]")
    assert (reward, done, info["action_type"], info["success"]) == (0.0, False, "search", False)
    assert obs.startswith(f"Search results for '{q.question}':\n[Document 1] (ID: ")
    assert obs.endswith("\n\n" + AVAILABLE)
    assert obs.count("[Document ") == env.config.max_search_results
    obs, reward, done, info = env.step(f"finish[{q.answers[0]}]")
    assert (obs, reward, done, info["success"], info["exact_match"]) == (f"Your answer: {q.answers[0]}. Reward: 1.00", 1.0, True, True, True)


def test_one_hop_answers_are_in_the_results(env):
    """The world is searchable: for one-hop questions the gold answer is in the top results mostly."""
    splits = load_splits(None, None, 0.1, 20000, None, 0, 400)
    one_hop = [i for i, q in enumerate(splits.train[:120]) if q.source == "world-1hop"]
    found = 0
    for i in one_hop:
        env.reset(i)
        obs = env.step(f"search[{env.question.question}]").observation
        found += env.question.answers[0] in obs
    assert found / len(one_hop) >= 0.8, (found, len(one_hop))


def test_free_form_wrong_and_empty_actions(env):
    env.reset(1)
    gold = env.question.answers[0]
    assert env.step("").info["action_is_valid"] is False
    obs, reward, done, info = env.step("search[]")
    assert (reward, done, info["action_is_valid"]) == (0.0, False, False)
    obs, reward, done, info = env.step(f"<think>hmm</think>I believe **{gold}** is it.")
    assert (reward, done, info["success"], info["action_is_valid"]) == (1.0, True, True, False)
    env.reset(1)
    assert env.step("finish[certainly not this]")[1:3] == (0.0, True)
    assert env.step("search[anything]")[1:3] == (0.0, True)  # after the end: no-op


def test_free_form_text_can_be_an_invalid_action_instead_of_an_answer(cfg):
    """Spec 17.5 (SearchQA): any unrecognised text ended the episode as an answer attempt."""
    with SearchQAEnv(cfg, free_form_answers=False, max_steps=3) as e:
        e.reset(1)
        gold = e.question.answers[0]
        obs, reward, done, info = e.step(f"I believe **{gold}** is it.")
        assert (reward, done, info["success"], info["action_is_valid"], info["action_type"]) == (0.0, False, False, False, "invalid")
        assert obs.startswith("Invalid action (neither search[...] nor finish[...])")
        assert e.step(f"finish[{gold}]")[1:3] == (1.0, True)  # the episode went on; finish still answers
        e.reset(1)
        assert e.step("just a thought")[2] is False and e.step("another")[2] is False
        assert e.step("and a third")[2] is True  # the step budget still ends it


def test_step_budget_ends_the_episode(cfg):
    with SearchQAEnv(cfg, max_steps=2) as e:
        e.reset(0)
        assert e.step("search[a]").done is False
        obs, _, done, _ = e.step("search[b]")
        assert done and obs.endswith("Maximum number of searches reached without an answer.")


def test_the_stated_budget_is_the_one_the_rollout_allows():
    """Defaults: max_steps 10, but 5 turns of one action; the instruction and the end say 5."""
    with SearchQAEnv(mock_mode=True) as e:
        assert e.step_budget == 5 and "You have 5 actions in all." in e.instruction()
        e.reset(0)
        assert [e.step(f"search[q{i}]").done for i in range(5)] == [False] * 4 + [True]
    with SearchQAEnv(mock_mode=True, max_turns=20) as e:
        assert e.step_budget == 10 and "You have 10 actions in all." in e.instruction()
    with SearchQAEnv(mock_mode=True, max_actions_per_turn=2) as e:  # 5 turns of 2: the 10 of max_steps
        assert e.step_budget == 10 and "Each turn, do up to 2 actions separated by ||: search[" in e.instruction()


def test_mock_mode_needs_no_server():
    with SearchQAEnv(mock_mode=True) as e:
        e.reset(0)
        obs = e.step("search[oak trees]").observation
        assert "oak trees" in obs and obs.count("[Document ") == 2
        assert e._service is None


def test_validation_questions_are_not_training_questions():
    splits = load_splits(None, None, 0.1, 20000, None, 0, 400)
    train = {question_key(q.question) for q in splits.train}
    assert splits.val and not any(question_key(q.question) in train for q in splits.val)
    with SearchQAEnv(mock_mode=True) as e:
        assert e.reset(3, mode="val") == f"Question: {splits.val[3].question}\n{AVAILABLE}"


def test_formatting_truncates_documents_and_the_block():
    docs = [Document(str(i), "x" * 1000, 1.23456) for i in range(3)]
    text = format_results(docs, max_total_chars=4000)
    assert text.startswith("[Document 1] (ID: 0, Score: 1.235)\n" + "x" * 800 + "...\n\n[Document 2]")
    short = format_results(docs, max_total_chars=500)
    assert len(short) == 503 and short.endswith("...")
    assert format_results([], 4000) == "No relevant documents found."


def test_envs_share_one_server_and_close_stops_it(cfg):
    a, b = SearchQAEnv(cfg), SearchQAEnv(cfg)
    a.reset(0)
    b.reset(1)
    assert a._service is None  # reset alone starts nothing (the trainer's prompt probe resets and closes an env)
    a.step("search[river]")
    b.step("search[city]")
    assert a._service.pid == b._service.pid
    handle = a._service
    refs = handle.refcount
    a.close()
    a.close()  # idempotent
    assert handle.refcount == refs - 1
    b.close()


def test_a_turn_of_searches_is_one_http_request(cfg, env):
    envs = [SearchQAEnv(cfg) for _ in range(8)]
    for i, e in enumerate(envs):
        e.reset(i)
    client = client_mod.client_for(envs[0]._server().ensure_ready(), cfg.retrieval_timeout)
    client.window_s = 0.2  # generous, so that all 8 threads surely join the first batch on a loaded machine
    before = client.requests
    barrier = threading.Barrier(len(envs))
    results = [None] * len(envs)

    def run(i):
        barrier.wait()
        results[i] = envs[i].step(f"search[{envs[i].question.question}]")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(envs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.window_s = 0.005
    assert client.requests - before == 1
    assert all(r.observation.startswith(f"Search results for '{e.question.question}'") for r, e in zip(results, envs))
    for e in envs:
        e.close()


def test_url_mode_only_connects(cfg, env):
    url = env._server().ensure_ready()
    with SearchQAEnv(cfg, server=ServiceConfig(url=url)) as e:
        e.reset(2)
        assert e.step(f"search[{e.question.question}]").observation.count("[Document ") == 5
        assert e._service.pid is None
    unreachable = SearchQAEnv(cfg, server=ServiceConfig(url="http://127.0.0.1:9", ready_timeout_s=0.5))
    unreachable.reset(0)
    with pytest.raises(ServiceError, match="was not ready"):
        unreachable.step("search[x]")


def test_a_corpus_the_server_cannot_load_fails_the_first_search_at_once(tmp_path):
    """The server stayed up answering /ready 503 "index failed to load", so the first search waited
    ready_timeout_s (600 s) in silence; it now fails within seconds with the server's own reason."""
    import json

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "1", "body": "x"}) + "\n", encoding="utf-8")
    env = SearchQAEnv(SearchQAConfig(retriever={"corpus": str(bad), "cache_dir": str(tmp_path / "cache")}))
    try:
        env.reset(0)
        started = time.monotonic()
        with pytest.raises(ServiceError) as info:
            env.step("search[Hamlet]")
        assert time.monotonic() - started < 60  # ready_timeout_s is 600
    finally:
        env.close()
    msg = str(info.value)
    assert "failed while starting (last probe: GET /ready answered HTTP 500)" in msg
    assert f"{bad}:1: bad corpus line" in msg


def test_bad_use_is_a_clear_error(tmp_path):
    with pytest.raises(EnvError, match="before reset"):
        SearchQAEnv(mock_mode=True).step("search[x]")
    with pytest.raises(ConfigError, match="does not exist"):
        SearchQAEnv(mock_mode=True, dataset=str(tmp_path / "missing.jsonl")).reset(0)


def _serve(app: FastAPI) -> tuple[str, Callable[[], None]]:
    """Serve ``app`` on a free loopback port in a thread: its URL and the function that stops it."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)

    return f"http://127.0.0.1:{port}", stop


def _serve_reference_like() -> tuple[str, Callable[[], None]]:
    """A server that knows only the reference's single-query shape (400 on Search-R1's batched
    one), in a thread: its URL and the function that stops it."""
    app = FastAPI()

    @app.post("/retrieve")
    async def retrieve(request: Request):
        data = await request.json()
        if "query" not in data:
            return JSONResponse({"error": "query is required"}, status_code=400)
        results = [{"id": f"doc_{i}", "content": f"passage {i} about {data['query']}", "score": 1.0 / (i + 1)}
                   for i in range(data.get("top_k", 10))]
        return {"query": data["query"], "method": "dense", "results": results, "num_results": len(results)}

    return _serve(app)


@pytest.fixture
def reference_like_server():
    url, stop = _serve_reference_like()
    yield url
    stop()


def test_a_server_with_only_the_single_query_shape(cfg, reference_like_server):
    with SearchQAEnv(cfg, server=ServiceConfig(url=reference_like_server)) as e:
        e.reset(0)
        obs = e.step("search[tall oaks]").observation
        assert "[Document 1] (ID: doc_0, Score: 1.000)\npassage 0 about tall oaks" in obs
        assert obs.count("[Document ") == 5
        client = client_mod.client_for(reference_like_server, cfg.retrieval_timeout)
        assert client.single is True and client.batched_ok is False
        assert "passage 0 about again" in e.step("search[again]").observation


def test_an_unexpected_error_in_a_batched_request_answers_every_waiting_search():
    """A search thread waits on its batch's leader without a deadline: whatever the leader's request
    raises (here a closed HTTP client's RuntimeError), every search of the batch gets a
    RetrievalError. Before, the others waited forever (a CI run hung on it)."""
    client = client_mod.BatchingClient("http://127.0.0.1:9", window_s=0.2)  # all threads join one batch

    def broken_post(*args, **kwargs):
        raise RuntimeError("Cannot send a request, as the client has been closed.")

    client._http.post = broken_post  # type: ignore[method-assign]
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            client.search(f"query {i}", 3)
        except BaseException as e:  # noqa: BLE001 - collected for the assertions
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "a search was left waiting"
    assert len(errors) == 6 and all(isinstance(e, client_mod.RetrievalError) and e.kind == "http" for e in errors)
    assert all("RuntimeError" in str(e) for e in errors)
    client.close()


def test_an_empty_split_names_its_cause_and_the_right_fix(tmp_path):
    """Extreme val_fraction values still leave one question on each side (a hash share of three
    questions could hold out all or none); a validation source that holds every training question
    leaves no training split, said with the fix."""
    import json

    load_splits.cache_clear()
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"Who made thing {i}?", "golden_answers": [f"maker {i}"]}) + "\n" for i in range(3)))
    for fraction, val_size in ((0.999999, 2), (1e-9, 1)):
        with SearchQAEnv(mock_mode=True, dataset=str(data), val_fraction=fraction) as e:
            train_question, val_question = e.reset(0), e.reset(0, mode="val")
            splits = load_splits(str(data), None, fraction, None, None, e.config.world_seed, e.config.world_size)
            assert (len(splits.train), len(splits.val)) == (3 - val_size, val_size) and train_question != val_question
    with SearchQAEnv(mock_mode=True, dataset=str(data), val_dataset=str(data)) as e, \
            pytest.raises(ConfigError, match="every question of .* is also in env_config.val_dataset"):
        e.reset(0)


def test_a_server_given_by_url_that_goes_away_fails_the_step_naming_it(cfg):
    url, stop = _serve_reference_like()
    with SearchQAEnv(cfg, server=ServiceConfig(url=url)) as e:
        e.reset(0)
        assert "[Document 1]" in e.step("search[first]").observation
        stop()
        with pytest.raises(EnvError, match=rf"^the retrieval server at env_config.server.url {url} no longer answers \(TCP connect failed") as err:
            e.step("search[second]")
        assert "ragen run --resume" in err.value.hints[0]


def test_odd_queries_are_refused_or_sent_and_echoed_in_bounds(env):
    """A 5,000-character query was sent (the server refused it: "Search failed: HTTP 400", a valid
    action), a 100k one was echoed whole into the observation, and a lone surrogate failed as an
    "unreadable answer" of the server."""
    env.reset(1)
    requests = client_mod.client_for(env._server().ensure_ready(), env.config.retrieval_timeout).requests
    obs, reward, done, info = env.step("search[" + "a" * 5000 + "]")
    assert obs.startswith("Invalid action (a search query of 5000 characters; at most 4096). ")
    assert (reward, info["action_is_valid"]) == (0.0, False)
    assert client_mod.client_for(env._server().ensure_ready(), env.config.retrieval_timeout).requests == requests  # not sent
    query = " ".join(["oak"] * 1000)  # 3,999 characters: sent, and echoed cut
    obs = env.step(f"search[{query}]").observation
    assert obs.startswith(f"Search results for '{query[:200]}... (3799 more characters)':\n")
    question = env.question.question
    obs, _, _, info = env.step(f"search[\ud800{question}\udfff]")
    assert obs.startswith(f"Search results for '\ud800{question}\udfff':\n[Document 1]") and info["action_is_effective"]


def test_a_url_that_is_no_retrieval_server_fails_the_first_search_naming_the_setting(cfg):
    """Anything that accepted a connection at server.url passed, and every search then became an
    observation ("Search failed: HTTP 501: <!DOCTYPE HTML>..."): a run trained on error text. A
    retrieval server that is busy or still loading on its first search (503, a timeout) is not
    refused: that search fails as an observation, as before, and the next one may work."""
    import subprocess
    import sys

    port = free_port()
    web = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],  # GET only: POST is 501
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        with SearchQAEnv(cfg, server=ServiceConfig(url=url, ready_timeout_s=20)) as e:
            e.reset(0)
            with pytest.raises(EnvError, match=rf"^env_config.server.url {url} is not a retrieval server: the first search got HTTP 501") as err:
                e.step("search[oaks]")
            assert "POST /retrieve" in err.value.hints[0]
    finally:
        web.kill()
        web.wait()
    url, stop = _serve_loading_first(cfg)
    try:
        with SearchQAEnv(cfg, server=ServiceConfig(url=url)) as e:
            e.reset(0)
            obs, _, done, _ = e.step("search[oaks]")
            assert "\nSearch failed: HTTP 503: index loading.\n" in obs and not done
            e.reset(0)
            assert "[Document 1]" in e.step("search[oaks]").observation
    finally:
        stop()


def _serve_loading_first(cfg) -> tuple[str, Callable[[], None]]:
    """A retrieval server (the reference's single-query shape) whose first search answers 503."""
    app = FastAPI()
    calls: list[int] = []

    @app.post("/retrieve")
    async def retrieve(request: Request):
        data = await request.json()
        calls.append(1)
        if len(calls) == 1:
            return JSONResponse({"detail": "index loading"}, status_code=503)
        if "query" not in data:
            return JSONResponse({"error": "query is required"}, status_code=400)
        return {"results": [{"id": "doc_0", "content": f"about {data['query']}", "score": 1.0}]}

    return _serve(app)


def test_a_validation_question_that_differs_in_punctuation_is_not_trained_on(tmp_path):
    """Search-R1's NQ copy ends questions with '?', FlashRAG's does not: all 17 validation questions
    stayed in training (the key only lower-cased)."""
    import json

    rows = [{"question": f"who wrote book number {i}?", "golden_answers": [f"author {i}"]} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    val = [{"question": f"Who wrote book number {i}", "golden_answers": [f"author {i}"]} for i in (2, 5)]
    (tmp_path / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in val), encoding="utf-8")
    splits = load_splits(str(tmp_path / "train.jsonl"), str(tmp_path / "val.jsonl"), 0.1, None, None, 0, 400)
    assert len(splits.val) == 2 and len(splits.train) == 8
    assert not any(q.question.startswith(("who wrote book number 2?", "who wrote book number 5?")) for q in splits.train)


def test_a_folder_as_dataset_is_one_line_naming_a_file_in_it(tmp_path):
    (tmp_path / "nq").mkdir()
    (tmp_path / "nq" / "test.parquet").write_bytes(b"")
    with pytest.raises(ConfigError, match="question file .* is a folder") as info:
        load_splits(str(tmp_path / "nq"), None, 0.1, None, None, 0, 400)
    assert info.value.hints == [f"set dataset to one file in it, e.g. {tmp_path / 'nq' / 'test.parquet'}"]


@pytest.mark.parametrize(("answer", "reward", "success"), [
    ("Marie Curie", 0.1, False),  # wrong: paid incorrect_reward, not a success (every answer was one)
    ("Wilhelm Conrad", 0.8, True),  # partial, F1 0.8 >= 0.3: paid its F1 and a success (the reference's rule)
    ("Wilhelm Conrad Roentgen", 1.0, True),
])
def test_success_is_exact_or_a_paid_partial_answer_not_a_positive_incorrect_reward(tmp_path, answer, reward, success):
    import json

    rows = [{"question": f"who discovered x-rays {i}", "golden_answers": ["Wilhelm Conrad Roentgen"]} for i in range(5)]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with SearchQAEnv(dataset=str(tmp_path / "q.jsonl"), mock_mode=True, incorrect_reward=0.1) as e:
        e.reset(0)
        result = e.step(f"finish[{answer}]")
    assert result.reward == pytest.approx(reward) and result.info["success"] is success
