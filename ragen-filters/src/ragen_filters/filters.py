"""Rollout filter classes: score groups, choose some, report why and how much (spec 9).

All filters share :class:`ScoredFilter`: group the batch by id, score each group
(:mod:`ragen_filters.scoring`), let the subclass choose, then attach weights, drop reasons and
``rollout/...`` metrics. Hard filters give every kept group weight 1.0; with ``loss_scaling`` set
that weight becomes the scale factor of spec 9.7 (kept ratio or its square root), so a trainer
that multiplies each group's advantages by its weight reproduces the reference's loss scaling.
The soft filter keeps everything and down-weights low-signal groups instead.

Filters are pure: they never mutate the input and are deterministic.
"""

from __future__ import annotations

import math
import sys
from typing import Any, ClassVar

from ragen_core.errors import ConfigError
from ragen_core.interfaces.rollout_filter import (
    FilterConfig,
    FilterResult,
    GroupedRollouts,
    RolloutFilter,
)
from ragen_filters.config import (
    MinPConfig,
    NoFilterConfig,
    ReferenceConfig,
    ScoreConfig,
    SoftConfig,
    TopKAbsConfig,
    TopKConfig,
    TopPConfig,
    TopPSoftmaxConfig,
)
from ragen_filters.scoring import ScoredBatch, batch_metrics, loss_scale, score_batch
from ragen_filters.selection import REASON_NON_FINITE, is_zero, select_with_reasons


class ScoredFilter(RolloutFilter):
    """Base of every filter in this package; subclasses implement :meth:`choose`."""

    config_class: ClassVar[type[FilterConfig]] = ScoreConfig
    config: Any

    @property
    def needs_entropies(self) -> bool:
        """The ``entropy`` and ``entropy_variance`` metrics score groups by policy entropy."""
        return str(self.config.metric).startswith("entropy")

    @property
    def loss_scaling(self) -> str:
        """``config.loss_scaling``: kept groups' weights are scaled here (see :meth:`select`)."""
        return str(self.config.loss_scaling)

    def choose(self, batch: ScoredBatch) -> tuple[list[int], dict[int, str]]:
        """Return kept group positions and a reason per dropped position."""
        raise NotImplementedError

    def base_weights(self, batch: ScoredBatch, kept: list[int]) -> dict[int, float]:
        """Weight per kept position before loss scaling (hard filters: 1.0)."""
        return {p: 1.0 for p in kept}

    def extra_metrics(self, batch: ScoredBatch, weights: dict[int, float]) -> dict[str, float]:
        """Filter-specific metrics added to the spec 9.5 set."""
        return {}

    def zero_reason(self) -> str:
        """Drop reason for a zero-score group."""
        return "zero variance" if self.config.metric.endswith("variance") else "zero score"

    def _check_ddof(self, batch: ScoredBatch) -> None:
        """Refuse a spread metric whose ``ddof`` leaves every group of the batch with spread 0.

        The group size is known only from the batch (``rollout.group_size``), so this runs on the
        first step. Groups of one episode have no spread whatever ``ddof`` is; they are left alone.
        """
        cfg = self.config
        if not str(cfg.metric).endswith("_variance") or not batch.index.members:
            return
        largest = max(len(m) for m in batch.index.members)
        if 2 <= largest <= cfg.ddof:
            raise ConfigError(
                f"filter_config.ddof={cfg.ddof} is not below the group size {largest} (rollout.group_size): the in-group "
                f"{cfg.statistic} of {cfg.metric} is 0 for every group, so the filter would drop every group; "
                f"use ddof 0 or 1 (1 = unbiased, the default) or groups of more than {cfg.ddof} episodes"
            )

    def select(self, rollouts: GroupedRollouts) -> FilterResult:
        """Choose the groups to train on.

        Args:
            rollouts: Per-episode group ids, rewards and optionally entropies and lengths.

        Returns:
            Kept group ids in order of first appearance, their weights, drop reasons and
            ``rollout/...`` metrics. An empty batch gives an empty result (with metrics).

        Raises:
            ConfigError: When the metric needs entropies or lengths the batch lacks, or when a
                spread metric's ``ddof`` is at least the size of every group (spread 0 everywhere).
        """
        batch = score_batch(rollouts, self.config)
        self._check_ddof(batch)
        kept, reasons = self.choose(batch) if len(batch.index) else ([], {})
        kept = sorted(set(kept))
        for pos, reason in list(reasons.items()):
            score = batch.scores[pos]
            if reason != REASON_NON_FINITE and math.isfinite(score) and is_zero(score):
                reasons[pos] = self.zero_reason()
        zero_count = sum(1 for s in batch.scores if is_zero(s))
        metrics = batch_metrics(batch, kept, zero_count)
        scale = loss_scale(self.config.loss_scaling, metrics["rollout/filter_kept_ratio"])
        weights = {p: w * scale for p, w in self.base_weights(batch, kept).items()}
        metrics["rollout/filter_loss_scale"] = scale
        metrics.update(self.extra_metrics(batch, weights))
        ids = batch.index.ids
        kept_set = set(kept)
        return FilterResult(
            kept_groups=[ids[p] for p in kept],
            group_weights={ids[p]: float(weights[p]) for p in kept},
            dropped={ids[p]: reasons.get(p, "not selected") for p in range(len(ids)) if p not in kept_set},
            metrics=metrics,
        )


