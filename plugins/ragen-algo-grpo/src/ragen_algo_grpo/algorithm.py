"""Algorithm bundles of the GRPO plugin: ``grpo``, ``drgrpo`` and ``dapo``.

The policy-loss maths is shared (:mod:`ragen_core.trainer.losses`); these classes fix defaults
and, for DAPO, expose the batch-level steps a trainer calls before computing advantages:
:meth:`DAPOAlgorithm.shape_rewards` (overlong punishment) and :meth:`DAPOAlgorithm.keep_mask`
(dynamic sampling).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragen_algo_grpo.config import (
    DAPOAlgorithmConfig,
    DrGRPOAlgorithmConfig,
    GRPOAlgorithmConfig,
)
from ragen_core.interfaces.algorithm import Algorithm

if TYPE_CHECKING:
    import torch


class GRPOAlgorithm(Algorithm):
    """GRPO: group-normalised advantages, no critic, ``seq-mean-token-mean``."""

    config_class = GRPOAlgorithmConfig
    config: GRPOAlgorithmConfig


class DrGRPOAlgorithm(Algorithm):
    """Dr.GRPO: ``S − μ`` advantages, ``seq-mean-token-sum`` (or the constant-normalised variant)."""

    config_class = DrGRPOAlgorithmConfig
    config: DrGRPOAlgorithmConfig

    @property
    def agg_kwargs(self) -> dict[str, float | None]:
        """Extra keyword arguments for :func:`ragen_core.trainer.losses.agg_loss`."""
        return {"norm_constant": self.config.loss_norm_constant}


class DAPOAlgorithm(Algorithm):
    """DAPO: clip-higher, token-level loss, dynamic sampling, optional overlong punishment."""

    config_class = DAPOAlgorithmConfig
    config: DAPOAlgorithmConfig

    def shape_rewards(
        self,
        token_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        max_length: int | None = None,
    ) -> torch.Tensor:
        """Rewards with the overlong penalty added (unchanged when ``overlong_buffer_len`` is 0).

        Args:
            token_rewards: ``[B, T]`` rewards.
            response_mask: ``[B, T]`` trained-token mask.
            max_length: Fallback ``L`` when ``overlong_max_length`` is None (the trainer's
                response budget); required then.
        """
        cfg = self.config
        if cfg.overlong_buffer_len == 0:
            return token_rewards
        from ragen_algo_grpo.dapo import apply_overlong_penalty
        from ragen_core.errors import ConfigError

        limit = (
            cfg.overlong_max_length
            if cfg.overlong_max_length is not None
            else max_length
        )
        if limit is None:
            raise ConfigError(
                "dapo: overlong shaping needs overlong_max_length (or the trainer's response budget)"
            )
        return apply_overlong_penalty(
            token_rewards,
            response_mask,
            max_length=limit,
            buffer_len=cfg.overlong_buffer_len,
            factor=cfg.overlong_penalty_factor,
        )

    def keep_mask(
        self,
        token_rewards: torch.Tensor,
        group_ids: torch.Tensor,
        episode_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``[B]`` bool rows to keep; all True when ``dynamic_sampling`` is off."""
        import torch

        if not self.config.dynamic_sampling:
            return torch.ones(
                token_rewards.shape[0], dtype=torch.bool, device=token_rewards.device
            )
        from ragen_algo_grpo.dapo import dynamic_sampling_mask

        return dynamic_sampling_mask(token_rewards, group_ids, episode_ids)
