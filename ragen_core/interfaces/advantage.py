"""Advantage estimator interface: a pure function from rewards, masks and groups to advantages.

Tensors are ``torch`` tensors shaped ``[batch, tokens]`` aligned with the *response* positions
of the training batch: ``response_mask[i, t] = 1`` exactly on tokens the model generated.
``token_rewards`` holds the reward placed on the last generated token of the episode (or of each
turn, for turn-level credit), zero elsewhere.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragen_core.specs import PluginConfig, with_overrides

if TYPE_CHECKING:
    import torch


@dataclass
class AdvantageInputs:
    """Everything an estimator may read. Unused fields may be ``None``."""

    token_rewards: torch.Tensor
    """``[B, T]`` float: rewards on generated-token positions."""
    response_mask: torch.Tensor
    """``[B, T]`` float/bool: 1 on generated tokens."""
    group_ids: torch.Tensor
    """``[B]`` long: samples with equal ids share a prompt (GRPO statistics)."""
    values: torch.Tensor | None = None
    """``[B, T]`` critic values, for critic-based estimators."""
    turn_ends: list[list[int]] | None = None
    """Per sample, the token index of each turn's last generated token (turn-level credit)."""
    episode_ids: torch.Tensor | None = None
    """``[B]`` long: rows of one episode (turn-level samples) share an id; de-duplicated in stats."""


@dataclass
class AdvantageOutputs:
    advantages: torch.Tensor
    """``[B, T]``, zero outside the mask."""
    returns: torch.Tensor
    """``[B, T]`` value targets (equal to advantages for critic-free estimators)."""
    metrics: dict[str, float] | None = None


class AdvantageEstimator(ABC):
    """Base class of estimator plugins; ``__call__`` must be a pure function of its inputs."""

    config_class: type[PluginConfig] = PluginConfig
    needs_critic: bool = False

    def __init__(self, config: PluginConfig | None = None, **overrides: Any) -> None:
        self.config = with_overrides(self.config_class, config, overrides)

    @abstractmethod
    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutputs:
        """Compute advantages and returns. Must not mutate ``inputs``; no NaN/inf on flat groups."""
