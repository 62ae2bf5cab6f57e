"""SFT micro-batches: the same step as the whole batch at a fraction of the memory."""

from __future__ import annotations

import pytest

from ragen_core.config import load_config
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer import warmstart
from ragen_core.trainer.config import RunConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cfg(tmp_path, *extra: str) -> RunConfig:
    return load_config(RunConfig, [], [f"env={register_toy_env()}", "env_config.length=4", "env_config.max_turns=2",
                                       "env_config.max_actions_per_turn=1", "sampling.train.max_new_tokens=40", "warm_start.episodes=6",
                                       "warm_start.start_from=scratch", f"warm_start.cache_dir={tmp_path / 'c'}", *extra])


@pytest.mark.parametrize("prompt_loss_weight", [0.0, 0.5])
def test_micro_batches_give_the_whole_batchs_losses_and_step(tmp_path, prompt_loss_weight):
    import torch

    from ragen_core.models import load_model_and_tokenizer

    cfg = _cfg(tmp_path)
    _, tok = load_model_and_tokenizer("tiny")
    trajs = warmstart.demonstrations(cfg, tok)
    results = {}
    for micro in (None, 2, 1):
        model = load_model_and_tokenizer("tiny")[0]
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)  # plain SGD: the weights move by exactly lr x gradient
        losses = warmstart.sft(model, tok, trajs, epochs=1, lr=0.1, batch_size=6, seed=3, optimizer=sgd,
                               prompt_loss_weight=prompt_loss_weight, micro_batch_size=micro)
        results[micro] = (losses, [p.detach().clone() for p in model.parameters()])
    whole_losses, whole_params = results[None]
    for micro in (2, 1):
        losses, params = results[micro]
        # float32 sums in another order: ~1e-7 relative per reply-loss sum (measured 2e-8..3e-7); 1e-5 leaves room
        assert losses == pytest.approx(whole_losses, rel=1e-5)
        # lr 0.1 x a gradient that differs by float rounding (~1e-7 of values up to ~1): well under 1e-6
        assert max(float((a - b).abs().max()) for a, b in zip(params, whole_params)) < 1e-6


def test_the_micro_batch_size_is_not_part_of_the_cache_key(tmp_path):
    assert warmstart.cache_key(_cfg(tmp_path)) == warmstart.cache_key(_cfg(tmp_path, "warm_start.micro_batch_size=1"))
    assert warmstart.cache_key(_cfg(tmp_path)) != warmstart.cache_key(_cfg(tmp_path, "warm_start.batch_size=8"))
