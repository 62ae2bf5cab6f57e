"""The ``ppo`` algorithm: GAE advantages, a critic, and the shared clipped-surrogate loss.

The loss maths lives in :mod:`ragen_core.trainer.losses`; this class only fixes the defaults
(spec 8.9): ``estimator="gae"``, ``use_critic=True``, ``loss_agg_mode="token-mean"``,
clip 0.2/0.28, dual clip 3.0, no KL loss.
"""

from __future__ import annotations

from ragen_algo_ppo.config import PPOConfig
from ragen_core.interfaces.algorithm import Algorithm


class PPOAlgorithm(Algorithm):
    """PPO with a value head (the RAGEN default)."""

    config_class = PPOConfig
    config: PPOConfig
