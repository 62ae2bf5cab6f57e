"""REINFORCE++ and REINFORCE++-baseline advantages (critic-free, spec 8.4 "other estimators").

REINFORCE++: discounted return over the trained tokens, skipping observation (unmasked)
positions exactly like masked GAE with ``V = 0`` and ``λ = 1``; a per-turn batch baseline; then
division by the batch std::

    G_t = r_t + γ · G_next        (G_next: return at the next trained token; 0 after the last)
    b_k = mean of G over the trained tokens of turn k, over every row of the batch
    c_t = G_t − b_{k(t)}          (k(t): the turn of token t)
    A   = c / sqrt(Σ_m c² / (n − 1) + 1e-8),  returns = G      (n: trained tokens of the batch)

(The reference backend instead *reset* the running return at every unmasked position, which in a
multi-turn sequence cuts later turns' rewards off from earlier turns; skipping keeps them.)

Reward-to-go and its baseline. ``G_t`` credits every turn with the rewards of the turns after
it, so a turn that set up a later success is rewarded for it. But ``G`` then grows towards the
first turn even in a batch where every episode earned the same rewards, and one batch-wide
baseline (plain whitening) turned that into advantages of order 1 — early turns pushed up, late
turns down, in a batch that carries no signal. ``b_k`` depends only on the turn index, never on
the action taken, so subtracting it keeps the policy gradient unbiased (a time-dependent
baseline; like any batch-mean baseline it includes the row's own return) and compares each turn
with the same turn of the other episodes. A batch whose returns are equal turn by turn gives
``c = 0`` exactly (``masked_mean`` of a constant is that constant, see :mod:`ragen_core.masked`),
hence ``A = 0``. When every token is in the first turn (single-turn episodes), ``b_1`` is the
batch mean and the formula is plain whitening, bit for bit: ``Σ_m c² / (n − 1)`` is
:func:`masked_var` of ``G`` (the centred values have mean 0 by construction, so they are not
centred a second time). Rows are weighed by their trained tokens in ``b_k`` and in the std, like
the whitening they replace.

Turns (:func:`turn_index`). ``turn_ends[i]`` lists the last position of each turn of row ``i``;
a token belongs to the first turn whose end it does not pass. Without ``turn_ends`` every row is
one turn. In windowed context modes the trainer builds one row per turn and the rows of an episode
share an ``episode_ids`` entry, in turn order (``build_batch(per_turn=True)``; filtering keeps the
order); the turns of a row therefore count after those of the episode's earlier rows. So a
row-per-turn batch and a row-per-episode batch of the same episodes, with episode-level rewards
and γ = 1, get the same advantages turn by turn (equal up to summation order). With γ < 1 they
differ: a row-per-turn row discounts only over its own reply, a row-per-episode row over every
later turn as well. Turn-level rewards have no row-per-turn form (those rows carry the score).

Episode-level rewards get the same per-turn baseline. The estimator cannot tell them apart: an
episode score on the last token is exactly a turn-level row whose earlier turns earned 0, and
with γ = 1 both make ``G`` the score on every token. So ``b_k`` is the mean score of the episodes
that reached turn k; rows that ended earlier do not enter later turns' means. An episode still
running at turn k is compared with the episodes that also got that far (in a batch where long
episodes are the failures, a failing episode's late turns get about 0 rather than the whole
batch's disapproval), and a turn reached by a single row gets 0 (its baseline is its own return).
The price: a row's tokens no longer share one advantage when other rows' turns differ in length or
outcome. Single-turn batches are unchanged.

Equal rewards give exactly 0 advantage with γ = 1 for any turn count, turn-level or not. With
γ < 1, ``G`` decays with the distance to the reward, so tokens of one turn differ by their
position in replies of different lengths, by design of the discount. ``whiten=False`` returns
``A = G``: no baseline at all.

REINFORCE++-baseline: group-mean baseline, broadcast, then whitened over the batch::

    A_i = S_i − μ_g   (μ_g over unique episodes; 0 for single-episode groups)
    A   = whiten_m(A_i · m_{i,t}),  returns = A

It is zero on every flat group before whitening (``S_i − μ_g`` is exact there, see
:mod:`ragen_algo_grpo.grpo`); whitening then shifts every row of the batch by the same
``−mean/std``, which is 0 when the whole batch is flat (``whiten_m`` of a constant is exactly 0).
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
from ragen_core.masked import masked_mean, masked_sum, masked_whiten, safe_denominator

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


def turn_index(
    response_mask: torch.Tensor,
    turn_ends: list[list[int]] | None = None,
    episode_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[B, T]`` long: the turn of the episode each position belongs to, counted from 0.

    Within a row, the number of the row's turn ends before the position (positions past the last
    end stay in the last turn); plus the turns held by earlier rows of the same episode
    (``episode_ids``), so one-turn-per-row batches number an episode's rows 0, 1, 2, ...
    """
    import torch

    rows, width = response_mask.shape
    if turn_ends is not None and len(turn_ends) != rows:
        raise ValueError(f"turn_ends has {len(turn_ends)} rows, the batch has {rows}")
    counts = [1] * rows if turn_ends is None else [max(len(e), 1) for e in turn_ends]
    index = torch.zeros(rows, width, dtype=torch.long)
    if turn_ends is not None and max(counts) > 1:
        ends = torch.full((rows, max(counts)), width, dtype=torch.long)  # padding: past every position
        for i, row in enumerate(turn_ends):
            if any(a > b for a, b in zip(row, row[1:])):
                raise ValueError(f"turn_ends[{i}] must be in increasing order, got {row}")
            ends[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
        before = torch.searchsorted(ends, torch.arange(width).expand(rows, width).contiguous())
        index = torch.minimum(before, torch.as_tensor(counts).unsqueeze(1) - 1)
    if episode_ids is not None:
        held: dict[int, int] = {}
        offsets = []
        for e, n in zip(episode_ids.tolist(), counts):
            offsets.append(held.get(e, 0))
            held[e] = offsets[-1] + n
        index = index + torch.as_tensor(offsets, dtype=torch.long).unsqueeze(1)
    return index.to(response_mask.device)


def reinforce_pp_advantages(
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    whiten: bool = True,
    turns: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` of REINFORCE++ (module docstring); ``turns`` from
    :func:`turn_index` (None: every row is one turn)."""
    import torch

    returns = discounted_returns(token_rewards, response_mask, gamma)
    if not whiten:
        return returns.clone(), returns
    with torch.no_grad():
        fmask = (response_mask > 0).to(token_rewards.dtype)
        if turns is None:
            turns = torch.zeros_like(fmask, dtype=torch.long)
        centred = returns.clone()
        for k in torch.unique(turns[fmask > 0]).tolist():
            in_turn = turns == k
            b_k = masked_mean(returns, fmask * in_turn.to(fmask.dtype))
            centred = torch.where(in_turn, returns - b_k, centred)
        n = fmask.sum()
        var = masked_sum(centred * centred, fmask) / safe_denominator((n - 1).clamp(min=0)) * (n > 1).to(fmask.dtype)
        return centred * torch.rsqrt(var + 1e-8) * fmask, returns


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
            turns=turn_index(inputs.response_mask, inputs.turn_ends, inputs.episode_ids),
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
