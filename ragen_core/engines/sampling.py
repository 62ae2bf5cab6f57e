"""Next-token sampling for the HF engine: temperature, top-k, top-p, seeded, with log-probs.

Written for large vocabularies (Qwen's ~152k ids), where the obvious PyTorch calls dominate a
small model's decode step on CPU:

* ``torch.multinomial`` draws one exponential variate per vocabulary entry (~50 ms for 16 rows
  of 152k ids on one core); :func:`draw` inverts the cumulative distribution instead (one
  uniform per row, ~2.5 ms). The uniforms come from one stream per reply (:func:`row_uniforms`).
* top-p with a full sort of the vocabulary costs ~190 ms for those 16 rows; :func:`sample_next`
  finds the nucleus among the ``k`` largest logits, growing ``k`` until the nucleus fits.
* unusable ids beyond the tokenizer are cut off with a view, not a masked copy.
"""

from __future__ import annotations

import torch

from ragen_core.interfaces.engine import SamplingParams


def draw(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One id per row of ``probs`` (non-negative, rows need not sum to 1), by inverse CDF.

    ``uniforms`` holds one variate in ``[0, 1)`` per row (see :func:`row_uniforms`): row ``i``
    takes the first id whose cumulative mass exceeds ``uniforms[i]`` times the row's total, so
    a row's draw depends on its own probabilities and variate only. Ids with probability 0 are
    never drawn.
    """
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    u = uniforms.to(device=cdf.device, dtype=cdf.dtype).reshape(-1, 1) * total
    ids = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    # Rounding can put u at the very top (u == total): take the last id with mass instead.
    over = ids >= probs.shape[-1]
    if bool(over.any()):
        last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).to(torch.int8).argmax(dim=-1)
        ids = torch.where(over, last, ids)
    return ids


def row_uniforms(seeds: list[int], steps: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``[len(seeds), steps]`` uniforms in ``[0, 1)``: row ``i`` is a stream seeded by ``seeds[i]`` alone.

    The HF engine gives every reply its own stream (column ``t`` is the variate of its ``t``-th
    new token), so a reply never depends on the other rows of its batch, on its position, or on
    which rows already finished. The streams come from CPU ``torch.Generator`` s (the same values
    whatever the device) and cross to ``device`` in one copy.
    """
    gen = torch.Generator()
    rows = [torch.rand(steps, generator=gen.manual_seed(int(s))) for s in seeds]
    return torch.stack(rows).to(device) if rows else torch.empty((0, steps), device=device)


def _nucleus_mask(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """``x`` with every id outside the top-p nucleus set to -inf (the first id always stays).

    An id is dropped when the probability mass of the ids ranked before it already reaches
    ``top_p``. Searches the ``k`` largest logits, growing ``k`` 4x until every row's nucleus is
    inside them, so the vocabulary is never fully sorted in the usual case.
    """
    vocab = x.shape[-1]
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    k = min(vocab, 64)
    while True:
        vals, idx = torch.topk(x, k, dim=-1)
        probs = (vals - lse).exp()
        before = probs.cumsum(dim=-1) - probs
        if k == vocab or bool((before[:, -1] + probs[:, -1] >= top_p).all()):
            break
        k = min(vocab, 4 * k)
    keep = before < top_p
    out = torch.full_like(x, float("-inf"))
    return out.scatter(-1, idx, vals.masked_fill(~keep, float("-inf")))


def sample_next(
    logits: torch.Tensor, params: SamplingParams, uniforms: torch.Tensor | None, vocab_limit: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return ``(ids, log-probs of those ids)``.

    Greedy when ``do_sample`` is False or the temperature is 0. Otherwise the logits are divided
    by the temperature, restricted to the ``top_k`` best (``-1`` = off) and to the smallest set
    whose probability reaches ``top_p``; the returned log-probs are those of this final
    distribution. Ties in greedy decoding resolve to the lowest id. Ids at or beyond
    ``vocab_limit`` are never returned. ``uniforms``: one variate per row (see :func:`draw`);
    greedy decoding ignores it (may be None).
    """
    if vocab_limit is not None and vocab_limit < logits.shape[-1]:
        logits = logits[:, :vocab_limit]
    if not params.do_sample or params.temperature == 0:
        ids = logits.argmax(dim=-1)
        return ids, torch.log_softmax(logits, dim=-1).gather(-1, ids[:, None]).squeeze(-1)
    x = logits / params.temperature if params.temperature != 1.0 else logits
    if 0 < params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if params.top_p < 1.0:
        x = _nucleus_mask(x, params.top_p)
    # One pass of exp over the vocabulary: draw from the unnormalised weights, normalise only
    # the chosen ids' log-probs (the same value log_softmax gives).
    top = x.max(dim=-1, keepdim=True).values
    weights = (x - top).exp()
    if uniforms is None:
        raise ValueError("sample_next needs one uniform per row to sample (uniforms=None is for greedy decoding only)")
    ids = draw(weights, uniforms)
    logz = top + weights.sum(dim=-1, keepdim=True).log()
    return ids, (x.gather(-1, ids[:, None]) - logz).squeeze(-1)
