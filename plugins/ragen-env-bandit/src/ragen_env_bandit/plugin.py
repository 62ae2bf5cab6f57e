"""Entry-point target of the ``bandit`` env: a light spec, no implementation imports."""

from __future__ import annotations

from ragen_core.specs import EnvSpec
from ragen_env_bandit.config import BanditConfig

SPEC = EnvSpec(
    name="bandit",
    summary="Two-armed bandit with symbolic arm names (low-risk vs high-risk job titles).",
    config_model=BanditConfig,
    factory="ragen_env_bandit.env:BanditEnv",
    presets={"Bandit": {"split": "train"}, "BanditTest": {"split": "test"}},
)
