"""Two-armed bandit with symbolic arm names (RAGEN's ``Bandit`` / ``BanditTest`` tasks).

Light package root: importing it pulls in the pydantic config only. The environment class
lives in :mod:`ragen_env_bandit.env` and is imported on first attribute access.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ragen_env_bandit.config import TEST_PAIRS, TRAIN_PAIRS, BanditConfig

try:
    __version__ = version("ragen-env-bandit")
except PackageNotFoundError:  # source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["TEST_PAIRS", "TRAIN_PAIRS", "BanditConfig", "BanditEnv", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "BanditEnv":
        from ragen_env_bandit.env import BanditEnv

        return BanditEnv
    raise AttributeError(name)
