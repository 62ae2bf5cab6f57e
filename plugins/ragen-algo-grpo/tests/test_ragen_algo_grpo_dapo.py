"""DAPO pieces: dynamic sampling and soft overlong punishment (L11). Numbers worked by hand."""

from __future__ import annotations

import pytest
import torch
from ragen_algo_grpo.algorithm import DAPOAlgorithm
from ragen_algo_grpo.config import DAPOAlgorithmConfig
from ragen_algo_grpo.dapo import (
    apply_overlong_penalty,
    dynamic_sampling_mask,
    overlong_penalty,
)

from ragen_core.errors import ConfigError


def test_dynamic_sampling_drops_flat_groups():
    # group 0 [1, 1] flat -> drop; group 1 [0, 1] -> keep; group 2 singleton -> keep
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 3.0])
    groups = torch.tensor([0, 0, 1, 1, 2])
    assert dynamic_sampling_mask(scores, groups).tolist() == [
        False,
        False,
        True,
        True,
        True,
    ]
    # token rewards [B, T] are summed first
    token = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [3.0, 0.0]])
    assert dynamic_sampling_mask(token, groups).tolist() == [
        False,
        False,
        True,
        True,
        True,
    ]


def test_dynamic_sampling_counts_episodes_once():
    # rows 0, 1 are turns of one episode: group 0 has one episode -> kept
    scores = torch.tensor([1.0, 1.0, 2.0, 2.0])
    groups = torch.tensor([0, 0, 1, 1])
    episodes = torch.tensor([7, 7, 8, 9])
    assert dynamic_sampling_mask(scores, groups, episodes).tolist() == [
        True,
        True,
        False,
        False,
    ]


def test_overlong_penalty_formula():
    # L = 10, B = 4 -> window starts at 6: ℓ=5 -> 0; 6 -> 0; 8 -> (6−8)/4 = −0.5; 10 -> −1; 12 -> −1
    lengths = torch.tensor([5, 6, 8, 10, 12])
    assert overlong_penalty(
        lengths, max_length=10, buffer_len=4
    ).tolist() == pytest.approx([0, 0, -0.5, -1.0, -1.0])
    assert overlong_penalty(
        lengths, max_length=10, buffer_len=4, factor=0.5
    ).tolist() == pytest.approx([0, 0, -0.25, -0.5, -0.5])
    with pytest.raises(ConfigError):
        overlong_penalty(lengths, max_length=10, buffer_len=0)


def test_apply_overlong_penalty_on_last_trained_token():
    rewards = torch.tensor(
        [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0]]
    )
    mask = torch.tensor(
        [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
    )
    out = apply_overlong_penalty(rewards, mask, max_length=4, buffer_len=2)
    # L − B = 2: ℓ = 3 -> (2 − 3)/2 = −0.5 on position 2; ℓ = 4 -> −1 on position 3; empty row unchanged
    assert out.tolist() == [
        [0.0, 0.0, 0.5, 0.0],
        [0.0, 0.0, 0.0, 1.0],
        [0.0, 0.0, 0.0, 0.0],
    ]
    assert rewards[0, 2].item() == 1.0  # input untouched


def test_dapo_algorithm_steps():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    mask = torch.ones(4, 2)
    groups = torch.tensor([0, 0, 1, 1])
    algo = DAPOAlgorithm()
    assert algo.shape_rewards(rewards, mask) is rewards  # shaping off by default
    assert algo.keep_mask(rewards, groups).tolist() == [False, False, True, True]
    off = DAPOAlgorithm(DAPOAlgorithmConfig(dynamic_sampling=False))
    assert off.keep_mask(rewards, groups).tolist() == [True] * 4
    shaped = DAPOAlgorithm(DAPOAlgorithmConfig(overlong_buffer_len=1))
    with pytest.raises(ConfigError):
        shaped.shape_rewards(rewards, mask)
    # L = 2 from the trainer's budget, B = 1: ℓ = 2 -> (1 − 2)/1 = −1 on the last token
    assert shaped.shape_rewards(rewards, mask, max_length=2)[:, 1].tolist() == [
        0.0,
        0.0,
        -1.0,
        -1.0,
    ]


def test_an_overlong_window_longer_than_the_reply_budget_is_refused_before_the_run():
    """The 'overlong' preset (512 tokens) under a 48-token reply budget used to fail after a
    training step; the run config's checks refuse it, naming both settings."""
    from ragen_core.config import load_config
    from ragen_core.errors import ConfigError
    from ragen_core.trainer.config import RunConfig, check_plugin_configs

    config = load_config(RunConfig, [], ["env=bandit", "algo=dapo", "algo_preset=overlong", "sampling.train.max_new_tokens=48"])
    with pytest.raises(ConfigError) as err:
        check_plugin_configs(config)
    assert str(err.value).splitlines()[0] == ("algo_config.overlong_buffer_len=512 is longer than the length it counts back from, "
                                              "sampling.train.max_new_tokens=48 (overlong_max_length is unset)")
    capped = load_config(RunConfig, [], ["env=bandit", "algo=dapo", "algo_preset=overlong", "algo_config.overlong_max_length=100"])
    with pytest.raises(ConfigError, match=r"algo_config.overlong_max_length=100"):
        check_plugin_configs(capped)
    fits = load_config(RunConfig, [], ["env=bandit", "algo=dapo", "algo_config.overlong_buffer_len=16", "sampling.train.max_new_tokens=48"])
    check_plugin_configs(fits)  # a window inside the budget passes
