"""MetaMathQA trains for two steps with the tiny model (the built-in problems, no download)."""

from __future__ import annotations

import math

import pytest
import torch

from ragen_core.config import load_config
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.trainer import Trainer


@pytest.fixture()
def one_torch_thread():
    """The tiny model gains nothing from threads; on a shared 2-core VM they slow it down."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("checker", ["math", "exact"])
def test_two_training_steps(tmp_path, checker):
    overrides = [
        "env=metamathqa", f"env_config.checker={checker}", "env_config.max_turns=2",
        "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=1536",
        "sampling.train.max_new_tokens=16", "sampling.val.max_new_tokens=16",
        "optim.mini_batch_size=4", "optim.micro_batch_size=2", "optim.lr=1e-3",
        "val_groups=2", "test_freq=2", "save_freq=0", "steps=2",
        "warm_start.enabled=false", "progress=false", f"run_dir={tmp_path / 'run'}",
    ]
    trainer = Trainer(load_config(RunConfig, [], overrides))
    assert len(trainer.train()) == 2
    rows = read_metrics(trainer.run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("train/success", "train/reward", "actor/pg_loss", "actor/grad_norm"):
        assert math.isfinite(rows[0][key]), key
    assert 0.0 <= rows[0]["train/success"] <= 1.0
    assert "val-env/success" in rows[1]
