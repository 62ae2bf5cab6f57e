"""Estimator tests: the spec 18.5 worked example, duplicate-aware retrieval, EMA, edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ragen_diagnostics.estimators import EmaTracker, collapse_metrics, retrieval_metrics

# Spec 18.5: rows = z11, z12, z21, z22; columns = prompts x1, x2 (per-token log-probs).
EXAMPLE = np.array([[-1.0, -3.0], [-1.2, -2.8], [-2.9, -0.9], [-3.1, -1.1]])
TRUE = [0, 0, 1, 1]


def _lse(row: np.ndarray) -> float:
    return float(np.log(np.sum(np.exp(row))))


def test_worked_example_per_token() -> None:
    m = collapse_metrics(EXAMPLE, [1, 1, 1, 1], TRUE).metrics
    assert m["mi_defined"] == 1.0
    assert m["matched_log_prob_mean"] == pytest.approx(-1.05)
    assert m["conditional_entropy_est"] == pytest.approx(1.05)
    marginals = [_lse(r) - math.log(2) for r in EXAMPLE]
    assert marginals == pytest.approx([-1.566, -1.709, -1.466, -1.666], abs=1e-3)
    assert m["marginal_log_prob_mean"] == pytest.approx(-1.602, abs=1e-3)
    assert m["reasoning_entropy_est"] == pytest.approx(1.602, abs=1e-3)
    assert m["mi_estimate"] == pytest.approx(0.552, abs=1e-3)
    assert m["mi_estimate"] == pytest.approx(m["reasoning_entropy_est"] - m["conditional_entropy_est"])
    assert m["mi_upper_bound"] == pytest.approx(math.log(2))
    assert m["retrieval_accuracy"] == 1.0
    assert m["retrieval_chance_level"] == 0.5
    assert m["retrieval_above_chance"] == 0.5
    # N = 2 -> k_eff = 2 for every k; chance@k = min(1, 0.5 * 2) = 1.
    for k in (2, 4, 8):
        assert m[f"retrieval_accuracy@{k}"] == 1.0
        assert m[f"retrieval_chance_level@{k}"] == 1.0
        assert m[f"retrieval_above_chance@{k}"] == 0.0
    # z-score: population std of the marginals, eps 1e-3.
    sigma = float(np.std(marginals))
    diff = np.array([-1.0, -1.2, -0.9, -1.1]) - np.array(marginals)
    assert m["marginal_std"] == pytest.approx(sigma)
    assert m["mi_zscore"] == pytest.approx(float(np.mean(diff / (sigma + 1e-3))))


def test_worked_example_per_sequence_uses_sums() -> None:
    lengths = np.array([10, 20, 5, 4])
    l_sum = EXAMPLE * lengths[:, None]
    m = collapse_metrics(l_sum, lengths, TRUE).metrics
    # per-token metrics are the example's exactly
    assert m["mi_estimate"] == pytest.approx(0.552, abs=1e-3)
    matched = np.array([-10.0, -24.0, -4.5, -4.4])
    marginal = np.array([_lse(r) - math.log(2) for r in l_sum])
    assert m["matched_log_prob_mean_seq"] == pytest.approx(matched.mean())
    assert m["conditional_entropy_seq_est"] == pytest.approx(-matched.mean())
    assert m["reasoning_entropy_seq_est"] == pytest.approx(-marginal.mean())
    assert m["mi_seq_estimate"] == pytest.approx(matched.mean() - marginal.mean())
    assert m["marginal_std_seq"] == pytest.approx(float(np.std(marginal)))


def test_identical_rows_give_zero_mi_and_chance_retrieval() -> None:
    flat = np.repeat(np.array([[-2.0], [-1.5], [-3.0], [-2.5]]), 2, axis=1)
    m = collapse_metrics(flat, [1] * 4, TRUE).metrics
    assert m["mi_estimate"] == pytest.approx(0.0, abs=1e-12)
    assert m["mi_seq_estimate"] == pytest.approx(0.0, abs=1e-12)
    # ties are credited with the expected hit rate of a random tie-break: exactly chance
    assert m["retrieval_accuracy"] == pytest.approx(0.5)
    assert m["retrieval_above_chance"] == pytest.approx(0.0)


def test_duplicate_signature_chance_levels() -> None:
    # 4 columns, the first two hold the same prompt: signatures a, a, b, c.
    l_tok = np.full((4, 4), -5.0)
    l_tok[0, 1] = -1.0  # row of column 0 prefers column 1, which is the same prompt -> correct
    l_tok[1, 1] = -1.0
    l_tok[2, 3] = -1.0  # row of column 2 prefers column 3 (a different prompt) -> wrong
    l_tok[3, 3] = -1.0
    m = collapse_metrics(l_tok, [1] * 4, [0, 1, 2, 3], ["a", "a", "b", "c"]).metrics
    assert m["retrieval_chance_level"] == pytest.approx((2 / 4 + 2 / 4 + 1 / 4 + 1 / 4) / 4)  # 0.375
    assert m["retrieval_accuracy"] == pytest.approx(0.75)
    assert m["retrieval_above_chance"] == pytest.approx(0.375)
    assert m["retrieval_chance_level@2"] == pytest.approx(0.75)  # k_eff 2
    assert m["retrieval_chance_level@4"] == 1.0  # k_eff 4, capped at 1
    assert m["retrieval_chance_level@8"] == 1.0  # k_eff = min(8, min(8, 4)) = 4
    # top-2 of row 2: column 3, then a 3-way tie among {0,1,2} for one slot -> 1/3 chance of column 2
    assert m["retrieval_accuracy@2"] == pytest.approx((1 + 1 + 1 / 3 + 1) / 4)
    assert m["num_distinct_prompts"] == 3.0
    # without signatures every column is distinct: chance 1/N, row 0 and 2 are wrong
    plain = collapse_metrics(l_tok, [1] * 4, [0, 1, 2, 3]).metrics
    assert plain["retrieval_chance_level"] == pytest.approx(0.25)
    assert plain["retrieval_chance_level@2"] == pytest.approx(0.5)
    assert plain["retrieval_accuracy"] == pytest.approx(0.5)


def test_k_eff_uses_at_most_eight_columns() -> None:
    n = 12
    l_tok = -np.arange(n, dtype=float)[None, :].repeat(n, axis=0)  # every row ranks column 0 first
    m = retrieval_metrics(l_tok, np.arange(n), np.arange(n))
    assert m["retrieval_chance_level@8"] == pytest.approx(8 / 12)
    assert m["retrieval_accuracy@8"] == pytest.approx(8 / 12)  # rows 0..7 are found in the top 8
    assert m["retrieval_accuracy"] == pytest.approx(1 / 12)


def test_ema_first_observation_initialises_then_decays() -> None:
    ema = EmaTracker(decay=0.9)
    first = collapse_metrics(EXAMPLE, [1] * 4, TRUE, ema=ema).metrics
    assert first["marginal_std_ema"] == pytest.approx(first["marginal_std"])
    assert first["mi_zscore_ema"] == pytest.approx(first["mi_zscore"])
    scaled = EXAMPLE * np.array([[1.0], [2.0], [0.5], [3.0]])
    second = collapse_metrics(scaled, [1] * 4, TRUE, ema=ema).metrics
    expected = 0.9 * first["marginal_std"] + 0.1 * second["marginal_std"]
    assert second["marginal_std_ema"] == pytest.approx(expected)
    diff_mean = second["matched_log_prob_mean"] - second["marginal_log_prob_mean"]
    assert second["mi_zscore_ema"] == pytest.approx(diff_mean / (expected + 1e-3))
    expected_seq = 0.9 * first["marginal_std_seq"] + 0.1 * second["marginal_std_seq"]
    assert second["marginal_std_ema_seq"] == pytest.approx(expected_seq)
    assert set(ema.values) == {"tok", "seq"}


def test_single_column_is_explicitly_undefined() -> None:
    ema = EmaTracker()
    est = collapse_metrics(np.array([[-1.0], [-2.0]]), [3, 4], [0, 0], ema=ema)
    assert not est.defined
    assert est.metrics["mi_defined"] == 0.0
    assert "at least 2" in (est.reason or "")
    assert all(np.isfinite(v) for v in est.metrics.values())
    assert ema.values == {}  # undefined steps do not feed the moving average


def test_empty_reasoning_rows_are_excluded() -> None:
    with_empty = np.vstack([EXAMPLE, [[0.0, -50.0]]])
    est = collapse_metrics(with_empty, [1, 1, 1, 1, 0], TRUE + [0])
    assert est.metrics["num_rows"] == 4.0
    assert est.metrics["num_rows_excluded"] == 1.0
    assert est.metrics["mi_estimate"] == pytest.approx(0.552, abs=1e-3)
    none_left = collapse_metrics(np.zeros((2, 3)), [0, 0], [0, 1])
    assert not none_left.defined and none_left.metrics["mi_defined"] == 0.0


def test_groups_of_size_one() -> None:
    # each prompt has exactly one reasoning sample; the matrix is square
    l_tok = np.array([[-1.0, -2.0, -3.0], [-2.5, -0.5, -2.0], [-3.0, -2.0, -1.0]])
    m = collapse_metrics(l_tok, [2, 2, 2], [0, 1, 2]).metrics
    assert m["retrieval_accuracy"] == 1.0
    assert m["retrieval_chance_level"] == pytest.approx(1 / 3)
    assert m["mi_estimate"] > 0
    assert all(np.isfinite(v) for v in m.values())


def test_minus_infinity_off_diagonal_is_allowed() -> None:
    l_tok = np.array([[-1.0, -np.inf], [-np.inf, -2.0]])
    m = collapse_metrics(l_tok, [1, 1], [0, 1]).metrics
    assert m["mi_estimate"] == pytest.approx(math.log(2))  # perfectly identifiable -> upper bound
    assert m["retrieval_accuracy"] == 1.0


def test_bad_shapes_raise() -> None:
    with pytest.raises(ValueError):
        collapse_metrics(np.zeros(3), [1, 1, 1], [0, 0, 0])
    with pytest.raises(ValueError):
        collapse_metrics(np.zeros((2, 2)), [1], [0, 1])
    with pytest.raises(ValueError):
        collapse_metrics(np.zeros((2, 2)), [1, 1], [0, 2])
