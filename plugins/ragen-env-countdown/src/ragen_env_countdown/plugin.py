"""Entry-point target: the light spec of the ``countdown`` env."""

from __future__ import annotations

from ragen_core.specs import EnvSpec
from ragen_env_countdown.config import CountdownConfig

SPEC = EnvSpec(
    name="countdown",
    summary="Reach a target with + - * / using each given number exactly once (one answer).",
    config_model=CountdownConfig,
    factory="ragen_env_countdown.env:CountdownEnv",
    presets={"Countdown": {"max_actions_per_episode": 1, "max_tokens": 100}},
)
