"""Group-relative advantages: GRPO and Dr.GRPO (spec 8.4).

Per sample the score is ``S_i = Σ_t r_{i,t}``. Samples sharing a ``group_id`` (one prompt /
seed) form a group; each ``(group_id, episode_id)`` pair contributes **once** to the group's
statistics, so turn-level rows of one episode are not over-counted. Per group with n ≥ 2 unique
episodes ``μ = mean``, ``σ = unbiased std``; a group with one episode uses ``μ = 0, σ = 1``.

* GRPO:    ``A_i = (S_i − μ) / (σ + ε)``  (ε = 1e-6)
* Dr.GRPO: ``A_i = S_i − μ``
* optional length weighting: ``A_i ← A_i / (ℓ_i / mean_j ℓ_j)`` with ``ℓ_i = Σ_t m_{i,t} + 1e-6``
* optional soft re-weighting: ``A_i ← A_i · σ_g / (max_g σ_g + 1e-6)`` (σ as above, so a
  single-episode group counts with σ = 1)

The scalar is broadcast over the row's trained tokens, ``A_{i,t} = A_i · m_{i,t}``; returns equal
advantages and there is no whitening.

Flat groups are exact: a group of ≥ 2 episodes whose scores are all equal gets advantages of
exactly 0, for any group size and score. It takes all three of these; without any one of them
rounding noise of an ulp remains, which ``σ + ε`` with ``ε = 1e-6`` blows up to advantages of 0.1
and more:

* a row's score is summed in float64 over its rewards *sorted* (:func:`episode_scores`), so rows
  holding the same rewards at different token positions get bit-identical scores;
* group statistics are float64, and a group whose scores are all equal has ``μ`` = that score
  and ``σ = 0`` by definition rather than by a rounded ``Σ S / n``;
* advantages are computed in float64 and cast to the rewards' dtype at the end.

Non-flat groups change only by float rounding (float64 instead of the rewards' dtype).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragen_algo_grpo.config import DrGRPOConfig, GRPOConfig
from ragen_core.interfaces.advantage import (
    AdvantageEstimator,
    AdvantageInputs,
    AdvantageOutputs,
)
from ragen_core.masked import row_sums

if TYPE_CHECKING:
    import torch


@dataclass
class GroupStats:
    """Per-row group statistics (broadcast from the group each row belongs to)."""

    mean: torch.Tensor
    """``[B]`` μ of the row's group (exactly the common score of a flat group)."""
    std: torch.Tensor
    """``[B]`` σ of the row's group (1 for single-episode groups, exactly 0 for flat groups)."""
    count: torch.Tensor
    """``[B]`` number of unique episodes in the row's group."""
    num_groups: int
    singleton_groups: int
    flat_groups: int
    """Groups of ≥ 2 episodes whose scores are all equal."""


def episode_scores(token_rewards: torch.Tensor) -> torch.Tensor:
    """``[B]`` float64 ``S_i = Σ_t r_{i,t}``, the same for rows holding the same rewards wherever
    they sit (:func:`ragen_core.masked.row_sums`)."""
    return row_sums(token_rewards)


def group_stats(
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    episode_ids: torch.Tensor | None = None,
) -> GroupStats:
    """Group mean/std with episode de-duplication (first row of each episode is its representative).

    Statistics are float64 (``scores`` is cast); a flat group gets ``μ`` = its score, ``σ = 0``.
    """
    import torch

    scores = scores.to(torch.float64)
    groups = group_ids.tolist()
    episodes = (
        episode_ids.tolist() if episode_ids is not None else list(range(len(groups)))
    )
    reps: dict[object, dict[object, int]] = {}
    for row, (g, e) in enumerate(zip(groups, episodes)):
        reps.setdefault(g, {}).setdefault(e, row)
    mean = torch.zeros_like(scores)
    std = torch.ones_like(scores)
    count = torch.zeros_like(scores)
    rows_of: dict[object, list[int]] = {}
    for row, g in enumerate(groups):
        rows_of.setdefault(g, []).append(row)
    singletons = flats = 0
    for g, by_episode in reps.items():
        vals = scores[list(by_episode.values())]
        idx = torch.tensor(rows_of[g], dtype=torch.long)
        count[idx] = float(vals.numel())
        if vals.numel() < 2:
            singletons += 1
        elif bool((vals == vals[0]).all()):
            flats += 1
            mean[idx] = vals[0]
            std[idx] = 0.0
        else:
            mean[idx] = vals.mean()
            std[idx] = vals.std(unbiased=True)
    return GroupStats(mean, std, count, len(reps), singletons, flats)


def length_weights(response_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``mean ℓ / ℓ_i`` with ``ℓ_i = Σ_t m_{i,t} + 1e-6`` (the divisor of length weighting)."""
    lengths = (response_mask > 0).to(dtype).sum(dim=-1) + 1e-6
    return lengths.mean() / lengths


def grpo_advantages(
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    episode_ids: torch.Tensor | None = None,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
    length_weight: bool = False,
    soft_reweight: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level GRPO / Dr.GRPO advantages ``[B, T]`` (formulas in the module docstring).

    Returns:
        ``(advantages, metrics)``; metrics: ``num_groups``, ``singleton_groups``,
        ``flat_groups`` (groups of ≥ 2 episodes whose scores are all equal).
    """
    import torch

    with torch.no_grad():
        scores = episode_scores(token_rewards)
        stats = group_stats(scores, group_ids, episode_ids)
        adv = scores - stats.mean
        if norm_by_std:
            adv = adv / (stats.std + epsilon)
        if length_weight:
            adv = adv * length_weights(response_mask, scores.dtype)
        if soft_reweight:
            adv = adv * stats.std / (stats.std.max() + 1e-6)
        fmask = (response_mask > 0).to(token_rewards.dtype)
        metrics = {
            "num_groups": float(stats.num_groups),
            "singleton_groups": float(stats.singleton_groups),
            "flat_groups": float(stats.flat_groups),
        }
        return adv.to(token_rewards.dtype).unsqueeze(-1) * fmask, metrics


class GRPOEstimator(AdvantageEstimator):
    """``grpo`` estimator plugin (critic-free)."""

    config_class = GRPOConfig
    needs_critic = False
    config: GRPOConfig

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutputs:
        cfg = self.config
        adv, metrics = grpo_advantages(
            inputs.token_rewards,
            inputs.response_mask,
            inputs.group_ids,
            episode_ids=inputs.episode_ids,
            norm_by_std=cfg.norm_adv_by_std,
            epsilon=cfg.epsilon,
            length_weight=cfg.length_weight,
            soft_reweight=cfg.soft_reweight,
        )
        return AdvantageOutputs(advantages=adv, returns=adv.clone(), metrics=metrics)


class DrGRPOEstimator(GRPOEstimator):
    """``drgrpo`` estimator plugin: GRPO without the std division."""

    config_class = DrGRPOConfig
