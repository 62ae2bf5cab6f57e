"""Light specs of the GRPO plugin (entry-point targets): imports only ragen_core and the configs."""

from __future__ import annotations

from ragen_algo_grpo.config import (
    DAPOAlgorithmConfig,
    DrGRPOAlgorithmConfig,
    DrGRPOConfig,
    GRPOAlgorithmConfig,
    GRPOConfig,
    ReinforcePPBaselineConfig,
    ReinforcePPConfig,
    RLOOConfig,
)
from ragen_core.specs import AlgorithmSpec, EstimatorSpec

GRPO_SPEC = EstimatorSpec(
    name="grpo",
    summary="Group-normalised scores (S - mean) / (unbiased std + 1e-6), broadcast over trained tokens",
    config_model=GRPOConfig,
    factory="ragen_algo_grpo.grpo:GRPOEstimator",
    presets={"drgrpo": {"norm_adv_by_std": False}},
    group_baseline="the raw episode score S (a one-episode group has mean 0 and std 1): no baseline, no normalisation",
)
DRGRPO_SPEC = EstimatorSpec(
    name="drgrpo",
    summary="Dr.GRPO: group-mean baseline S - mean, no std normalisation",
    config_model=DrGRPOConfig,
    factory="ragen_algo_grpo.grpo:DrGRPOEstimator",
    group_baseline="the raw episode score S (a one-episode group has mean 0): no baseline",
)
RLOO_SPEC = EstimatorSpec(
    name="rloo",
    summary="REINFORCE leave-one-out: S minus the mean of the other episodes of the group",
    config_model=RLOOConfig,
    factory="ragen_algo_grpo.rloo:RLOOEstimator",
    group_baseline="the raw episode score S (no other episode to leave out): no baseline",
)
REINFORCE_PP_SPEC = EstimatorSpec(
    name="reinforce-plus-plus",
    summary="REINFORCE++: reward-to-go minus the batch mean of its turn, over the batch std",
    config_model=ReinforcePPConfig,
    factory="ragen_algo_grpo.reinforce_pp:ReinforcePPEstimator",
)
REINFORCE_PP_BASELINE_SPEC = EstimatorSpec(
    name="reinforce-plus-plus-baseline",
    summary="REINFORCE++ with a group-mean baseline, whitened over the batch",
    config_model=ReinforcePPBaselineConfig,
    factory="ragen_algo_grpo.reinforce_pp:ReinforcePPBaselineEstimator",
    group_baseline="the raw episode score S whitened over the batch (a batch baseline instead of a group one)",
)

GRPO_ALGO_SPEC = AlgorithmSpec(
    name="grpo",
    summary="GRPO: critic-free, group-normalised advantages, seq-mean-token-mean loss",
    config_model=GRPOAlgorithmConfig,
    factory="ragen_algo_grpo.algorithm:GRPOAlgorithm",
)
DRGRPO_ALGO_SPEC = AlgorithmSpec(
    name="drgrpo",
    summary="Dr.GRPO: S - mean advantages, seq-mean-token-sum loss (preset constant-norm: fixed normaliser)",
    config_model=DrGRPOAlgorithmConfig,
    factory="ragen_algo_grpo.algorithm:DrGRPOAlgorithm",
    presets={"constant-norm": {"loss_agg_mode": "seq-mean-token-sum-norm"}},
)
DAPO_ALGO_SPEC = AlgorithmSpec(
    name="dapo",
    summary="DAPO: clip 0.2/0.28, token-mean loss, dynamic sampling, optional overlong punishment",
    config_model=DAPOAlgorithmConfig,
    factory="ragen_algo_grpo.algorithm:DAPOAlgorithm",
    presets={
        # RAGEN's scripts called this "DAPO" but it equals the PPO preset (L11); kept for comparison.
        "ragen-reference": {
            "estimator": "gae",
            "use_critic": True,
            "dynamic_sampling": False,
        },
        "overlong": {"overlong_buffer_len": 512},
    },
)
