"""Golden tests for the grpo, drgrpo and rloo estimators (spec 8.4, 18.2). Numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_algo_grpo.config import DrGRPOConfig, GRPOConfig
from ragen_algo_grpo.grpo import (
    DrGRPOEstimator,
    GRPOEstimator,
    episode_scores,
    group_stats,
    grpo_advantages,
)
from ragen_algo_grpo.reinforce_pp import (
    ReinforcePPBaselineEstimator,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
)
from ragen_algo_grpo.rloo import RLOOEstimator, rloo_advantages

from ragen_core.interfaces.advantage import AdvantageInputs


def _rows(scores, lengths=None, width=5):
    """Token rewards with each score on the row's last trained token; masks of given lengths."""
    lengths = lengths or [3] * len(scores)
    rewards = torch.zeros(len(scores), width, dtype=torch.float64)
    mask = torch.zeros(len(scores), width, dtype=torch.float64)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        mask[i, 1 : 1 + n] = 1.0
        rewards[i, n] = s
    return rewards, mask


SPEC_182 = [10.7, -0.5, -0.5, -1.0]
# μ = 8.7/4 = 2.175; deviations [8.525, −2.675, −2.675, −3.175]; Σ squares = 72.675625 + 2·7.155625
# + 10.080625 = 97.0675; σ = sqrt(97.0675/3) = sqrt(32.355833) = 5.688219
SIGMA_182 = math.sqrt(97.0675 / 3)


def test_grpo_spec_18_2():
    rewards, mask = _rows(SPEC_182)
    adv, metrics = grpo_advantages(rewards, mask, torch.tensor([0, 0, 0, 0]))
    per_row = adv[:, 1].tolist()
    # ≈ [1.50, −0.47, −0.47, −0.56]; exact: deviation / (σ + 1e-6)
    assert per_row == pytest.approx(
        [d / (SIGMA_182 + 1e-6) for d in (8.525, -2.675, -2.675, -3.175)]
    )
    assert per_row == pytest.approx([1.4987, -0.4703, -0.4703, -0.5582], abs=1e-4)
    # broadcast over every trained token, zero elsewhere
    assert adv[0].tolist() == pytest.approx(
        [0.0, per_row[0], per_row[0], per_row[0], 0.0]
    )
    assert metrics == {"num_groups": 1.0, "singleton_groups": 0.0, "flat_groups": 0.0}


def test_drgrpo_spec_18_2():
    rewards, mask = _rows(SPEC_182)
    out = DrGRPOEstimator()(
        AdvantageInputs(
            token_rewards=rewards,
            response_mask=mask,
            group_ids=torch.zeros(4, dtype=torch.long),
        )
    )
    assert out.advantages[:, 2].tolist() == pytest.approx(
        [8.525, -2.675, -2.675, -3.175]
    )
    assert torch.equal(out.advantages, out.returns)


def test_identical_scores_give_zero_and_singleton_gives_score():
    # group 0: three identical scores -> 0; group 1: singleton with S = 7 -> μ = 0, σ = 1
    rewards, mask = _rows([2.0, 2.0, 2.0, 7.0])
    groups = torch.tensor([0, 0, 0, 1])
    grpo = GRPOEstimator()(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=groups)
    )
    # GRPO singleton: 7 / (1 + 1e-6) = 6.999993
    assert grpo.advantages[:, 1].tolist() == pytest.approx(
        [0.0, 0.0, 0.0, 7 / (1 + 1e-6)]
    )
    assert grpo.metrics == {
        "num_groups": 2.0,
        "singleton_groups": 1.0,
        "flat_groups": 1.0,
    }
    dr = DrGRPOEstimator()(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=groups)
    )
    assert dr.advantages[:, 1].tolist() == [0.0, 0.0, 0.0, 7.0]


def test_turn_level_rows_are_deduplicated_by_episode():
    # episode 10 has three turn rows (each carries the episode total 1), episode 11 one row (0)
    rewards, mask = _rows([1.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0])
    dedup, _ = grpo_advantages(
        rewards, mask, groups, episode_ids=torch.tensor([10, 10, 10, 11])
    )
    # unique scores {1, 0}: μ = 0.5, σ = sqrt(0.5) = 0.7071068 -> ±0.5/0.7071078 = ±0.7071058
    expected = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert dedup[:, 1].tolist() == pytest.approx(
        [expected, expected, expected, -expected]
    )
    # without de-duplication: [1, 1, 1, 0]: μ = 0.75, σ = sqrt((3·0.0625 + 0.5625)/3) = 0.5
    plain, _ = grpo_advantages(rewards, mask, groups)
    assert plain[:, 1].tolist() == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-5)


