"""Golden tests for bi-level GAE with explicit turn ends (spec 8.3 fixed per L5)."""

from __future__ import annotations

import pytest
import torch
from ragen_algo_ppo.bilevel_gae import BilevelGAEEstimator, bilevel_gae
from ragen_algo_ppo.config import BilevelGAEConfig
from ragen_algo_ppo.gae import masked_gae

from ragen_core.interfaces.advantage import AdvantageInputs


def t(x):
    return torch.tensor(x, dtype=torch.float64)


# Two turns: turn 1 = positions 0, 1 (end 1), observation at 2, turn 2 = positions 3, 4 (end 4),
# padding at 5.
MASK = [[1.0, 1.0, 0.0, 1.0, 1.0, 0.0]]
VAL = [[0.5, 0.4, 9.0, 0.3, 0.2, 9.0]]
ENDS = [[1, 4]]


def test_two_turns_gamma_lambda_one():
    rew = t([[0.0, 1.0, 0.0, 0.0, 2.0, 0.0]])  # turn rewards R_1 = 1, R_2 = 2
    adv, ret = bilevel_gae(
        rew, t(VAL), t(MASK), ENDS, gamma=1.0, lam=1.0, high_level_gamma=0.95
    )
    # turn level (γ_h = 0.95, λ = 1):
    #   k=2: δ = 2 + 0.95·0 − 0.2 = 1.8;          A^h = 1.8;                  u_2 = 2.0
    #   k=1: δ = 1 + 0.95·0.2 − 0.4 = 0.79;       A^h = 0.79 + 0.95·1.8 = 2.5; u_1 = 2.9
    # token level (γ = λ = 1): A_t = u_k − V_t
    #   [2.9 − 0.5, 2.9 − 0.4, _, 2.0 − 0.3, 2.0 − 0.2, _] = [2.4, 2.5, 0, 1.7, 1.8, 0]
    assert adv.tolist()[0] == pytest.approx([2.4, 2.5, 0.0, 1.7, 1.8, 0.0])
    assert ret.tolist()[0] == pytest.approx([2.9, 2.9, 0.0, 2.0, 2.0, 0.0])
    # plain GAE (γ = 1) gives turn-1 tokens the undiscounted 1 + 2 − V_t = [2.5, 2.6] and turn-2
    # tokens 2 − V_t; bi-level discounts the later turn's reward by γ_h for turn 1
    plain, _ = masked_gae(rew, t(VAL), t(MASK))
    assert plain.tolist()[0] == pytest.approx([2.5, 2.6, 0.0, 1.7, 1.8, 0.0])


def test_zero_reward_turn_is_not_skipped():
    # L5: the reference found turn ends by non-zero reward, so a zero-reward turn 1 merged into turn 2.
    rew = t([[0.0, 0.0, 0.0, 0.0, 2.0, 0.0]])
    adv, _ = bilevel_gae(
        rew, t(VAL), t(MASK), ENDS, gamma=1.0, lam=1.0, high_level_gamma=0.95
    )
    # k=2 as before: A^h = 1.8, u_2 = 2.0
    # k=1: δ = 0 + 0.95·0.2 − 0.4 = −0.21; A^h = −0.21 + 0.95·1.8 = 1.5; u_1 = 1.9
    # turn 1 tokens: [1.9 − 0.5, 1.9 − 0.4] = [1.4, 1.5]   (non-zero detection would give [1.5, 1.6])
    assert adv.tolist()[0] == pytest.approx([1.4, 1.5, 0.0, 1.7, 1.8, 0.0])


def test_two_turns_gamma_09_lambda_05():
    rew = t([[0.0, 1.0, 0.0, 0.0, 2.0, 0.0]])
    adv, _ = bilevel_gae(
        rew, t(VAL), t(MASK), ENDS, gamma=0.9, lam=0.5, high_level_gamma=0.95
    )
    # turn level: k=2: A^h = 1.8; k=1: δ = 0.79, A^h = 0.79 + 0.95·0.5·1.8 = 1.645
    # token level, turn 2: t=4: 1.8;  t=3: δ = 0.9·0.2 − 0.3 = −0.12, A = −0.12 + 0.45·1.8 = 0.69
    # turn 1: t=1: 1.645; t=0: δ = 0.9·0.4 − 0.5 = −0.14, A = −0.14 + 0.45·1.645 = 0.60025
    assert adv.tolist()[0] == pytest.approx([0.60025, 1.645, 0.0, 0.69, 1.8, 0.0])


def test_single_turn_reduces_to_plain_gae():
    rew = t([[0.0, 0.0, 0.0, 0.0, 2.0, 0.0]])
    for ends in ([[4]], None, [[]]):
        adv, ret = bilevel_gae(rew, t(VAL), t(MASK), ends, gamma=1.0, lam=1.0)
        ref_adv, ref_ret = masked_gae(rew, t(VAL), t(MASK))
        assert adv.tolist()[0] == pytest.approx(ref_adv.tolist()[0])
        assert ret.tolist()[0] == pytest.approx(ref_ret.tolist()[0])


def test_trailing_tokens_after_last_turn_end_form_a_final_turn():
    # ends [1] only; tokens 3, 4 become a final turn ending at 4 (which holds reward 2)
    rew = t([[0.0, 1.0, 0.0, 0.0, 2.0, 0.0]])
    a, _ = bilevel_gae(rew, t(VAL), t(MASK), [[1]], gamma=1.0, lam=1.0)
    b, _ = bilevel_gae(rew, t(VAL), t(MASK), ENDS, gamma=1.0, lam=1.0)
    assert torch.equal(a, b)


def test_bad_turn_ends_raise():
    with pytest.raises(ValueError):
        bilevel_gae(t([[0.0, 1.0]]), None, t([[1.0, 1.0]]), [[5]])
    with pytest.raises(ValueError):
        bilevel_gae(t([[0.0, 1.0]]), None, t([[1.0, 1.0]]), [[1], [1]])


def test_estimator_uses_turn_ends_and_whitens():
    rew = t([[0.0, 1.0, 0.0, 0.0, 2.0, 0.0]])
    inputs = AdvantageInputs(
        token_rewards=rew,
        response_mask=t(MASK),
        group_ids=torch.tensor([0]),
        values=t(VAL),
        turn_ends=ENDS,
    )
    raw = BilevelGAEEstimator(BilevelGAEConfig(whiten=False))(inputs)
    assert raw.advantages.tolist()[0] == pytest.approx([2.4, 2.5, 0.0, 1.7, 1.8, 0.0])
    white = BilevelGAEEstimator()(inputs)
    # raw [2.4, 2.5, 1.7, 1.8]: mean 2.1, Σ(x−μ)² = 0.09+0.16+0.16+0.09 = 0.5, var 0.5/3
    s = (0.5 / 3) ** 0.5
    assert white.advantages.tolist()[0] == pytest.approx(
        [0.3 / s, 0.4 / s, 0.0, -0.4 / s, -0.3 / s, 0.0], abs=1e-6
    )
    assert white.returns.tolist()[0] == pytest.approx([2.9, 2.9, 0.0, 2.0, 2.0, 0.0])
