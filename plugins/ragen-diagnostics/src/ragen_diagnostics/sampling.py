"""Choosing the (prompt X, reasoning Z) pairs that enter the cross-scoring matrix (spec 10.3-10.4).

X is a turn's ``prompt_ids`` (the full context including the generation prefix ``<think>``) and
Z its ``reasoning_ids``; a turn without reasoning is invalid for diagnostics. Two families:

* **first turn**: valid first turns, subsampled without replacement; one column per env group
  (its members share the same initial prompt). Members of a group with *different* prompts
  break that assumption: :class:`SamplingError` is raised so the caller reports it as
  ``collapse/error`` instead of skipping silently (spec 17 L23).
* **trajectory-uniform**: an episode uniformly, then one of its valid turns uniformly. The
  fixed mode (default) draws pairs without replacement and merges identical prompts into one
  column (L22); ``without_replacement=False`` reproduces the reference (with replacement,
  every draw its own column, duplicates handled by signatures).

All randomness comes from the generator passed in (``ragen_core.seeding.make_rng``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Turns a reasoning text into token ids (used only when ``Turn.reasoning_ids`` is missing).
Tokenize = Callable[[str], list[int]]
#: The Z token ids of a turn (``[]`` = invalid for diagnostics).
ZOf = Callable[[Any], list[int]]


class SamplingError(ValueError):
    """An invariant of the sampled pairs does not hold (e.g. a group with differing prompts)."""


@dataclass
class PairSample:
    """Pairs chosen for one family, ready for cross-scoring.

    Attributes:
        prompts: Token ids of each column's prompt X_j.
        reasonings: Token ids of each row's reasoning Z_r.
        true_cols: Column of each row's own prompt.
        signatures: Hashable identity of each column's prompt (equal = same prompt).
        sources: (trajectory index, turn index) of each row, for inspection.
    """

    prompts: list[list[int]] = field(default_factory=list)
    reasonings: list[list[int]] = field(default_factory=list)
    true_cols: list[int] = field(default_factory=list)
    signatures: list[tuple[int, ...]] = field(default_factory=list)
    sources: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_columns(self) -> int:
        return len(self.prompts)

    @property
    def num_rows(self) -> int:
        return len(self.reasonings)


def reasoning_ids(turn: Any, tokenize: Tokenize | None = None) -> list[int]:
    """Z token ids of a turn, or ``[]`` when the turn has no usable reasoning."""
    ids = getattr(turn, "reasoning_ids", None)
    if ids:
        return [int(t) for t in ids]
    text = getattr(turn, "reasoning", None)
    if ids is None and tokenize is not None and isinstance(text, str) and text.strip():
        return [int(t) for t in tokenize(text.strip())]
    return []


def response_z(turn: Any) -> list[int]:
    """Z = the whole sampled reply (no-think mode, spec 17 L24): exactly what the model generated."""
    return [int(t) for t in (getattr(turn, "response_ids", None) or [])]


def make_z_of(source: str = "reasoning", tokenize: Tokenize | None = None) -> ZOf:
    """The Z extractor for ``source``: ``"reasoning"`` (the think block, spec 10.2),
    ``"response"`` (the full reply tokens) or ``"auto"`` (reasoning when present, else the reply)."""
    if source == "reasoning":
        return lambda turn: reasoning_ids(turn, tokenize)
    if source == "response":
        return response_z
    if source == "auto":
        return lambda turn: reasoning_ids(turn, tokenize) or response_z(turn)
    raise ValueError(f"unknown Z source {source!r}; expected 'reasoning', 'response' or 'auto'")


def _has_reply(turn: Any) -> bool:
    return bool(getattr(turn, "response_ids", None)) or bool(getattr(turn, "response_text", ""))


def _cap(num_samples: int | str, available: int) -> int:
    if num_samples == "all":
        return available
    return min(int(num_samples), available)


def coverage_metrics(trajectories: Sequence[Any], z_of: ZOf | None = None) -> dict[str, float]:
    """``collapse/valid_thinking_rate`` and the first-turn counts of spec 10.3."""
    z_of = z_of or make_z_of()
    replies = valid = first_total = first_valid = 0
    for traj in trajectories:
        for t_idx, turn in enumerate(traj.turns):
            if not _has_reply(turn):
                continue
            replies += 1
            ok = bool(z_of(turn))
            valid += ok
            if t_idx == 0:
                first_total += 1
                first_valid += ok
    return {
        "collapse/valid_thinking_rate": valid / replies if replies else 0.0,
        "collapse/first_turn_num_total": float(first_total),
        "collapse/first_turn_num_valid": float(first_valid),
        "collapse/first_turn_valid_rate": first_valid / first_total if first_total else 0.0,
    }


def first_turn_sample(
    trajectories: Sequence[Any],
    num_samples: int | str,
    rng: np.random.Generator,
    z_of: ZOf | None = None,
) -> PairSample:
    """The first-turn family: columns are env groups, rows are valid first turns.

    Raises:
        SamplingError: Two selected members of one group saw different first prompts.
    """
    z_of = z_of or make_z_of()
    valid: list[tuple[int, list[int]]] = []
    for i, traj in enumerate(trajectories):
        if traj.turns and _has_reply(traj.turns[0]):
            z = z_of(traj.turns[0])
            if z:
                valid.append((i, z))
    n = _cap(num_samples, len(valid))
    if n < len(valid):
        picked = sorted(rng.choice(len(valid), size=n, replace=False).tolist())
        valid = [valid[k] for k in picked]
    sample = PairSample()
    column_of_group: dict[int, int] = {}
    for i, z in valid:
        traj = trajectories[i]
        x = [int(t) for t in traj.turns[0].prompt_ids]
        col = column_of_group.get(traj.group_id)
        if col is None:
            col = column_of_group[traj.group_id] = len(sample.prompts)
            sample.prompts.append(x)
            sample.signatures.append(tuple(x))
        elif sample.signatures[col] != tuple(x):
            raise SamplingError(
                f"group {traj.group_id}: member {traj.member} (env {traj.env!r}, seed {traj.seed}) saw a "
                f"different first-turn prompt than the group's first member; first-turn columns need "
                f"identical prompts within a group"
            )
        sample.reasonings.append(z)
        sample.true_cols.append(col)
        sample.sources.append((i, 0))
    return sample


def trajectory_sample(
    trajectories: Sequence[Any],
    num_samples: int | str,
    rng: np.random.Generator,
    z_of: ZOf | None = None,
    *,
    without_replacement: bool = True,
) -> PairSample:
    """The trajectory-uniform family: episode uniformly, then one of its valid turns uniformly.

    Args:
        trajectories: The (unfiltered) batch.
        num_samples: Number of draws (capped at the number of valid turns), or ``"all"``.
        rng: Source of randomness.
        z_of: Z extractor (default: the turn's reasoning ids, see :func:`make_z_of`).
        without_replacement: Fixed mode (L22): a drawn (episode, turn) pair is removed, an episode
            with no turns left leaves the draw, and identical prompts share one column. False is
            the reference: draws with replacement over all episodes with a valid turn and one
            column per draw (episodes with no valid turn still count in the uniform choice but
            yield nothing, as in Pr(m, t) = 1/M · 1/T_m).
    """
    z_of = z_of or make_z_of()
    pools: list[list[tuple[int, list[int]]]] = []
    for traj in trajectories:
        pool = [(t, z) for t, turn in enumerate(traj.turns) if _has_reply(turn) and (z := z_of(turn))]
        pools.append(pool)
    total = sum(len(p) for p in pools)
    n = _cap(num_samples, total)
    draws: list[tuple[int, int, list[int]]] = []
    if without_replacement:
        remaining = [list(p) for p in pools]
        while len(draws) < n:
            live = [m for m, p in enumerate(remaining) if p]
            m = live[int(rng.integers(len(live)))]
            t, z = remaining[m].pop(int(rng.integers(len(remaining[m]))))
            draws.append((m, t, z))
    else:
        # Reference: n draws, each an episode uniformly over all M episodes, then a valid turn.
        # Episodes without valid turns yield nothing, so fewer than n pairs may come back.
        for _ in range(n):
            m = int(rng.integers(len(pools)))
            if pools[m]:
                t, z = pools[m][int(rng.integers(len(pools[m])))]
                draws.append((m, t, z))
    sample = PairSample()
    column_of_sig: dict[tuple[int, ...], int] = {}
    for m, t, z in draws:
        x = [int(v) for v in trajectories[m].turns[t].prompt_ids]
        sig = tuple(x)
        if without_replacement and sig in column_of_sig:
            col = column_of_sig[sig]
        else:
            col = len(sample.prompts)
            column_of_sig.setdefault(sig, col)
            sample.prompts.append(x)
            sample.signatures.append(sig)
        sample.reasonings.append(z)
        sample.true_cols.append(col)
        sample.sources.append((m, t))
    return sample
