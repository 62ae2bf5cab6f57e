"""Training steps on DeepCoder with the tiny model: rollouts run the sandbox, the update runs.

The tiny model writes noise (its replies rarely even parse), so a second run feeds it scripted
replies, the reference solution in every other row, to prove that programs reach the sandbox and
rewards reach the update.
"""

from __future__ import annotations

import math

import pytest
import torch

from ragen_core import registry
from ragen_core.config import load_config
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.trainer import Trainer

pytestmark = pytest.mark.skipif("grpo" not in registry.names("algorithm"),
                                reason="needs the grpo algorithm (ragen-algo-grpo), absent when this env is installed alone")


@pytest.fixture
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


BASE = [
    "env=deepcoder", "env_config.max_tests=2", "env_config.sandbox.time_limit_s=1",
    "rollout.env_groups=2", "rollout.group_size=2", "optim.mini_batch_size=4", "optim.micro_batch_size=2",
    "optim.lr=1e-3", "algo=grpo", "warm_start.enabled=false", "progress=false", "save_freq=0",
]


def test_two_training_steps(tmp_path, one_torch_thread):
    overrides = BASE + ["rollout.max_model_len=1024", "sampling.train.max_new_tokens=16", "sampling.val.max_new_tokens=16",
                        "val_groups=2", "test_freq=2", "steps=2", f"run_dir={tmp_path / 'run'}"]
    trainer = Trainer(load_config(RunConfig, [], overrides))
    history = trainer.train()
    rows = read_metrics(trainer.run_dir / "metrics.jsonl")
    assert len(history) == 2 and [r["step"] for r in rows] == [1, 2]
    for key in ("train/success", "train/reward", "actor/pg_loss", "timing_s/gen"):
        assert math.isfinite(rows[0][key]), key
    assert 0.0 <= rows[0]["train/success"] <= 1.0
    assert "val-env/success" in rows[1]


def test_scripted_programs_are_graded_in_the_sandbox_and_rewarded(tmp_path, one_torch_thread, monkeypatch):
    from ragen_env_deepcoder.builtin import ROWS

    from ragen_core.engines.scripted import ScriptedEngine
    from ragen_core.trainer import setup

    def script_for(tok):
        def script(call, row, prompt):
            text = tok.decode(prompt)
            solution = next(r["solution"] for r in ROWS if r["problem"] in text)
            program = solution if row % 2 == 0 else "print(0)"  # one pass and one failure per group
            return f"ok</think><answer>```python\n{program}```</answer>"
        return ScriptedEngine(script, tok)

    monkeypatch.setattr(setup, "make_engine", lambda c, m, t: script_for(t))
    overrides = BASE + ["rollout.max_model_len=2048", "sampling.train.max_new_tokens=512", "steps=1", "test_freq=0",
                        "filter=none", f"run_dir={tmp_path / 'run'}"]
    (row,) = Trainer(load_config(RunConfig, [], overrides)).train()
    assert row["train/success"] == 0.5  # exactly the even rows: 2 of 4 episodes
    assert row["train/deepcoder/action_is_valid"] == 1.0
    assert row["actor/pg_loss"] != 0.0 or row["actor/grad_norm"] > 0.0
