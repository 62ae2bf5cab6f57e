"""Training steps on SearchQA with the tiny model, offline with the defaults.

The tiny model writes noise (it rarely forms a search), so a second run feeds scripted replies (a
search, then the gold answer in every other episode) to prove that the env starts its retrieval
server, the searches reach it, rewards reach the update, and the run's end stops the server.
"""

from __future__ import annotations

import math

import pytest

from ragen_core import services
from ragen_core.testing.train_checks import TINY_RUN, requires_algorithm, train

pytestmark = [requires_algorithm("grpo"), pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture
def handles(monkeypatch):
    """Every service handle the env acquires during the run."""
    seen = []
    real = services.acquire

    def spy(spec, config=None):
        handle = real(spec, config)
        seen.append(handle)
        return handle

    import ragen_env_searchqa.env as env_mod

    monkeypatch.setattr(env_mod, "acquire", spy)
    return seen


def _base(tmp_path):
    return [*TINY_RUN, "env=searchqa", f"env_config.retriever.cache_dir={tmp_path / 'cache'}", "env_config.max_turns=2"]


def test_two_training_steps(tmp_path, handles):
    overrides = _base(tmp_path) + ["rollout.max_model_len=1024", "sampling.train.max_new_tokens=16",
                                   "sampling.val.max_new_tokens=16", "val_groups=2", "test_freq=2", "steps=2",
                                   f"run_dir={tmp_path / 'run'}"]
    _, rows = train(overrides)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("train/success", "train/reward", "actor/pg_loss", "timing_s/gen"):
        assert math.isfinite(rows[0][key]), key
    assert "val-env/success" in rows[1]
    # the tiny model's noise rarely forms a search: the server starts only if one did, and is stopped at the end
    assert not any(h.alive for h in handles)


def test_scripted_search_then_answer_is_rewarded(tmp_path, monkeypatch, handles):
    from ragen_env_searchqa.data import load_splits

    from ragen_core.engines.scripted import ScriptedEngine
    from ragen_core.trainer import setup

    questions = load_splits(None, None, 0.1, 20000, None, 0, 400).train

    def script_for(tok):
        def script(call, row, prompt):
            text = tok.decode(prompt)
            if "Search results for" not in text:
                return "<think>look it up</think><answer>search[founded]</answer>"
            q = next(q for q in questions if f"Question: {q.question}" in text)
            answer = q.answers[0] if row % 2 == 0 else "nobody knows"
            return f"<think>found it</think><answer>finish[{answer}]</answer>"
        return ScriptedEngine(script, tok)

    monkeypatch.setattr(setup, "make_engine", lambda c, m, t: script_for(t))
    # byte tokens: the second prompt is ~900 (first turn) + 30 (reply) + ~1,060 (five passages) = ~2,000, so
    # 3,072 leaves room for longer passages (at 2,048 a run whose search returned other passages cut an episode)
    overrides = _base(tmp_path) + ["rollout.max_model_len=3072", "sampling.train.max_new_tokens=64", "steps=1",
                                   "test_freq=0", "filter=none", f"run_dir={tmp_path / 'run'}"]
    _, (row,) = train(overrides)
    assert row["train/success"] == 0.5  # exactly the even rows: 2 of 4 episodes
    assert row["train/searchqa/num_actions"] == 2.0  # one search, one answer each
    assert row["actor/pg_loss"] != 0.0 or row["actor/grad_norm"] > 0.0
    # the env started one server for the run (all four episodes searched it) and the run's end stopped it
    pids = [h.pid for h in handles]
    assert len(pids) == 4 and len(set(pids)) == 1 and pids[0] is not None
    assert not any(h.alive for h in handles)
