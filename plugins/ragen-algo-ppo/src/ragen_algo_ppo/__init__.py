"""PPO for RAGEN: the ``gae`` and ``bilevel-gae`` advantage estimators and the ``ppo`` algorithm.

The estimators are pure functions in :mod:`ragen_algo_ppo.gae` and
:mod:`ragen_algo_ppo.bilevel_gae` (imported lazily: they need torch). Importing this package
loads only the pydantic configs.
"""

from __future__ import annotations

from ragen_algo_ppo.config import BilevelGAEConfig, GAEConfig, PPOConfig

__all__ = ["BilevelGAEConfig", "GAEConfig", "PPOConfig"]
