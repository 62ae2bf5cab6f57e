"""Shared-prefix forward: run a prompt that several rows share once, then only each row's rest.

In GRPO every group of episodes starts with the same first prompt, often ~95 % of a row's
tokens. A plain forward runs (and back-propagates through) that prompt once per row. Here the
rows of a micro-batch are clustered by a shared prefix that ends at or before each member's
first trained position (:func:`row_keys`: the ids before the first trained token when another
row has the same, else a long enough common prefix with another row); each cluster's prefix
runs once, **with gradient**, filling a KV cache; the cache is expanded to
the member rows with ``index_select`` (its backward sums the members' gradients, which is
exactly what the plain forward's per-row copies add up to) and every row's suffix runs on top
of it. The result is the same computation up to float rounding: same log-probs, entropies,
values and parameter gradients at every position from the prefix's end on. Across the
micro-batches of a mini-batch, :mod:`ragen_core.trainer.prefix_session` shares prefixes too.

Layout (``B`` rows right-padded to ``L`` tokens; shifted arrays: position ``t`` scores token
``t+1``). Row ``i`` has ``n_i`` real tokens and its first trained position is ``r_i``; its
cluster's prefix length is ``s_i <= r_i``, so no output the trainer reads lies in the prefix.
The prefix call sees ``[C, P]`` right-padded ids (``P = max s``); the suffix call sees
``[B, S]`` ids ``input_ids[i, s_i:n_i]`` right-padded (``S = max(n_i - s_i)``) with position
ids ``s_i + j`` and a 2-D mask ``[prefix mask of the row's cluster | suffix mask]``. Outputs
come back in the ``[B, L-1]`` shifted layout with zeros outside ``[s_i, n_i - 1)``.

The path is used only when it is exact and pays off (see :func:`plan_shared_prefix` and
:func:`supports_shared_prefix`); otherwise callers run the plain full forward. Set
:data:`ENABLED` to ``False`` to force the plain path (tests, benchmarks).
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragen_core.models import base_model, cache_argument, forward_parameters  # cheap: no torch at import

if TYPE_CHECKING:
    import torch

ENABLED = True
"""Module switch: ``False`` forces the plain full forward everywhere."""

MIN_SAVING = 0.2
"""Use the shared path only when it saves at least this fraction of the token positions run."""

MIN_SHARED_PREFIX = 16
"""Rows with different ids before their first trained token share a common prefix only from this many ids on."""

SESSION_LIVE_FACTOR = 2.0
"""A :class:`ragen_core.trainer.prefix_session.PrefixSession` keeps the graphs of at most this
many times a micro-batch's padded tokens in prompt prefixes alive (with gradient); a micro-batch
needing more (rows of many groups interleaved) runs its new prompts in the micro-batch instead."""

__all__ = [
    "ENABLED",
    "MIN_SAVING",
    "MIN_SHARED_PREFIX",
    "SESSION_LIVE_FACTOR",
    "PrefixPlan",
    "RowKeys",
    "keep_one_logit",
    "plan_shared_prefix",
    "row_keys",
    "run_prefixes",
    "run_suffixes",
    "shared_forward",
    "shared_prefix_forward",
    "supports_shared_prefix",
    "to_shifted",
]


@dataclass
class PrefixPlan:
    """How a micro-batch is split into shared prefixes and per-row suffixes."""

    cluster: torch.Tensor
    """``[B]`` long: the cluster (prefix) each row belongs to."""
    prefix_lens: torch.Tensor
    """``[C]`` long: tokens in each cluster's prefix (all >= 1)."""
    starts: torch.Tensor
    """``[B]`` long: ``s_i``, the row's prefix length = index of its first suffix token."""
    lengths: torch.Tensor
    """``[B]`` long: real (unpadded) tokens of each row."""
    width: int
    """``L``: the padded width of the input rows."""


