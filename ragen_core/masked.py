"""Masked tensor statistics: the stable API algorithm plugins build on.

Estimators and losses work on ``[batch, tokens]`` tensors where only some positions count (the
tokens the model generated). Every helper here takes ``values`` and a ``mask`` of the same shape
and reduces over the masked positions only. Plugins import them from this module
(``from ragen_core.masked import masked_whiten``); the signatures and the behaviour below change
only through the deprecation rules of the plugin API.

Conventions shared by every helper:

* **Mask semantics.** ``mask`` may be bool or float. It is cast to ``values``' dtype and used as a
  weight: ``Σ x·m / Σ m``. A 0/1 mask therefore selects positions; fractional weights are allowed
  and weigh positions. Values at positions with ``m = 0`` never affect a result, except through
  ``0 · inf = NaN`` (keep masked-out positions finite).
* **Shapes.** ``masked_sum`` and ``masked_mean`` reduce over ``dim`` (all elements when ``dim``
  is None). ``masked_var`` and ``masked_whiten`` always use the statistics of *all* masked
  elements; ``masked_whiten`` returns a tensor shaped like ``values``.
* **Empty masks.** A zero normaliser is replaced by 1 (:func:`safe_denominator`), so an empty
  mask gives a mean and variance of 0, never NaN.
* **Dtype.** Results keep ``values``' dtype; nothing is upcast, so float32 inputs give float32
  statistics with float32 rounding.
* **Constant inputs are exact.** When every masked value (along ``dim``) is the same number
  ``c``, :func:`masked_mean` returns ``c`` itself rather than ``Σ c·m / Σ m`` (which float
  rounding can move by an ulp). Hence :func:`masked_var` of a constant is exactly 0 and
  :func:`masked_whiten` of a constant is exactly 0 on the mask: whitening ``x − μ`` that is one
  ulp off by ``sqrt(eps)`` would otherwise turn rounding noise into advantages of order 1e-3 to 1
  on batches that carry no signal at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "row_sums",
    "safe_denominator",
]


def safe_denominator(value: torch.Tensor) -> torch.Tensor:
    """``value`` with zeros replaced by 1, so dividing an empty sum by it gives 0, never NaN."""
    import torch

    return torch.where(value != 0, value, torch.ones_like(value))


def row_sums(values: torch.Tensor) -> torch.Tensor:
    """``[B]`` float64 sum of each row, independent of where in the row the values sit.

    Each row is sorted before summing: two rows holding the same values (the same multiset) then
    reduce identical vectors and get bit-identical sums. A plain sum's order follows the
    positions, and from four equal values on, ``((v + v) + v) + v`` and ``(v + v) + (v + v)`` can
    round differently, which makes a flat group of episode scores look non-flat. Sorting costs
    O(T log T) per row, noticeable only for dense (KL-in-reward) rewards.
    """
    import torch

    return torch.sort(values.to(torch.float64), dim=-1).values.sum(dim=-1)


def masked_sum(
    values: torch.Tensor, mask: torch.Tensor, dim: int | None = None
) -> torch.Tensor:
    """``Σ values · mask`` over ``dim`` (all elements when ``dim`` is None)."""
    prod = values * mask.to(values.dtype)
    return prod.sum() if dim is None else prod.sum(dim=dim)


def masked_mean(
    values: torch.Tensor, mask: torch.Tensor, dim: int | None = None
) -> torch.Tensor:
    """``Σ x·m / Σ m`` over ``dim``; 0 where the mask is empty; exactly ``c`` if all masked x = c.

    Args:
        values: Tensor of values.
        mask: Same shape; bool or float weights.
        dim: Dimension to reduce; None reduces everything to a scalar.
    """
    import torch

    m = mask.to(values.dtype)
    on = m != 0
    mean = masked_sum(values, m, dim) / safe_denominator(
        m.sum() if dim is None else m.sum(dim=dim)
    )
    # The smallest and largest masked value coincide exactly when the masked values are one
    # constant c; an empty mask gives (inf, -inf) and keeps the 0 above. No host sync needed.
    # ``mean + (c − mean)`` is exactly c (mean is within an ulp of c, so the difference is exact)
    # and keeps the gradient of the plain mean for callers that differentiate.
    lo = values.masked_fill(~on, float("inf"))
    hi = values.masked_fill(~on, float("-inf"))
    lo, hi = (lo.amin(), hi.amax()) if dim is None else (lo.amin(dim), hi.amax(dim))
    return torch.where(lo == hi, mean + (lo - mean).detach(), mean)


def masked_var(
    values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True
) -> torch.Tensor:
    """Masked variance over all elements: ``Σ m (x − μ)² / (n − 1)`` with ``n = Σ m``.

    ``unbiased=False`` divides by ``n``. With ``n ≤ 1`` (unbiased) or ``n = 0`` the variance
    is defined as 0 instead of failing, so whitening a single token gives 0. Constant masked
    values give exactly 0 (see :func:`masked_mean`).
    """
    m = mask.to(values.dtype)
    mean = masked_mean(values, m)
    sq = masked_sum((values - mean) ** 2, m)
    n = m.sum()
    denom = n - 1 if unbiased else n
    return sq / safe_denominator(denom.clamp(min=0)) * (denom > 0).to(values.dtype)


def masked_whiten(
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    shift_mean: bool = True,
    eps: float = 1e-8,
) -> torch.Tensor:
    """``(x − μ_m) / sqrt(var_m + eps)`` with the masked mean and unbiased masked variance.

    With ``shift_mean=False`` the mean is added back after scaling. Values outside the mask
    are transformed too; callers multiply by the mask when they need zeros there. Masked values
    that are all equal whiten to exactly 0 (exactly ``c`` with ``shift_mean=False``).
    """
    import torch

    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    return whitened if shift_mean else whitened + mean
