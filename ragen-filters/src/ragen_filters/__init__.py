"""RAGEN rollout filters: SNR-adaptive group selection (spec section 9).

Public API (imported lazily so that loading a spec stays cheap):

* :func:`select_groups` - pure selection over per-group scores (spec 9.3).
* :class:`EmptyStreak` - consecutive empty-after-filter counter for the trainer (spec 9.6).
* Filter classes in :mod:`ragen_filters.filters`, configs in :mod:`ragen_filters.config`,
  specs in :mod:`ragen_filters.plugin`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "select_groups": "ragen_filters.selection",
    "select_with_reasons": "ragen_filters.selection",
    "EmptyStreak": "ragen_filters.streak",
    "GroupIndex": "ragen_filters.stats",
    "group_stats": "ragen_filters.stats",
    "KeepAllFilter": "ragen_filters.filters",
    "ReferenceFilter": "ragen_filters.filters",
    "TopPFilter": "ragen_filters.filters",
    "TopPSoftmaxFilter": "ragen_filters.filters",
    "TopKFilter": "ragen_filters.filters",
    "TopKAbsFilter": "ragen_filters.filters",
    "MinPFilter": "ragen_filters.filters",
    "SoftFilter": "ragen_filters.filters",
}

__all__ = [
    "EmptyStreak",
    "GroupIndex",
    "KeepAllFilter",
    "MinPFilter",
    "ReferenceFilter",
    "SoftFilter",
    "TopKAbsFilter",
    "TopKFilter",
    "TopPFilter",
    "TopPSoftmaxFilter",
    "group_stats",
    "select_groups",
    "select_with_reasons",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ragen_filters' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
