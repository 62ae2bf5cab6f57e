"""The actor's optimiser step does not depend on ``optim.micro_batch_size`` (spec 17 L9): every
micro-batch loss is normalised by the whole mini-batch's token count, so gradients that add up
over micro-batches equal the mini-batch's own. (The reference averages micro-batch means, which
weighs the tokens of a short micro-batch more.)"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from ragen_core.config import load_config
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.trainer import Trainer
from ragen_core.trainer.update import prepare, update_actor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_the_actor_step_is_the_same_for_any_micro_batch_size(tmp_path, mode):
    import torch

    cfg = load_config(RunConfig, [], [
        f"env={register_toy_env()}", "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
        "rollout.env_groups=3", "rollout.group_size=2", "rollout.max_model_len=512", "sampling.train.max_new_tokens=10",
        "optim.mini_batch_size=6", "optim.micro_batch_size=6", "optim.grad_clip=1e9", "algo=grpo", f"algo_config.loss_agg_mode={mode}",
        "warm_start.enabled=false", "progress=false", f"run_dir={tmp_path / 'run'}",
    ])
    trainer = Trainer(cfg)
    trainer.setup()
    batch = trainer._build_batch(trainer.runner.run(mode="train", sampling=trainer.train_sampling))
    lengths = batch.response_mask.sum(1)
    assert len(batch) == 6 and float(lengths.min()) < float(lengths.max())  # micro-batches of unequal token counts
    torch.manual_seed(0)
    adv = torch.randn(batch.response_mask.shape) * batch.response_mask  # a real gradient, whatever the toy rewards
    start = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    moves = []
    for micro in (6, 1, 4):
        model = copy.deepcopy(trainer.model)
        optim = cfg.optim.model_copy(update={"micro_batch_size": micro})
        prepared = prepare(batch, model=model, ref_model=None, critic=None, algorithm=trainer.algorithm, estimator=trainer.estimator,
                           optim=optim, sampling=trainer.train_sampling)
        prepared = dataclasses.replace(prepared, batch=dataclasses.replace(prepared.batch, advantages=adv))
        update_actor(prepared, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0), algorithm=trainer.algorithm,
                     optim=optim, temperature=trainer.train_sampling.temperature)
        moves.append({n: p.detach() - start[n] for n, p in model.named_parameters()})
    assert sum(float(d.abs().sum()) for d in moves[0].values()) > 0
    for other in moves[1:]:
        for name, delta in moves[0].items():
            torch.testing.assert_close(other[name], delta, rtol=1e-4, atol=1e-7)
