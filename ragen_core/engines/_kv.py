"""A KV-cache layer that grows in place instead of concatenating on every decode step.

``transformers``' ``DynamicLayer`` appends each new token with ``torch.cat``, which copies the
whole cache once per generated token (quadratic memory traffic; ~35 % of decode time for the
tiny model at 2k context on CPU). :class:`GrowableLayer` keeps a buffer with spare room --
the engine reserves the reply budget up front -- writes new positions into it and exposes
``keys``/``values`` as views of the filled part, so attention sees exactly the same tensors.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer


class GrowableLayer(DynamicLayer):
    """Drop-in ``DynamicLayer`` with an over-allocated buffer (``reserve`` spare positions)."""

    def __init__(self, reserve: int = 64) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # unannotated in transformers
        self.reserve = max(1, int(reserve))
        self._filled = 0
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        need = self._filled + key_states.shape[-2]
        if self._kbuf is None or self._vbuf is None or need > self._kbuf.shape[-2]:
            cap = need + self.reserve
            kbuf = key_states.new_empty((*key_states.shape[:-2], cap, key_states.shape[-1]))
            vbuf = value_states.new_empty((*value_states.shape[:-2], cap, value_states.shape[-1]))
            if self._filled and self._kbuf is not None and self._vbuf is not None:
                kbuf[..., : self._filled, :] = self._kbuf[..., : self._filled, :]
                vbuf[..., : self._filled, :] = self._vbuf[..., : self._filled, :]
            self._kbuf, self._vbuf = kbuf, vbuf
        self._kbuf[..., self._filled : need, :] = key_states
        self._vbuf[..., self._filled : need, :] = value_states
        self._filled = need
        self.keys = self._kbuf[..., :need, :]
        self.values = self._vbuf[..., :need, :]
        return self.keys, self.values

    def fill_rows(self, rows: list[tuple[torch.Tensor, torch.Tensor] | None], width: int, room: int) -> None:
        """Start an empty layer with ``width`` positions per batch row, without a staging copy.

        Row ``i`` gets ``rows[i]`` = (keys, values) of shape ``[heads, n, head_dim]`` right-aligned
        (positions ``width - n`` to ``width``) and zeros before it, which the caller masks out as
        padding (zeros, not garbage: a NaN in a masked key would still poison attention).
        ``None`` rows are all padding. The buffer leaves room for ``room`` more positions plus
        the reserve, so the prefill that follows writes in place.
        """
        k0, v0 = next(r for r in rows if r is not None)
        self.lazy_initialization(k0, v0)
        cap = width + room + self.reserve
        kbuf = k0.new_empty((len(rows), k0.shape[0], cap, k0.shape[-1]))
        vbuf = v0.new_empty((len(rows), v0.shape[0], cap, v0.shape[-1]))
        for i, row in enumerate(rows):
            n = 0 if row is None else row[0].shape[-2]
            if n < width:
                kbuf[i, :, : width - n] = 0
                vbuf[i, :, : width - n] = 0
            if row is not None:
                kbuf[i, :, width - n : width] = row[0]
                vbuf[i, :, width - n : width] = row[1]
        self._kbuf, self._vbuf, self._filled = kbuf, vbuf, width
        self.keys = kbuf[..., :width, :]
        self.values = vbuf[..., :width, :]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep batch rows ``indices`` (new row ``j`` = old row ``indices[j]``).

        Fewer or as many rows (finished rows leaving the batch): rows move inside the existing
        buffer, so only the filled part of the rows that change place is copied (the engine
        fills holes from the tail, so that is at most one row per finished row) and the reserve
        is never allocated again. More rows (a shared prefill repeated per prompt) need a new
        buffer. Either way ``keys``/``values`` then hold exactly the selected rows.
        Pass ``indices`` on the CPU to plan the moves without a device synchronisation.
        """
        if not self._filled or self._kbuf is None or self._vbuf is None:
            return
        n, f = len(indices), self._filled
        if n > self._kbuf.shape[0]:
            self._kbuf = self._kbuf[indices.to(self._kbuf.device), ...]
            self._vbuf = self._vbuf[indices.to(self._vbuf.device), ...]
        else:
            moved = (indices != torch.arange(n, device=indices.device)).nonzero().squeeze(-1)
            if len(moved):
                # The right-hand side is gathered before anything is written, so a row may be
                # both read and overwritten in the same move.
                dst, src = moved.to(self._kbuf.device), indices[moved].to(self._kbuf.device)
                self._kbuf[dst, :, :f] = self._kbuf[src, :, :f]
                self._vbuf[dst, :, :f] = self._vbuf[src, :, :f]
            self._kbuf, self._vbuf = self._kbuf[:n], self._vbuf[:n]
        self.keys = self._kbuf[..., :f, :]
        self.values = self._vbuf[..., :f, :]


def use_growable_layers(cache: Any, reserve: int) -> None:
    """Swap a fresh ``DynamicCache``'s plain layers for :class:`GrowableLayer` (others untouched)."""
    layers = getattr(cache, "layers", None)
    if not layers:
        return
    cache.layers = [GrowableLayer(reserve) if type(layer) is DynamicLayer and not layer.is_initialized else layer for layer in layers]
