"""Masked GAE (spec 8.2): the default PPO advantage estimator.

Backwards over the token positions ``t = T−1 … 0`` of each row, with observation
(unmasked) positions skipped::

    δ_t  = r_t + γ · V_next − V_t
    A'_t = δ_t + γλ · A_next
    if m_t = 1:  A_next ← A'_t ;  V_next ← V_t        (otherwise both carry over)
    A_t  = A_next,   R_t = A_t + V_t

starting from ``A_next = V_next = 0``. Rewards sitting on unmasked positions are therefore
ignored. Returns are taken *before* whitening; advantages are then whitened over the masked
tokens (the whole batch, or each group separately, L13) and zeroed outside the mask.

With γ = λ = 1 and one terminal reward R, the raw advantage at every trained token is
``R − V_t`` and the return is ``R`` (spec 18.3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragen_algo_ppo.config import GAEConfig
from ragen_core.interfaces.advantage import (
    AdvantageEstimator,
    AdvantageInputs,
    AdvantageOutputs,
)
from ragen_core.masked import masked_mean, masked_var, masked_whiten

if TYPE_CHECKING:
    import torch


def masked_gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor | None,
    response_mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw (un-whitened) masked GAE advantages and returns, both zero outside the mask.

    Args:
        token_rewards: ``[B, T]`` rewards.
        values: ``[B, T]`` critic values; ``None`` means a zero baseline (discounted
            reward-to-go).
        response_mask: ``[B, T]`` 1 on trained tokens.
        gamma: Discount γ.
        lam: GAE λ.

    Returns:
        ``(advantages, returns)`` in the rewards' dtype.
    """
    import torch

    with torch.no_grad():
        rewards = token_rewards
        vals = torch.zeros_like(rewards) if values is None else values.to(rewards.dtype)
        active = response_mask > 0
        batch, length = rewards.shape
        adv = torch.zeros_like(rewards)
        a_next = rewards.new_zeros(batch)
        v_next = rewards.new_zeros(batch)
        for t in range(length - 1, -1, -1):
            v_t = vals[:, t]
            delta = rewards[:, t] + gamma * v_next - v_t
            a_new = delta + gamma * lam * a_next
            on = active[:, t]
            a_next = torch.where(on, a_new, a_next)
            v_next = torch.where(on, v_t, v_next)
            adv[:, t] = a_next
        fmask = active.to(rewards.dtype)
        return adv * fmask, (adv + vals) * fmask


def whiten_advantages(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Whiten over the masked tokens of the batch, or of each group when ``group_ids`` is given.

    ``A ← (A − mean_m(A)) / sqrt(var_m(A) + eps)`` with the unbiased masked variance; the result
    is zero outside the mask. A group with a single trained token whitens to 0.
    """
    import torch

    fmask = (response_mask > 0).to(advantages.dtype)
    if group_ids is None:
        return masked_whiten(advantages, fmask, eps=eps) * fmask
    out = torch.zeros_like(advantages)
    for g in torch.unique(group_ids):
        rows = (group_ids == g).to(advantages.dtype).unsqueeze(-1)
        sub = fmask * rows
        out = out + masked_whiten(advantages, sub, eps=eps) * sub
    return out


def finish_outputs(raw: torch.Tensor, returns: torch.Tensor, inputs: AdvantageInputs, *, whiten: bool, scope: str) -> AdvantageOutputs:
    """Whiten raw GAE advantages (over the batch or per group) and package them with metrics."""
    adv = raw
    if whiten:
        adv = whiten_advantages(raw, inputs.response_mask, inputs.group_ids if scope == "group" else None)
    return AdvantageOutputs(advantages=adv, returns=returns, metrics=_metrics(raw, returns, inputs.response_mask))


class GAEEstimator(AdvantageEstimator):
    """``gae`` estimator plugin: :func:`masked_gae` plus whitening."""

    config_class = GAEConfig
    needs_critic = True
    config: GAEConfig

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutputs:
        cfg = self.config
        raw, returns = masked_gae(
            inputs.token_rewards,
            inputs.values,
            inputs.response_mask,
            gamma=cfg.gamma,
            lam=cfg.lam,
        )
        return finish_outputs(raw, returns, inputs, whiten=cfg.whiten, scope=cfg.whiten_scope)


def _metrics(
    raw: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    fmask = (mask > 0).to(raw.dtype)
    return {
        "raw_adv_mean": float(masked_mean(raw, fmask)),
        "raw_adv_std": float(masked_var(raw, fmask).sqrt()),
        "returns_mean": float(masked_mean(returns, fmask)),
    }
