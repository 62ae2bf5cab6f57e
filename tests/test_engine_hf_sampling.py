"""Sampling helpers of the HF engine: inverse-CDF draws and the top-k search for the nucleus."""

from __future__ import annotations

import pytest
import torch

from ragen_core.engines.sampling import _nucleus_mask, draw, row_uniforms, sample_next
from ragen_core.interfaces.engine import SamplingParams


def _sorted_nucleus(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """Reference: sort the whole row, drop an id once the mass before it reaches top_p."""
    sorted_x, order = torch.sort(x, dim=-1, descending=True)
    probs = torch.softmax(sorted_x, dim=-1)
    drop = (probs.cumsum(dim=-1) - probs) >= top_p
    return torch.full_like(x, float("-inf")).scatter(-1, order, sorted_x.masked_fill(drop, float("-inf")))


def _u(rows: int, seed: int) -> torch.Tensor:
    return torch.rand(rows, generator=torch.Generator().manual_seed(seed))


def test_draw_frequencies_follow_probs_and_skip_zero_mass():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(4000, 1)
    ids = draw(probs, _u(len(probs), 0))
    counts = torch.bincount(ids, minlength=5).double() / len(ids)
    assert counts[1] == 0 and counts[4] == 0
    # Binomial standard error with n=4000 is <= 0.008; allow 4 of them.
    for j, p in ((0, 0.5), (2, 0.3), (3, 0.2)):
        assert abs(float(counts[j]) - p) < 0.032


def test_draw_accepts_unnormalised_rows_and_is_seeded():
    probs = torch.tensor([[2.0, 6.0, 0.0], [0.0, 0.0, 5.0]])
    a = [draw(probs, _u(2, 3)).tolist() for _ in range(2)]
    assert a[0] == a[1]
    assert a[0][1] == 2  # the only id with mass
    draws = draw(probs[:1].repeat(3000, 1), _u(3000, 1))
    assert abs(float((draws == 1).double().mean()) - 0.75) < 0.04


def test_draw_at_the_top_of_the_cdf_takes_the_last_id_with_mass():
    probs = torch.tensor([[0.25, 0.75, 0.0, 0.0], [0.5, 0.0, 0.0, 0.5]])
    # u * total rounding up to the total (u = 1 stands in for it): the last id with mass.
    assert draw(probs, torch.ones(2)).tolist() == [1, 3]


def test_draw_row_depends_only_on_its_own_uniform():
    probs = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0], [0.1, 0.1, 0.8]])
    u = torch.tensor([0.1, 0.5, 0.95])
    together = draw(probs, u).tolist()
    assert together == [0, 0, 2]  # cdf rows [.2 .5 1], [.6 1 1], [.1 .2 1]
    assert [draw(probs[i : i + 1], u[i : i + 1]).item() for i in range(3)] == together


def test_row_uniforms_are_one_stream_per_seed():
    a = row_uniforms([5, 6, 7], steps=10)
    b = row_uniforms([7, 99], steps=10)
    assert a.shape == (3, 10) and a.dtype == torch.float32
    assert bool(((a >= 0) & (a < 1)).all())
    assert torch.equal(a[2], b[0])  # seed 7's stream, whatever the other rows
    assert not torch.equal(a[0], a[1])
    assert torch.equal(row_uniforms([7], steps=4)[0], a[2, :4])  # a longer budget only extends it


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99, 0.9999])
@pytest.mark.parametrize("scale", [0.05, 1.0, 8.0])
def test_nucleus_equals_full_sort_reference(top_p, scale):
    # Flat rows (scale 0.05) need thousands of ids for the nucleus: the top-k search must grow.
    x = torch.randn(3, 5000, generator=torch.Generator().manual_seed(int(top_p * 1e4) + int(scale * 10))) * scale
    got, ref = _nucleus_mask(x, top_p), _sorted_nucleus(x, top_p)
    assert torch.equal(torch.isfinite(got), torch.isfinite(ref))
    assert torch.equal(got[torch.isfinite(got)], x[torch.isfinite(ref)])


def test_nucleus_keeps_the_first_id_and_respects_top_k_masking():
    x = torch.tensor([[5.0, 1.0, float("-inf"), 0.5]])
    assert torch.isfinite(_nucleus_mask(x, 0.01)).tolist() == [[True, False, False, False]]
    assert torch.isfinite(_nucleus_mask(x, 0.9999)).tolist() == [[True, True, False, True]]


def test_sample_next_with_vocab_limit_never_returns_cut_ids():
    logits = torch.zeros(2000, 6)
    logits[:, 4:] = 100.0
    ids, lp = sample_next(logits, SamplingParams(), _u(2000, 0), vocab_limit=4)
    assert int(ids.max()) < 4
    # float32 log-softmax over 4 equal logits: within an ulp of -log 4; allclose's rtol 1e-5 is ~80 eps
    assert torch.allclose(lp, torch.full_like(lp, -torch.log(torch.tensor(4.0)).item()))
