"""Per-group statistics keyed by explicit group id (spec 9.2, fixing 17.2 L18).

Episodes are grouped by their ``group_id`` value, not by reshaping a batch positionally, so
groups may be interleaved, of unequal size, or partial. Groups appear in order of first
appearance.

Zero-variance detection is robust to floating-point noise: a group whose values differ by no
more than ``flat_rtol`` relative to their magnitude (``0.1 + 0.2`` against ``0.3``) is *flat*
and its spread statistics are exactly 0, so it can never pass an ``include_zero=False`` filter by
accident.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Statistic = Literal["std", "var"]

#: Default relative tolerance under which a group's values count as all equal.
FLAT_RTOL = 1e-9


@dataclass(frozen=True)
class GroupIndex:
    """Episodes of a batch partitioned by group id.

    Attributes:
        ids: Distinct group ids in order of first appearance.
        members: For each id (same order), the episode indices belonging to it.
    """

    ids: list[int]
    members: list[list[int]]

    @classmethod
    def from_ids(cls, group_ids: Sequence[int]) -> GroupIndex:
        """Partition episode indices ``0..len(group_ids)-1`` by group id."""
        position: dict[int, int] = {}
        ids: list[int] = []
        members: list[list[int]] = []
        for episode, gid in enumerate(group_ids):
            key = int(gid)
            slot = position.get(key)
            if slot is None:
                position[key] = slot = len(ids)
                ids.append(key)
                members.append([])
            members[slot].append(episode)
        return cls(ids=ids, members=members)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class GroupStats:
    """Per-group summary of one per-episode quantity (arrays aligned with ``GroupIndex.ids``)."""

    std: np.ndarray
    var: np.ndarray
    mean: np.ndarray
    max: np.ndarray
    sum: np.ndarray
    flat: np.ndarray
    """True where every value in the group is equal up to floating-point noise."""

    def spread(self, statistic: Statistic) -> np.ndarray:
        """The spread statistic used as a score: ``std`` or ``var``."""
        return self.std if statistic == "std" else self.var


def is_flat(values: np.ndarray, rtol: float = FLAT_RTOL) -> bool:
    """True when all finite ``values`` are equal up to ``rtol`` times their magnitude (min 1)."""
    if values.size <= 1:
        return True
    lo, hi = float(values.min()), float(values.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    scale = max(1.0, abs(lo), abs(hi))
    return hi - lo <= rtol * scale


def group_stats(
    values: Sequence[float],
    index: GroupIndex,
    *,
    ddof: int = 1,
    flat_rtol: float = FLAT_RTOL,
) -> GroupStats:
    """Compute std, variance, mean, max and sum of ``values`` for every group (vectorised).

    Args:
        values: One number per episode (aligned with the ids the index was built from).
        index: The group partition.
        ddof: Delta degrees of freedom; 1 (default) gives the unbiased estimate the reference
            uses (spec 17.2 L14). A group with ``size <= ddof`` has spread 0.
        flat_rtol: Relative tolerance for the flat-group test; a flat group has spread exactly 0.

    Returns:
        The per-group statistics. A group holding a NaN or inf gets NaN spread and a non-finite
        mean/max/sum, so selection treats it as unusable.
    """
    arr = np.asarray(values, dtype=np.float64)
    n = len(index)
    if n == 0:
        empty = np.zeros(0)
        return GroupStats(std=empty, var=empty, mean=empty, max=empty, sum=empty, flat=np.zeros(0, dtype=bool))
    inverse = np.empty(arr.size, dtype=np.int64)
    for g, members in enumerate(index.members):
        inverse[members] = g
    counts = np.bincount(inverse, minlength=n).astype(np.float64)
    bad = np.bincount(inverse, weights=(~np.isfinite(arr)).astype(np.float64), minlength=n) > 0
    with np.errstate(invalid="ignore", over="ignore"):
        total = np.bincount(inverse, weights=arr, minlength=n)
        mean = total / counts
        mx = np.full(n, -np.inf)
        np.maximum.at(mx, inverse, arr)
        mn = np.full(n, np.inf)
        np.minimum.at(mn, inverse, arr)
        # Two-pass variance: squared deviations from the group mean, summed per group.
        deviation = arr - mean[inverse]
        squares = np.bincount(inverse, weights=deviation * deviation, minlength=n)
        var = np.where(counts > ddof, squares / np.maximum(counts - ddof, 1.0), 0.0)
        scale = np.maximum(1.0, np.maximum(np.abs(mn), np.abs(mx)))
        flat = ~bad & ((counts <= 1) | (mx - mn <= flat_rtol * scale))
    var[flat] = 0.0
    var[bad] = np.nan
    std = np.sqrt(var)
    return GroupStats(std=std, var=var, mean=mean, max=mx, sum=total, flat=flat)
