"""Golden-value tests for ragen_core.trainer.losses (spec 5.9, 8.5-8.7; L9, L10).

Every expected number is derived by hand in the comment next to it.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.errors import ConfigError
from ragen_core.trainer import losses as L


def t(x, dtype=torch.float64):
    """float64, so rounding (~1e-16) does not depend on the CPU: explicit tolerances below only cover
    the truncation of the hand-written decimal constants (n decimals: at most 0.5e-n)."""
    return torch.tensor(x, dtype=dtype)


# --------------------------------------------------------------------------------------------
# masked statistics

X = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
M = [[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]


def test_masked_mean_and_sum():
    # masked values 1, 2, 5 -> sum 8, mean 8/3
    assert float(L.masked_sum(t(X), t(M))) == pytest.approx(8.0)
    assert float(L.masked_mean(t(X), t(M))) == pytest.approx(8 / 3)
    # per row: row0 (1+2)/2 = 1.5, row1 5/1 = 5
    assert L.masked_mean(t(X), t(M), dim=-1).tolist() == pytest.approx([1.5, 5.0])
    # bool masks work like float masks
    assert float(L.masked_mean(t(X), t(M).bool())) == pytest.approx(8 / 3)


def test_masked_mean_empty_mask_is_zero_not_nan():
    assert float(L.masked_mean(t(X), torch.zeros(2, 3))) == 0.0
    assert L.masked_mean(t(X), t([[0.0, 0, 0], [1, 0, 0]]), dim=-1).tolist() == [
        0.0,
        4.0,
    ]


def test_masked_var_unbiased():
    # deviations from 8/3: -5/3, -2/3, 7/3 -> squares 25/9 + 4/9 + 49/9 = 78/9; / (3-1) = 13/3
    assert float(L.masked_var(t(X), t(M))) == pytest.approx(13 / 3)
    # biased: 78/9 / 3 = 26/9
    assert float(L.masked_var(t(X), t(M), unbiased=False)) == pytest.approx(26 / 9)
    # one element -> 0 instead of a division by zero; empty -> 0
    one = t([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert float(L.masked_var(t(X), one)) == 0.0
    assert float(L.masked_var(t(X), torch.zeros(2, 3))) == 0.0


def test_masked_whiten():
    w = L.masked_whiten(t(X), t(M))
    s = math.sqrt(13 / 3 + 1e-8)
    # (1 - 8/3)/sqrt(13/3) = -0.80064, (2 - 8/3)/s = -0.32026, (5 - 8/3)/s = 1.12090
    assert [w[0, 0].item(), w[0, 1].item(), w[1, 1].item()] == pytest.approx(
        [(-5 / 3) / s, (-2 / 3) / s, (7 / 3) / s]
    )
    assert [w[0, 0].item(), w[1, 1].item()] == pytest.approx(
        [-0.80064, 1.12090], abs=1e-5
    )
    assert float(L.masked_mean(w, t(M))) == pytest.approx(0.0, abs=1e-12)
    assert float(L.masked_var(w, t(M))) == pytest.approx(1.0, abs=1e-6)
    # shift_mean=False adds the mean back: -0.80064 + 8/3
    w2 = L.masked_whiten(t(X), t(M), shift_mean=False)
    assert w2[0, 0].item() == pytest.approx((-5 / 3) / s + 8 / 3)


# --------------------------------------------------------------------------------------------
# aggregation

LOSS = [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0]]
LMASK = [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]


def test_agg_token_mean():
    # (1 + 2) + (5 + 6 + 7 + 8) = 29 over 6 tokens
    assert float(L.agg_loss(t(LOSS), t(LMASK), "token-mean")) == pytest.approx(29 / 6)
    # global normaliser 10 -> 2.9
    assert float(
        L.agg_loss(t(LOSS), t(LMASK), "token-mean", global_token_count=10)
    ) == pytest.approx(2.9)


def test_agg_seq_mean_token_mean():
    # row0 mean 1.5, row1 mean 6.5, row2 has no tokens and is excluded -> (1.5 + 6.5)/2 = 4
    assert float(L.agg_loss(t(LOSS), t(LMASK), "seq-mean-token-mean")) == pytest.approx(
        4.0
    )
    # global sequence count 4 -> 8/4 = 2
    assert float(
        L.agg_loss(t(LOSS), t(LMASK), "seq-mean-token-mean", global_seq_count=4)
    ) == pytest.approx(2.0)


def test_agg_seq_mean_token_sum():
    # row sums 3 and 26 -> mean 14.5
    assert float(L.agg_loss(t(LOSS), t(LMASK), "seq-mean-token-sum")) == pytest.approx(
        14.5
    )


def test_agg_seq_mean_token_sum_norm():
    # Σ L·m = 29 over the padded length 4 -> 7.25; constant normaliser 100 -> 0.29
    assert float(
        L.agg_loss(t(LOSS), t(LMASK), "seq-mean-token-sum-norm")
    ) == pytest.approx(7.25)
    assert float(
        L.agg_loss(t(LOSS), t(LMASK), "seq-mean-token-sum-norm", norm_constant=100)
    ) == pytest.approx(0.29)
    with pytest.raises(ConfigError):
        L.agg_loss(t(LOSS), t(LMASK), "seq-mean-token-sum-norm", norm_constant=0)


def test_agg_global_token_count_fixes_micro_batch_dependence():
    # L9: rows 0 and 1 as two micro-batches. Mean of micro-batch means = (1.5 + 6.5)/2 = 4.0,
    # but the mini-batch token mean is 29/6. With the global count the micro losses sum to 29/6.
    loss, mask = t(LOSS), t(LMASK)
    per_micro = [
        L.agg_loss(loss[i : i + 1], mask[i : i + 1], "token-mean") for i in (0, 1)
    ]
    assert float(sum(per_micro) / 2) == pytest.approx(4.0)
    total = sum(
        L.agg_loss(loss[i : i + 1], mask[i : i + 1], "token-mean", global_token_count=6)
        for i in (0, 1)
    )
    assert float(total) == pytest.approx(29 / 6)


def test_agg_row_weights_make_an_episode_one_sequence():
    # rows 0 and 1 are two turns of one episode (weight 1/2 each), row 3 a one-turn episode
    # (weight 1); row 2 is empty. Row means 1.5, 6.5, -, 2.0; row sums 3, 26, -, 4.
    loss = t(LOSS + [[2.0, 2.0, 2.0, 2.0]])
    mask = t(LMASK + [[1.0, 1.0, 0.0, 0.0]])
    w = t([0.5, 0.5, 1.0, 1.0])
    # (0.5*1.5 + 0.5*6.5 + 1*2.0) / (0.5 + 0.5 + 1) = 6 / 2 = 3 (unweighted: 10 / 3)
    assert float(L.agg_loss(loss, mask, "seq-mean-token-mean", row_weights=w)) == pytest.approx(3.0)
    assert float(L.agg_loss(loss, mask, "seq-mean-token-mean")) == pytest.approx(10 / 3)
    # (0.5*3 + 0.5*26 + 4) / 2 = 9.25
    assert float(L.agg_loss(loss, mask, "seq-mean-token-sum", row_weights=w)) == pytest.approx(9.25)
    # token-mean ignores the weights: 33 tokens-sum over 8 tokens
    assert float(L.agg_loss(loss, mask, "token-mean", row_weights=w)) == pytest.approx(33 / 8)
    # micro-batches {0, 1} and {2, 3} normalised by the mini-batch's weighted count sum to the whole
    kw = L.minibatch_normalisers("seq-mean-token-mean", mask, global_norm=True, row_weights=w)
    assert kw == {"global_seq_count": pytest.approx(2.0)}
    parts = [L.agg_loss(loss[a:b], mask[a:b], "seq-mean-token-mean", row_weights=w[a:b], **kw) for a, b in ((0, 2), (2, 4))]
    assert float(sum(parts)) == pytest.approx(3.0)


def test_episode_row_weights():
    from ragen_core.trainer.update import episode_row_weights

    assert episode_row_weights(torch.tensor([4, 4, 7, 4, 9])).tolist() == pytest.approx([1 / 3, 1 / 3, 1.0, 1 / 3, 1.0])


@pytest.mark.parametrize("mode", L.AGG_MODES)
def test_agg_empty_mask_is_zero(mode):
    assert float(L.agg_loss(t(LOSS), torch.zeros(3, 4), mode)) == 0.0


def test_agg_unknown_mode():
    with pytest.raises(ConfigError, match="loss_agg_mode"):
        L.agg_loss(t(LOSS), t(LMASK), "token_mean")


# --------------------------------------------------------------------------------------------
# policy loss

# Tokens (old log-prob 0, so ρ = exp(log_prob)), clip 0.2/0.28, c = 3:
#  a: A= 1, ρ=1.5: L1=-1.5,  L2=-1.28 -> Lc=-1.28 (clipped)
#  b: A= 1, ρ=0.5: L1=-0.5,  L2=-0.8  -> Lc=-0.5
#  c: A=-1, ρ=5  : L1=5,     L2=1.28  -> Lc=5; dual: min(5, 3) = 3 (dual clip active)
#  d: A=-2, ρ=0.5: L1=1.0,   L2=1.6   -> Lc=1.6 (clipped); dual min(1.6, 6) = 1.6
#  e: masked out (A=100)
RATIOS = [1.5, 0.5, 5.0, 0.5, 1.0]
ADV = [1.0, 1.0, -1.0, -2.0, 100.0]
PMASK = [1.0, 1.0, 1.0, 1.0, 0.0]


def _policy_inputs():
    logp = torch.log(t([RATIOS])).requires_grad_(True)
    return logp, torch.zeros(1, 5, dtype=torch.float64), t([ADV]), t([PMASK])


def test_policy_loss_golden():
    logp, old, adv, mask = _policy_inputs()
    loss, metrics = L.policy_loss(
        logp, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_c=3.0
    )
    # (-1.28 - 0.5 + 3 + 1.6) / 4 = 2.82 / 4 = 0.705
    assert loss.item() == pytest.approx(0.705)
    assert metrics["pg_loss"] == pytest.approx(0.705)
    assert metrics["pg_clipfrac"] == pytest.approx(0.5)  # a and d
    assert metrics["pg_clipfrac_lower"] == pytest.approx(0.25)  # c
    # ppo_kl = -mean(log 1.5, log 0.5, log 5, log 0.5) = -0.6286086/4 = -0.1571522
    assert metrics["ppo_kl"] == pytest.approx(-0.1571522, abs=1e-6)
    loss.backward()
    # only b is unclipped: dL/dlogp = -A·ρ / 4 = -0.5/4 = -0.125; clipped/dual/masked tokens: 0
    assert logp.grad[0].tolist() == pytest.approx([0.0, -0.125, 0.0, 0.0, 0.0])


def test_policy_loss_symmetric_clip_changes_token_a():
    logp, old, adv, mask = _policy_inputs()
    # clip_high 0.2: token a -> L2 = -1.2, so (-1.2 - 0.5 + 3 + 1.6)/4 = 0.725
    loss, _ = L.policy_loss(
        logp, old, adv, mask, clip_low=0.2, clip_high=0.2, clip_c=3.0
    )
    assert loss.item() == pytest.approx(0.725)


def test_policy_loss_seq_mean_token_sum():
    logp, old, adv, mask = _policy_inputs()
    # one sequence: token sum 2.82
    loss, _ = L.policy_loss(logp, old, adv, mask, agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(2.82)


def test_policy_loss_log_ratio_clamped():
    # log-ratio 100 would overflow exp in float32; clamped to 20 -> dual clip gives -A·c = 3
    logp = torch.tensor([[100.0]], requires_grad=True)
    loss, metrics = L.policy_loss(
        logp, torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1)
    )
    assert loss.item() == pytest.approx(3.0)
    assert metrics["ppo_kl"] == pytest.approx(-20.0)
    loss.backward()
    assert torch.isfinite(logp.grad).all()


def test_policy_loss_rejects_bad_dual_clip():
    logp, old, adv, mask = _policy_inputs()
    with pytest.raises(ConfigError):
        L.policy_loss(logp, old, adv, mask, clip_c=1.0)


# --------------------------------------------------------------------------------------------
# KL

# d = log π − log π_ref = [-0.5, 1.0]
KL_LOGP = [0.0, 1.0]
KL_REF = [0.5, 0.0]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("k1", [-0.5, 1.0]),
        ("kl", [-0.5, 1.0]),
        ("abs", [0.5, 1.0]),
        ("k2", [0.125, 0.5]),  # ½ d²
        ("mse", [0.125, 0.5]),
        # x = -d = [0.5, -1]: e^0.5 - 0.5 - 1 = 0.1487213; e^-1 + 1 - 1 = 0.3678794
        ("k3", [0.1487213, 0.3678794]),
        ("low_var_kl", [0.1487213, 0.3678794]),
    ],
)
def test_kl_values(kind, expected):
    out = L.kl_penalty(t(KL_LOGP), t(KL_REF), kind)
    assert out.tolist() == pytest.approx(expected, abs=1e-7)
    # the straight-through variant has the same forward value
    assert L.kl_penalty(t(KL_LOGP), t(KL_REF), kind + "+").tolist() == pytest.approx(
        expected, abs=1e-7
    )


def test_k3_clamps():
    # d = -30: x clamped to 20, e^20 - 21 ≈ 4.85e8 -> clamped to 10
    # d = +30: x clamped to -20, e^-20 + 19 ≈ 19 -> clamped to 10
    out = L.kl_penalty(t([-30.0, 30.0]), t([0.0, 0.0]), "k3")
    assert out.tolist() == [10.0, 10.0]


@pytest.mark.parametrize(
    "kind", ["k1+", "abs+", "k2+", "k3+", "low_var_kl+", "kl+", "mse+"]
)
def test_kl_straight_through_gradient_is_k2(kind):
    logp = t(KL_LOGP).requires_grad_(True)
    L.kl_penalty(logp, t(KL_REF), kind).sum().backward()
    # ∂(½ d²)/∂logp = d = [-0.5, 1.0]
    assert logp.grad.tolist() == pytest.approx([-0.5, 1.0])


def test_k3_plain_gradient_differs_from_straight_through():
    logp = t(KL_LOGP).requires_grad_(True)
    L.kl_penalty(logp, t(KL_REF), "k3").sum().backward()
    # ∂(e^{-d} + d - 1)/∂d = 1 - e^{-d}: [1 - e^0.5, 1 - e^-1] = [-0.6487213, 0.6321206]
    assert logp.grad.tolist() == pytest.approx([-0.6487213, 0.6321206], abs=1e-7)


@pytest.mark.parametrize("kind", ["low-var-kl", "full", "K3", "k4", "+", ""])
def test_kl_unknown_names(kind):
    with pytest.raises(ConfigError, match="unknown KL estimator"):
        L.kl_penalty(t(KL_LOGP), t(KL_REF), kind)


def test_kl_in_reward():
    # r - β·k1·m with β = 0.1: d = [-0.5, 1.0], mask [1, 0] -> [1 + 0.05, 2 - 0]
    rewards, metrics = L.kl_in_reward(
        t([[1.0, 2.0]]), t([KL_LOGP]), t([KL_REF]), t([[1.0, 0.0]]), 0.1
    )
    assert rewards.tolist()[0] == pytest.approx([1.05, 2.0])
    assert metrics["kl_in_reward"] == pytest.approx(-0.5)
    assert metrics["kl_coef"] == pytest.approx(0.1)


# --------------------------------------------------------------------------------------------
# entropy


def test_entropy_golden():
    logits = t(
        [
            [0.0, 0.0, -1e9, -1e9],  # two equal -> ln 2 = 0.693147
            [
                1000.0,
                1000.0,
                1000.0,
                1000.0,
            ],  # uniform over 4, huge logits -> ln 4 = 1.386294
            [
                0.0,
                math.log(3.0),
                -1e9,
                -1e9,
            ],  # p = [1/4, 3/4]: 0.25·ln4 + 0.75·ln(4/3) = 0.562335
        ]
    )
    assert L.entropy_from_logits(logits).tolist() == pytest.approx(
        [0.693147, 1.386294, 0.562335], abs=1e-6
    )


def test_entropy_with_minus_inf_logits_is_finite():
    logits = torch.tensor(
        [[0.0, float("-inf"), 0.0], [5.0, float("-inf"), float("-inf")]],
        requires_grad=True,
    )
    h = L.entropy_from_logits(logits)
    # [ln 2, 0]
    assert h.tolist() == pytest.approx([0.693147, 0.0], abs=1e-6)
    h.sum().backward()
    assert torch.isfinite(logits.grad).all()


# --------------------------------------------------------------------------------------------
# critic


def test_value_loss_golden():
    # token0: V=1, V_old=0, R=2: V_c = 0.5; (1-2)² = 1, (0.5-2)² = 2.25 -> 2.25 (clipped)
    # token1: V=2, V_old=2, R=0: both 4 -> 4 (not clipped)
    # token2: masked out
    # loss = ½ · (2.25 + 4)/2 = 1.5625, clipfrac = 1/2
    loss, metrics = L.value_loss(
        t([[1.0, 2.0, 0.0]]),
        t([[0.0, 2.0, 0.0]]),
        t([[2.0, 0.0, 5.0]]),
        t([[1.0, 1.0, 0.0]]),
        0.5,
    )
    assert loss.item() == pytest.approx(1.5625)
    assert metrics["vf_clipfrac"] == pytest.approx(0.5)
    assert metrics["vf_loss"] == pytest.approx(1.5625)


def test_value_loss_clipping_never_lowers_loss():
    # V=1, V_old=0, R=0: unclipped (1)² = 1 > clipped (0.5)² = 0.25 -> ½·1 = 0.5, clipfrac 0
    values = t([[1.0]]).requires_grad_(True)
    loss, metrics = L.value_loss(values, t([[0.0]]), t([[0.0]]), t([[1.0]]), 0.5)
    assert loss.item() == pytest.approx(0.5)
    assert metrics["vf_clipfrac"] == 0.0
    loss.backward()
    assert values.grad.item() == pytest.approx(1.0)  # ∂ ½(V-R)²/∂V = V - R = 1


# --------------------------------------------------------------------------------------------
# reward normalisation (5.9)


def test_normalize_identity_and_mean():
    scores, groups = [1.0, 3.0, 5.0, 10.0], [0, 0, 1, 1]
    assert L.normalize_scores(scores, groups, "identity").tolist() == [
        1.0,
        3.0,
        5.0,
        10.0,
    ]
    # group means 2 and 7.5
    assert L.normalize_scores(scores, groups, "mean").tolist() == pytest.approx(
        [-1.0, 1.0, -2.5, 2.5]
    )


def test_normalize_mean_std():
    # group0: std(1, 3) = sqrt2 -> ±1/(1.4142136 + 1e-6) = ±0.7071063
    # group1: std(5, 10) = sqrt 12.5 = 3.5355339 -> ±2.5/3.5355349 = ±0.7071066
    out = L.normalize_scores(t([1.0, 3.0, 5.0, 10.0]), t([0, 0, 1, 1]), "mean_std")
    assert out.tolist() == pytest.approx(
        [-0.7071063, 0.7071063, -0.7071066, 0.7071066], abs=1e-7
    )


def test_normalize_flat_and_singleton_groups_become_zero():
    # group 0 flat -> 0; group 1 = [1, 3] -> ±0.7071; group 2 singleton -> 0
    out = L.normalize_scores(
        [2.0, 2.0, 1.0, 3.0, 7.0], ["a", "a", "b", "b", "c"], "mean_std"
    )
    assert out.tolist() == pytest.approx(
        [0.0, 0.0, -0.7071063, 0.7071063, 0.0], abs=1e-7
    )


def test_normalize_asym_clip():
    # batch grouping, 16 samples [16, 0 × 15]: mean 1, var (15² + 15·1²)/15 = 16, std 4
    # -> top (16-1)/4 = 3.75 clipped to 3; others -1/4 = -0.25
    out = L.normalize_scores([16.0] + [0.0] * 15, ["batch"] * 16, "asym_clip")
    assert out[0].item() == pytest.approx(3.0)
    assert out[1:].tolist() == pytest.approx([-0.25] * 15, abs=1e-6)
    # lower clip: [-16, 0 × 15] -> bottom -3.75 clipped to -1, others 0.25
    out = L.normalize_scores([-16.0] + [0.0] * 15, ["batch"] * 16, "asym_clip")
    assert out[0].item() == pytest.approx(-1.0)
    assert out[1].item() == pytest.approx(0.25, abs=1e-6)


def test_normalize_skipped_when_every_sample_is_its_own_group():
    assert L.normalize_scores([1.0, 2.0], [0, 1], "mean_std").tolist() == [1.0, 2.0]


def test_normalize_errors():
    with pytest.raises(ConfigError):
        L.normalize_scores([1.0, 2.0], [0, 0], "zscore")
    with pytest.raises(ValueError):
        L.normalize_scores([1.0, 2.0], [0], "mean")


def test_normalize_does_not_mutate_input():
    scores = t([1.0, 3.0])
    L.normalize_scores(scores, [0, 0], "mean")
    assert scores.tolist() == [1.0, 3.0]


# --------------------------------------------------------------------------------------------
# properties


_floats = st.floats(min_value=-5.0, max_value=5.0, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(_floats, st.booleans()), min_size=1, max_size=12),
    st.integers(1, 4),
)
def test_global_token_count_matches_full_batch_for_any_split(tokens, n_rows):
    """Summing micro-batch losses normalised by the global count equals the mini-batch token mean."""
    loss = t([[a * (r + 1) for a, _ in tokens] for r in range(n_rows)])
    mask = t([[float(m) for _, m in tokens]] * n_rows)
    full = L.agg_loss(loss, mask, "token-mean")
    count = float(mask.sum())
    parts = sum(
        L.agg_loss(
            loss[i : i + 1], mask[i : i + 1], "token-mean", global_token_count=count
        )
        for i in range(n_rows)
    )
    assert float(parts) == pytest.approx(float(full), abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_floats, st.booleans()), min_size=1, max_size=10))
def test_policy_loss_at_ratio_one_is_minus_advantage(tokens):
    """On-policy (ρ = 1) nothing is clipped and the loss is agg(−A)."""
    adv = t([[a for a, _ in tokens]])
    mask = t([[float(m) for _, m in tokens]])
    logp = torch.zeros_like(adv)
    loss, metrics = L.policy_loss(logp, logp, adv, mask)
    assert loss.item() == pytest.approx(
        float(L.agg_loss(-adv, mask, "token-mean")), abs=1e-12
    )
    assert (
        metrics["pg_clipfrac"] == 0.0
        and metrics["pg_clipfrac_lower"] == 0.0
        and metrics["ppo_kl"] == 0.0
    )


def test_a_norm_constant_of_zero_is_not_taken_for_unset():
    """``norm_constant=0.0`` from an algorithm's agg_kwargs was read as "none given" (a falsy check)
    and the loss divided by the padded width instead (helper-80's walk): only None means that, and
    a normaliser that is not a positive number is refused, 0 included (the loss is divided by it)."""
    mask = t(LMASK)
    assert L.minibatch_normalisers("seq-mean-token-sum-norm", mask, global_norm=True) == {"norm_constant": float(mask.shape[-1])}
    assert L.minibatch_normalisers("seq-mean-token-sum-norm", mask, global_norm=True, norm_constant=2.0) == {"norm_constant": 2.0}
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ConfigError, match=r"^seq-mean-token-sum-norm needs a positive normaliser"):
            L.agg_loss(t(LOSS), mask, "seq-mean-token-sum-norm",
                       **L.minibatch_normalisers("seq-mean-token-sum-norm", mask, global_norm=True, norm_constant=bad))
