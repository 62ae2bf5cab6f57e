"""Bi-level GAE with explicit turn ends (spec 8.3, fixed as recommended by L5).

The reference detected turn ends as positions with a *non-zero* reward, so zero-reward turns
vanished, and it only ran with one terminal reward (reducing to plain GAE). Here every turn
end comes from ``AdvantageInputs.turn_ends``. For one row with turn ends ``p_1 < … < p_K``:

1. Turn rewards: ``R_k = Σ r_t`` over ``t ∈ (p_{k−1}, p_k]`` (``p_0 = −1``); rewards after
   ``p_K`` are added to ``R_K``. Masked tokens after ``p_K`` form one extra final turn ending at
   the last masked token; a row without turn ends is one turn ending at its last masked token.
2. Turn level, backwards over k = K … 1 with ``V_k = V[p_k]``, ``V_{K+1} = A^h_{K+1} = 0``::

       δ_k   = R_k + γ_h · V_{k+1} − V_k
       A^h_k = δ_k + γ_h λ · A^h_{k+1}
       u_k   = A^h_k + V_k                      (turn-level return)

3. Token level, backwards over t with masked positions as in plain GAE, resetting at every turn
   end (so no credit leaks between turns through the token recursion)::

       t = p_k:      A_t = u_k − V_t  (= A^h_k)
       otherwise:    δ_t = γ · V_next − V_t;  A_t = δ_t + γλ · A_next
       (V_next, A_next: value/advantage of the next masked position of the same turn)
       R_t = A_t + V_t

4. Whiten over the mask (batch or per group) and zero outside it.

With γ = λ = 1 a token of turn k gets ``A_t = u_k − V_t`` and, when the critic is exact,
``u_k = R_k + γ_h · u_{k+1}``: later turns' rewards reach earlier turns discounted by γ_h.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragen_algo_ppo.config import BilevelGAEConfig
from ragen_algo_ppo.gae import finish_outputs
from ragen_core.interfaces.advantage import (
    AdvantageEstimator,
    AdvantageInputs,
    AdvantageOutputs,
)

if TYPE_CHECKING:
    import torch


def _row_turn_ends(ends: Sequence[int] | None, active_row: torch.Tensor) -> list[int]:
    """Sorted, de-duplicated turn ends of one row, extended to cover trailing masked tokens."""
    length = active_row.shape[0]
    clean = sorted({int(p) for p in (ends or ())})
    if clean and (clean[0] < 0 or clean[-1] >= length):
        raise ValueError(f"turn end index out of range [0, {length}): {clean}")
    masked = active_row.nonzero().flatten()
    if masked.numel():
        last = int(masked[-1])
        if not clean or last > clean[-1]:
            clean.append(last)
    return clean


def bilevel_gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor | None,
    response_mask: torch.Tensor,
    turn_ends: Sequence[Sequence[int] | None] | None,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    high_level_gamma: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw bi-level advantages and returns (recursion in the module docstring), zero off-mask.

    Args:
        token_rewards: ``[B, T]`` rewards (per-turn rewards on each turn's last token).
        values: ``[B, T]`` critic values; ``None`` means a zero baseline.
        response_mask: ``[B, T]`` 1 on trained tokens.
        turn_ends: Per row, the token index of each turn's last generated token.
        gamma: Token-level discount γ.
        lam: λ, used at both levels.
        high_level_gamma: Turn-level discount γ_h.
    """
    import torch

    with torch.no_grad():
        rewards = token_rewards
        vals = torch.zeros_like(rewards) if values is None else values.to(rewards.dtype)
        active = response_mask > 0
        batch, length = rewards.shape
        if turn_ends is not None and len(turn_ends) != batch:
            raise ValueError(f"turn_ends has {len(turn_ends)} rows, batch has {batch}")
        is_end = torch.zeros_like(active)
        target = torch.zeros_like(rewards)
        for i in range(batch):
            ends = _row_turn_ends(
                None if turn_ends is None else turn_ends[i], active[i]
            )
            bounds = [-1, *ends]
            a_h, v_h_next = 0.0, 0.0
            for k in range(len(ends) - 1, -1, -1):
                stop = length if k == len(ends) - 1 else bounds[k + 1] + 1
                r_k = float(rewards[i, bounds[k] + 1 : stop].sum())
                v_k = float(vals[i, ends[k]])
                a_h = (
                    r_k
                    + high_level_gamma * v_h_next
                    - v_k
                    + high_level_gamma * lam * a_h
                )
                target[i, ends[k]] = a_h + v_k
                is_end[i, ends[k]] = True
                v_h_next = v_k
        adv = torch.zeros_like(rewards)
        a_next = rewards.new_zeros(batch)
        v_next = rewards.new_zeros(batch)
        for t in range(length - 1, -1, -1):
            v_t = vals[:, t]
            end = is_end[:, t]
            inner = gamma * v_next - v_t + gamma * lam * a_next
            a_new = torch.where(end, target[:, t] - v_t, inner)
            on = active[:, t] | end
            a_next = torch.where(on, a_new, a_next)
            v_next = torch.where(on, v_t, v_next)
            adv[:, t] = a_next
        fmask = active.to(rewards.dtype)
        return adv * fmask, (adv + vals) * fmask


class BilevelGAEEstimator(AdvantageEstimator):
    """``bilevel-gae`` estimator plugin: :func:`bilevel_gae` plus whitening."""

    config_class = BilevelGAEConfig
    needs_critic = True
    config: BilevelGAEConfig

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutputs:
        cfg = self.config
        raw, returns = bilevel_gae(
            inputs.token_rewards,
            inputs.values,
            inputs.response_mask,
            inputs.turn_ends,
            gamma=cfg.gamma,
            lam=cfg.lam,
            high_level_gamma=cfg.high_level_gamma,
        )
        return finish_outputs(raw, returns, inputs, whiten=cfg.whiten, scope=cfg.whiten_scope)
