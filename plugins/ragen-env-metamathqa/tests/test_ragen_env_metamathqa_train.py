"""MetaMathQA trains for two steps with the tiny model (the built-in problems, no download)."""

from __future__ import annotations

import math

import pytest

from ragen_core.testing.train_checks import TINY_RUN, train


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("checker", ["math", "exact"])
def test_two_training_steps(tmp_path, checker):
    overrides = [
        *TINY_RUN, "env=metamathqa", f"env_config.checker={checker}", "env_config.max_turns=2", "rollout.max_model_len=1536",
        "sampling.train.max_new_tokens=16", "sampling.val.max_new_tokens=16",
        "val_groups=2", "test_freq=2", "steps=2", f"run_dir={tmp_path / 'run'}",
    ]
    _, rows = train(overrides)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("train/success", "train/reward", "actor/pg_loss", "actor/grad_norm"):
        assert math.isfinite(rows[0][key]), key
    assert 0.0 <= rows[0]["train/success"] <= 1.0
    assert "val-env/success" in rows[1]
