"""Pydantic configs of the rollout filters (one model per user-facing filter name).

Every model subclasses :class:`ragen_core.interfaces.rollout_filter.FilterConfig` (which adds
``empty_stop_steps``). Defaults follow spec 2.3 and the recommended presets of spec 9.8. Metric
and strategy names accept the reference spellings (``reward_std``, ``top-p``) and are
normalised to one canonical value.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from ragen_core.errors import ConfigError
from ragen_core.interfaces.rollout_filter import FilterConfig

Metric = Literal["reward_variance", "reward", "reward_sum", "entropy", "entropy_variance", "length"]
LossScaling = Literal["none", "linear", "sqrt"]

METRIC_ALIASES: dict[str, str] = {"reward_std": "reward_variance", "entropy_std": "entropy_variance"}


def _canonical(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip().lower().replace("-", "_")
    return value


def _dashed(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip().lower().replace("_", "-")
    return value


class ScoreConfig(FilterConfig):
    """How group scores are computed and how the result is weighted (shared by all filters)."""

    metric: Metric = "reward_variance"
    """Group score: ``reward_variance`` (in-group reward spread; alias ``reward_std``), ``reward``
    (mean), ``reward_sum``, ``entropy`` (mean), ``entropy_variance`` (alias ``entropy_std``),
    ``length`` (mean)."""
    statistic: Literal["std", "var"] = "std"
    """Spread statistic of the ``*_variance`` metrics: ``std`` (reference) or ``var`` (spec L14)."""
    ddof: int = Field(default=1, ge=0)
    """Delta degrees of freedom of the spread; 1 = unbiased, as the reference. Must stay below the
    group size (``rollout.group_size``): a group of ``size <= ddof`` has spread 0, so a filter whose
    groups are all that small is refused on its first batch."""
    num_groups: int | None = Field(default=None, ge=1)
    """Configured number of prompt groups per step (``env_groups``); used by fractional top-k
    and the kept ratio. None = the number of groups present in the batch."""
    loss_scaling: LossScaling = "none"
    """Scale kept groups' weights by the kept ratio (``linear``) or its square root (``sqrt``);
    the trainer multiplies advantages by the group weight (spec 9.7), so only the policy-gradient
    term scales, not the entropy or KL terms (spec 17 L20)."""
    flat_rtol: float = Field(default=1e-9, ge=0.0)
    """Relative tolerance under which a group's values count as identical (spread exactly 0)."""

    def keeps_zero_scores(self) -> bool:
        """Whether groups scoring 0 can be kept (trained on with a non-zero weight)."""
        return False

    def scores_without_rewards(self) -> str | None:
        """The ``entropy*`` and ``length`` metrics score groups without their rewards."""
        return None if self.metric.startswith("reward") else f"filter_config.metric={self.metric}"

    def check_group_size(self, group_size: int) -> None:
        """Groups of one episode have no spread: a spread metric scores every one of them 0, and a
        filter that drops zero-score groups would keep none (a run that trained nothing, exit 0)."""
        if group_size == 1 and self.metric.endswith("_variance") and not self.keeps_zero_scores():
            raise ConfigError(
                f"rollout.group_size=1 gives groups of one episode, whose in-group {self.statistic} of {self.metric} is 0: "
                "this filter drops every such group (a soft filter weights it 0), so no step would train",
                ["use rollout.group_size=2 or more, or --filter none (or filter_config.metric=reward)"],
            )

    @field_validator("metric", mode="before")
    @classmethod
    def _metric_alias(cls, value: Any) -> Any:
        value = _canonical(value)
        return METRIC_ALIASES.get(value, value)

    @field_validator("loss_scaling", "statistic", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class OrderedConfig(ScoreConfig):
    """Adds the ranking direction and zero handling used by every hard filter."""

    order: Literal["largest", "smallest"] = "largest"
    """Keep the groups with the largest scores (default) or the smallest."""
    include_zero: bool = True
    """Whether groups with ``|score| <= 1e-10`` are candidates at all."""

    def keeps_zero_scores(self) -> bool:
        return self.include_zero or getattr(self, "on_all_zero", "empty") == "keep-all"

    @field_validator("order", mode="before")
    @classmethod
    def _order(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class NoFilterConfig(ScoreConfig):
    """``none``: keep every group; metrics are still computed from ``metric``."""

    def keeps_zero_scores(self) -> bool:
        return True


class TopPConfig(OrderedConfig):
    """``snr-topp``: linear top-p 0.9 without zero-score groups (the docs' recommendation)."""

    value: float = Field(default=0.9, ge=0.0)
    """Share of the score mass to keep; ``>= 1`` keeps every candidate."""
    prob_mode: Literal["linear", "softmax"] = "linear"
    """``linear``: mass = share of summed scores (scale-free); ``softmax``: mass of softmax(scores)."""
    selection_eps: float = Field(default=0.01, ge=0.0)
    """Slack subtracted from the linear threshold; batches with ``value * sum <= eps`` keep nothing.
    Not negative: a negative slack raises the threshold above ``value * sum`` (spec 9.3)."""
    include_zero: bool = False
    """Whether zero-score groups are candidates (off: flat groups are always dropped)."""
    on_all_zero: Literal["empty", "keep-all"] = "empty"
    """When every group scores zero: ``empty`` keeps none (reference), ``keep-all`` keeps all (L16)."""

    @field_validator("prob_mode", "on_all_zero", mode="before")
    @classmethod
    def _lower_mode(cls, value: Any) -> Any:
        return _dashed(value)


class TopPSoftmaxConfig(TopPConfig):
    """``snr-topp-softmax``: softmax top-p 0.9 without zero-score groups (scale-dependent, L15)."""

    prob_mode: Literal["linear", "softmax"] = "softmax"
    """Softmax mass: mild on 0/1 rewards, strong on Sokoban-scale rewards (spec 17.2 L15)."""


class TopKConfig(OrderedConfig):
    """``snr-topk``: keep ``int(value * num_groups)`` groups (at least 1)."""

    value: float = Field(default=0.25, ge=0.0)
    """Fraction of the configured number of groups to keep, in [0, 1] (a count is ``snr-topk-abs``)."""

    @field_validator("value")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if value > 1:  # int(value * groups) then exceeds every batch: the filter would keep all, silently
            raise ValueError(f"is a fraction of the groups in [0, 1] ({value:g} would keep every group); "
                             f"to keep {value:g} groups use the filter snr-topk-abs")
        return value


class TopKAbsConfig(OrderedConfig):
    """``snr-topk-abs``: keep a fixed number of groups (at least 1)."""

    value: int = Field(default=4)
    """Number of groups to keep, at least 1 (clamped to the candidates)."""

    @field_validator("value")
    @classmethod
    def _count(cls, value: int) -> int:
        if value < 1:  # top-k keeps at least one group (spec 9.3): 0 or less would keep 1, silently
            raise ValueError(f"is the number of groups to keep, at least 1 (top-k keeps at least one group, so {value} "
                             "would keep 1)")
        return value

    def rollout_warnings(self, env_groups: int, group_size: int) -> list[str]:
        if self.value < env_groups:
            return []
        zero = "" if self.keeps_zero_scores() else " (but those of zero spread)"
        return [f"filter_config.value={self.value} keeps every one of rollout.env_groups={env_groups} groups{zero}, so snr-topk-abs "
                f"selects nothing out; set filter_config.value below {env_groups}, or raise rollout.env_groups"]


class MinPConfig(OrderedConfig):
    """``snr-minp``: keep groups scoring at least ``value`` times the best score."""

    value: float = Field(default=0.1, ge=0.0, le=1.0)
    """Relative cut in [0, 1]: largest keeps ``score >= max * value``; smallest keeps
    ``score <= min / value``. Above 1 no group can pass (not even the best), so it is refused."""
    include_zero: bool = False
    """Whether zero-score groups are candidates (off: flat groups are always dropped)."""


class SoftConfig(ScoreConfig):
    """``snr-soft``: keep every group, weight each by ``score / max score``."""

    weight_eps: float = Field(default=0.0, ge=0.0)
    """Added to the max score in the denominator (1e-6 reproduces the reference's GRPO
    ``soft_advantage_reweight``)."""


class ReferenceConfig(OrderedConfig):
    """``reference``: every knob of the reference filter, with its defaults (no filtering)."""

    strategy: Literal["top_p", "top_k", "top_k_abs", "min_p"] = "top_p"
    """Selection rule (``top-p`` spellings accepted)."""
    value: float = Field(default=1.0, ge=0.0)
    """Meaning depends on ``strategy`` (mass, fraction, count or relative cut)."""
    prob_mode: Literal["linear", "softmax"] = "linear"
    """Top-p mass computation (``linear`` or ``softmax``)."""
    selection_eps: float = Field(default=0.01, ge=0.0)
    """Linear top-p threshold slack (not negative)."""
    on_all_zero: Literal["empty", "keep-all"] = "empty"
    """When every group scores zero: ``empty`` (reference) or ``keep-all`` (L16)."""

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategy(cls, value: Any) -> Any:
        return _canonical(value)

    @field_validator("value")
    @classmethod
    def _min_p_cut(cls, value: float, info: ValidationInfo) -> float:
        if info.data.get("strategy") == "min_p" and value > 1:
            raise ValueError(f"with strategy min_p the value is a fraction of the best score, in [0, 1]; {value:g} keeps no group")
        if info.data.get("strategy") == "top_k" and value > 1:  # as snr-topk: int(value * groups) keeps them all, silently
            raise ValueError(f"with strategy top_k the value is a fraction of the groups, in [0, 1] ({value:g} would keep every "
                             f"group); to keep {value:g} groups use strategy top_k_abs")
        return value

    @field_validator("prob_mode", "on_all_zero", mode="before")
    @classmethod
    def _modes(cls, value: Any) -> Any:
        return _dashed(value)
