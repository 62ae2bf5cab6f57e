"""Mutual-information, entropy and retrieval estimates from a cross-scoring matrix (spec 10.6).

Pure numpy. The input is ``L_sum[r, j] = log p(z_r | x_j)`` summed over the reasoning tokens of
sample ``r`` scored under prompt ``j`` (rows = reasoning samples, columns = prompts), the token
counts ``|z_r|``, the true column ``c(r)`` of every row and optional column signatures (columns
with equal signatures hold identical prompts and count as equivalent for retrieval).

Every metric exists per token (``ℓ^tok = ℓ^sum / max(|z|, 1)``; unsuffixed / ``_est``) and per
sequence (``ℓ^sum``; ``_seq``):

* ``matched_r = ℓ[r, c(r)]``, ``marginal_r = logsumexp_j ℓ[r, j] − log N``;
* MI = mean(matched) − mean(marginal), upper bound log N; H(Z|X) ≈ −mean(matched),
  H(Z) ≈ −mean(marginal);
* duplicate-aware top-1 / top-k retrieval accuracy and chance levels (always on ℓ^tok);
* z-scores against the population std of the marginal, plus its exponential moving average.

Ties: where several columns share the maximal score, retrieval credits the *expected* hit rate
of a uniformly random tie-break (exact, deterministic). Without ties this is the plain
argmax/top-k rule of the reference; with ties (an input-agnostic policy scores every column the
same) it gives chance instead of whatever column index happens to come first.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

#: Retrieval cut-offs reported as ``retrieval_accuracy@k``.
TOP_KS: tuple[int, ...] = (2, 4, 8)


@dataclass
class EmaTracker:
    """Exponential moving averages keyed by name (one tracker per sampling family).

    The first observation of a key initialises it; later ones apply
    ``ema <- decay * ema + (1 - decay) * value``.
    """

    decay: float = 0.9
    values: dict[str, float] = field(default_factory=dict)

    def update(self, key: str, value: float) -> float:
        """Fold ``value`` into the average named ``key`` and return the new average."""
        if key not in self.values:
            self.values[key] = float(value)
        else:
            self.values[key] = self.decay * self.values[key] + (1.0 - self.decay) * float(value)
        return self.values[key]


@dataclass
class CollapseEstimate:
    """Result of :func:`collapse_metrics`.

    Attributes:
        metrics: Metric name (no namespace) -> float. Always holds ``mi_defined`` (1.0 or 0.0).
        defined: Whether the estimates exist (at least two columns and one usable row).
        reason: Why they do not, when ``defined`` is False.
    """

    metrics: dict[str, float]
    defined: bool
    reason: str | None = None


def _logsumexp_rows(mat: np.ndarray) -> np.ndarray:
    peak = np.max(mat, axis=1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):
        return (peak + np.log(np.sum(np.exp(mat - peak), axis=1, keepdims=True)))[:, 0]


def _topk_hit(row: np.ndarray, good: np.ndarray, k: int) -> float:
    """Probability that a uniformly tie-broken top-``k`` of ``row`` contains a ``good`` column."""
    k = min(k, row.size)
    threshold = np.sort(row)[::-1][k - 1]
    above = row > threshold
    if np.any(good & above):
        return 1.0
    tied = row == threshold
    slots = k - int(np.sum(above))
    n_tied = int(np.sum(tied))
    n_good = int(np.sum(good & tied))
    if n_good == 0:
        return 0.0
    # P(at least one good among `slots` drawn from `n_tied` without replacement)
    return 1.0 - math.comb(n_tied - n_good, slots) / math.comb(n_tied, slots)


def _family(prefix_free: dict[str, float], matched: np.ndarray, marginal: np.ndarray, *, suffix: str,
            std_eps: float, ema: EmaTracker | None) -> None:
    """MI, entropies and z-scores for one log-prob scale; ``suffix`` is "" or "_seq"."""
    mi = float(np.mean(matched) - np.mean(marginal))
    diff = matched - marginal
    sigma = float(np.std(marginal))  # population (biased) std, as in the reference
    out = prefix_free
    out["mi_seq_estimate" if suffix else "mi_estimate"] = mi
    out[f"matched_log_prob_mean{suffix}"] = float(np.mean(matched))
    out[f"marginal_log_prob_mean{suffix}"] = float(np.mean(marginal))
    out["conditional_entropy_seq_est" if suffix else "conditional_entropy_est"] = -float(np.mean(matched))
    out["reasoning_entropy_seq_est" if suffix else "reasoning_entropy_est"] = -float(np.mean(marginal))
    out[f"marginal_std{suffix}"] = sigma
    out[f"mi_zscore{suffix}"] = float(np.mean(diff / (sigma + std_eps)))
    if ema is not None:
        smoothed = ema.update("seq" if suffix else "tok", sigma)
        out[f"marginal_std_ema{suffix}"] = smoothed
        out[f"mi_zscore_ema{suffix}"] = float(np.mean(diff / (smoothed + std_eps)))


def retrieval_metrics(l_tok: np.ndarray, true_cols: np.ndarray, sig_ids: np.ndarray) -> dict[str, float]:
    """Duplicate-aware retrieval accuracy and chance levels (spec 10.6) on per-token scores.

    Args:
        l_tok: Per-token log-probs, shape [R, N].
        true_cols: True column of each row, shape [R].
        sig_ids: Integer signature class of each column, shape [N].

    Returns:
        ``retrieval_accuracy``, ``retrieval_chance_level``, ``retrieval_above_chance`` and their
        ``@k`` variants for k in :data:`TOP_KS`.
    """
    n_rows, n_cols = l_tok.shape
    good = sig_ids[None, :] == sig_ids[true_cols][:, None]  # [R, N]
    chance = float(np.mean(np.sum(good, axis=1) / n_cols))
    top1 = float(np.mean([_topk_hit(l_tok[r], good[r], 1) for r in range(n_rows)]))
    out = {
        "retrieval_accuracy": top1,
        "retrieval_chance_level": chance,
        "retrieval_above_chance": top1 - chance,
    }
    for k in TOP_KS:
        k_eff = min(k, min(8, n_cols))
        acc = float(np.mean([_topk_hit(l_tok[r], good[r], k_eff) for r in range(n_rows)]))
        chance_k = min(1.0, chance * k_eff)
        out[f"retrieval_accuracy@{k}"] = acc
        out[f"retrieval_chance_level@{k}"] = chance_k
        out[f"retrieval_above_chance@{k}"] = acc - chance_k
    return out


def _signature_ids(signatures: Sequence[Hashable] | None, n_cols: int) -> np.ndarray:
    if signatures is None:
        return np.arange(n_cols)
    if len(signatures) != n_cols:
        raise ValueError(f"got {len(signatures)} column signatures for {n_cols} columns")
    index: dict[Hashable, int] = {}
    return np.array([index.setdefault(s, len(index)) for s in signatures], dtype=np.int64)


def undefined(reason: str, **counts: float) -> CollapseEstimate:
    """The explicit "no estimate" result: ``mi_defined = 0`` plus counts, never NaN."""
    metrics = {"mi_defined": 0.0, **{k: float(v) for k, v in counts.items()}}
    return CollapseEstimate(metrics=metrics, defined=False, reason=reason)


def collapse_metrics(
    l_sum: np.ndarray,
    lengths: Sequence[int] | np.ndarray,
    true_cols: Sequence[int] | np.ndarray,
    signatures: Sequence[Hashable] | None = None,
    *,
    std_eps: float = 1e-3,
    ema: EmaTracker | None = None,
) -> CollapseEstimate:
    """All metrics of spec 10.6 from a summed log-prob matrix.

    Rows with an empty reasoning (length 0), a NaN/+inf entry, or a matched score of -inf are
    excluded (counted in ``num_rows_excluded``); columns are kept, since each is a component of
    the prompt mixture even when none of its rows survived.

    Args:
        l_sum: ``[R, N]`` summed log-probs of reasoning ``r`` under prompt ``j``.
        lengths: ``[R]`` reasoning token counts.
        true_cols: ``[R]`` column index of the prompt each reasoning was sampled under.
        signatures: Optional hashable per column (e.g. the prompt token tuple); equal
            signatures are equivalent prompts for retrieval. None = all columns distinct.
        std_eps: Added to the marginal std in z-scores.
        ema: Moving-average state of this sampling family; updated in place when given.

    Returns:
        A :class:`CollapseEstimate`. With fewer than two columns or no usable rows it is
        undefined (``mi_defined`` 0.0 and a ``reason``) and ``ema`` is left untouched.
    """
    mat = np.asarray(l_sum, dtype=np.float64)
    if mat.ndim != 2:
        raise ValueError(f"l_sum must be 2-D [rows, columns], got shape {mat.shape}")
    n_rows, n_cols = mat.shape
    lens = np.asarray(lengths, dtype=np.int64).reshape(-1)
    cols = np.asarray(true_cols, dtype=np.int64).reshape(-1)
    if lens.size != n_rows or cols.size != n_rows:
        raise ValueError(f"lengths ({lens.size}) and true_cols ({cols.size}) must have {n_rows} entries")
    if n_rows and (cols.min() < 0 or cols.max() >= n_cols):
        raise ValueError(f"true_cols must lie in [0, {n_cols})")
    sig_ids = _signature_ids(signatures, n_cols)
    if n_cols < 2:
        return undefined(f"{n_cols} prompt column(s): MI needs at least 2", num_columns=n_cols, num_rows=n_rows)

    matched_sum = mat[np.arange(n_rows), cols] if n_rows else np.zeros(0)
    usable = (lens > 0) & ~np.any(np.isnan(mat) | (mat == np.inf), axis=1) & np.isfinite(matched_sum)
    excluded = int(n_rows - np.sum(usable))
    if not np.any(usable):
        return undefined("no reasoning sample with a finite score", num_columns=n_cols, num_rows=0,
                         num_rows_excluded=excluded)
    mat, lens, cols = mat[usable], lens[usable], cols[usable]
    l_tok = mat / np.maximum(lens, 1)[:, None]

    out: dict[str, float] = {
        "mi_defined": 1.0,
        "num_rows": float(mat.shape[0]),
        "num_columns": float(n_cols),
        "num_distinct_prompts": float(len(set(sig_ids.tolist()))),
        "num_rows_excluded": float(excluded),
        "mi_upper_bound": math.log(n_cols),
    }
    rows = np.arange(mat.shape[0])
    for scores, suffix in ((l_tok, ""), (mat, "_seq")):
        matched = scores[rows, cols]
        marginal = _logsumexp_rows(scores) - math.log(n_cols)
        _family(out, matched, marginal, suffix=suffix, std_eps=std_eps, ema=ema)
    out.update(retrieval_metrics(l_tok, cols, sig_ids))
    return CollapseEstimate(metrics=out, defined=True)
