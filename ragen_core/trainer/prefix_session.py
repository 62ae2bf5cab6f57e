"""Share prompt prefixes across the micro-batches of one optimiser step (or one no-grad pass).

:func:`ragen_core.trainer.prefix.shared_prefix_forward` shares a prompt among the rows of one
micro-batch. With small micro-batches (down to 1 row) most rows of a GRPO group sit in different
micro-batches, so a :class:`PrefixSession` keeps each prompt's KV cache for the whole
mini-batch instead:

* The first micro-batch that needs a prompt runs it (with gradient if enabled); the session
  keeps the cache and hands each micro-batch a **detached leaf copy** (``requires_grad``), so
  each micro-batch's ``backward`` stops at the cache and accumulates ``d loss / d cache`` in
  the leaf's ``.grad``.
* Once every row using a prompt has run (and its micro-batch's ``backward`` is done) the
  session back-propagates the accumulated cache gradient through the prompt's graph **once**.
  The parameter gradients are then exactly the plain path's (chain rule; sums commute), up to
  float rounding.

Memory: a prompt's graph lives until its last row has run, so rows of one prompt should be close
together (the trainer's batches are in group order); prompt graphs beyond
:data:`ragen_core.trainer.prefix.SESSION_LIVE_FACTOR` micro-batches' worth of tokens are not
started (those rows run in their own micro-batch).

Protocol for the caller: one session per optimiser step's rows; for each micro-batch, forward
through :meth:`PrefixSession.forward` and call ``backward`` **before the next micro-batch's
forward**; call :meth:`PrefixSession.finish` after the last ``backward`` and before clipping /
stepping. Without gradient (old/ref log-probs, values) the session simply reuses caches and
drops each once its last row has run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragen_core.trainer import prefix

if TYPE_CHECKING:
    import torch


@dataclass
class _PrefixBatch:
    """Prompts run together in one prefix forward: graph roots, leaf copies, rows still to come."""

    roots: list[tuple[torch.Tensor, torch.Tensor]]
    leaves: list[tuple[torch.Tensor, torch.Tensor]]
    remaining: int
    grad: bool
    done: bool = False


@dataclass
class _Entry:
    batch: _PrefixBatch
    index: int
    length: int


@dataclass
class PrefixSession:
    """Prompt KV caches shared by the micro-batches of one pass over ``rows``.

    Build with :meth:`create` (``None`` when sharing would not pay off or the model cannot).
    """

    model: Any
    counts: dict[bytes, int]
    starts_by_row: dict[bytes, int]
    entries: dict[bytes, _Entry] = field(default_factory=dict)
    batches: list[_PrefixBatch] = field(default_factory=list)

    @classmethod
    def create(cls, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor | None) -> PrefixSession | None:
        """A session for these rows (all rows of the pass, any padding width), or ``None``."""
        found = prefix.row_keys(input_ids, attention_mask, response_mask)
        if found is None or not prefix.pays_off(found, padded=False) or not prefix.supports_shared_prefix(model):
            return None
        counts: dict[bytes, int] = {}
        for k in found.keys:
            counts[k] = counts.get(k, 0) + 1
        return cls(model=model, counts=counts, starts_by_row=dict(zip(found.row_ids, found.starts.tolist())))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor,
                *, hidden: bool = False) -> tuple[Any, torch.Tensor, prefix.PrefixPlan] | None:
        """Run one micro-batch: its prompts from the shared caches, its suffixes here.

        Returns ``(out, suffix_ids, plan)`` as :func:`ragen_core.trainer.prefix.shared_prefix_forward`
        plus the plan for :func:`ragen_core.trainer.prefix.to_shifted`, or ``None`` when these
        rows cannot take the shared path (the caller then runs the plain forward).
        """
        import torch

        self._flush()
        found = prefix.row_keys(input_ids, attention_mask, response_mask, self.starts_by_row)
        if found is None:
            return None
        keys, starts, lengths = found.keys, found.starts, found.lengths
        dev = input_ids.device
        seen: set[bytes] = set()
        new: list[int] = []  # rows whose prefix is not cached yet, first row of each prefix only
        for i, k in enumerate(keys):
            if k not in self.entries and k not in seen:
                seen.add(k)
                new.append(i)
        if new and torch.is_grad_enabled():
            live = sum(int(e.length) for e in self.entries.values() if e.batch.grad and not e.batch.done)
            if live + int(starts[new].sum()) > prefix.SESSION_LIVE_FACTOR * input_ids.numel():
                return None  # bound the memory held by live prompt graphs
        if new:
            self._run_new(input_ids, keys, starts, new)
        entries = [self.entries[k] for k in keys]
        kv = _gather(entries, max(e.length for e in entries))
        plens = torch.tensor([e.length for e in entries], dtype=torch.long, device=dev)
        prefix_mask = (torch.arange(kv[0][0].shape[2], device=dev)[None, :] < plens[:, None]).long()
        out, ids_s = prefix.run_suffixes(self.model, input_ids, kv, prefix_mask, starts, lengths, hidden=hidden)
        for e in entries:
            e.batch.remaining -= 1
        plan = prefix.PrefixPlan(cluster=torch.arange(len(keys), device=dev), prefix_lens=plens, starts=starts, lengths=lengths,
                                 width=int(input_ids.shape[1]))
        return out, ids_s, plan

    def _run_new(self, input_ids: torch.Tensor, keys: list[bytes], starts: torch.Tensor, new: list[int]) -> None:
        import torch

        idx = torch.tensor(new, dtype=torch.long, device=input_ids.device)
        lens = starts.index_select(0, idx)
        roots, _ = prefix.run_prefixes(self.model, input_ids.index_select(0, idx), lens)
        grad = torch.is_grad_enabled()
        # a cache that no trainable parameter feeds (e.g. LoRA without k_proj: layer 0's keys) stays a constant
        leaves = [(_leaf(k), _leaf(v)) for k, v in roots] if grad else roots
        batch = _PrefixBatch(roots=roots if grad else [], leaves=leaves, remaining=sum(self.counts.get(keys[i], 1) for i in new), grad=grad)
        self.batches.append(batch)
        for j, (i, r) in enumerate(zip(new, lens.tolist())):
            self.entries[keys[i]] = _Entry(batch=batch, index=j, length=int(r))

    def _flush(self, *, force: bool = False) -> None:
        """Back-propagate (and drop) every prefix batch whose rows have all run."""
        import torch

        for batch in self.batches:
            if batch.done or (batch.remaining > 0 and not force):
                continue
            batch.done = True
            if batch.grad:
                pairs = [(root, leaf.grad) for rk, lk in zip(batch.roots, batch.leaves) for root, leaf in zip(rk, lk)
                         if leaf.grad is not None and root.requires_grad]
                if pairs:
                    torch.autograd.backward([p[0] for p in pairs], grad_tensors=[p[1] for p in pairs])
            batch.roots, batch.leaves = [], []
        self.batches = [b for b in self.batches if not b.done]
        self.entries = {k: e for k, e in self.entries.items() if not e.batch.done}

    def finish(self) -> None:
        """Back-propagate what is left (call after the last micro-batch's ``backward``)."""
        self._flush(force=True)


def _leaf(root: torch.Tensor) -> torch.Tensor:
    """A detached copy that collects ``d loss / d root`` when ``root`` depends on trainable parameters."""
    return root.detach().requires_grad_(root.requires_grad)


def _gather(entries: list[_Entry], width: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the ``[B, heads, width, dim]`` keys and values of each row's prompt (zero-padded)."""
    import torch

    groups: dict[int, tuple[_PrefixBatch, list[int], list[int]]] = {}  # batch -> (batch, rows, indices in it)
    for row, e in enumerate(entries):
        g = groups.setdefault(id(e.batch), (e.batch, [], []))
        g[1].append(row)
        g[2].append(e.index)
    dev = entries[0].batch.leaves[0][0].device
    order = torch.tensor([row for _, rows, _ in groups.values() for row in rows], device=dev)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order), device=dev)
    out = []
    for layer in range(len(entries[0].batch.leaves)):
        parts_k, parts_v = [], []
        for batch, _, idx in groups.values():
            sel = torch.tensor(idx, dtype=torch.long, device=dev)
            k, v = batch.leaves[layer]
            parts_k.append(_fit(k.index_select(0, sel), width))
            parts_v.append(_fit(v.index_select(0, sel), width))
        out.append((torch.cat(parts_k).index_select(0, inverse), torch.cat(parts_v).index_select(0, inverse)))
    return out


def _fit(x: torch.Tensor, width: int) -> torch.Tensor:
    """Cut or zero-pad ``[B, heads, P, dim]`` along the position axis to ``width`` (the mask hides the rest)."""
    import torch

    if x.shape[2] >= width:
        return x[:, :, :width]
    pad = x.new_zeros((x.shape[0], x.shape[1], width - x.shape[2], x.shape[3]))
    return torch.cat([x, pad], dim=2)
