"""Cross-scoring: log-probabilities of every reasoning sample under every prompt (spec 10.5).

``L_sum[r, j] = Σ_t log p(z_{r,t} | x_j, z_{r,<t})`` under a Hugging Face causal LM.

* :func:`naive_cross_score` is the reference cost: one teacher-forced pass over ``[x_j; z_r]``
  for every (prompt, reasoning) pair, N × R sequences.
* :func:`shared_prefix_cross_score` encodes each prompt once, copies its KV cache across a batch
  of reasoning samples and runs only the reasoning tokens (spec 17 L21). The first reasoning
  token's log-prob comes from the prompt pass's last logits. Prompts are long (hundreds of
  tokens) and reasonings short, so this removes most of the work; ``bench/bench_cross_scoring.py``
  measures the ratio.

Both return ``(L_sum [R, N] float64, lengths [R] int64)``; an empty reasoning scores 0 with
length 0 (the estimators exclude it). torch is imported inside the functions; the model's
train/eval mode is restored afterwards and no gradients are recorded.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

#: ``scorer(prompts, reasonings) -> (L_sum [R, N], lengths [R])``; what the diagnostic calls.
CrossScorer = Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], "tuple[np.ndarray, np.ndarray]"]


def _device_of(model: Any) -> Any:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return "cpu"


def _forward_kwargs(model: Any) -> tuple[str, bool]:
    """Name of the cache argument (``cache`` in transformers 5, else ``past_key_values``) and
    whether ``logits_to_keep`` is accepted (a PEFT wrapper is looked through)."""
    from ragen_core.models import cache_argument, forward_parameters

    return cache_argument(model) or "past_key_values", "logits_to_keep" in forward_parameters(model)


def _output_cache(out: Any) -> Any:
    cache = out.get("cache") if hasattr(out, "get") else None
    return cache if cache is not None else out.past_key_values


@contextmanager
def _scoring_mode(model: Any) -> Any:
    import torch

    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        if was_training:
            model.train()


def _pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """Right-padded id tensor and 0/1 mask (torch, CPU)."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def _gather_sum(logits: Any, targets: Any, mask: Any) -> Any:
    """Σ over masked positions of log_softmax(logits)[target]; logits [B, T, V] align with targets."""
    logp = logits.float().log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (logp * mask).sum(-1).double()


def _empty_result(prompts: Sequence[Sequence[int]], reasonings: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(z) for z in reasonings], dtype=np.int64)
    return np.zeros((len(reasonings), len(prompts)), dtype=np.float64), lengths


def _check(prompts: Sequence[Sequence[int]]) -> None:
    if any(len(x) == 0 for x in prompts):
        raise ValueError("every prompt needs at least one token (the log-prob of the first reasoning token is conditioned on it)")


