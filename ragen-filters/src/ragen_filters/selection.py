"""Pure group selection: per-group scores in, kept group indices out (spec 9.3).

This module has no dependency beyond the standard library so it can be tested with hand-computed
numbers and reused by any trainer. :func:`select_groups` reproduces the reference's selection
rules exactly, including their sharp edges (linear top-p returns an empty set when the total mass
is zero; fractional top-k counts the *configured* number of groups, spec 17.2 L16/L17).

Ties are broken by the lower index first; the returned indices are always in ascending (original)
order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Strategy = Literal["top_p", "top_k", "top_k_abs", "min_p"]
ProbMode = Literal["linear", "softmax"]

#: A score with absolute value at or below this counts as zero (``include_zero`` / zero count).
ZERO_EPS = 1e-10

STRATEGIES: tuple[str, ...] = ("top_p", "top_k", "top_k_abs", "min_p")
PROB_MODES: tuple[str, ...] = ("linear", "softmax")

# Reasons a candidate may be left out; the filter classes map them onto dropped groups.
REASON_ZERO = "zero variance"
REASON_TOP_P = "below top-p mass"
REASON_TOP_K = "not in top-k"
REASON_MIN_P = "below min-p"
REASON_UNREACHABLE = "threshold unreachable"
REASON_NON_FINITE = "non-finite score"


@dataclass
class Selection:
    """Result of :func:`select_with_reasons`.

    Attributes:
        kept: Kept indices in ascending order.
        reasons: Index -> reason for every index that was not kept.
    """

    kept: list[int]
    reasons: dict[int, str] = field(default_factory=dict)


def is_zero(score: float) -> bool:
    """Return True when ``score`` counts as zero for ``include_zero`` (``|score| <= 1e-10``)."""
    return abs(score) <= ZERO_EPS


def normalize_strategy(strategy: str) -> str:
    """Accept ``top-p``/``TOP_P`` spellings and return the canonical ``top_p`` form."""
    canonical = strategy.strip().lower().replace("-", "_")
    if canonical not in STRATEGIES:
        raise ValueError(f"unknown selection strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    return canonical


def _ranked(indices: Sequence[int], scores: Sequence[float], largest: bool) -> list[int]:
    """Indices sorted best first; a stable sort keeps the lower index first among ties."""
    sign = -1.0 if largest else 1.0
    return sorted(indices, key=lambda i: sign * scores[i])


def _softmax(logits: Sequence[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


def _top_p(
    candidates: list[int],
    scores: Sequence[float],
    value: float,
    largest: bool,
    prob_mode: str,
    selection_eps: float,
) -> tuple[list[int], str]:
    if prob_mode == "softmax":
        sign = 1.0 if largest else -1.0
        probs = _softmax([sign * scores[i] for i in candidates])
        # Highest probability first; ties keep the lower index first (stable sort).
        order = sorted(range(len(candidates)), key=lambda j: -probs[j])
        cumulative = 0.0
        k = len(candidates)
        for rank, j in enumerate(order):
            cumulative += probs[j]
            if cumulative >= value:
                k = rank + 1
                break
        return [candidates[j] for j in order[:k]], REASON_TOP_P
    if prob_mode != "linear":
        raise ValueError(f"unknown prob_mode {prob_mode!r}; expected one of {', '.join(PROB_MODES)}")
    ranked = _ranked(candidates, scores, largest)
    threshold = value * sum(scores[i] for i in candidates) - selection_eps
    accumulated = 0.0
    counted: list[int] = []
    for i in ranked:
        if accumulated >= threshold or scores[i] <= 0:
            break
        accumulated += scores[i]
        counted.append(i)
    if accumulated >= threshold:
        return counted, REASON_TOP_P
    return [], REASON_UNREACHABLE


def select_with_reasons(
    scores: Sequence[float],
    *,
    strategy: str,
    value: float,
    largest: bool = True,
    include_zero: bool = True,
    prob_mode: str = "linear",
    selection_eps: float = 0.01,
    num_groups: int | None = None,
) -> Selection:
    """Like :func:`select_groups`, but also say why each left-out index was dropped.

    Non-finite scores (NaN, inf) are never candidates (reason ``"non-finite score"``); the
    reference has no rule for them and a NaN would poison every sum and softmax.
    """
    strategy = normalize_strategy(strategy)
    values = [float(s) for s in scores]
    reasons: dict[int, str] = {}
    candidates: list[int] = []
    for i, s in enumerate(values):
        if not math.isfinite(s):
            reasons[i] = REASON_NON_FINITE
        elif not include_zero and is_zero(s):
            reasons[i] = REASON_ZERO
        else:
            candidates.append(i)

    kept: list[int]
    reason = REASON_TOP_P
    if not candidates:
        kept = []
    elif strategy == "top_p":
        if value >= 1:
            kept = list(candidates)
        else:
            kept, reason = _top_p(candidates, values, value, largest, prob_mode, selection_eps)
    elif strategy in ("top_k", "top_k_abs"):
        total = len(values) if num_groups is None else num_groups
        k = int(value * total) if strategy == "top_k" else int(value)
        k = max(min(k, len(candidates)), 1)
        kept = _ranked(candidates, values, largest)[:k]
        reason = REASON_TOP_K
    else:  # min_p
        reason = REASON_MIN_P
        cand_scores = [values[i] for i in candidates]
        if largest:
            cut = max(cand_scores) * value - ZERO_EPS
            kept = [i for i in candidates if values[i] >= cut]
        else:
            cut = min(cand_scores) / (value + ZERO_EPS) + ZERO_EPS
            kept = [i for i in candidates if values[i] <= cut]

    kept_set = set(kept)
    for i in candidates:
        if i not in kept_set:
            reasons[i] = reason
    return Selection(kept=sorted(kept_set), reasons=reasons)


def select_groups(
    scores: Sequence[float],
    *,
    strategy: str,
    value: float,
    largest: bool = True,
    include_zero: bool = True,
    prob_mode: str = "linear",
    selection_eps: float = 0.01,
    num_groups: int | None = None,
) -> list[int]:
    """Choose groups from their scores with the reference's rules (spec 9.3).

    Args:
        scores: One score per group (e.g. in-group reward std); never modified.
        strategy: ``top_p``, ``top_k``, ``top_k_abs`` or ``min_p`` (``-`` spellings accepted).
        value: Mass for top-p, fraction of ``num_groups`` for top-k, a count for top-k-abs,
            the relative cut for min-p.
        largest: Prefer high scores (True) or low scores (False, the reference's ``smallest``).
        include_zero: When False, groups with ``|score| <= 1e-10`` are never candidates.
        prob_mode: Top-p mass: ``linear`` (share of the summed scores) or ``softmax``.
        selection_eps: Slack subtracted from the linear top-p threshold.
        num_groups: Configured group count for fractional top-k; defaults to ``len(scores)``.

    Returns:
        Kept indices in ascending order (may be empty, e.g. linear top-p on all-zero scores).

    Raises:
        ValueError: On an unknown ``strategy`` or ``prob_mode``.
    """
    return select_with_reasons(
        scores,
        strategy=strategy,
        value=value,
        largest=largest,
        include_zero=include_zero,
        prob_mode=prob_mode,
        selection_eps=selection_eps,
        num_groups=num_groups,
    ).kept
