"""Property tests of the estimators on random log-prob matrices (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_diagnostics.estimators import collapse_metrics


@st.composite
def matrices(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    n_cols = draw(st.integers(2, 9))
    n_rows = draw(st.integers(1, 20))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, size=n_rows)
    l_sum = -rng.gamma(2.0, 2.0, size=(n_rows, n_cols)) * lengths[:, None]
    cols = rng.integers(0, n_cols, size=n_rows)
    # a few duplicated prompts: signature = column index folded onto a smaller alphabet
    fold = draw(st.integers(1, n_cols))
    sigs = [j % fold for j in range(n_cols)]
    return l_sum, lengths, cols, sigs


@settings(max_examples=150, deadline=None)
@given(matrices())
def test_bounds_and_identities(data: tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]) -> None:
    l_sum, lengths, cols, sigs = data
    m = collapse_metrics(l_sum, lengths, cols, sigs).metrics
    n = l_sum.shape[1]
    # logsumexp_j >= the matched entry, so each row's (matched - marginal) <= log N
    assert m["mi_estimate"] <= math.log(n) + 1e-9
    assert m["mi_seq_estimate"] <= math.log(n) + 1e-9
    assert m["mi_estimate"] == pytest.approx(m["reasoning_entropy_est"] - m["conditional_entropy_est"], abs=1e-9)
    assert m["mi_seq_estimate"] == pytest.approx(m["reasoning_entropy_seq_est"] - m["conditional_entropy_seq_est"], abs=1e-6)
    assert 1 / n - 1e-12 <= m["retrieval_chance_level"] <= 1.0
    for k in ("", "@2", "@4", "@8"):
        acc = m[f"retrieval_accuracy{k}"]
        assert 0.0 <= acc <= 1.0
        assert m[f"retrieval_above_chance{k}"] == pytest.approx(acc - m[f"retrieval_chance_level{k}"])
    assert m["retrieval_accuracy"] <= m["retrieval_accuracy@2"] + 1e-12 <= m["retrieval_accuracy@4"] + 2e-12
    assert m["marginal_std"] >= 0 and all(np.isfinite(v) for v in m.values())


@settings(max_examples=100, deadline=None)
@given(matrices(), st.integers(0, 2**31 - 1))
def test_column_permutation_does_not_change_anything(data: tuple[np.ndarray, np.ndarray, np.ndarray, list[int]], seed: int) -> None:
    l_sum, lengths, cols, sigs = data
    perm = np.random.default_rng(seed).permutation(l_sum.shape[1])  # new column k = old column perm[k]
    inverse = np.argsort(perm)
    a = collapse_metrics(l_sum, lengths, cols, sigs).metrics
    b = collapse_metrics(l_sum[:, perm], lengths, inverse[cols], [sigs[p] for p in perm]).metrics
    # includes retrieval: tie credit does not depend on column order
    for key in a:
        assert b[key] == pytest.approx(a[key], abs=1e-9), key


@settings(max_examples=100, deadline=None)
@given(matrices(), st.floats(-20, 20))
def test_row_offsets_cancel_in_mi_and_retrieval(data: tuple[np.ndarray, np.ndarray, np.ndarray, list[int]], offset: float) -> None:
    """Adding a per-row constant (e.g. a reasoning that is a-priori unlikely) changes the entropies
    but neither MI nor retrieval: both compare a row's columns with each other."""
    l_sum, lengths, cols, sigs = data
    shift = offset * np.arange(1, l_sum.shape[0] + 1)[:, None] * lengths[:, None]  # per-token offset = offset * (r+1)
    a = collapse_metrics(l_sum, lengths, cols, sigs).metrics
    b = collapse_metrics(l_sum + shift, lengths, cols, sigs).metrics
    assert b["mi_estimate"] == pytest.approx(a["mi_estimate"], abs=1e-7)
    assert b["mi_seq_estimate"] == pytest.approx(a["mi_seq_estimate"], abs=1e-6)
    assert b["retrieval_accuracy"] == pytest.approx(a["retrieval_accuracy"], abs=1e-12)