def test_episode_dedup_singleton():
    # two rows of one episode form a single-episode group: μ = 0, σ = 1 -> A = S (Dr.GRPO)
    rewards, mask = _rows([3.0, 3.0])
    adv, metrics = grpo_advantages(
        rewards,
        mask,
        torch.tensor([5, 5]),
        episode_ids=torch.tensor([1, 1]),
        norm_by_std=False,
    )
    assert adv[:, 1].tolist() == [3.0, 3.0]
    assert metrics["singleton_groups"] == 1.0


def test_length_weight():
    # Dr.GRPO on [1, 3] -> [−1, 1]; ℓ = [2, 4] (+1e-6), mean 3 -> weights mean/ℓ = [1.5, 0.75]
    rewards, mask = _rows([1.0, 3.0], lengths=[2, 4])
    est = DrGRPOEstimator(DrGRPOConfig(length_weight=True))
    out = est(
        AdvantageInputs(
            token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0])
        )
    )
    assert out.advantages[:, 1].tolist() == pytest.approx([-1.5, 0.75], abs=1e-6)


def test_soft_reweight():
    # group A [0, 2]: σ = sqrt2; group B [0, 1]: σ = sqrt0.5; weights σ_g/(sqrt2 + 1e-6) ≈ [1, 0.5]
    # Dr.GRPO advantages [−1, 1, −0.5, 0.5] -> [−1, 1, −0.25, 0.25]
    rewards, mask = _rows([0.0, 2.0, 0.0, 1.0])
    est = DrGRPOEstimator(DrGRPOConfig(soft_reweight=True))
    out = est(
        AdvantageInputs(
            token_rewards=rewards,
            response_mask=mask,
            group_ids=torch.tensor([0, 0, 1, 1]),
        )
    )
    assert out.advantages[:, 1].tolist() == pytest.approx(
        [-1.0, 1.0, -0.25, 0.25], abs=1e-5
    )


def test_grpo_is_scale_invariant_and_keeps_dtype():
    rewards, mask = _rows([1.0, 0.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0])
    a, _ = grpo_advantages(rewards, mask, groups)
    b, _ = grpo_advantages(rewards * 10, mask, groups)
    assert a.tolist() == [pytest.approx(row, abs=1e-5) for row in b.tolist()]
    f32, _ = grpo_advantages(rewards.float(), mask.float(), groups)
    assert f32.dtype == torch.float32


def test_rloo_by_hand():
    # group [1, 2, 6]: baselines (2+6)/2 = 4, (1+6)/2 = 3.5, (1+2)/2 = 1.5 -> [−3, −1.5, 4.5]
    # singleton [5] -> baseline 0 -> 5
    rewards, mask = _rows([1.0, 2.0, 6.0, 5.0])
    adv = rloo_advantages(rewards, mask, torch.tensor([0, 0, 0, 1]))
    assert adv[:, 1].tolist() == pytest.approx([-3.0, -1.5, 4.5, 5.0])
    # de-duplication: rows 0 and 1 are one episode with score 1 -> group {1, 6}: [−5, −5, 5]
    rewards, mask = _rows([1.0, 1.0, 6.0])
    adv = rloo_advantages(
        rewards, mask, torch.tensor([0, 0, 0]), episode_ids=torch.tensor([0, 0, 1])
    )
    assert adv[:, 1].tolist() == pytest.approx([-5.0, -5.0, 5.0])
    out = RLOOEstimator()(
        AdvantageInputs(
            token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 0])
        )
    )
    assert torch.equal(out.advantages, out.returns)


def test_grpo_config_rejects_bad_epsilon():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        GRPOConfig(epsilon=0.0)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-10, 10), st.integers(0, 3)), min_size=1, max_size=12)
)
def test_group_advantages_sum_to_zero(rows):
    """Dr.GRPO and GRPO advantages sum to 0 within every group of ≥ 2 samples; RLOO is n/(n−1)·Dr.GRPO."""
    scores = [s for s, _ in rows]
    groups = torch.tensor([g for _, g in rows])
    rewards, mask = _rows(scores)
    dr, _ = grpo_advantages(rewards, mask, groups, norm_by_std=False)
    gr, _ = grpo_advantages(rewards, mask, groups)
    lo = rloo_advantages(rewards, mask, groups)
    for g in set(groups.tolist()):
        idx = (groups == g).nonzero().flatten()
        n = idx.numel()
        if n >= 2:
            assert dr[idx, 1].sum().item() == pytest.approx(0.0, abs=1e-9)
            assert gr[idx, 1].sum().item() == pytest.approx(0.0, abs=1e-6)
            assert lo[idx, 1].tolist() == pytest.approx(
                (dr[idx, 1] * n / (n - 1)).tolist(), abs=1e-9
            )
        else:
            assert dr[idx, 1].item() == pytest.approx(scores[int(idx)])
    assert torch.isfinite(gr).all()


