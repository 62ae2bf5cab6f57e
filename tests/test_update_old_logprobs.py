"""Before the update's first optimiser step the current policy is the old one: the first
mini-batch's old log-probs come from the update's own forward, and only the other rows get the
separate no-grad pass (update.prepare / update.update_actor)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from ragen_core.config import load_config
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer import modeling
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.losses import agg_loss
from ragen_core.trainer.trainer import Trainer
from ragen_core.trainer.update import prepare, update_actor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rollout(tmp_path, *overrides, name="run"):
    cfg = load_config(RunConfig, [], [
        f"env={register_toy_env()}", "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
        "rollout.env_groups=4", "rollout.group_size=2", "rollout.max_model_len=512", "sampling.train.max_new_tokens=10",
        "optim.mini_batch_size=4", "optim.micro_batch_size=2", "algo=grpo", "warm_start.enabled=false", "progress=false",
        f"run_dir={tmp_path / name}", *overrides,
    ])
    trainer = Trainer(cfg)
    trainer.setup()
    batch = trainer._build_batch(trainer.runner.run(mode="train", sampling=trainer.train_sampling))
    assert len(batch) == 8  # two mini-batches of 4
    return trainer, batch


def test_first_mini_batch_takes_its_old_log_probs_from_the_update(tmp_path, monkeypatch):
    import torch

    trainer, batch = _rollout(tmp_path)
    cfg, temp = trainer.config, trainer.train_sampling.temperature
    common = {"ref_model": None, "critic": None, "algorithm": trainer.algorithm, "estimator": trainer.estimator, "optim": cfg.optim,
              "sampling": trainer.train_sampling}
    model_a, model_b = trainer.model, copy.deepcopy(trainer.model)
    start = {n: p.detach().clone() for n, p in model_a.named_parameters()}
    # what the trainer did before: every row's old log-probs (and entropies) from one no-grad pass
    full_old, full_entropy = modeling.batched_logprobs(model_b, batch, list(range(8)), 2, temp, with_entropy=True)

    passes: list[list[int]] = []
    real = modeling.batched_logprobs
    monkeypatch.setattr(modeling, "batched_logprobs", lambda model, b, rows, *a, **k: passes.append(list(rows)) or real(model, b, rows, *a, **k))
    pa = prepare(batch, model=model_a, **common)
    assert pa.old_from_update_rows == 4 < len(batch)
    assert passes == [[4, 5, 6, 7]]  # the separate pass covers the second mini-batch only
    assert pa.batch.old_log_probs is not None and float(pa.batch.old_log_probs[:4].abs().sum()) == 0.0
    # the same old log-probs the full pass gave, on the rows it ran (a pass over fewer rows: rounding only)
    torch.testing.assert_close(pa.batch.old_log_probs[4:], full_old[4:], rtol=0, atol=1e-5)
    pb = prepare(dataclasses.replace(batch, old_log_probs=full_old), model=model_b, **common)
    assert pb.old_from_update_rows == 0 and passes == [[4, 5, 6, 7]]  # supplied: no pass at all

    # the same advantages for both (the toy env's rewards may all tie at this size): a real gradient
    torch.manual_seed(0)
    adv = torch.randn(batch.response_mask.shape) * batch.response_mask
    pa = dataclasses.replace(pa, batch=dataclasses.replace(pa.batch, advantages=adv))
    pb = dataclasses.replace(pb, batch=dataclasses.replace(pb.batch, advantages=adv))
    args = {"algorithm": trainer.algorithm, "optim": cfg.optim, "temperature": temp}
    ma = update_actor(pa, model=model_a, optimizer=torch.optim.SGD(model_a.parameters(), lr=1.0), **args)
    mb = update_actor(pb, model=model_b, optimizer=torch.optim.SGD(model_b.parameters(), lr=1.0), **args)
    moved = 0.0
    for (name, a), b in zip(model_a.named_parameters(), model_b.parameters(), strict=True):
        # SGD at lr 1: the two steps' summed (clipped) gradients. They differ only by the first
        # mini-batch's ratio, exactly 1 here and exp(logp - old) = 1 +- ~1e-6 from the separate
        # pass (another forward grouping); rtol 1e-4 leaves room for that and summation order.
        torch.testing.assert_close(a.detach() - start[name], b.detach() - start[name], rtol=1e-4, atol=1e-7)
        moved += float((a.detach() - start[name]).abs().sum())
    assert moved > 0.0
    # actor/entropy over the whole batch: the update's first mini-batch plus the pass's rows
    expected = float(agg_loss(full_entropy, batch.response_mask, trainer.algorithm.config.loss_agg_mode))
    assert ma["actor/entropy"] == pytest.approx(expected, rel=1e-5)
    assert "actor/entropy" not in mb  # (a supplied batch: the behaviour policy's pass is not the update's)
    assert ma["actor/pg_loss"] == pytest.approx(mb["actor/pg_loss"], rel=1e-4, abs=1e-6)
    assert 0.0 <= ma["rollout/engine_logprob_abs_diff"] < 1e-4  # the sampler's log-probs, recomputed


def test_several_epochs_or_a_kl_in_the_reward_keep_the_separate_pass(tmp_path):
    for i, (overrides, why) in enumerate(((["optim.ppo_epochs=2"], "epoch 2 needs every row's old log-probs"),
                                          (["algo_config.use_kl_in_reward=true"], "the reward's KL needs them before the update"))):
        trainer, batch = _rollout(tmp_path, *overrides, name=f"run{i}")
        prepared = prepare(batch, model=trainer.model, ref_model=trainer.ref_model, critic=None, algorithm=trainer.algorithm,
                           estimator=trainer.estimator, optim=trainer.config.optim, sampling=trainer.train_sampling)
        assert prepared.old_from_update_rows == 0, why
        assert prepared.batch.old_log_probs is not None and float(prepared.batch.old_log_probs[:4].abs().sum()) > 0, why
        assert "actor/entropy" in prepared.metrics
