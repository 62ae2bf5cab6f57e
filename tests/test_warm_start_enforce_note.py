"""Under ``rollout.enforce_env_max_tokens`` the prompts state the smaller reply budget; a shipped
warm policy learnt on prompts stating the env's ``max_tokens`` may then miss its gate, and the
warm start says why and what keeps its prompts (helper-114's walk: Bandit's shipped policy fell
from 1.0 to 0.5 valid replies with the flag alone, then spent minutes in SFT with no word why)."""

from __future__ import annotations

from ragen_core.config import load_config
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.warmstart import enforced_budget_note


def config(*overrides: str) -> RunConfig:
    return load_config(RunConfig, overrides=["env=bandit", *overrides])


def test_the_note_names_the_budgets_the_prompts_state_instead_of_max_tokens():
    note = enforced_budget_note(config("rollout.enforce_env_max_tokens=true", "sampling.train.max_new_tokens=48",
                                       "sampling.val.max_new_tokens=120"))
    assert note is not None
    assert "sampling.train.max_new_tokens=48" in note and "env_config.max_tokens=100" in note
    assert "sampling.val" not in note  # validation's budget is not below max_tokens: its prompts are unchanged
    assert note.endswith("raise sampling.train.max_new_tokens to 100")


def test_no_note_when_the_prompts_state_max_tokens():
    assert enforced_budget_note(config("sampling.train.max_new_tokens=48")) is None  # the flag is off
    assert enforced_budget_note(config("rollout.enforce_env_max_tokens=true", "sampling.train.max_new_tokens=100",
                                       "sampling.val.max_new_tokens=100")) is None
    assert enforced_budget_note(config("rollout.enforce_env_max_tokens=true", "env_config.max_tokens=40",
                                       "sampling.train.max_new_tokens=48", "sampling.val.max_new_tokens=48")) is None
    # a max_tokens of the user's own: the shipped policy's prompts stated another number anyway
    assert enforced_budget_note(config("rollout.enforce_env_max_tokens=true", "env_config.max_tokens=200")) is None
