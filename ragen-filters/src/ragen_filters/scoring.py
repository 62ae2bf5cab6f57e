"""Turn a :class:`GroupedRollouts` batch into per-group statistics, scores and metrics.

Metric families (spec 9.2): ``reward_variance``, ``reward`` and ``reward_sum`` read the episode
rewards; ``entropy`` and ``entropy_variance`` read the episode entropies; ``length`` reads the
episode lengths. Metric keys follow spec 9.5 exactly (``rollout/in_group_std`` ...).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragen_core.errors import ConfigError
from ragen_core.interfaces.rollout_filter import GroupedRollouts
from ragen_filters.config import ScoreConfig
from ragen_filters.stats import GroupIndex, GroupStats, group_stats

#: Metric -> family (which per-episode quantity it reads).
FAMILY: dict[str, str] = {
    "reward_variance": "reward",
    "reward": "reward",
    "reward_sum": "reward",
    "entropy": "entropy",
    "entropy_variance": "entropy",
    "length": "length",
}

_FIELD = {"reward": "rewards", "entropy": "entropies", "length": "lengths"}


@dataclass(frozen=True)
class ScoredBatch:
    """One batch, grouped and scored.

    Attributes:
        index: Group partition (ids in order of first appearance).
        stats: Per-group statistics of the metric family's per-episode quantity.
        scores: Per-group selection score (aligned with ``index.ids``).
        family: ``reward``, ``entropy`` or ``length``.
        num_groups: Configured group count (kept ratio, fractional top-k).
    """

    index: GroupIndex
    stats: GroupStats
    scores: list[float]
    family: str
    num_groups: int


def _episode_values(rollouts: GroupedRollouts, family: str) -> Sequence[float]:
    field = _FIELD[family]
    values = getattr(rollouts, field)
    if values is None:
        raise ConfigError(
            f"rollout filter metric family {family!r} needs per-episode {field}, but the batch has none",
            hints=[f"pass GroupedRollouts({field}=...) or choose a reward metric (metric: reward_variance)"],
        )
    if len(values) != len(rollouts.group_ids):
        raise ConfigError(
            f"GroupedRollouts.{field} has {len(values)} entries but group_ids has {len(rollouts.group_ids)}",
            hints=["give one value per episode, aligned with group_ids"],
        )
    return values


def score_batch(rollouts: GroupedRollouts, config: ScoreConfig) -> ScoredBatch:
    """Group the batch by id and compute the selection score of every group.

    Raises:
        ConfigError: When the metric needs entropies/lengths the batch lacks, or when a
            per-episode sequence is not aligned with ``group_ids``.
    """
    family = FAMILY[config.metric]
    values = _episode_values(rollouts, family)
    if family != "reward":
        _episode_values(rollouts, "reward")  # rewards must still be aligned
    index = GroupIndex.from_ids(rollouts.group_ids)
    stats = group_stats(values, index, ddof=config.ddof, flat_rtol=config.flat_rtol)
    if config.metric in ("reward_variance", "entropy_variance"):
        scores = stats.spread(config.statistic)
    elif config.metric == "reward_sum":
        scores = stats.sum
    else:
        scores = stats.mean
    num_groups = config.num_groups if config.num_groups is not None else len(index)
    return ScoredBatch(
        index=index,
        stats=stats,
        scores=[float(s) for s in scores],
        family=family,
        num_groups=num_groups,
    )


def _finite_mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else 0.0


def batch_metrics(batch: ScoredBatch, kept_positions: Sequence[int], zero_count: int) -> dict[str, float]:
    """The ``rollout/...`` metrics of spec 9.5 for one filtered batch.

    Means over groups skip non-finite values; a mean over no groups is 0.
    """
    kept = np.asarray(sorted(kept_positions), dtype=np.int64)
    stats = batch.stats
    names = ["std", "max", "mean"] + (["sum"] if batch.family == "reward" else [])
    metrics: dict[str, float] = {}
    for name in names:
        per_group = getattr(stats, name)
        overall = _finite_mean(per_group)
        chosen = _finite_mean(per_group[kept]) if kept.size else 0.0
        if name != "sum":
            metrics[f"rollout/in_group_{name}"] = overall
            metrics[f"rollout/chosen_in_group_{name}"] = chosen
        metrics[f"rollout/in_group_{batch.family}_{name}"] = overall
        metrics[f"rollout/chosen_in_group_{batch.family}_{name}"] = chosen
    metrics["rollout/filter_kept_count"] = float(kept.size)
    metrics["rollout/filter_kept_ratio"] = kept.size / batch.num_groups if batch.num_groups else 0.0
    metrics["rollout/filter_zero_count"] = float(zero_count)
    metrics["rollout/filter_num_groups"] = float(len(batch.index))
    return metrics


def loss_scale(mode: str, kept_ratio: float) -> float:
    """Factor applied to kept groups' weights (spec 9.7): 1, the kept ratio, or its root.

    The ratio is clamped to 1 so a batch with more groups than the configured ``num_groups``
    never scales weights up.
    """
    ratio = min(max(kept_ratio, 0.0), 1.0)
    if mode == "linear":
        return ratio
    if mode == "sqrt":
        return math.sqrt(ratio)
    return 1.0
