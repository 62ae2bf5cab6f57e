"""Algorithm bundle interface: an advantage estimator plus the policy-loss settings.

An algorithm plugin (``ppo``, ``grpo``, ``drgrpo``, ``dapo``) is mostly a preset: which estimator,
whether a critic is trained, how the clipped surrogate is aggregated. The loss maths itself is
shared and lives in :mod:`ragen_core.trainer.losses` so that every algorithm uses the same,
tested implementation; an algorithm with another per-token loss overrides :meth:`Algorithm.token_loss`
and keeps the shared aggregation, entropy and KL terms.

Besides its config an algorithm has four declared hooks into the step, each with a default,
which the trainer calls unconditionally (:mod:`ragen_core.trainer.selection`,
:mod:`ragen_core.trainer.update`):

* :meth:`Algorithm.keep_mask` -- rows to drop before the update (DAPO's dynamic sampling);
* :meth:`Algorithm.shape_rewards` -- token rewards before the estimator (DAPO's overlong
  punishment);
* :meth:`Algorithm.token_loss` -- the policy-gradient loss per token (the clipped surrogate;
  REINFORCE or a sequence-level ratio override it);
* :attr:`Algorithm.agg_kwargs` -- extra keywords of the loss aggregation (Dr.GRPO's
  ``norm_constant``).

An algorithm with metrics of its own (GSPO's mean sequence ratio) names them in
:attr:`Algorithm.metric_names` and returns them from every ``token_loss`` call in
:attr:`PolicyLossOutputs.metrics`; the run logs them as ``actor/algo/<name>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from ragen_core.specs import PluginConfig, with_overrides

if TYPE_CHECKING:
    import torch

LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
KLType = Literal["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k1+", "k3+", "low_var_kl+"]


@dataclass(frozen=True)
class PolicyLossInputs:
    """One micro-batch as :meth:`Algorithm.token_loss` sees it (tensors on the model's device).

    A row is an episode (the replies of all its turns are trained tokens) in the ``full`` context
    mode, one turn in the windowed ones. A row may have no trained token (an all-zero mask): a
    NaN there, masked or not, makes the whole loss NaN and stops the run naming the algorithm, so
    clamp per-row token counts to at least 1. Outside the mask the per-token inputs are finite but
    arbitrary (mask before ``exp``). Rows arrive in micro-batches, whole, with ``T`` trimmed to
    their longest row. Fields may be added later; a loss reads the ones it needs.
    """

    log_probs: torch.Tensor
    """``[B, T]`` log-probs of the sampled tokens under the policy being trained (with grad)."""
    old_log_probs: torch.Tensor
    """``[B, T]`` under the policy that sampled them (no grad)."""
    advantages: torch.Tensor
    """``[B, T]`` from the estimator, zero outside ``response_mask``."""
    response_mask: torch.Tensor
    """``[B, T]`` trained tokens (1) and the rest (0)."""
    group_ids: torch.Tensor
    """``[B]`` group of each row (members of a group share their start)."""
    episode_ids: torch.Tensor
    """``[B]`` episode of each row (the turn rows of one episode share it)."""
    turn_ends: list[list[int]]
    """Per row, the position of each turn's last generated token (the turn boundaries of a
    ``full``-mode row); for a turn that generated nothing (none of its tokens trained), the
    position just before where its reply would start."""
    ref_log_probs: torch.Tensor | None = None
    """``[B, T]`` under the reference policy when the run computes them (``use_kl_loss``), else None."""


@dataclass
class PolicyLossOutputs:
    """What :meth:`Algorithm.token_loss` returns."""

    loss: torch.Tensor
    """``[B, T]`` loss per token, computed from ``inputs.log_probs`` (the trainer aggregates it)."""
    flags: dict[str, torch.Tensor] = field(default_factory=dict)
    """Per-token bool tensors (another dtype is refused) logged as their masked means, among
    ``pg_clipfrac`` and ``pg_clipfrac_lower`` (each left out is logged as 0)."""
    metrics: dict[str, float | torch.Tensor] = field(default_factory=dict)
    """The algorithm's own scalars over this micro-batch (a float or a one-element tensor, e.g. a
    masked mean), exactly the names in :attr:`Algorithm.metric_names`. Logged as
    ``actor/algo/<name>``, averaged over micro-batches as the flags are: weighted by each
    micro-batch's share of the mini-batch's trained tokens, then over mini-batches."""


class AlgorithmConfig(PluginConfig):
    """Policy-optimisation settings shared by every algorithm (defaults from spec section 2)."""

    estimator: str = "grpo"
    """Name of the advantage estimator plugin."""
    estimator_preset: str | None = None
    """Named preset of the estimator (e.g. gae's ``group-whiten``)."""
    estimator_config: dict[str, Any] = Field(default_factory=dict)
    """Config passed to the estimator (over its preset)."""
    use_critic: bool = False
    """Train a value head (GAE-style estimators need it)."""
    clip_ratio_low: float = Field(default=0.2, ge=0)
    clip_ratio_high: float = Field(default=0.28, ge=0)
    clip_ratio_c: float = Field(default=3.0, gt=1)
    """Dual-clip constant for negative advantages."""
    loss_agg_mode: LossAggMode = "token-mean"
    entropy_coeff: float = 0.001
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: KLType = "k1"
    use_kl_in_reward: bool = False
    kl_in_reward_coef: float = 0.0
    kl_in_reward_type: KLType = "k1"
    cliprange_value: float = 0.5
    """Critic value clipping range."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal before the update."""
    global_token_norm: bool = True
    """Normalise ``token-mean`` by the mini-batch's token count, not per micro-batch (fixes L9)."""

    @field_validator("loss_agg_mode")
    @classmethod
    def _implemented_aggregation(cls, value: str) -> str:
        """A plugin's config may narrow these choices, not add to them: the loss code (not the
        plugin) aggregates, and a value it lacks stopped a run at its first update."""
        from ragen_core.trainer.losses import AGG_MODES

        if value not in AGG_MODES:
            raise ValueError(f"{value!r} is no aggregation the loss code implements: one of {', '.join(AGG_MODES)}")
        return value

    @field_validator("kl_loss_type", "kl_in_reward_type")
    @classmethod
    def _implemented_kl(cls, value: str) -> str:
        from ragen_core.trainer.losses import KL_KINDS

        if value not in KL_KINDS:
            raise ValueError(f"{value!r} is no KL estimator the loss code implements: one of {', '.join(KL_KINDS)}")
        return value

    def check_response_budget(self, max_new_tokens: int) -> None:
        """Refuse settings that cannot work with replies of at most ``max_new_tokens`` tokens (the
        run's ``sampling.train.max_new_tokens``, the ``max_length`` that :meth:`Algorithm.shape_rewards`
        gets). Called with the run config's checks, before a model loads; nothing to check here.

        Raises:
            ConfigError: naming the settings to change.
        """


class Algorithm:
    """An estimator plus loss settings. Plugins usually subclass only to change defaults."""

    config_class: type[AlgorithmConfig] = AlgorithmConfig
    metric_names: tuple[str, ...] = ()
    """Names of the metrics every :meth:`token_loss` call returns in
    :attr:`PolicyLossOutputs.metrics` (none by default), logged as ``actor/algo/<name>``. Fixed
    up front because data-parallel ranks reduce the same keys in the same order; a call that
    returns another set, or a NaN or infinite value from finite inputs, stops the run naming the
    algorithm and the key (the conformance kit refuses them too)."""

    def __init__(self, config: AlgorithmConfig | None = None, **overrides: Any) -> None:
        self.config = with_overrides(self.config_class, config, overrides)

    @property
    def needs_critic(self) -> bool:
        return self.config.use_critic

    def keep_mask(self, token_rewards: torch.Tensor, group_ids: torch.Tensor, episode_ids: torch.Tensor | None = None) -> torch.Tensor | None:
        """``[B]`` bool rows to train on, or None to keep every row (the default).

        Called on the whole rollout batch after the filter, before any forward pass. A group
        with a dropped row is dropped as a whole (``rollout/dynamic_sampling_dropped`` counts
        such groups among the kept ones).

        Args:
            token_rewards: ``[B, T]`` rewards as built from the episodes (before shaping).
            group_ids: ``[B]`` group of each row.
            episode_ids: ``[B]`` episode of each row (turn rows of one episode share it).
        """
        return None

    def shape_rewards(self, token_rewards: torch.Tensor, response_mask: torch.Tensor, *, max_length: int | None = None) -> torch.Tensor:
        """Token rewards the estimator sees (default: unchanged). Must not mutate its input.

        Args:
            token_rewards: ``[B, T]`` rewards of the kept rows.
            response_mask: ``[B, T]`` trained-token mask.
            max_length: The trainer's per-turn generation budget (``sampling.train.max_new_tokens``).
        """
        return token_rewards

    def token_loss(self, inputs: PolicyLossInputs) -> PolicyLossOutputs:
        """The policy-gradient loss per token, before aggregation (default: the clipped surrogate,
        :func:`ragen_core.trainer.losses.clipped_token_loss`, with this config's clip ratios).

        The trainer aggregates it with ``loss_agg_mode`` (so it is normalised over ranks and
        micro-batches like every loss), then subtracts the entropy bonus and adds the KL loss.
        Override it for another loss: REINFORCE is ``-inputs.advantages * inputs.log_probs``; a
        sequence-level ratio (GSPO) averages ``log_probs - old_log_probs`` over each row's
        ``response_mask`` (:class:`PolicyLossInputs` says what a row is).

        Returns:
            :class:`PolicyLossOutputs`: the loss shaped like ``inputs.log_probs`` and
            differentiable through it, optional per-token flags for the clip-fraction metrics, and
            the scalars named in :attr:`metric_names` (none by default).
        """
        from ragen_core.trainer.losses import clipped_token_loss

        c = self.config
        loss, flags = clipped_token_loss(inputs.log_probs, inputs.old_log_probs, inputs.advantages, clip_low=c.clip_ratio_low,
                                         clip_high=c.clip_ratio_high, clip_c=c.clip_ratio_c)
        return PolicyLossOutputs(loss=loss, flags=flags)

    @property
    def agg_kwargs(self) -> dict[str, float | None]:
        """Extra keywords of :func:`ragen_core.trainer.losses.agg_loss` (default none).

        The trainer reads ``norm_constant`` (``seq-mean-token-sum-norm``'s divisor).
        """
        return {}


def check_metric_names(algorithm: Algorithm) -> None:
    """Refuse :attr:`Algorithm.metric_names` that is not a tuple or list of distinct non-empty
    strings without spaces (the ends of metric keys), before a model loads (where
    :func:`check_agg_kwargs` is called). A bare string would declare one metric per character.

    Raises:
        PluginError: naming the algorithm and the value.
    """
    from ragen_core.errors import PluginError
    from ragen_core.registry import plugin_label

    names = getattr(algorithm, "metric_names", ())
    if (not isinstance(names, (tuple, list)) or not all(isinstance(n, str) and n.split() == [n] for n in names)
            or len(set(names)) != len(names)):
        raise PluginError(f"{plugin_label(algorithm)}: metric_names = {names!r}; it names the metrics token_loss returns, a tuple of "
                          "distinct non-empty strings without spaces", ["e.g. metric_names = ('seq_ratio',) (or () for none)"])


def check_agg_kwargs(algorithm: Algorithm) -> None:
    """Refuse :attr:`Algorithm.agg_kwargs` the loss code cannot use, before a model loads (called
    where the trainer builds the algorithm, and by ``ragen plugins check --strict``): a
    ``norm_constant`` that is neither None (divide by the padded response width) nor a positive
    finite number. Read as "unset", a 0 trained with the padded width as divisor.

    Raises:
        PluginError: naming the algorithm and the value.
    """
    import math

    from ragen_core.errors import PluginError
    from ragen_core.registry import plugin_label

    value = algorithm.agg_kwargs.get("norm_constant")
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise PluginError(f"{plugin_label(algorithm)}: its agg_kwargs give norm_constant={value!r}, but seq-mean-token-sum-norm divides "
                          "the loss by it: a positive number, or None for the padded response width",
                          ["fix the algorithm's agg_kwargs (or the setting they come from)"])
