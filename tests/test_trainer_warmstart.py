"""Warm start: random legal actions in the reply format through the real prompt layout; cached."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("ragen_core.rollout.runner")

from ragen_core.config import load_config
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _cfg(tmp_path, *extra: str) -> RunConfig:
    env = register_toy_env()
    return load_config(RunConfig, [], [f"env={env}", "env_config.length=4", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
                                       "sampling.train.max_new_tokens=40", "warm_start.episodes=6", "warm_start.epochs=2",
                                       f"warm_start.cache_dir={tmp_path / 'cache'}", *extra])


def test_demonstrations_are_valid_random_actions_in_reply_format(tmp_path):
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import demonstrations

    _, tok = load_model_and_tokenizer("tiny")
    trajs = demonstrations(_cfg(tmp_path), tok)
    assert len(trajs) == 6
    turns = [t for tr in trajs for t in tr.turns]
    assert turns and all(t.valid for t in turns)
    assert all(t.response_text.startswith("<think>") and "</think><answer>" in t.response_text and t.response_text.endswith("</answer>")
               for t in turns)
    assert {a for t in turns for a in t.actions} <= {"Left", "Right"}
    # random, not an oracle: some episodes walk the wrong way
    assert len({tuple(a for t in tr.turns for a in t.actions) for tr in trajs}) > 1
    assert all(tr.env == "toy-corridor" or tr.env.startswith("warmstart-") for tr in trajs)


def test_warm_start_lowers_reply_loss_and_is_cached(tmp_path, capsys):
    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import cache_key, demonstrations, sft, warm_start

    cfg = _cfg(tmp_path)
    model, tok = load_model_and_tokenizer("tiny")
    losses = sft(model, tok, demonstrations(cfg, tok), epochs=4, lr=3e-3, batch_size=6, seed=0)
    assert losses[-1] < losses[0]
    fresh, _ = load_model_and_tokenizer("tiny")
    warm = warm_start(cfg, fresh, tok)
    folder = tmp_path / "cache" / cache_key(cfg)
    assert (folder / "config.json").is_file()
    again = warm_start(cfg, load_model_and_tokenizer("tiny")[0], tok)
    assert "using cached model" in capsys.readouterr().out
    assert all(torch.equal(a, b) for a, b in zip(warm.state_dict().values(), again.state_dict().values()))
    assert cache_key(cfg) != cache_key(cfg.model_copy(update={"seed": 1}))


def test_cached_prefix_logprobs_equal_full_forward(tmp_path):
    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.batch import build_batch
    from ragen_core.trainer.modeling import token_logprobs
    from ragen_core.trainer.warmstart import demonstrations, reply_logprobs

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "env_config.max_turns=3", "warm_start.episodes=4")
    batch = build_batch(demonstrations(cfg, tok), tok.pad_token_id)
    full, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    cached, mask = reply_logprobs(model, batch)
    assert int(mask.sum()) == int(batch.response_mask.sum()) > 0
    assert torch.allclose(full[batch.response_mask > 0], cached[mask > 0], atol=1e-5)
