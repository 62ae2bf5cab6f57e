"""REINFORCE++ and REINFORCE++-baseline advantages (critic-free, spec 8.4 "other estimators").

REINFORCE++: discounted return over the trained tokens, skipping observation (unmasked)
positions exactly like masked GAE with ``V = 0`` and ``λ = 1``, then whitened over the batch::

    G_t = r_t + γ · G_next        (G_next: return at the next trained token; 0 after the last)
    A   = whiten_m(G),  returns = G

(The reference backend instead *reset* the running return at every unmasked position, which in a
multi-turn sequence cuts later turns' rewards off from earlier turns; skipping keeps them.)

REINFORCE++-baseline: group-mean baseline, broadcast, then whitened over the batch::

    A_i = S_i − μ_g   (μ_g over unique episodes; 0 for single-episode groups)
    A   = whiten_m(A_i · m_{i,t}),  returns = A

Equal rewards: ``whiten_m`` of a constant is exactly 0 (:mod:`ragen_core.masked`), so a batch whose
returns are one constant gets zero advantages. For REINFORCE++ that needs episode-level rewards
and γ = 1: with turn-level rewards ``G_t`` is the reward-to-go, larger in earlier turns, and the
batch baseline leaves those differences in the advantages by design. REINFORCE++-baseline is
zero on every flat group before whitening (``S_i − μ_g`` is exact there, see
:mod:`ragen_algo_grpo.grpo`); whitening then shifts every row of the batch by the same
``−mean/std``, which is 0 when the whole batch is flat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragen_algo_grpo.config import ReinforcePPBaselineConfig, ReinforcePPConfig
from ragen_algo_grpo.grpo import episode_scores, group_stats
from ragen_core.interfaces.advantage import (
    AdvantageEstimator,
    AdvantageInputs,
    AdvantageOutputs,
)
from ragen_core.masked import masked_whiten

if TYPE_CHECKING:
    import torch


def discounted_returns(
    token_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """``G_t`` over trained tokens (unmasked positions skipped), zero outside the mask."""
    import torch

    with torch.no_grad():
        active = response_mask > 0
        out = torch.zeros_like(token_rewards)
        g_next = token_rewards.new_zeros(token_rewards.shape[0])
        for t in range(token_rewards.shape[1] - 1, -1, -1):
            g_next = torch.where(
                active[:, t], token_rewards[:, t] + gamma * g_next, g_next
            )
            out[:, t] = g_next
        return out * active.to(token_rewards.dtype)


def reinforce_pp_advantages(
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    whiten: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` of REINFORCE++ (module docstring)."""
    returns = discounted_returns(token_rewards, response_mask, gamma)
    fmask = (response_mask > 0).to(token_rewards.dtype)
    adv = masked_whiten(returns, fmask) * fmask if whiten else returns.clone()
    return adv, returns


def reinforce_pp_baseline_advantages(
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    episode_ids: torch.Tensor | None = None,
    whiten: bool = True,
) -> torch.Tensor:
    """Advantages of REINFORCE++-baseline (module docstring)."""
    import torch

    with torch.no_grad():
        scores = episode_scores(token_rewards)
        stats = group_stats(scores, group_ids, episode_ids)
        fmask = (response_mask > 0).to(token_rewards.dtype)
        adv = (scores - stats.mean).to(token_rewards.dtype).unsqueeze(-1) * fmask
        return masked_whiten(adv, fmask) * fmask if whiten else adv


class ReinforcePPEstimator(AdvantageEstimator):
    """``reinforce-plus-plus`` estimator plugin."""

    config_class = ReinforcePPConfig
    needs_critic = False
    config: ReinforcePPConfig

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutputs:
        adv, returns = reinforce_pp_advantages(
            inputs.token_rewards,
            inputs.response_mask,
            gamma=self.config.gamma,
            whiten=self.config.whiten,
        )
        return AdvantageOutputs(advantages=adv, returns=returns, metrics={})


class ReinforcePPBaselineEstimator(AdvantageEstimator):
    """``reinforce-plus-plus-baseline`` estimator plugin."""

    config_class = ReinforcePPBaselineConfig
    needs_critic = False
    config: ReinforcePPBaselineConfig

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutputs:
        adv = reinforce_pp_baseline_advantages(
            inputs.token_rewards,
            inputs.response_mask,
            inputs.group_ids,
            episode_ids=inputs.episode_ids,
            whiten=self.config.whiten,
        )
        return AdvantageOutputs(advantages=adv, returns=adv.clone(), metrics={})
