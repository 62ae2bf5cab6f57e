"""REINFORCE leave-one-out (RLOO) advantages.

Scores ``S_i = Σ_t r_{i,t}``; per group of n ≥ 2 unique episodes (de-duplicated by
``episode_ids`` as in GRPO) the baseline of a sample is the mean of the *other* episodes::

    A_i = S_i − (Σ_{j≠i} S_j) / (n − 1)  =  n/(n − 1) · (S_i − μ)

A single-episode group has no other sample, so its baseline is 0 and ``A_i = S_i``. The scalar
is broadcast over the row's trained tokens; returns equal advantages; no whitening.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragen_algo_grpo.config import RLOOConfig
from ragen_algo_grpo.grpo import group_stats, length_weights
from ragen_core.interfaces.advantage import (
    AdvantageEstimator,
    AdvantageInputs,
    AdvantageOutputs,
)

if TYPE_CHECKING:
    import torch


def rloo_advantages(
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    episode_ids: torch.Tensor | None = None,
    length_weight: bool = False,
) -> torch.Tensor:
    """Token-level RLOO advantages ``[B, T]`` (formula in the module docstring)."""
    import torch

    with torch.no_grad():
        scores = token_rewards.sum(dim=-1)
        stats = group_stats(scores, group_ids, episode_ids)
        others = stats.count - 1
        baseline = torch.where(
            others > 0,
            (stats.sum - scores) / others.clamp(min=1),
            torch.zeros_like(scores),
        )
        adv = scores - baseline
        if length_weight:
            adv = adv * length_weights(response_mask, scores.dtype)
        return adv.unsqueeze(-1) * (response_mask > 0).to(scores.dtype)


class RLOOEstimator(AdvantageEstimator):
    """``rloo`` estimator plugin (critic-free)."""

    config_class = RLOOConfig
    needs_critic = False
    config: RLOOConfig

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutputs:
        adv = rloo_advantages(
            inputs.token_rewards,
            inputs.response_mask,
            inputs.group_ids,
            episode_ids=inputs.episode_ids,
            length_weight=self.config.length_weight,
        )
        return AdvantageOutputs(advantages=adv, returns=adv.clone(), metrics={})
