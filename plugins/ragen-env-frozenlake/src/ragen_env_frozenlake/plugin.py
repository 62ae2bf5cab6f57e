"""Entry-point target: the light spec of the ``frozenlake`` env."""

from __future__ import annotations

from ragen_core.specs import EnvSpec
from ragen_env_frozenlake.config import FrozenLakeConfig

SPEC = EnvSpec(
    name="frozenlake",
    summary="Reach the goal on a random frozen lake without falling into a hole (optionally slippery).",
    config_model=FrozenLakeConfig,
    factory="ragen_env_frozenlake.env:FrozenLakeEnv",
    aliases=("frozen-lake",),
    presets={
        "FrozenLake": {"success_rate": 0.8, "max_actions_per_episode": 10, "max_tokens": 100},
        # The reference task file and every main-table run set success_rate 1 (deterministic).
        "CoordFrozenLake": {
            "observation_format": "grid_coord",
            "success_rate": 1.0,
            "max_actions_per_episode": 10,
            "max_tokens": 120,
        },
    },
)
