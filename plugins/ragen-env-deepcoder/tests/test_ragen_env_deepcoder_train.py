"""Training steps on DeepCoder with the tiny model: rollouts run the sandbox, the update runs.

The tiny model writes noise (its replies rarely even parse), so a second run feeds it scripted
replies, the reference solution in every other row, to prove that programs reach the sandbox and
rewards reach the update.
"""

from __future__ import annotations

import math

import pytest

from ragen_core.testing.train_checks import TINY_RUN, requires_algorithm, train

pytestmark = [requires_algorithm("grpo"), pytest.mark.usefixtures("one_torch_thread")]


BASE = [*TINY_RUN, "env=deepcoder", "env_config.max_tests=2", "env_config.sandbox.time_limit_s=1"]


def test_two_training_steps(tmp_path):
    overrides = BASE + ["rollout.max_model_len=1024", "sampling.train.max_new_tokens=16", "sampling.val.max_new_tokens=16",
                        "val_groups=2", "test_freq=2", "steps=2", f"run_dir={tmp_path / 'run'}"]
    _, rows = train(overrides)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("train/success", "train/reward", "actor/pg_loss", "timing_s/gen"):
        assert math.isfinite(rows[0][key]), key
    assert 0.0 <= rows[0]["train/success"] <= 1.0
    assert "val-env/success" in rows[1]


def test_scripted_programs_are_graded_in_the_sandbox_and_rewarded(tmp_path, monkeypatch):
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
    _, (row,) = train(overrides)
    assert row["train/success"] == 0.5  # exactly the even rows: 2 of 4 episodes
    assert row["train/deepcoder/action_is_valid"] == 1.0
    assert row["actor/pg_loss"] != 0.0 or row["actor/grad_norm"] > 0.0
