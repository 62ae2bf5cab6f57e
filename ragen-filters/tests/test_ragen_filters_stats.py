"""Per-group statistics by explicit id, including the robust flat-group rule."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_filters.stats import GroupIndex, group_stats, is_flat


def test_group_index_first_appearance_order():
    index = GroupIndex.from_ids([5, 2, 5, 9, 2])
    assert index.ids == [5, 2, 9]
    assert index.members == [[0, 2], [1, 4], [3]]
    assert len(GroupIndex.from_ids([])) == 0


def test_stats_hand_computed():
    index = GroupIndex.from_ids([0, 1, 0, 1, 1])
    stats = group_stats([1.0, 0.0, 3.0, 3.0, 6.0], index)
    assert stats.mean.tolist() == [2.0, 3.0]
    assert stats.max.tolist() == [3.0, 6.0]
    assert stats.sum.tolist() == [4.0, 9.0]
    assert stats.var.tolist() == [2.0, 9.0]  # unbiased: (1+1)/1, (9+0+9)/2
    assert np.allclose(stats.std, [math.sqrt(2.0), 3.0])
    biased = group_stats([1.0, 0.0, 3.0, 3.0, 6.0], index, ddof=0)
    assert np.allclose(biased.var, [1.0, 6.0])


def test_flat_groups_have_exactly_zero_spread():
    index = GroupIndex.from_ids([0, 0, 1, 1, 2, 2, 3])
    values = [0.1 + 0.2, 0.3, 1e9 + 0.1, 1e9 + 0.1 + 1e-9, 0.0, 1e-6, 4.0]
    stats = group_stats(values, index)
    assert stats.std[0] == 0.0 and stats.var[0] == 0.0 and stats.flat[0]
    assert stats.std[1] == 0.0 and stats.flat[1]  # relative noise at 1e9 scale
    assert stats.std[2] > 0 and not stats.flat[2]  # a real (small) difference survives
    assert stats.std[3] == 0.0 and stats.flat[3]  # singleton
    assert 0.1 + 0.2 != 0.3  # the noise this guards against is real


def test_non_finite_values_poison_only_their_group():
    index = GroupIndex.from_ids([0, 0, 1, 1])
    stats = group_stats([float("nan"), 1.0, 0.0, 2.0], index)
    assert math.isnan(stats.std[0]) and not stats.flat[0]
    assert stats.std[1] == math.sqrt(2.0)


def test_is_flat():
    assert is_flat(np.array([0.3, 0.1 + 0.2]))
    assert is_flat(np.array([7.0]))
    assert not is_flat(np.array([0.0, 1e-6]))
    assert not is_flat(np.array([1.0, float("inf")]))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.floats(min_value=-100, max_value=100, allow_nan=False)),
        min_size=1,
        max_size=30,
    )
)
def test_property_matches_numpy_per_group(pairs):
    ids = [g for g, _ in pairs]
    values = [v for _, v in pairs]
    index = GroupIndex.from_ids(ids)
    stats = group_stats(values, index)
    for g, members in enumerate(index.members):
        vals = np.asarray([values[i] for i in members])
        assert stats.mean[g] == np.float64(vals.mean()) or math.isclose(stats.mean[g], vals.mean(), abs_tol=1e-9)
        assert stats.max[g] == vals.max()
        if stats.flat[g]:
            assert stats.std[g] == 0.0
            assert vals.max() - vals.min() <= 1e-9 * max(1.0, np.abs(vals).max())
        else:
            assert math.isclose(stats.std[g], vals.std(ddof=1), rel_tol=1e-9, abs_tol=1e-12)
