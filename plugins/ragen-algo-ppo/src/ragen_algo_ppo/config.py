"""Configs of the PPO plugin: the GAE estimators and the ``ppo`` algorithm preset."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragen_core.interfaces.algorithm import AlgorithmConfig, LossAggMode
from ragen_core.specs import PluginConfig


class GAEConfig(PluginConfig):
    """Masked generalised advantage estimation (spec 8.2; defaults from spec 2.5)."""

    gamma: float = Field(default=1.0, ge=0.0, le=1.0)
    """Token-level discount γ."""
    lam: float = Field(default=1.0, ge=0.0, le=1.0)
    """GAE λ."""
    whiten: bool = True
    """Whiten advantages over the masked tokens: ``(A − mean) / sqrt(var + 1e-8)``."""
    whiten_scope: Literal["batch", "group"] = "batch"
    """``batch``: one mean/variance over all trained tokens (reference). ``group``: separate
    statistics per ``group_ids`` value, so groups with different reward scales do not mix (L13)."""


class BilevelGAEConfig(GAEConfig):
    """Turn-level + token-level GAE with explicit turn ends (spec 8.3, fixed per L5)."""

    high_level_gamma: float = Field(default=0.95, ge=0.0, le=1.0)
    """Turn-level discount γ_h applied between consecutive turns."""


class PPOConfig(AlgorithmConfig):
    """PPO preset (spec 8.9): GAE with a critic, clip 0.2/0.28, ``token-mean`` loss, no KL."""

    estimator: str = "gae"
    """Name of the advantage estimator plugin."""
    use_critic: bool = True
    """Train a value head (GAE needs it)."""
    loss_agg_mode: LossAggMode = "token-mean"
    """Aggregation of the per-token policy loss (spec 8.5)."""
