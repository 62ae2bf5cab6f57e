"""Golden tests for the masked GAE estimator (spec 8.2, 18.3, L13). Numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_algo_ppo.config import GAEConfig
from ragen_algo_ppo.gae import GAEEstimator, masked_gae, whiten_advantages

from ragen_core.interfaces.advantage import AdvantageInputs
from ragen_core.masked import masked_mean, masked_var


def t(x):
    return torch.tensor(x, dtype=torch.float64)


# Spec 18.3: trained tokens at 1, 3, 5 (observations at 2, 4; padding at 0 and 6), reward R = 2 on
# position 5. γ = λ = 1 => A_t = R − V_t at every trained token, returns = R.
MASK_183 = [[0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]]
REW_183 = [[0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0]]
VAL_183 = [[9.0, 0.5, 7.0, 1.0, -3.0, 1.5, 4.0]]


def test_gae_gamma_lambda_one_gives_r_minus_v():
    adv, ret = masked_gae(t(REW_183), t(VAL_183), t(MASK_183), gamma=1.0, lam=1.0)
    # A = [_, 2 − 0.5, _, 2 − 1, _, 2 − 1.5, _] = [0, 1.5, 0, 1.0, 0, 0.5, 0]
    assert adv.tolist()[0] == pytest.approx([0.0, 1.5, 0.0, 1.0, 0.0, 0.5, 0.0])
    assert ret.tolist()[0] == pytest.approx([0.0, 2.0, 0.0, 2.0, 0.0, 2.0, 0.0])


def test_gae_estimator_whitening_off_and_on():
    inputs = AdvantageInputs(
        token_rewards=t(REW_183),
        response_mask=t(MASK_183),
        group_ids=torch.tensor([0]),
        values=t(VAL_183),
    )
    off = GAEEstimator(GAEConfig(whiten=False))(inputs)
    assert off.advantages.tolist()[0] == pytest.approx(
        [0.0, 1.5, 0.0, 1.0, 0.0, 0.5, 0.0]
    )
    on = GAEEstimator(GAEConfig(whiten=True))(inputs)
    # raw [1.5, 1.0, 0.5]: mean 1, unbiased var (0.25 + 0 + 0.25)/2 = 0.25 -> std 0.5 -> [1, 0, −1]
    assert on.advantages.tolist()[0] == pytest.approx(
        [0.0, 1.0, 0.0, 0.0, 0.0, -1.0, 0.0], abs=1e-6
    )
    # returns are taken before whitening: R = 2 on every trained token
    assert on.returns.tolist()[0] == pytest.approx([0.0, 2.0, 0.0, 2.0, 0.0, 2.0, 0.0])


def test_gae_gamma_09_lambda_095_by_hand():
    # positions 0, 1, 3 trained; position 2 is an observation carrying a reward 5 and a value 7
    # that must both be ignored; position 4 is padding.
    mask = t([[1.0, 1.0, 0.0, 1.0, 0.0]])
    rew = t([[0.0, 0.0, 5.0, 1.0, 0.0]])
    val = t([[0.2, 0.4, 7.0, 0.5, 3.0]])
    adv, ret = masked_gae(rew, val, mask, gamma=0.9, lam=0.95)
    # t=3: δ = 1 + 0.9·0 − 0.5 = 0.5                         A = 0.5
    # t=1: δ = 0 + 0.9·0.5 − 0.4 = 0.05;  A = 0.05 + 0.855·0.5 = 0.4775
    # t=0: δ = 0 + 0.9·0.4 − 0.2 = 0.16;  A = 0.16 + 0.855·0.4775 = 0.5682625
    assert adv.tolist()[0] == pytest.approx([0.5682625, 0.4775, 0.0, 0.5, 0.0])
    # returns A + V: [0.7682625, 0.8775, 0, 1.0, 0]
    assert ret.tolist()[0] == pytest.approx([0.7682625, 0.8775, 0.0, 1.0, 0.0])


def test_gae_observation_tokens_are_skipped():
    # Same trained tokens and rewards; changing rewards/values on unmasked positions changes nothing.
    mask = t([[1.0, 0.0, 0.0, 1.0]])
    base = masked_gae(
        t([[0.0, 0.0, 0.0, 1.0]]), t([[0.1, 0.0, 0.0, 0.3]]), mask, gamma=0.9, lam=0.8
    )
    noisy = masked_gae(
        t([[0.0, 4.0, -2.0, 1.0]]), t([[0.1, 5.0, 6.0, 0.3]]), mask, gamma=0.9, lam=0.8
    )
    assert torch.equal(base[0], noisy[0]) and torch.equal(base[1], noisy[1])
    # t=3: A = 1 − 0.3 = 0.7; t=0: δ = 0.9·0.3 − 0.1 = 0.17, A = 0.17 + 0.72·0.7 = 0.674
    # (γ is applied once across the skipped observation, not once per skipped token)
    assert base[0].tolist()[0] == pytest.approx([0.674, 0.0, 0.0, 0.7])


def test_gae_without_values_is_discounted_reward_to_go():
    adv, ret = masked_gae(
        t([[0.0, 0.0, 1.0]]), None, t([[1.0, 1.0, 1.0]]), gamma=0.5, lam=1.0
    )
    # reward-to-go with γ = 0.5: [0.25, 0.5, 1]
    assert adv.tolist()[0] == pytest.approx([0.25, 0.5, 1.0])
    assert torch.equal(adv, ret)


def _two_group_inputs():
    # row 0: R = 2, V = [0.5, 1.0, 1.5] -> raw [1.5, 1.0, 0.5]
    # row 1: R = 10, V = [0, 2, 4]     -> raw [10, 8, 6]
    return AdvantageInputs(
        token_rewards=t([[0.0, 0.0, 2.0], [0.0, 0.0, 10.0]]),
        response_mask=t([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]),
        group_ids=torch.tensor([0, 1]),
        values=t([[0.5, 1.0, 1.5], [0.0, 2.0, 4.0]]),
    )


def test_gae_batch_whitening():
    out = GAEEstimator(GAEConfig())(_two_group_inputs())
    # all six raw values [1.5, 1, 0.5, 10, 8, 6]: mean 4.5, Σ(x−μ)² = 9+12.25+16+30.25+12.25+2.25 = 82,
    # unbiased var 82/5 = 16.4 -> first token (1.5 − 4.5)/sqrt(16.4) = −0.740797
    assert out.advantages[0, 0].item() == pytest.approx(-3 / math.sqrt(16.4), abs=1e-6)
    mask = _two_group_inputs().response_mask
    assert float(masked_mean(out.advantages, mask)) == pytest.approx(0.0, abs=1e-9)
    assert float(masked_var(out.advantages, mask)) == pytest.approx(1.0, abs=1e-6)


def test_gae_per_group_whitening_l13():
    out = GAEEstimator(GAEConfig(whiten_scope="group"))(_two_group_inputs())
    # row 0: mean 1, std 0.5 -> [1, 0, −1]; row 1: mean 8, std 2 -> [1, 0, −1]
    assert out.advantages.tolist() == [pytest.approx([1.0, 0.0, -1.0], abs=1e-6)] * 2


def test_whiten_zero_outside_mask_and_single_token_group():
    adv = t([[3.0, 5.0], [7.0, 0.0]])
    mask = t([[1.0, 0.0], [1.0, 0.0]])
    out = whiten_advantages(adv, mask, torch.tensor([0, 1]))
    # each group holds one token -> variance 0 -> whitened value 0
    assert out.tolist() == [[0.0, 0.0], [0.0, 0.0]]


@settings(max_examples=60, deadline=None)
@given(
    value=st.one_of(st.sampled_from([0.7, 2.1, 1e-8, 1e6, -0.3]), st.floats(-1e6, 1e6, allow_subnormal=False)),
    rows=st.integers(1, 40),
    scope=st.sampled_from(["batch", "group"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_whitening_equal_advantages_gives_exactly_zero(value, rows, scope, dtype):
    """No critic and one equal reward per episode at γ = λ = 1: every raw advantage is the reward,
    so batch and group whitening must give exactly 0 (an ulp-off mean times 1/sqrt(1e-8) did not)."""
    mask = torch.zeros(rows, 9, dtype=dtype)
    rewards = torch.zeros(rows, 9, dtype=dtype)
    for i in range(rows):
        mask[i, i % 3 : 4 + i % 5] = 1.0
        rewards[i, 3 + i % 5] = value
    inputs = AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=torch.arange(rows) // 4)
    out = GAEEstimator(GAEConfig(whiten_scope=scope))(inputs)
    assert torch.equal(out.advantages, torch.zeros_like(rewards))


def test_gae_inputs_not_mutated_and_dtype_kept():
    inputs = _two_group_inputs()
    before = inputs.token_rewards.clone(), inputs.values.clone()
    out = GAEEstimator()(inputs)
    assert torch.equal(inputs.token_rewards, before[0]) and torch.equal(
        inputs.values, before[1]
    )
    assert out.advantages.dtype == torch.float64
    assert set(out.metrics) >= {"raw_adv_mean", "returns_mean"}


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-3, 3), st.floats(-3, 3), st.booleans()),
        min_size=1,
        max_size=10,
    ),
    st.floats(0.0, 1.0),
)
def test_gae_lambda_one_is_discounted_return_minus_value(tokens, gamma):
    """With λ = 1 the values telescope: A_t = Σ_k γ^k r_{s_k} − V_t over the masked positions s_k ≥ t."""
    rew = t([[r for r, _, _ in tokens]])
    val = t([[v for _, v, _ in tokens]])
    mask = t([[float(m) for _, _, m in tokens]])
    adv, ret = masked_gae(rew, val, mask, gamma=gamma, lam=1.0)
    masked = [i for i, (_, _, m) in enumerate(tokens) if m]
    for j, pos in enumerate(masked):
        g = sum(gamma**k * tokens[s][0] for k, s in enumerate(masked[j:]))
        assert adv[0, pos].item() == pytest.approx(g - tokens[pos][1], abs=1e-9)
        assert ret[0, pos].item() == pytest.approx(g, abs=1e-9)
    assert all(adv[0, i].item() == 0.0 for i in range(len(tokens)) if i not in masked)
