"""Acceptance tests for the pure selection function (spec 9.3, 9.9 cases 6-13, 18.4)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_filters.selection import select_groups, select_with_reasons


def topp(scores, value, mode="linear", include_zero=True, **kw):
    return select_groups(scores, strategy="top_p", value=value, prob_mode=mode, include_zero=include_zero, **kw)


# --- spec 9.9 --------------------------------------------------------------------------------


def test_case6_softmax_top_p_uniform_scores_keeps_two_of_three():
    assert topp([1, 1, 1], 0.6, "softmax") == [0, 1]


def test_case7_linear_top_p_threshold_5_99():
    assert topp([4, 3, 2, 1], 0.6) == [0, 1]
    # 4 alone is below 5.99, 4 + 3 = 7 reaches it.
    assert select_with_reasons([4, 3, 2, 1], strategy="top_p", value=0.6).reasons == {
        2: "below top-p mass",
        3: "below top-p mass",
    }


def test_case8_linear_top_p_all_zero_is_empty():
    assert topp([0, 0, 0], 0.9) == []


@pytest.mark.parametrize(
    "scores,expected",
    [([4, 2, 0, 0], [0, 1, 2, 3]), ([0, 0, 0], [0, 1, 2]), ([1, 3, 2], [0, 1, 2])],
)
def test_case9_no_filter_keeps_all_in_original_order(scores, expected):
    assert topp(scores, 1.0, "linear", include_zero=True) == expected


@pytest.mark.parametrize(
    "scores,value,expected",
    [([10, 1, 0, 0], 0.9, [0]), ([4, 2, 0, 0], 0.9, [0, 1]), ([1, 1, 1, 0], 0.6, [0, 1])],
)
def test_case10_softmax_top_p_without_zeros(scores, value, expected):
    assert topp(scores, value, "softmax", include_zero=False) == expected


@pytest.mark.parametrize(
    "scores,expected",
    [([10, 1, 0, 0], [0]), ([4, 2, 0, 0], [0, 1]), ([3, 1, 1, 0], [0, 1, 2])],
)
def test_case11_linear_top_p_without_zeros(scores, expected):
    assert topp(scores, 0.9, "linear", include_zero=False, selection_eps=0.01) == expected


def test_case12_top_k_counts_configured_groups_not_candidates():
    # G0 [1.0, 2.0] std 0.707, G1 [5, 5] std 0, G2 [10, 20] std 7.07, G3 [0, 0] std 0.
    stds = [math.sqrt(0.5), 0.0, math.sqrt(50.0), 0.0]
    # (b) k = int(0.5 * 4) = 2, capped at the 2 non-zero candidates: G0 and G2 both stay.
    assert select_groups(stds, strategy="top_k", value=0.5, include_zero=False) == [0, 2]
    # The old script's semantics (k over non-zero candidates) is num_groups = #candidates:
    assert select_groups(stds, strategy="top_k", value=0.5, include_zero=False, num_groups=2) == [2]
    # (a) "lower ratio" 0.5 with G0 = [1.0, 1.1]: smallest, zeros ignored.
    stds_a = [math.sqrt(0.005), 0.0, math.sqrt(50.0), 0.0]
    assert select_groups(stds_a, strategy="top_k", value=0.5, largest=False, include_zero=False) == [0, 2]
    assert select_groups(
        stds_a, strategy="top_k", value=0.5, largest=False, include_zero=False, num_groups=2
    ) == [0]


def test_case13_pipeline_figure_linear_top_p():
    assert topp([9, 1, 5], 0.9) == [0, 2]


# --- spec 18.4 -------------------------------------------------------------------------------


def test_18_4_softmax_sokoban_scale_keeps_two():
    assert topp([5, 4, 0, 0, 0, 0, 0, 0], 0.9, "softmax") == [0, 1]


def test_18_4_softmax_binary_rewards_keeps_seven():
    assert topp([0.52, 0.5, 0.48, 0.35, 0, 0, 0, 0], 0.9, "softmax") == [0, 1, 2, 3, 4, 5, 6]


def test_18_4_linear_binary_rewards_keeps_four():
    assert topp([0.52, 0.5, 0.48, 0.35, 0, 0, 0, 0], 0.9, "linear") == [0, 1, 2, 3]


def test_18_4_top_k_quarter_of_sixteen_is_four():
    scores = [float(i) for i in range(16)]
    assert select_groups(scores, strategy="top_k", value=0.25) == [12, 13, 14, 15]


def test_18_4_min_p_largest():
    assert select_groups([4, 1, 0.3, 0], strategy="min_p", value=0.1) == [0, 1]


# --- further rules of 9.3 --------------------------------------------------------------------


def test_linear_top_p_tiny_total_mass_is_empty():
    # 8 groups x std 0.0013 at 0.9: 0.9 * 0.0104 = 0.00936 <= eps ⇒ threshold <= 0 ⇒ empty prefix.
    assert topp([0.0013] * 8, 0.9) == []
    assert topp([0.0013] * 8, 0.9, selection_eps=0.0) != []


def test_linear_top_p_negative_scores_unreachable():
    result = select_with_reasons([-1.0, -2.0], strategy="top_p", value=0.5, selection_eps=0.0)
    # threshold 0.5 * -3 = -1.5; accumulated 0 >= -1.5 immediately ⇒ empty prefix, not unreachable.
    assert result.kept == []
    mixed = select_with_reasons([2.0, -1.0, 3.0], strategy="top_p", value=0.9, selection_eps=0.0)
    # sum 4 ⇒ threshold 3.6: 3 then 2 ⇒ 5 >= 3.6 ⇒ [0, 2]
    assert mixed.kept == [0, 2]
    unreachable = select_with_reasons([1.0, -5.0, 10.0], strategy="top_p", value=0.9, selection_eps=0.0, largest=False)
    # smallest: sorted ascending -5 first ⇒ next score <= 0 stops at once; threshold 5.4 unreachable.
    assert unreachable.kept == []
    assert set(unreachable.reasons.values()) == {"threshold unreachable"}


def test_top_k_keeps_at_least_one_and_ties_prefer_lower_index():
    assert select_groups([1, 1, 1, 1], strategy="top_k", value=0.1) == [0]
    assert select_groups([2, 5, 5, 1], strategy="top_k", value=0.25) == [1]
    assert select_groups([2, 5, 5, 1], strategy="top_k", value=0.5) == [1, 2]


def test_top_k_no_candidates_is_empty():
    assert select_groups([0, 0], strategy="top_k", value=0.5, include_zero=False) == []


def test_top_k_abs_and_smallest():
    assert select_groups([3, 1, 2, 0.5], strategy="top_k_abs", value=2) == [0, 2]
    assert select_groups([3, 1, 2, 0.5], strategy="top_k_abs", value=2, largest=False) == [1, 3]
    assert select_groups([3, 1, 2, 0.5], strategy="top_k_abs", value=10) == [0, 1, 2, 3]
    assert select_groups([3, 0, 2, 0.5], strategy="top_k", value=0.5, largest=False, include_zero=False) == [2, 3]


def test_min_p_smallest_and_zero_handling():
    # smallest: keep score <= min / (value + 1e-10) + 1e-10 ⇒ 1 / 0.4 = 2.5
    assert select_groups([1, 2, 3, 0], strategy="min_p", value=0.4, largest=False, include_zero=False) == [0, 1]
    # exactly on the cut: 1 / (0.5 + 1e-10) + 1e-10 is a hair below 2, so 2 is dropped (reference formula)
    assert select_groups([1, 2, 3, 0], strategy="min_p", value=0.5, largest=False, include_zero=False) == [0]
    # with zeros included the min is 0 ⇒ only zeros survive
    assert select_groups([1, 2, 3, 0], strategy="min_p", value=0.5, largest=False) == [3]
    # all-zero batch with include_zero: max 0 ⇒ threshold -1e-10 ⇒ keep all
    assert select_groups([0, 0], strategy="min_p", value=0.5) == [0, 1]


def test_softmax_smallest_prefers_low_scores():
    assert topp([5, 0.1, 4], 0.9, "softmax", largest=False) == [1]


def test_strategy_spellings_and_bad_input():
    assert select_groups([1, 2], strategy="TOP-K", value=0.5) == [1]
    with pytest.raises(ValueError, match="unknown selection strategy"):
        select_groups([1], strategy="best", value=1)
    with pytest.raises(ValueError, match="prob_mode"):
        topp([1, 2], 0.5, "cubic")


def test_non_finite_scores_are_never_candidates():
    result = select_with_reasons([float("nan"), 2.0, float("inf")], strategy="top_k_abs", value=3)
    assert result.kept == [1]
    assert result.reasons == {0: "non-finite score", 2: "non-finite score"}


def test_empty_scores():
    for strategy in ("top_p", "top_k", "top_k_abs", "min_p"):
        assert select_groups([], strategy=strategy, value=0.5) == []


# --- properties ------------------------------------------------------------------------------

scores_st = st.lists(
    st.one_of(st.just(0.0), st.floats(min_value=-20, max_value=20, allow_nan=False)), min_size=0, max_size=12
)
config_st = st.fixed_dictionaries(
    {
        "strategy": st.sampled_from(["top_p", "top_k", "top_k_abs", "min_p"]),
        "value": st.floats(min_value=0.0, max_value=1.5),
        "largest": st.booleans(),
        "include_zero": st.booleans(),
        "prob_mode": st.sampled_from(["linear", "softmax"]),
    }
)


@settings(max_examples=300, deadline=None)
@given(scores=scores_st, cfg=config_st)
def test_property_subset_sorted_deterministic_pure(scores, cfg):
    snapshot = list(scores)
    first = select_groups(scores, **cfg)
    assert scores == snapshot
    assert first == select_groups(scores, **cfg)
    assert first == sorted(set(first))
    assert all(0 <= i < len(scores) for i in first)
    if not cfg["include_zero"]:
        assert all(abs(scores[i]) > 1e-10 for i in first)
    result = select_with_reasons(scores, **cfg)
    assert set(result.kept) | set(result.reasons) == set(range(len(scores)))
    assert not set(result.kept) & set(result.reasons)


@settings(max_examples=200, deadline=None)
@given(scores=st.lists(st.floats(min_value=0.001, max_value=10), min_size=1, max_size=12))
def test_property_top_k_keeps_best_and_at_least_one(scores):
    kept = select_groups(scores, strategy="top_k", value=0.5)
    assert len(kept) == max(1, min(int(0.5 * len(scores)), len(scores)))
    dropped = [s for i, s in enumerate(scores) if i not in kept]
    assert not dropped or min(scores[i] for i in kept) >= max(dropped)