def test_reinforce_pp_returns_skip_observations():
    # trained tokens 0, 1, 3 (observation at 2 with a reward 9 that is ignored), reward 1 on 3; γ = 0.5
    # G_3 = 1; G_1 = 0 + 0.5·1 = 0.5; G_0 = 0.25
    rewards = torch.tensor([[0.0, 0.0, 9.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    adv, ret = reinforce_pp_advantages(rewards, mask, gamma=0.5, whiten=False)
    assert ret.tolist()[0] == pytest.approx([0.25, 0.5, 0.0, 1.0])
    assert torch.equal(adv, ret)
    # whitened: [0.25, 0.5, 1]: mean 7/12, Σ(x−μ)² = 1/9 + 1/144 + 25/144 = 42/144, var 21/144
    white, _ = reinforce_pp_advantages(rewards, mask, gamma=0.5)
    s = math.sqrt(21 / 144 + 1e-8)
    assert white.tolist()[0] == pytest.approx(
        [(0.25 - 7 / 12) / s, (0.5 - 7 / 12) / s, 0.0, (1 - 7 / 12) / s]
    )


def test_reinforce_pp_baseline_by_hand():
    # group 0 [1, 3] -> [−1, 1]; singleton [5] -> μ = 0 -> 5 (unwhitened)
    rewards, mask = _rows([1.0, 3.0, 5.0], lengths=[1, 1, 1])
    groups = torch.tensor([0, 0, 1])
    raw = reinforce_pp_baseline_advantages(rewards, mask, groups, whiten=False)
    assert raw[:, 1].tolist() == [-1.0, 1.0, 5.0]
    # whitened over the three tokens: mean 5/3, Σ(x−μ)² = 64/9 + 4/9 + 100/9 = 168/9, var 28/3
    out = ReinforcePPBaselineEstimator()(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=groups)
    )
    s = math.sqrt(28 / 3 + 1e-8)
    assert out.advantages[:, 1].tolist() == pytest.approx(
        [(-1 - 5 / 3) / s, (1 - 5 / 3) / s, (5 - 5 / 3) / s]
    )
    assert torch.equal(out.advantages, out.returns)


def test_episode_scores_do_not_depend_on_reward_positions():
    # five turn rewards 0.7 on tokens 0-4 vs 3-7: a plain float64 row sum gives 3.5 and
    # 3.4999999999999996 on this machine (the reduction order follows the positions); sorting
    # first makes both rows reduce the same vector
    rewards = torch.zeros(2, 8, dtype=torch.float64)
    rewards[0, 0:5] = 0.7
    rewards[1, 3:8] = 0.7
    scores = episode_scores(rewards)
    assert scores.dtype == torch.float64
    assert scores[0].item() == scores[1].item()


def test_flat_group_statistics_are_exact():
    # 16 float32 scores 2.1 (three turn rewards 0.7): μ is exactly the score and σ exactly 0, so
    # GRPO, Dr.GRPO and RLOO give exact zeros (a float32 mean used to be an ulp off: GRPO 0.19)
    rewards = torch.zeros(16, 12)
    mask = torch.zeros(16, 12)
    for i in range(16):
        ends = [1 + i % 3, 5 + i % 2, 10]
        for e in ends:
            mask[i, e - 1 : e + 1] = 1.0
            rewards[i, e] = 0.7
    scores = episode_scores(rewards)
    stats = group_stats(scores, torch.zeros(16, dtype=torch.long))
    assert torch.equal(stats.mean, scores) and torch.equal(stats.std, torch.zeros(16, dtype=torch.float64))
    assert stats.flat_groups == 1
    groups = torch.zeros(16, dtype=torch.long)
    for adv in (grpo_advantages(rewards, mask, groups)[0], grpo_advantages(rewards, mask, groups, norm_by_std=False)[0],
                rloo_advantages(rewards, mask, groups)):
        assert torch.equal(adv, torch.zeros_like(rewards))
