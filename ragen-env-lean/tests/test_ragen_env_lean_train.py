"""The lean env trains for one step with the tiny model, checked by the REPL stand-in
(tests/lean_repl_double.py): it proves the env works inside the trainer (threads of the local
pool, the shared REPL process, rewards into metrics), not that the tiny model proves anything."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from ragen_env_lean.repl import close_shared

from ragen_core.config import load_config
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.trainer import Trainer

DOUBLE = str(Path(__file__).with_name("lean_repl_double.py"))


@pytest.fixture()
def one_torch_thread():
    """The tiny model gains nothing from threads; on a shared 2-core VM they slow it down."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    close_shared()


@pytest.mark.usefixtures("one_torch_thread")
def test_one_training_step_with_the_stand_in(tmp_path):
    overrides = [
        "env=lean", f"env_config.repl_command=[{sys.executable}, {DOUBLE}]", "env_config.max_turns=1",
        "env_config.max_actions_per_turn=2", "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=1536",
        "sampling.train.max_new_tokens=16", "sampling.val.max_new_tokens=16",
        "optim.mini_batch_size=4", "optim.micro_batch_size=2", "optim.lr=1e-3",
        "val_groups=2", "test_freq=1", "save_freq=0", "steps=1",
        "warm_start.enabled=false", "progress=false", f"run_dir={tmp_path / 'run'}",
    ]
    trainer = Trainer(load_config(RunConfig, [], overrides))
    assert len(trainer.train()) == 1
    (row,) = read_metrics(trainer.run_dir / "metrics.jsonl")
    for key in ("train/success", "train/reward", "actor/pg_loss", "actor/grad_norm"):
        assert math.isfinite(row[key]), key
    assert 0.0 <= row["train/success"] <= 1.0 and "val-env/success" in row
