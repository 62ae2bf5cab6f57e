"""Training steps on WebShop with the tiny model and the env's defaults (generated catalog, offline).

The tiny model writes noise, so a second run feeds scripted replies, the oracle's next action in
even rows and a junk click in odd rows, to prove that actions reach the shop and purchases reach
the update.
"""

from __future__ import annotations

import math

import pytest

from ragen_core.testing.train_checks import TINY_RUN, requires_algorithm, train

pytestmark = [requires_algorithm("grpo"), pytest.mark.usefixtures("one_torch_thread")]


BASE = [*TINY_RUN, "env=webshop"]


def test_two_training_steps_with_the_defaults(tmp_path):
    overrides = BASE + ["rollout.env_groups=1", "env_config.max_turns=2", "rollout.max_model_len=2048", "sampling.train.max_new_tokens=16",
                        "sampling.val.max_new_tokens=16", "val_groups=1", "test_freq=2", "steps=2", f"run_dir={tmp_path / 'run'}"]
    _, rows = train(overrides)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("train/success", "train/reward", "actor/pg_loss", "timing_s/gen"):
        assert math.isfinite(rows[0][key]), key
    assert 0.0 <= rows[0]["train/success"] <= 1.0
    assert "val-env/success" in rows[1]


def test_scripted_shopping_is_rewarded(tmp_path, monkeypatch):
    from ragen_env_webshop.config import WebShopConfig
    from ragen_env_webshop.engine import Location, engine_for

    from ragen_core.engines.scripted import ScriptedEngine
    from ragen_core.trainer import setup

    engine = engine_for(WebShopConfig().catalog)
    by_text = {g.instruction: i for i, g in enumerate(engine.goals)}

    def script_for(tok):
        def script(call, row, prompt):
            if row % 2:
                return "ok</think><answer>click[nothing here]</answer>"
            text = tok.decode(prompt)
            goal = max((i for t, i in by_text.items() if t in text), key=lambda i: len(engine.goals[i].instruction))
            actions = engine.oracle_actions(goal, Location())  # one engine call per turn: call = actions taken
            return f"ok</think><answer>{actions[min(call, len(actions) - 1)]}</answer>"
        return ScriptedEngine(script, tok)

    monkeypatch.setattr(setup, "make_engine", lambda c, m, t: script_for(t))
    # the tiny tokenizer spells text almost letter by letter: show each turn its own page only
    overrides = BASE + ["rollout.env_groups=1", "env_config.max_turns=6", "env_config.show_guidance=false",
                        "rollout.extra.context_window=single-turn",
                        "rollout.max_model_len=4096", "sampling.train.max_new_tokens=160", "steps=1", "test_freq=0",
                        "filter=none", f"run_dir={tmp_path / 'run'}"]
    _, (row,) = train(overrides)
    assert row["train/success"] == 0.5  # exactly the even row: 1 of 2 episodes
    assert row["actor/pg_loss"] != 0.0 or row["actor/grad_norm"] > 0.0

