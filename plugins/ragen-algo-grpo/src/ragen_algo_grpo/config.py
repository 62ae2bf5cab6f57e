"""Configs of the GRPO plugin: group-relative estimators and the grpo/drgrpo/dapo presets."""

from __future__ import annotations

from pydantic import Field

from ragen_core.interfaces.algorithm import AlgorithmConfig, LossAggMode
from ragen_core.specs import PluginConfig


class GRPOConfig(PluginConfig):
    """Group-normalised advantages (spec 8.4)."""

    norm_adv_by_std: bool = True
    """Divide by the group's unbiased std (GRPO); False gives Dr.GRPO's ``S − μ``."""
    epsilon: float = Field(default=1e-6, gt=0.0)
    """Added to the std before dividing."""
    length_weight: bool = False
    """Divide each sample's advantage by ``ℓ_i / mean ℓ`` (ℓ = trained tokens of the row)."""
    soft_reweight: bool = False
    """Scale each group's advantages by ``σ_g / (max_g σ_g + 1e-6)``."""


class DrGRPOConfig(GRPOConfig):
    """Dr.GRPO: group-mean baseline without std normalisation."""

    norm_adv_by_std: bool = False
    """Divide by the group's std (off for Dr.GRPO)."""


class RLOOConfig(PluginConfig):
    """Leave-one-out baseline over each group (no options beyond length weighting)."""

    length_weight: bool = False
    """Divide each sample's advantage by ``ℓ_i / mean ℓ``."""


class ReinforcePPConfig(PluginConfig):
    """REINFORCE++: discounted return over trained tokens, centred per turn index, over the batch std."""

    gamma: float = Field(default=1.0, ge=0.0, le=1.0)
    """Token-level discount γ."""
    whiten: bool = True
    """Subtract the batch mean of each turn and divide by the batch std; False gives ``A = G``."""


class ReinforcePPBaselineConfig(PluginConfig):
    """REINFORCE++-baseline: group-mean baseline, whitened over the batch."""

    whiten: bool = True
    """Whiten advantages over the masked tokens of the batch."""


class GRPOAlgorithmConfig(AlgorithmConfig):
    """GRPO preset (spec 8.9): no critic, ``seq-mean-token-mean`` loss."""

    estimator: str = "grpo"
    """Name of the advantage estimator plugin."""
    use_critic: bool = False
    """GRPO is critic-free."""
    loss_agg_mode: LossAggMode = "seq-mean-token-mean"
    """Aggregation of the per-token policy loss (spec 8.5)."""


class DrGRPOAlgorithmConfig(AlgorithmConfig):
    """Dr.GRPO preset (spec 8.9): ``S − μ`` advantages, ``seq-mean-token-sum`` loss.

    The reference's ``seq-mean-token-sum`` scales the loss with sequence length (L10); the
    ``constant-norm`` preset switches to ``seq-mean-token-sum-norm`` with ``loss_norm_constant``.
    """

    estimator: str = "drgrpo"
    """Name of the advantage estimator plugin."""
    use_critic: bool = False
    """Dr.GRPO is critic-free."""
    loss_agg_mode: LossAggMode = "seq-mean-token-sum"
    """Aggregation of the per-token policy loss (spec 8.5)."""
    loss_norm_constant: float | None = Field(default=None, gt=0)
    """``L_max`` of ``seq-mean-token-sum-norm``; None uses the padded length of the batch."""


class DAPOAlgorithmConfig(AlgorithmConfig):
    """DAPO with its distinctive pieces (fix for L11): group-relative advantages, clip-higher
    0.2/0.28, token-level loss, dynamic sampling and optional soft overlong punishment.

    Overlong shaping (off when ``overlong_buffer_len`` is 0), with ``ℓ`` = generated tokens of
    the episode, ``L = overlong_max_length`` and ``B = overlong_buffer_len``, adds to the score::

        0                              if ℓ ≤ L − B
        f · ((L − B) − ℓ) / B          if L − B < ℓ ≤ L
        −f                             if ℓ > L          (f = overlong_penalty_factor)
    """

    estimator: str = "grpo"
    """Name of the advantage estimator plugin."""
    use_critic: bool = False
    """DAPO is critic-free."""
    clip_ratio_low: float = Field(default=0.2, ge=0)
    """ε_low of the clipped surrogate."""
    clip_ratio_high: float = Field(default=0.28, ge=0)
    """ε_high ("clip-higher")."""
    loss_agg_mode: LossAggMode = "token-mean"
    """Token-level loss."""
    use_kl_loss: bool = False
    """DAPO drops the KL term."""
    kl_loss_coef: float = 0.0
    """Unused while ``use_kl_loss`` is False."""
    dynamic_sampling: bool = True
    """Drop groups whose rewards are all equal (their group-relative advantage is 0)."""
    overlong_buffer_len: int = Field(default=0, ge=0)
    """Soft-punishment window B in tokens before ``overlong_max_length``; 0 disables shaping."""
    overlong_max_length: int | None = Field(default=None, gt=0)
    """Length L at which the full penalty applies; None uses the trainer's response budget."""
    overlong_penalty_factor: float = Field(default=1.0, ge=0)
    """Penalty f at (and beyond) ``overlong_max_length``."""

    def check_response_budget(self, max_new_tokens: int) -> None:
        """The overlong window must fit in L (``overlong_max_length``, else the reply budget)."""
        from ragen_core.errors import ConfigError

        limit = self.overlong_max_length if self.overlong_max_length is not None else max_new_tokens
        if 0 < self.overlong_buffer_len and self.overlong_buffer_len > limit:
            where = (f"algo_config.overlong_max_length={limit}" if self.overlong_max_length is not None
                     else f"sampling.train.max_new_tokens={limit} (overlong_max_length is unset)")
            raise ConfigError(f"algo_config.overlong_buffer_len={self.overlong_buffer_len} is longer than the length it counts back "
                              f"from, {where}",
                              [f"set algo_config.overlong_buffer_len to at most {limit}, or raise "
                               + ("algo_config.overlong_max_length" if self.overlong_max_length is not None else "sampling.train.max_new_tokens")
                               + f" to {self.overlong_buffer_len} or more (algo_preset=overlong sets a 512-token window)"])
