"""Light specs of the PPO plugin (entry-point targets): imports only ragen_core and the configs."""

from __future__ import annotations

from ragen_algo_ppo.config import BilevelGAEConfig, GAEConfig, PPOConfig
from ragen_core.specs import AlgorithmSpec, EstimatorSpec

GAE_SPEC = EstimatorSpec(
    name="gae",
    summary="Masked GAE over generated tokens, whitened over the batch or per group",
    config_model=GAEConfig,
    factory="ragen_algo_ppo.gae:GAEEstimator",
    needs_critic=True,
    presets={"group-whiten": {"whiten_scope": "group"}, "no-whiten": {"whiten": False}},
)

BILEVEL_GAE_SPEC = EstimatorSpec(
    name="bilevel-gae",
    summary="Turn-level GAE across explicit turn ends (gamma_h 0.95) plus token-level GAE inside turns",
    config_model=BilevelGAEConfig,
    factory="ragen_algo_ppo.bilevel_gae:BilevelGAEEstimator",
    needs_critic=True,
)

PPO_SPEC = AlgorithmSpec(
    name="ppo",
    summary="PPO: GAE with a critic, clip 0.2/0.28, token-mean loss, no KL",
    config_model=PPOConfig,
    factory="ragen_algo_ppo.algorithm:PPOAlgorithm",
    needs_critic=True,
    presets={
        "bilevel": {"estimator": "bilevel-gae"},
        "group-whiten": {"estimator_config": {"whiten_scope": "group"}},
    },
)