class KeepAllFilter(ScoredFilter):
    """``none``: keep every group (metrics are still reported)."""

    config_class = NoFilterConfig

    def choose(self, batch: ScoredBatch) -> tuple[list[int], dict[int, str]]:
        return list(range(len(batch.index))), {}


class SelectionFilter(ScoredFilter):
    """Hard filter driven by :func:`ragen_filters.selection.select_groups`.

    The strategy comes from the config's ``strategy`` field when it has one (``reference``),
    otherwise from the class attribute :attr:`strategy`.
    """

    config_class = ReferenceConfig
    strategy: ClassVar[str] = "top_p"

    def __init__(self, config: FilterConfig | dict[str, Any] | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        warning = self.never_keeps()
        if warning:
            print(f"warning: {warning}", file=sys.stderr)

    def never_keeps(self) -> str | None:
        """Why this setting keeps no group in any batch, or None.

        Linear top-p with ``value == 0``: the threshold ``0 * sum - selection_eps`` is at most 0,
        so the empty prefix already reaches it (spec 9.3) and every step is empty-after-filter.
        This is warned about rather than refused: the spec defines the result. Softmax top-p
        with ``value == 0`` keeps the single most probable group and is not affected.
        """
        cfg = self.config
        if self._strategy() == "top_p" and getattr(cfg, "prob_mode", "linear") == "linear" and cfg.value == 0:
            return ("filter_config.value=0 with linear top-p keeps no group in any batch (threshold 0 * sum - selection_eps "
                    "is reached by the empty prefix): every step is skipped as empty; use a value in (0, 1]")
        return None

    def _strategy(self) -> str:
        return str(getattr(self.config, "strategy", self.strategy))

    def bypass(self) -> bool:
        """Spec 9.4: top-p with ``value >= 1`` and ``include_zero`` returns the batch unmodified."""
        return self._strategy() == "top_p" and self.config.value >= 1 and self.config.include_zero

    def choose(self, batch: ScoredBatch) -> tuple[list[int], dict[int, str]]:
        cfg = self.config
        everything = list(range(len(batch.index)))
        if self.bypass():
            return everything, {}
        on_all_zero = getattr(cfg, "on_all_zero", "empty")
        if on_all_zero == "keep-all" and all(math.isfinite(s) and is_zero(s) for s in batch.scores):
            return everything, {}
        selection = select_with_reasons(
            batch.scores,
            strategy=self._strategy(),
            value=float(cfg.value),
            largest=cfg.order == "largest",
            include_zero=cfg.include_zero,
            prob_mode=getattr(cfg, "prob_mode", "linear"),
            selection_eps=getattr(cfg, "selection_eps", 0.01),
            num_groups=batch.num_groups,
        )
        return selection.kept, selection.reasons

    def extra_metrics(self, batch: ScoredBatch, weights: dict[int, float]) -> dict[str, float]:
        return {"rollout/filter_bypassed": 1.0 if self.bypass() else 0.0}


class ReferenceFilter(SelectionFilter):
    """``reference``: every knob of the reference filter (defaults: no filtering)."""

    config_class = ReferenceConfig


class TopPFilter(SelectionFilter):
    """``snr-topp``: linear top-p 0.9 over groups with non-zero score."""

    config_class = TopPConfig
    strategy = "top_p"


class TopPSoftmaxFilter(TopPFilter):
    """``snr-topp-softmax``: softmax top-p 0.9 over groups with non-zero score."""

    config_class = TopPSoftmaxConfig


class TopKFilter(SelectionFilter):
    """``snr-topk``: the best ``int(value * num_groups)`` groups (at least 1)."""

    config_class = TopKConfig
    strategy = "top_k"


class TopKAbsFilter(SelectionFilter):
    """``snr-topk-abs``: the best ``value`` groups (at least 1)."""

    config_class = TopKAbsConfig
    strategy = "top_k_abs"


class MinPFilter(SelectionFilter):
    """``snr-minp``: groups scoring at least ``value`` times the best score."""

    config_class = MinPConfig
    strategy = "min_p"


class SoftFilter(ScoredFilter):
    """``snr-soft``: keep every group; weight = score / (max score + ``weight_eps``).

    Zero-variance (and negative or non-finite score) groups get weight 0; when every group
    scores 0 all weights are 0. Metrics add ``rollout/soft_weight_min|max|mean``.
    """

    config_class = SoftConfig

    def choose(self, batch: ScoredBatch) -> tuple[list[int], dict[int, str]]:
        return list(range(len(batch.index))), {}

    def base_weights(self, batch: ScoredBatch, kept: list[int]) -> dict[int, float]:
        clean = [s if math.isfinite(s) and s > 0 and not is_zero(s) else 0.0 for s in batch.scores]
        denominator = (max(clean) if clean else 0.0) + self.config.weight_eps
        if denominator <= 0:
            return {p: 0.0 for p in kept}
        return {p: clean[p] / denominator for p in kept}

    def extra_metrics(self, batch: ScoredBatch, weights: dict[int, float]) -> dict[str, float]:
        values = list(weights.values())
        if not values:
            return {"rollout/soft_weight_min": 0.0, "rollout/soft_weight_max": 0.0, "rollout/soft_weight_mean": 0.0}
        return {
            "rollout/soft_weight_min": min(values),
            "rollout/soft_weight_max": max(values),
            "rollout/soft_weight_mean": sum(values) / len(values),
        }
