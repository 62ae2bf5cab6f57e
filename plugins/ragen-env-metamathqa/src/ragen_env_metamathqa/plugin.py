"""Entry-point target: the light spec of the ``metamathqa`` env (no data or checker imports)."""

from __future__ import annotations

from ragen_core.specs import EnvSpec
from ragen_env_metamathqa.config import MetaMathQAConfig

_TAG = {"max_actions_per_episode": 1, "max_actions_per_turn": 1, "max_turns": 5, "max_tokens": 100}

SPEC = EnvSpec(
    name="metamathqa",
    summary="Math word problems (built-in, MetaMathQA, GSM8K or MATH files); the final answer is checked by value.",
    config_model=MetaMathQAConfig,
    factory="ragen_env_metamathqa.env:MetaMathQAEnv",
    presets={
        # the reference tag, with the value-based checker
        "MetamathQA": dict(_TAG),
        # the reference tag and the reference's exact-match rule
        "ExactMatch": {**_TAG, "checker": "exact"},
    },
)
