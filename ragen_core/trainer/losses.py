"""Policy-optimisation maths shared by every algorithm (spec sections 5.9 and 8.5-8.7).

Pure functions over ``torch`` tensors shaped ``[batch, tokens]`` with a float/bool ``mask``
that is 1 on trained (generated) tokens. Every function states its formula in the docstring
and is covered by hand-computed golden tests in ``tests/test_losses.py``.

Contents:

* masked statistics: :func:`masked_sum`, :func:`masked_mean`, :func:`masked_var`,
  :func:`masked_whiten`, re-exported from their home :mod:`ragen_core.masked`;
* :func:`agg_loss`: the four loss aggregation modes (``token-mean`` optionally normalised by a
  global token count, which fixes limitation L9);
* :func:`policy_loss`: clipped surrogate with asymmetric clip and dual clip (:func:`clipped_token_loss`
  per token, then :func:`aggregate_policy_loss`, which also serves an algorithm's own token loss);
* :func:`kl_penalty`: KL estimators k1/abs/k2/k3 and the straight-through ``+`` variants;
* :func:`entropy_from_logits`, :func:`value_loss`, :func:`kl_in_reward`;
* :func:`normalize_scores`: the per-group reward normalisation of section 5.9.

Design notes: empty masks never produce NaN (the normaliser falls back to 1 so the loss is 0);
metrics are returned as detached python floats so callers can log them directly.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from ragen_core.errors import ConfigError
from ragen_core.masked import masked_mean, masked_sum, masked_var, masked_whiten
from ragen_core.masked import safe_denominator as _safe_denominator

if TYPE_CHECKING:
    import torch

__all__ = [
    "AGG_MODES",
    "KL_KINDS",
    "REWARD_NORM_METHODS",
    "POLICY_LOSS_FLAGS",
    "agg_loss",
    "aggregate_policy_loss",
    "clipped_token_loss",
    "entropy_from_logits",
    "kl_in_reward",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "normalize_scores",
    "policy_loss",
    "value_loss",
]

AGG_MODES = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
"""Loss aggregation modes accepted by :func:`agg_loss`."""

_KL_BASE = {
    "kl": "k1",
    "k1": "k1",
    "abs": "abs",
    "mse": "k2",
    "k2": "k2",
    "low_var_kl": "k3",
    "k3": "k3",
}
KL_KINDS = tuple(sorted(set(_KL_BASE) | {f"{k}+" for k in _KL_BASE}))
"""KL estimator names accepted by :func:`kl_penalty` (exact spelling; ``low-var-kl`` is not one)."""

REWARD_NORM_METHODS = ("identity", "mean", "mean_std", "asym_clip")
"""Reward normalisation methods of spec 5.9."""

LOG_RATIO_CLAMP = 20.0
"""Log-ratios are clamped to ``[-20, 20]`` before ``exp`` (spec 8.1)."""


# ---------------------------------------------------------------------------------------------
# aggregation


class AggNorms(TypedDict, total=False):
    """Keyword arguments of :func:`agg_loss` that :func:`minibatch_normalisers` may set."""

    global_token_count: float
    global_seq_count: float
    norm_constant: float


def minibatch_normalisers(mode: str, mask: torch.Tensor, *, global_norm: bool, norm_constant: float | None = None,
                          row_weights: torch.Tensor | None = None) -> AggNorms:
    """The :func:`agg_loss` keyword arguments that normalise each micro-batch by its whole mini-batch.

    ``mask`` is the mini-batch's ``[B, L-1]`` response mask. ``seq-mean-token-sum-norm`` always
    gets its constant (``norm_constant``, else the padded width); with ``global_norm`` the other
    modes get the mini-batch's token or sequence count, so summed micro-batch losses equal the
    mini-batch loss. With ``row_weights`` (``[B]``) the sequence count is their sum over rows that
    have tokens. An empty dict means every micro-batch normalises itself: average the micro-batch
    losses instead of summing them.
    """
    if mode == "seq-mean-token-sum-norm":  # None, not 0, means "none given" (agg_loss refuses a 0)
        return {"norm_constant": float(norm_constant) if norm_constant is not None else float(mask.shape[-1])}
    if not global_norm:
        return {}
    if mode == "token-mean":
        return {"global_token_count": float(mask.sum())}
    has = (mask.sum(1) > 0).double()
    return {"global_seq_count": float((has if row_weights is None else has * row_weights.double()).sum())}


def agg_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    global_token_count: float | torch.Tensor | None = None,
    global_seq_count: float | torch.Tensor | None = None,
    norm_constant: float | None = None,
    row_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss ``L[i, t]`` into a scalar (spec 8.5).

    ============================  ==================================================================
    ``token-mean``                ``Σ_{i,t} L·m / N`` with ``N = Σ_{i,t} m``, or ``N`` =
                                  ``global_token_count`` (the masked-token count of the whole
                                  mini-batch: summing micro-batch losses then gives the exact
                                  mini-batch token mean — fix for L9; do *not* also divide by the
                                  gradient-accumulation factor).
    ``seq-mean-token-mean``       ``Σ_{i∈S} (Σ_t L·m / Σ_t m) / |S|``, ``S`` = rows with any mask.
    ``seq-mean-token-sum``        ``Σ_{i∈S} (Σ_t L·m) / |S|``.
    ``seq-mean-token-sum-norm``   ``Σ_{i,t} L·m / L_max``; ``L_max`` = padded length
                                  ``loss_mat.shape[-1]`` or ``norm_constant`` (Dr.GRPO's constant
                                  normaliser, L10).
    ============================  ==================================================================

    ``global_seq_count`` replaces ``|S|`` in the two ``seq-mean`` modes in the same way as
    ``global_token_count`` does for ``token-mean``. Empty masks give 0.

    ``row_weights`` (``[B]``, seq-mean modes only) weighs each row's sequence loss, and ``|S|``
    becomes the weights' sum over ``S``: with one row per turn and weight ``1/turns`` per row, each
    *episode* counts as one sequence (``optim.seq_mean_unit=episode``). Other modes ignore it.

    Raises:
        ConfigError: unknown ``mode``.
    """
    import torch

    m = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        denom = (
            m.sum()
            if global_token_count is None
            else torch.as_tensor(global_token_count, dtype=loss_mat.dtype)
        )
        return masked_sum(loss_mat, m) / _safe_denominator(denom)
    if mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
        tokens_per_seq = m.sum(dim=-1)
        seq_sum = masked_sum(loss_mat, m, dim=-1)
        seq_loss = (
            seq_sum / _safe_denominator(tokens_per_seq)
            if mode == "seq-mean-token-mean"
            else seq_sum
        )
        has_tokens = (tokens_per_seq > 0).to(loss_mat.dtype)
        if row_weights is not None:
            has_tokens = has_tokens * row_weights.to(device=loss_mat.device, dtype=loss_mat.dtype)
        n_seq = (
            has_tokens.sum()
            if global_seq_count is None
            else torch.as_tensor(global_seq_count, dtype=loss_mat.dtype)
        )
        return (seq_loss * has_tokens).sum() / _safe_denominator(n_seq)
    if mode == "seq-mean-token-sum-norm":
        l_max = (
            float(norm_constant)
            if norm_constant is not None
            else float(loss_mat.shape[-1])
        )
        if not math.isfinite(l_max) or l_max <= 0:
            raise ConfigError(
                f"seq-mean-token-sum-norm needs a positive normaliser, got {l_max}"
            )
        return masked_sum(loss_mat, m) / l_max
    raise ConfigError(
        f"unknown loss_agg_mode {mode!r}", [f"choose one of: {', '.join(AGG_MODES)}"]
    )