def first_trained(response_mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``r_i``: the first shifted position with a trained token (``n_i - 1`` for a row without one)."""
    import torch

    on = response_mask > 0
    width = on.shape[1]
    idx = torch.arange(width, device=on.device).expand_as(on)
    big = torch.full_like(idx, width)
    first = torch.where(on, idx, big).min(dim=1).values
    return torch.where(first >= width, lengths - 1, first)


@dataclass
class RowKeys:
    """Where each row of a batch can be cut, from :func:`row_keys`."""

    keys: list[bytes]
    """Per row, the identity of its prefix ``ids[:s_i]`` (rows with equal keys share it)."""
    starts: torch.Tensor
    """``[B]`` long: ``s_i``, the prefix length (``1 <= s_i <= r_i``)."""
    lengths: torch.Tensor
    """``[B]`` long: real tokens ``n_i``."""
    row_ids: list[bytes]
    """Per row, the identity of ``ids[:r_i]`` (all the ids its trained outputs depend on before ``r_i``)."""


def row_keys(input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor | None,
             starts_by_row: dict[bytes, int] | None = None) -> RowKeys | None:
    """Cut every row at a prefix shared with other rows, never past its first trained position.

    ``s_i = r_i`` when another row has the same ``ids[:r_i]`` (a GRPO group's prompt); otherwise
    the longest common prefix (of at least :data:`MIN_SHARED_PREFIX` ids) with a neighbour in
    sorted order, e.g. the first prompt shared by turn-level rows of later turns; otherwise
    ``r_i`` (the row runs alone). ``starts_by_row`` (``row_ids -> s``, from a larger set of rows)
    overrides that choice, so a session cuts a row the same way in every micro-batch.

    ``None`` when the shared path cannot be exact here: the switch is off, no response mask, a
    row is not right-padded, a trained position scores a padding token, or ``r_i = 0`` for some
    row (nothing to share).
    """
    import torch

    if not ENABLED or response_mask is None or input_ids.dim() != 2:
        return None
    b, width = input_ids.shape
    if b < 1 or tuple(response_mask.shape) != (b, width - 1):
        return None
    am = attention_mask.to(input_ids.device) > 0
    lengths = am.sum(dim=1)
    ar = torch.arange(width, device=input_ids.device)
    if not torch.equal(am, ar[None, :] < lengths[:, None]):
        return None  # left padding or holes: keep the plain path
    rm = response_mask.to(input_ids.device)
    if bool(((rm > 0) & ~(ar[None, 1:] < lengths[:, None])).any()):
        return None  # a trained position scores a padding token
    first = first_trained(rm, lengths)
    if bool((first < 1).any()):
        return None
    rows = input_ids.detach().cpu().numpy()
    r = first.tolist()
    row_ids = [ri.to_bytes(4, "little") + rows[i, :ri].tobytes() for i, ri in enumerate(r)]
    if starts_by_row is None:
        starts = _choose_starts([rows[i, :ri] for i, ri in enumerate(r)], row_ids)
    else:
        starts = [min(starts_by_row.get(k, ri), ri) for k, ri in zip(row_ids, r)]
    keys = [si.to_bytes(4, "little") + rows[i, :si].tobytes() for i, si in enumerate(starts)]
    return RowKeys(keys=keys, starts=torch.tensor(starts, dtype=torch.long, device=input_ids.device), lengths=lengths.to(torch.long),
                   row_ids=row_ids)


def _choose_starts(prefixes: list[Any], row_ids: list[bytes]) -> list[int]:
    """``s_i`` per row (see :func:`row_keys`) from each row's ``ids[:r_i]`` (numpy arrays)."""
    import numpy as np

    starts = [len(p) for p in prefixes]
    order = sorted(range(len(prefixes)), key=lambda i: prefixes[i].tolist())
    best = [0] * len(prefixes)
    for a, b in itertools.pairwise(order):
        if row_ids[a] == row_ids[b]:
            common = len(prefixes[a])
        else:
            m = min(len(prefixes[a]), len(prefixes[b]))
            diff = np.flatnonzero(prefixes[a][:m] != prefixes[b][:m])
            common = int(diff[0]) if len(diff) else m
        best[a], best[b] = max(best[a], common), max(best[b], common)
    return [bst if bst >= max(MIN_SHARED_PREFIX, 1) else s for s, bst in zip(starts, best)]


def pays_off(found: RowKeys, *, padded: bool) -> bool:
    """Whether sharing saves at least :data:`MIN_SAVING` of the token positions run.

    ``padded``: count positions as one batched call pads them (one micro-batch); otherwise
    count real tokens (prefixes reused across micro-batches).
    """
    prefix_len: dict[bytes, int] = dict(zip(found.keys, found.starts.tolist()))
    if len(prefix_len) == len(found.keys):
        return False
    suffix = found.lengths - found.starts
    if padded:
        cost = len(prefix_len) * max(prefix_len.values()) + len(found.keys) * int(suffix.max())
        return cost <= (1.0 - MIN_SAVING) * len(found.keys) * int(found.lengths.max())
    cost = sum(prefix_len.values()) + int(suffix.sum())
    return cost <= (1.0 - MIN_SAVING) * int(found.lengths.sum())


def plan_shared_prefix(input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor | None) -> PrefixPlan | None:
    """Cluster the rows of one micro-batch by shared prefix (cut points from :func:`row_keys`).

    Returns ``None`` (use the plain forward) when :func:`row_keys` refuses, no two rows share a
    prefix, or the saving is below :data:`MIN_SAVING`.
    """
    import torch

    found = row_keys(input_ids, attention_mask, response_mask)
    if found is None or not pays_off(found, padded=True):
        return None
    index: dict[bytes, int] = {}
    cluster = [index.setdefault(k, len(index)) for k in found.keys]
    prefix_lens = [0] * len(index)
    for c, si in zip(cluster, found.starts.tolist()):
        prefix_lens[c] = si
    dev = input_ids.device
    return PrefixPlan(
        cluster=torch.tensor(cluster, dtype=torch.long, device=dev),
        prefix_lens=torch.tensor(prefix_lens, dtype=torch.long, device=dev),
        starts=found.starts,
        lengths=found.lengths,
        width=int(input_ids.shape[1]),
    )


def _cache_kwarg_checked(model: Any) -> str:
    name = cache_argument(model)
    assert name is not None, "callers check supports_shared_prefix first"
    return name


def supports_shared_prefix(model: Any) -> bool:
    """Whether ``model`` can run the cache path exactly.

    Needs a ``transformers`` causal LM taking ``position_ids`` and a KV cache argument, full
    attention in every layer (a sliding window would drop prefix keys), an attention kernel
    that accepts an arbitrary 2-D padding mask (``sdpa`` or ``eager``; flash attention cannot
    skip the padding between prefix and suffix), a RoPE whose frequencies do not depend on the
    call's length (not ``dynamic``/``longrope``), no active dropout (the plain forward draws one
    mask per row's copy of a prompt) and no gradient checkpointing (it turns the cache off in
    training).
    """
    base = base_model(model)
    cfg = getattr(base, "config", None)
    if cfg is None or cache_argument(base) is None:
        return False
    if "position_ids" not in inspect.signature(base.forward).parameters:
        return False
    if getattr(cfg, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
        return False
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return False
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if isinstance(rope, dict) and rope.get("rope_type", rope.get("type")) in ("dynamic", "longrope"):
        return False  # frequencies depend on the longest position in the call, which differs per call
    if _dropout_active(model):
        return False
    checkpointing = "is_activation_checkpointing" if hasattr(type(base), "is_activation_checkpointing") else "is_gradient_checkpointing"
    if getattr(base, checkpointing, False):
        return False
    try:
        from transformers import DynamicCache

        return hasattr(_new_cache(DynamicCache, cfg), "layers")
    except Exception:  # noqa: BLE001 - any import/API mismatch means: use the plain path
        return False


def _dropout_active(model: Any) -> bool:
    """Training with dropout: the plain forward draws a separate mask for every row's copy of a prompt."""
    if not getattr(model, "training", False):
        return False
    cfg = getattr(base_model(model), "config", None)
    for name, value in (vars(cfg) if cfg is not None else {}).items():
        if ("dropout" in name or "pdrop" in name) and isinstance(value, float) and value > 0:
            return True
    return any(type(m).__name__.startswith("Dropout") and getattr(m, "p", 0) > 0 for m in model.modules())


def keep_one_logit(model: Any) -> dict[str, int]:
    """``logits_to_keep=1`` (vocabulary projection of one position only) where the model takes it."""
    return {"logits_to_keep": 1} if "logits_to_keep" in forward_parameters(model) else {}


def _new_cache(cls: Any, cfg: Any) -> Any:
    try:
        return cls(config=cfg)
    except TypeError:
        return cls()


def shared_forward(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor | None,
                   session: Any = None, *, hidden: bool = False) -> tuple[Any, torch.Tensor, PrefixPlan] | None:
    """The shared path for one micro-batch: ``(out, suffix_ids, plan)``, or ``None`` for the plain forward.

    Tries ``session`` (a :class:`ragen_core.trainer.prefix_session.PrefixSession`, prompts shared
    across micro-batches) first, then sharing within these rows; ``out`` as in
    :func:`shared_prefix_forward`, ``plan`` for :func:`to_shifted`.
    """
    if response_mask is None:
        return None
    if session is not None:
        found: tuple[Any, torch.Tensor, PrefixPlan] | None = session.forward(input_ids, attention_mask, response_mask, hidden=hidden)
        if found is not None:
            return found
    plan = plan_shared_prefix(input_ids, attention_mask, response_mask)
    if plan is None or not supports_shared_prefix(model):
        return None
    return (*shared_prefix_forward(model, input_ids, plan, hidden=hidden), plan)


def shared_prefix_forward(model: Any, input_ids: torch.Tensor, plan: PrefixPlan, *, hidden: bool = False) -> tuple[Any, torch.Tensor]:
    """Run the prefixes once and every row's suffix on the expanded cache.

    Args:
        model: A causal LM for which :func:`supports_shared_prefix` holds.
        input_ids: ``[B, L]`` right-padded ids (the rows of ``plan``).
        plan: From :func:`plan_shared_prefix`.
        hidden: Return the last hidden states instead of the logits (the lm head is then run
            on one position only).

    Returns:
        ``(out, suffix_ids)``: the suffix call's ``[B, S, V]`` logits (or ``[B, S, H]`` last
        hidden states) and its ``[B, S]`` input ids; suffix index ``j`` of row ``i`` is input
        position ``s_i + j``.
    """
    import torch

    dev = input_ids.device
    n_clusters = int(plan.prefix_lens.shape[0])
    first_row = torch.full((n_clusters,), -1, dtype=torch.long, device=dev)
    first_row = first_row.scatter_reduce(0, plan.cluster, torch.arange(len(plan.cluster), device=dev), reduce="amin", include_self=False)
    kv, mask_p = run_prefixes(model, input_ids.index_select(0, first_row), plan.prefix_lens)
    rows = [(k.index_select(0, plan.cluster), v.index_select(0, plan.cluster)) for k, v in kv]
    return run_suffixes(model, input_ids, rows, mask_p.index_select(0, plan.cluster), plan.starts, plan.lengths, hidden=hidden)


def run_prefixes(model: Any, ids: torch.Tensor, prefix_lens: torch.Tensor) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """Forward ``ids[c, :prefix_lens[c]]`` (right-padded to the longest) filling a KV cache.

    Returns the per-layer ``(keys, values)`` ``[C, heads, P, dim]`` and the ``[C, P]`` mask.
    """
    import torch
    from transformers import DynamicCache

    base = base_model(model)
    width_p = int(prefix_lens.max())
    ar_p = torch.arange(width_p, device=ids.device)
    mask_p = (ar_p[None, :] < prefix_lens[:, None]).long()
    cache = _new_cache(DynamicCache, base.config)
    # the prefix needs no logits, only its keys and values
    model(input_ids=ids[:, :width_p], attention_mask=mask_p, position_ids=ar_p.expand(len(ids), width_p), use_cache=True,
          **keep_one_logit(base), **{_cache_kwarg_checked(base): cache})
    return [(layer.keys, layer.values) for layer in cache.layers], mask_p


def run_suffixes(model: Any, input_ids: torch.Tensor, kv: list[tuple[torch.Tensor, torch.Tensor]], prefix_mask: torch.Tensor,
                 starts: torch.Tensor, lengths: torch.Tensor, *, hidden: bool = False) -> tuple[Any, torch.Tensor]:
    """Forward each row's ``input_ids[i, starts[i]:lengths[i]]`` on its prefix's ``kv`` (``[B, heads, P, dim]``)."""
    import torch
    from transformers import DynamicCache

    base = base_model(model)
    dev = input_ids.device
    cache = _new_cache(DynamicCache, base.config)
    for layer_idx, (k, v) in enumerate(kv):
        cache.update(k, v, layer_idx)
    width = input_ids.shape[1]
    suffix_lens = lengths - starts
    ar_s = torch.arange(int(suffix_lens.max()), device=dev)
    cols = starts[:, None] + ar_s[None, :]
    ids_s = input_ids.gather(1, cols.clamp(max=width - 1))
    mask = torch.cat([prefix_mask, (ar_s[None, :] < suffix_lens[:, None]).long()], dim=1)
    extra = {"output_hidden_states": True, **keep_one_logit(base)} if hidden else {}
    # padding positions only feed masked outputs; clamped so learned position tables stay in range
    out = model(input_ids=ids_s, attention_mask=mask, position_ids=cols.clamp(max=width - 1), use_cache=True, **{_cache_kwarg_checked(base): cache},
                **extra)
    return (out.hidden_states[-1] if hidden else out.logits), ids_s


def to_shifted(values: torch.Tensor, plan: PrefixPlan) -> torch.Tensor:
    """Place ``[B, S]`` per-suffix-position values into the ``[B, L-1]`` shifted layout.

    Suffix index ``j`` of row ``i`` is shifted position ``s_i + j``; only ``j < n_i - s_i - 1``
    (the next token is real) is kept, the rest of the row is zero. Differentiable.
    """
    import torch

    b, width_s = values.shape
    ar = torch.arange(width_s, device=values.device)
    keep = ar[None, :] < (plan.lengths - plan.starts - 1)[:, None]
    cols = (plan.starts[:, None] + ar[None, :])[keep]
    row_idx = torch.arange(b, device=values.device)[:, None].expand(b, width_s)[keep]
    out = values.new_zeros((b, plan.width - 1))
    return out.index_put((row_idx, cols), values[keep])
