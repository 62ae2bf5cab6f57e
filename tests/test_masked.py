"""Tests of ragen_core.masked beyond the golden values in tests/test_losses.py: constants are exact.

Whitening amplifies ``x − μ`` by up to ``1/sqrt(eps) = 1e4``, so a mean that float rounding
moves one ulp off a constant batch used to turn a signal-free batch into non-zero advantages.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.masked import masked_mean, masked_var, masked_whiten
from ragen_core.trainer import losses

CONSTANTS = st.one_of(
    st.sampled_from([0.7, 0.1, 2.1, 1e-8, 1e6, -0.3, -1e6, 0.0]),
    st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False),
)


@settings(max_examples=200, deadline=None)
@given(
    c=CONSTANTS,
    rows=st.integers(1, 40),
    cols=st.integers(1, 12),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_constant_masked_values_have_exact_mean_and_zero_whitening(c, rows, cols, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(rows, cols, generator=gen) < 0.7).to(dtype)
    mask[0, 0] = 1.0  # at least one masked value
    # masked-out positions hold unrelated values: they must not break the constant case
    values = torch.where(mask > 0, torch.tensor(c, dtype=dtype), torch.randn(rows, cols, generator=gen, dtype=dtype))
    c_exact = torch.tensor(c, dtype=dtype)
    assert torch.equal(masked_mean(values, mask), c_exact)
    assert torch.equal(masked_var(values, mask), torch.zeros((), dtype=dtype))
    assert torch.equal(masked_whiten(values, mask) * mask, torch.zeros_like(values))
    assert torch.equal(masked_whiten(values, mask, shift_mean=False) * mask, c_exact * mask)
    # per-row means: rows whose masked values are all c give c exactly
    row_mean = masked_mean(values, mask, dim=-1)
    has = mask.sum(dim=-1) > 0
    assert torch.equal(row_mean[has], c_exact.expand(int(has.sum())))
    assert torch.equal(row_mean[~has], torch.zeros(int((~has).sum()), dtype=dtype))


def test_constant_case_keeps_the_mean_gradient():
    # d mean / d x_i = m_i / Σ m = 1/3 on the three masked entries, 0 on the masked-out one
    x = torch.full((4,), 0.7, requires_grad=True)
    masked_mean(x, torch.tensor([1.0, 1.0, 1.0, 0.0])).backward()
    assert x.grad.tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0.0])


def test_non_constant_values_are_unchanged():
    # [1, 2, 2]: mean 5/3 exactly as Σ x·m / Σ m; one differing value disables the constant path
    x = torch.tensor([1.0, 2.0, 2.0, 9.0], dtype=torch.float64)
    m = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    assert float(masked_mean(x, m)) == 5 / 3
    # unbiased variance: (4/9 + 1/9 + 1/9) / 2 = 1/3
    assert float(masked_var(x, m)) == pytest.approx(1 / 3, abs=1e-15)  # 1e-15: float64 rounding


def test_trainer_losses_reexports_the_same_functions():
    assert losses.masked_mean is masked_mean
    assert losses.masked_var is masked_var
    assert losses.masked_whiten is masked_whiten
