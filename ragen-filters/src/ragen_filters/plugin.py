"""Entry-point targets: one :class:`FilterSpec` per user-facing filter name.

Imports only ``ragen_core`` and the configs; the filter classes load through ``factory``.
The reference's strategy spellings (``top-p``, ``top-k``, ``top-k-abs``, ``min-p``) are aliases
of the ``snr-*`` specs and are also registered as entry points pointing at the same objects.
"""

from __future__ import annotations

from ragen_core.specs import FilterSpec
from ragen_filters import config as c


def _spec(name: str, summary: str, config_model: type, cls: str, *aliases: str) -> FilterSpec:
    return FilterSpec(
        name=name,
        summary=summary,
        config_model=config_model,
        factory=f"ragen_filters.filters:{cls}",
        aliases=aliases,
    )


NONE = _spec("none", "Keep every group (metrics only)", c.NoFilterConfig, "KeepAllFilter")
SNR_TOPP = _spec(
    "snr-topp", "Linear top-p 0.9 by reward std, zero-std groups dropped (recommended)",
    c.TopPConfig, "TopPFilter", "top-p",
)
SNR_TOPP_SOFTMAX = _spec(
    "snr-topp-softmax", "Softmax top-p 0.9 by reward std, zero-std groups dropped",
    c.TopPSoftmaxConfig, "TopPSoftmaxFilter",
)
SNR_TOPK = _spec("snr-topk", "Keep the top 25% of groups by reward std", c.TopKConfig, "TopKFilter", "top-k")
SNR_TOPK_ABS = _spec(
    "snr-topk-abs", "Keep a fixed number of groups by reward std", c.TopKAbsConfig, "TopKAbsFilter", "top-k-abs"
)
SNR_MINP = _spec(
    "snr-minp", "Keep groups whose reward std is at least a fraction of the best", c.MinPConfig, "MinPFilter", "min-p"
)
SNR_SOFT = _spec("snr-soft", "Keep all groups, weight each by reward std / max std", c.SoftConfig, "SoftFilter")
REFERENCE = _spec(
    "reference", "The reference filter with every knob (defaults: no filtering)", c.ReferenceConfig, "ReferenceFilter"
)

SPECS: tuple[FilterSpec, ...] = (NONE, SNR_TOPP, SNR_TOPP_SOFTMAX, SNR_TOPK, SNR_TOPK_ABS, SNR_MINP, SNR_SOFT, REFERENCE)
