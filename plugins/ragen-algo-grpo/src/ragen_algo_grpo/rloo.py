"""REINFORCE leave-one-out (RLOO) advantages.

Scores ``S_i = Σ_t r_{i,t}``; per group of n ≥ 2 unique episodes (de-duplicated by
``episode_ids`` as in GRPO) the baseline of a sample is the mean of the *other* episodes::

    A_i = S_i − (Σ_{j≠i} S_j) / (n − 1)  =  n/(n − 1) · (S_i − μ)

A single-episode group has no other sample, so its baseline is 0 and ``A_i = S_i``. The scalar
is broadcast over the row's trained tokens; returns equal advantages; no whitening.

Computed as the right-hand side, in float64, from GRPO's :func:`~ragen_algo_grpo.grpo.group_stats`
(whose ``μ`` is exact on a flat group), so a group of equal scores gets exactly 0; the
leave-one-out form ``(Σ_j S_j − S_i) / (n − 1)`` rounds to an ulp off ``S_i`` there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragen_algo_grpo.config import RLOOConfig
from ragen_algo_grpo.grpo import episode_scores, group_stats, length_weights
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
        scores = episode_scores(token_rewards)
        stats = group_stats(scores, group_ids, episode_ids)
        n = stats.count
        adv = torch.where(
            n >= 2, n / (n - 1).clamp(min=1) * (scores - stats.mean), scores
        )
        if length_weight:
            adv = adv * length_weights(response_mask, scores.dtype)
        fmask = (response_mask > 0).to(token_rewards.dtype)
        return adv.to(token_rewards.dtype).unsqueeze(-1) * fmask


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
