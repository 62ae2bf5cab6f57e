"""Training steps on WebShop with the tiny model and the env's defaults (generated catalog, offline).

The tiny model writes noise, so a second run feeds scripted replies, the oracle's next action in
even rows and a junk click in odd rows, to prove that actions reach the shop and purchases reach
the update.
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
    "env=webshop", "rollout.env_groups=2", "rollout.group_size=2", "optim.mini_batch_size=4", "optim.micro_batch_size=2",
    "optim.lr=1e-3", "algo=grpo", "warm_start.enabled=false", "progress=false", "save_freq=0",
]


def test_two_training_steps_with_the_defaults(tmp_path, one_torch_thread):
    overrides = BASE + ["rollout.env_groups=1", "env_config.max_turns=2", "rollout.max_model_len=2048", "sampling.train.max_new_tokens=16",
                        "sampling.val.max_new_tokens=16", "val_groups=1", "test_freq=2", "steps=2", f"run_dir={tmp_path / 'run'}"]
    trainer = Trainer(load_config(RunConfig, [], overrides))
    history = trainer.train()
    rows = read_metrics(trainer.run_dir / "metrics.jsonl")
    assert len(history) == 2 and [r["step"] for r in rows] == [1, 2]
    for key in ("train/success", "train/reward", "actor/pg_loss", "timing_s/gen"):
        assert math.isfinite(rows[0][key]), key
    assert 0.0 <= rows[0]["train/success"] <= 1.0
    assert "val-env/success" in rows[1]


def test_scripted_shopping_is_rewarded(tmp_path, one_torch_thread, monkeypatch):
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
    (row,) = Trainer(load_config(RunConfig, [], overrides)).train()
    assert row["train/success"] == 0.5  # exactly the even row: 1 of 2 episodes
    assert row["actor/pg_loss"] != 0.0 or row["actor/grad_norm"] > 0.0

