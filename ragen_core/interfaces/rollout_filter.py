"""Rollout filter interface: choose which prompt groups train this step.

Filters work on explicit group ids (not on positional reshapes, fixing spec 17 L18) and return
the kept group ids plus per-group loss weights (1.0 for hard filters; soft filters down-weight
instead of dropping) and metrics. A filter never mutates its input.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from ragen_core.specs import PluginConfig, with_overrides


@dataclass(frozen=True)
class GroupedRollouts:
    """Per-episode quantities of one rollout batch; index i is one episode."""

    group_ids: Sequence[int]
    rewards: Sequence[float]
    """Episode reward, by the run's ``filter_signal``: the score (task reward plus format penalty,
    after any normalisation; the default) or the task reward alone (``env_reward``)."""
    entropies: Sequence[float] | None = None
    """Mean per-token policy entropy of the episode's generated tokens."""
    lengths: Sequence[float] | None = None
    """Number of generated tokens in the episode."""


@dataclass
class FilterResult:
    kept_groups: list[int]
    """Kept group ids, in order of first appearance in the input."""
    group_weights: dict[int, float] = field(default_factory=dict)
    """Loss weight per kept group (hard filters: all 1.0)."""
    dropped: dict[int, str] = field(default_factory=dict)
    """Dropped group id -> short fixed reason ("zero variance", "below top-p mass", ...). Each
    distinct reason becomes a metric counting its groups (``rollout/dropped/zero_variance``), so
    keep numbers out of it (report them in :attr:`metrics`)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """``rollout/...`` metrics of spec 9.5."""

    @property
    def empty(self) -> bool:
        return not self.kept_groups


class FilterConfig(PluginConfig):
    """Settings shared by every filter."""

    empty_stop_steps: int = Field(default=5, ge=0)
    """Stop training after this many consecutive empty-after-filter steps; 0 disables."""

    def check_group_size(self, group_size: int) -> None:
        """Refuse settings that keep no group of ``group_size`` episodes in any batch (the run's
        ``rollout.group_size``). Called with the run config's checks, before a model loads;
        nothing to check here.

        Raises:
            ConfigError: naming the settings to change.
        """

    def scores_without_rewards(self) -> str | None:
        """The setting that makes :meth:`RolloutFilter.select` score groups by something else than
        :attr:`GroupedRollouts.rewards` (``filter_config.metric=entropy``), so the run warns that its
        ``filter_signal``, which picks those rewards, does not change which groups train. None (here):
        it scores by the rewards."""
        return None

    def rollout_warnings(self, env_groups: int, group_size: int) -> list[str]:
        """Settings that run but probably do not do what was meant for batches of ``env_groups``
        groups of ``group_size`` (one sentence each; the run prints them at its start). None here."""
        return []


class RolloutFilter(ABC):
    """Base of filter plugins. The trainer reads :meth:`select`, :attr:`needs_entropies`,
    :attr:`loss_scaling` and ``config.empty_stop_steps``, nothing else."""

    config_class: type[FilterConfig] = FilterConfig

    def __init__(self, config: FilterConfig | Mapping[str, Any] | None = None, **overrides: Any) -> None:
        # a dict, or another filter's config (the base FilterConfig), is validated as this filter's model
        self.config = with_overrides(self.config_class, config, overrides)

    @property
    def needs_entropies(self) -> bool:
        """Whether :meth:`select` reads :attr:`GroupedRollouts.entropies`.

        Entropies cost the trainer an extra forward pass over the rollout, so they are
        computed only for filters that say so (default False: ``entropies`` is None).
        """
        return False

    @property
    def loss_scaling(self) -> str:
        """How the filter itself scales kept groups' weights by the kept ratio: ``"none"``
        (default), ``"linear"`` or ``"sqrt"``.

        The trainer refuses a run that also sets ``optim.filter_loss_scaling``, which would
        scale the advantages a second time.
        """
        return "none"

    @abstractmethod
    def select(self, rollouts: GroupedRollouts) -> FilterResult:
        """Return the groups to train on. Deterministic; handles an empty batch.

        The trainer refuses (one line naming the filter) a result that is not a
        :class:`FilterResult`, keeps a group id not in ``rollouts`` or keeps one twice, or gives a
        weight that is negative or not finite; an exception raised here stops the run the same way.
        """