# ---------------------------------------------------------------------------------------------
# actor


def clipped_token_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_c: float = 3.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token clipped PPO surrogate with asymmetric and dual clipping (spec 8.5), before
    aggregation.

    Per token, with ``ρ = exp(clamp(log π − log π_old, −20, 20))``::

        L1 = −A·ρ
        L2 = −A·clip(ρ, 1 − clip_low, 1 + clip_high)
        Lc = max(L1, L2)
        L  = min(Lc, −A·clip_c)   if A < 0      (dual clip)
        L  = Lc                   if A ≥ 0

    Returns:
        ``(L, flags)``: ``L`` shaped like ``log_probs``; ``flags`` per token (bool):
        ``pg_clipfrac`` where ``L2 > L1``, ``pg_clipfrac_lower`` where ``A < 0`` and
        ``Lc > −A·clip_c`` (dual clip active).

    Raises:
        ConfigError: ``clip_c ≤ 1`` (the dual clip would cut below the standard clip).
    """
    import torch

    if clip_c <= 1.0:
        raise ConfigError(f"clip_ratio_c must be greater than 1, got {clip_c}")
    ratio = torch.exp(torch.clamp(log_probs - old_log_probs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(loss1, loss2)
    loss3 = -advantages * clip_c
    negative = advantages < 0
    per_token = torch.where(negative, torch.minimum(clipped, loss3), clipped)
    return per_token, {"pg_clipfrac": loss2 > loss1, "pg_clipfrac_lower": negative & (clipped > loss3)}


POLICY_LOSS_FLAGS = ("pg_clipfrac", "pg_clipfrac_lower")
"""Per-token flags a token loss may return; their masked means are logged as ``actor/<name>`` (0 when left out)."""


def aggregate_policy_loss(
    per_token: torch.Tensor,
    flags: dict[str, torch.Tensor],
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    mask: torch.Tensor,
    agg_mode: str = "token-mean",
    *,
    global_token_count: float | torch.Tensor | None = None,
    global_seq_count: float | torch.Tensor | None = None,
    norm_constant: float | None = None,
    row_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``agg_loss(per_token, mask, agg_mode, ...)`` and the policy metrics (masked means,
    floats): ``pg_loss`` (the aggregated loss), each of :data:`POLICY_LOSS_FLAGS` (0 when not in
    ``flags``), and ``ppo_kl``, the mean of ``−clamp(log π − log π_old, −20, 20)``."""
    import torch

    loss = agg_loss(per_token, mask, agg_mode, global_token_count=global_token_count, global_seq_count=global_seq_count,
                    norm_constant=norm_constant, row_weights=row_weights)
    with torch.no_grad():
        fm = mask.to(log_probs.dtype)
        log_ratio = torch.clamp(log_probs - old_log_probs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        metrics = {"pg_loss": float(loss.detach())}
        for name in POLICY_LOSS_FLAGS:
            metrics[name] = float(masked_mean(flags[name].to(fm.dtype), fm)) if name in flags else 0.0
        metrics["ppo_kl"] = float(masked_mean(-log_ratio, fm))
    return loss, metrics


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_c: float = 3.0,
    agg_mode: str = "token-mean",
    global_token_count: float | torch.Tensor | None = None,
    global_seq_count: float | torch.Tensor | None = None,
    norm_constant: float | None = None,
    row_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PPO surrogate (spec 8.5): :func:`clipped_token_loss` aggregated by
    :func:`aggregate_policy_loss` (``agg_loss(L, mask, agg_mode, row_weights=...)``).

    Returns:
        ``(loss, metrics)``; metrics (masked means, floats): ``pg_loss``; ``pg_clipfrac`` —
        fraction of tokens with ``L2 > L1``; ``pg_clipfrac_lower`` — fraction with ``A < 0`` and
        ``Lc > −A·clip_c`` (dual clip active); ``ppo_kl`` — mean of ``−(log π − log π_old)``.

    Raises:
        ConfigError: ``clip_c ≤ 1`` (the dual clip would cut below the standard clip).
    """
    per_token, flags = clipped_token_loss(log_probs, old_log_probs, advantages, clip_low=clip_low, clip_high=clip_high, clip_c=clip_c)
    return aggregate_policy_loss(per_token, flags, log_probs, old_log_probs, mask, agg_mode, global_token_count=global_token_count,
                                 global_seq_count=global_seq_count, norm_constant=norm_constant, row_weights=row_weights)


def kl_penalty(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kind: str
) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference (spec 8.6).

    With ``d = log π − log π_ref``:

    * ``k1`` / ``kl``: ``d``
    * ``abs``: ``|d|``
    * ``k2`` / ``mse``: ``½ d²``
    * ``k3`` / ``low_var_kl``: ``clamp(e^x − x − 1, −10, 10)`` with ``x = clamp(−d, −20, 20)``
    * ``<base>+`` (e.g. ``k3+``): straight-through — the forward value of ``<base>``, the
      gradient of ``k2`` (``∂/∂θ = d · ∂d/∂θ``): ``k2 + (base − k2).detach()``.

    Raises:
        ConfigError: unknown name (e.g. ``low-var-kl`` with hyphens).
    """
    import torch

    straight_through = kind.endswith("+")
    base = _KL_BASE.get(kind[:-1] if straight_through else kind)
    if base is None:
        raise ConfigError(
            f"unknown KL estimator {kind!r}",
            [f"choose one of: {', '.join(KL_KINDS)}"],
        )
    d = log_probs - ref_log_probs
    if base == "k1":
        value = d
    elif base == "abs":
        value = d.abs()
    elif base == "k2":
        value = 0.5 * d.square()
    else:
        x = torch.clamp(-d, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        value = torch.clamp(torch.exp(x) - x - 1.0, -10.0, 10.0)
    if not straight_through:
        return value
    k2 = 0.5 * d.square()
    return k2 + (value - k2).detach()


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary entropy ``H = −Σ_v p_v log p_v`` over the last dimension.

    Computed from ``log_softmax`` (stable for large logits); vocabulary entries with
    ``p = 0`` (e.g. ``-inf`` logits) contribute exactly 0 instead of ``0·(−inf) = NaN``.
    Returns a tensor shaped ``logits.shape[:-1]``.
    """
    import torch

    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    return -(p * log_p.masked_fill(p == 0, 0.0)).sum(dim=-1)


# ---------------------------------------------------------------------------------------------
# critic


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float = 0.5,
    *,
    agg_mode: str = "token-mean",
    global_token_count: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss (spec 8.7), aggregated ``token-mean`` over the mask::

        V_c  = clip(V, V_old − c, V_old + c)
        loss = ½ · agg( max((V − R)², (V_c − R)²) )

    Returns:
        ``(loss, metrics)`` with ``vf_loss`` and ``vf_clipfrac`` (fraction of masked tokens where
        the clipped term is strictly larger).
    """
    import torch

    clipped_values = old_values + torch.clamp(
        values - old_values, -cliprange, cliprange
    )
    err1 = (values - returns) ** 2
    err2 = (clipped_values - returns) ** 2
    loss = 0.5 * agg_loss(
        torch.maximum(err1, err2), mask, agg_mode, global_token_count=global_token_count
    )
    with torch.no_grad():
        fm = mask.to(values.dtype)
        metrics = {
            "vf_loss": float(loss.detach()),
            "vf_clipfrac": float(masked_mean((err2 > err1).to(fm.dtype), fm)),
        }
    return loss, metrics


# ---------------------------------------------------------------------------------------------
# rewards


def kl_in_reward(
    token_rewards: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    kind: str = "k1",
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL placed in the reward (spec 8.6, fix for L6): ``r_t ← r_t − β · KL_t · m_t``.

    ``log_probs`` are the rollout (old) policy's. Returns the new rewards (input untouched)
    and metrics ``kl_in_reward`` (masked mean KL) and ``kl_coef`` (β).
    """
    import torch

    with torch.no_grad():
        kl = kl_penalty(log_probs, ref_log_probs, kind) * mask.to(log_probs.dtype)
        rewards = token_rewards - beta * kl
        metrics = {"kl_in_reward": float(masked_mean(kl, mask)), "kl_coef": float(beta)}
    return rewards, metrics


def normalize_scores(
    scores: torch.Tensor | Sequence[float],
    groups: Sequence[Hashable] | torch.Tensor,
    method: str = "identity",
    *,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Per-group normalisation of episode scores (reward + penalty), spec 5.9.

    ``groups`` holds one key per sample: the group id (``state`` grouping), the env tag
    (``inductive``) or one constant key (``batch``). Normalisation is applied **only if there
    are fewer groups than samples**; otherwise the scores are returned unchanged. Per group:

    * ``identity``: ``x``
    * ``mean``: ``x − mean(x)``
    * ``mean_std``: ``(x − mean) / (std + eps)``, unbiased std; a group with ``std ≤ eps``
      becomes all 0 (this includes single-member groups, whose unbiased std is undefined)
    * ``asym_clip``: ``mean_std`` then clipped to ``[−1, 3]``

    Returns:
        A new float tensor shaped like ``scores``.

    Raises:
        ConfigError: unknown method; ValueError: length mismatch.
    """
    import torch

    if method not in REWARD_NORM_METHODS:
        raise ConfigError(
            f"unknown reward normalisation method {method!r}",
            [f"choose one of: {', '.join(REWARD_NORM_METHODS)}"],
        )
    if isinstance(scores, torch.Tensor):
        x = (
            scores.detach().clone()
            if scores.is_floating_point()
            else scores.to(torch.float32)
        )
    else:
        x = torch.tensor(list(scores), dtype=torch.float32)
    keys: list[Any] = (
        groups.tolist() if isinstance(groups, torch.Tensor) else list(groups)
    )
    if len(keys) != x.shape[0]:
        raise ValueError(f"got {x.shape[0]} scores but {len(keys)} group keys")
    index: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        index.setdefault(key, []).append(i)
    if method == "identity" or len(index) >= x.shape[0]:
        return x
    out = x.clone()
    for members in index.values():
        idx = torch.tensor(members, dtype=torch.long)
        g = x[idx]
        centred = g - g.mean()
        if method == "mean":
            out[idx] = centred
            continue
        std = g.std(unbiased=True) if g.numel() > 1 else g.new_zeros(())
        normed = torch.zeros_like(g) if float(std) <= eps else centred / (std + eps)
        out[idx] = normed.clamp(-1.0, 3.0) if method == "asym_clip" else normed
    return out
