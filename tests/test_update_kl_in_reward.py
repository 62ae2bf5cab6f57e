"""The KL placed in the reward (spec 8.6, 17 L6) reaches the advantages: ``prepare`` subtracts
``β · KL_t`` from every trained token's reward before the estimator runs."""

from __future__ import annotations

import copy

import pytest

from ragen_core.config import load_config
from ragen_core.interfaces.advantage import AdvantageInputs
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.trainer import Trainer
from ragen_core.trainer.update import prepare

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_kl_in_the_reward_moves_the_advantages_by_beta_times_the_kl(tmp_path):
    import torch

    cfg = load_config(RunConfig, [], [
        f"env={register_toy_env()}", "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
        "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=512", "sampling.train.max_new_tokens=10",
        "optim.mini_batch_size=4", "optim.micro_batch_size=2", "algo=grpo", "warm_start.enabled=false", "progress=false",
        "algo_config.use_kl_in_reward=true", "algo_config.kl_in_reward_coef=0.5", "algo_config.kl_in_reward_type=k1",
        f"run_dir={tmp_path / 'run'}",
    ])
    trainer = Trainer(cfg)
    trainer.setup()
    batch = trainer._build_batch(trainer.runner.run(mode="train", sampling=trainer.train_sampling))
    ref = copy.deepcopy(trainer.model)  # a reference that differs from the policy: a non-zero KL on every token
    torch.manual_seed(0)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    prepared = prepare(batch, model=trainer.model, ref_model=ref, critic=None, algorithm=trainer.algorithm, estimator=trainer.estimator,
                       optim=cfg.optim, sampling=trainer.train_sampling)
    out = prepared.batch
    assert out.old_log_probs is not None and out.ref_log_probs is not None
    m = batch.response_mask
    kl = (out.old_log_probs - out.ref_log_probs) * m  # k1
    assert float(kl.abs().sum()) > 0
    assert prepared.metrics["actor/kl_in_reward"] == pytest.approx(float(kl.sum() / m.sum()), rel=1e-5)
    assert prepared.metrics["actor/kl_coef"] == 0.5

    def advantages(rewards):
        res = trainer.estimator(AdvantageInputs(token_rewards=rewards, response_mask=m, group_ids=batch.group_ids, values=None,
                                                turn_ends=batch.turn_ends, episode_ids=batch.episode_ids))
        return res.advantages.float() * m

    with_kl, without = advantages(batch.token_rewards - 0.5 * kl), advantages(batch.token_rewards)
    assert not torch.allclose(with_kl, without, atol=1e-4)  # the KL does change what the update sees
    torch.testing.assert_close(out.advantages, with_kl, rtol=1e-5, atol=1e-6)
