"""Critic-free RL for RAGEN: the ``grpo``, ``drgrpo``, ``rloo``, ``reinforce-plus-plus`` and
``reinforce-plus-plus-baseline`` estimators and the ``grpo``, ``drgrpo`` and ``dapo`` algorithms.

Estimators are pure functions in :mod:`ragen_algo_grpo.grpo`, :mod:`ragen_algo_grpo.rloo` and
:mod:`ragen_algo_grpo.reinforce_pp`; DAPO's dynamic sampling and overlong shaping are in
:mod:`ragen_algo_grpo.dapo` (these need torch and are imported lazily). Importing this package
loads only the pydantic configs.
"""

from __future__ import annotations

from ragen_algo_grpo.config import (
    DAPOAlgorithmConfig,
    DrGRPOAlgorithmConfig,
    DrGRPOConfig,
    GRPOAlgorithmConfig,
    GRPOConfig,
    ReinforcePPBaselineConfig,
    ReinforcePPConfig,
    RLOOConfig,
)

__all__ = [
    "DAPOAlgorithmConfig",
    "DrGRPOAlgorithmConfig",
    "DrGRPOConfig",
    "GRPOAlgorithmConfig",
    "GRPOConfig",
    "RLOOConfig",
    "ReinforcePPBaselineConfig",
    "ReinforcePPConfig",
]