def naive_cross_score(
    model: Any,
    prompts: Sequence[Sequence[int]],
    reasonings: Sequence[Sequence[int]],
    *,
    micro_batch_size: int = 16,
    pad_id: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Reference cross-scoring: a full forward pass over ``[x_j; z_r]`` per pair.

    Args:
        model: A transformers causal LM.
        prompts: Token ids of the N prompts.
        reasonings: Token ids of the R reasoning samples.
        micro_batch_size: Sequences per forward pass.
        pad_id: Id used for right padding (masked out, so any valid id works).

    Returns:
        ``(L_sum [R, N], lengths [R])``.
    """

    _check(prompts)
    out, lengths = _empty_result(prompts, reasonings)
    live = [r for r, z in enumerate(reasonings) if len(z) > 0]
    if not live or not prompts:
        return out, lengths
    device = _device_of(model)
    _, has_keep = _forward_kwargs(model)
    with _scoring_mode(model):
        for j, x in enumerate(prompts):
            p = len(x)
            for start in range(0, len(live), micro_batch_size):
                rows = live[start : start + micro_batch_size]
                ids, mask = _pad_batch([list(x) + list(reasonings[r]) for r in rows], pad_id)
                t_max = int(max(len(reasonings[r]) for r in rows))
                kwargs: dict[str, Any] = {"attention_mask": mask.to(device), "use_cache": False}
                if has_keep:  # same lm-head saving as the shared-prefix path: compare like with like
                    kwargs["logits_to_keep"] = t_max + 1
                logits = model(ids.to(device), **kwargs).logits
                logits = logits[:, -(t_max + 1) : -1] if has_keep else logits[:, p - 1 : p - 1 + t_max]
                # With logits_to_keep the kept window ends at the padded end, which is p + t_max.
                targets = ids[:, p : p + t_max].to(device)
                tmask = mask[:, p : p + t_max].to(device).float()
                sums = _gather_sum(logits, targets, tmask).cpu().numpy()
                out[rows, j] = sums
    return out, lengths


def shared_prefix_cross_score(
    model: Any,
    prompts: Sequence[Sequence[int]],
    reasonings: Sequence[Sequence[int]],
    *,
    micro_batch_size: int = 16,
    pad_id: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Cross-scoring with one prompt pass per column and a shared KV cache.

    For each prompt: run it once with ``use_cache=True``; keep the cache and the last position's
    logits. For each batch of reasoning samples: copy the cache, repeat it over the batch, run the
    reasoning tokens with positions ``P..P+T-1`` and an attention mask that covers the prompt and
    the real (unpadded) reasoning tokens.

    Args and return value as :func:`naive_cross_score`.
    """
    import torch

    _check(prompts)
    out, lengths = _empty_result(prompts, reasonings)
    live = [r for r, z in enumerate(reasonings) if len(z) > 0]
    if not live or not prompts:
        return out, lengths
    device = _device_of(model)
    cache_arg, has_keep = _forward_kwargs(model)
    # Sort rows by length so each micro-batch pads little; results are written back by row index.
    live.sort(key=lambda r: len(reasonings[r]))
    with _scoring_mode(model):
        for j, x in enumerate(prompts):
            p = len(x)
            x_ids = torch.as_tensor([list(x)], dtype=torch.long, device=device)
            kwargs: dict[str, Any] = {"use_cache": True}
            if has_keep:
                kwargs["logits_to_keep"] = 1
            prompt_out = model(x_ids, **kwargs)
            first_logits = prompt_out.logits[:, -1:]  # predicts the first reasoning token
            prompt_cache = _output_cache(prompt_out)
            for start in range(0, len(live), micro_batch_size):
                rows = live[start : start + micro_batch_size]
                ids, mask = _pad_batch([reasonings[r] for r in rows], pad_id)
                ids, mask = ids.to(device), mask.to(device)
                b, t = ids.shape
                cache = copy.deepcopy(prompt_cache)
                cache.batch_repeat_interleave(b)
                attn = torch.cat([torch.ones((b, p), dtype=torch.long, device=device), mask], dim=1)
                pos = torch.arange(p, p + t, device=device).unsqueeze(0).expand(b, -1)
                logits = model(ids, attention_mask=attn, position_ids=pos, use_cache=True, **{cache_arg: cache}).logits
                # logits[:, k] predicts token k+1; prepend the prompt's prediction of token 0.
                logits = torch.cat([first_logits.expand(b, -1, -1), logits[:, :-1]], dim=1)
                out[rows, j] = _gather_sum(logits, ids, mask.float()).cpu().numpy()
                del cache
    return out, lengths


def model_scorer(model: Any, *, method: str = "shared-prefix", micro_batch_size: int = 16, pad_id: int | None = None) -> CrossScorer:
    """A :data:`CrossScorer` bound to ``model`` using the named method."""
    fn = {"shared-prefix": shared_prefix_cross_score, "naive": naive_cross_score}[method]
    if pad_id is None:
        pad_id = int(getattr(getattr(model, "config", None), "pad_token_id", None) or 0)

    def score(prompts: Sequence[Sequence[int]], reasonings: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        return fn(model, prompts, reasonings, micro_batch_size=micro_batch_size, pad_id=pad_id)

    return score
