"""In-process Hugging Face engine: batched sampling from token ids with a KV cache.

Why a hand-written decode loop instead of ``model.generate``: the rollout layer needs exactly
the sampled ids (with the EOS the model emitted, never padding), the log-probability of each
sampled id under the distribution it was drawn from (after temperature, top-k and top-p), one
seeded random stream per reply that leaves the global torch RNG alone, and the freedom to drop finished
rows from the batch and its KV cache. ``generate`` offers these only piecemeal (scores are
post-processor logits, finished rows keep decoding padding). The loop is short: one
prefill forward over the left-padded batch, then one forward per new token on the cache.

Multi-turn speed (measured in ``bench/bench_multiturn.py``):

* **KV reuse across calls** (``reuse_kv_cache``): after a call the engine keeps each reply's KV
  cache (prompt + reply minus the last sampled token). The next turn's prompt of an episode
  starts with exactly those ids (the rollout layer appends, never re-tokenises), so only the
  new user message is prefilled. Only the latest call's replies are kept.
* **Shared prompts prefilled once** (``share_prompt_prefill``): a group of episodes on the same
  env seed starts from the same prompt; each distinct prompt of a batch is prefilled once and
  its KV cache rows and last logits are repeated before decoding (rows still sample apart).
* **Growable cache layers** (:mod:`ragen_core.engines._kv`): new positions are written into a
  buffer with the reply budget reserved, instead of ``torch.cat`` on every decode step; kept
  caches are laid straight into that buffer with room for the prefill.
* **Prebuilt prefill mask** (sdpa on CPU): one additive 4-D mask per prefill instead of a
  boolean one that the attention kernel converts again in every layer (bit-identical output).
* **Finished rows leave in place**: when replies end, the last live rows move into their
  places inside the KV buffers (:meth:`~ragen_core.engines._kv.GrowableLayer.batch_select_indices`);
  nothing is reallocated and only the moved rows' filled positions are copied.
* **Cheap sampling at large vocabularies** (:mod:`ragen_core.engines.sampling`).

What is left is the model's own work: on the tiny model ~94 % of a multi-turn rollout's CPU
time is inside its forward (see ``bench/results/multiturn.md``). :attr:`HFEngine.stats` keeps
the split: ``forward_s`` (model forwards) against ``total_s`` (whole ``generate`` calls).

Seeds: every reply has its own random stream, seeded by its prompt's seed
(:func:`~ragen_core.engines.sampling.row_uniforms`: one uniform per new token), so a reply
depends on its prompt, the params, the weights and its seed, not on its row, on the other
prompts of the batch, or on when they finish (up to floating-point differences between batch
shapes, which can move a draw that lands exactly on a boundary). Rows without a seed get one
from ``os.urandom``.

Weights: the engine holds a reference to the policy module. :meth:`HFEngine.sync_weights` with
that module's own state dict (the trainer's case) only records the version and drops the kept
KV caches; any other state dict is loaded into the module first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ragen_core.engines.config import HFEngineConfig
from ragen_core.engines.sampling import row_uniforms, sample_next
from ragen_core.errors import RagenError
from ragen_core.interfaces.engine import Engine, Generation, SamplingParams, checked_budgets, per_prompt_seeds

__all__ = ["HFEngine", "additive_prefill_mask", "sample_next"]


class HFEngine(Engine):
    """Engine that samples with a ``transformers`` causal LM in the trainer's process.

    Build it from a config (the model is loaded lazily on first use through
    :func:`ragen_core.models.load_model_and_tokenizer`) or hand it the policy the trainer already
    holds: ``HFEngine(config, model=policy, tokenizer=tok)`` or ``engine.attach(policy, tok)``.
    """

    config_class = HFEngineConfig
    config: HFEngineConfig

    def __init__(
        self,
        config: HFEngineConfig | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, **overrides)
        self.model: Any = model
        self.tokenizer: Any = tokenizer
        self._store: list[_Entry] = []
        self._next_store: list[_Entry] = []
        self._store_model: Any = None
        #: Running totals: ``calls``, ``prompt_tokens`` (all prompt ids), ``prefill_tokens``
        #: (prompt ids actually run through the model), ``reused_tokens`` (served from kept KV
        #: caches), ``shared_tokens`` (ids of prompts identical to an earlier prompt of the same
        #: batch, served by its prefill) and ``generated_tokens``. ``prompt_tokens`` is the sum
        #: of ``prefill_tokens``, ``reused_tokens`` and ``shared_tokens``. Seconds: ``total_s``
        #: (inside ``generate``) and ``forward_s`` (inside the model's forwards, synchronised on
        #: CUDA); the difference is the engine's own time (batching, sampling, cache moves).
        self.stats: dict[str, float] = dict.fromkeys(
            ("calls", "prompt_tokens", "prefill_tokens", "reused_tokens", "shared_tokens", "generated_tokens"), 0
        )
        self.stats.update(forward_s=0.0, total_s=0.0)

    # ------------------------------------------------------------------ setup
    def attach(self, model: Any, tokenizer: Any = None) -> None:
        """Share ``model`` in-process (no copy) and decode with ``tokenizer``; policy version 0."""
        self.model = model
        self.policy_version = 0
        self.clear_cache()
        if tokenizer is not None:
            self.tokenizer = tokenizer

    def load(self) -> None:
        """Load ``config.model`` (empty: ``tiny``) if no model is attached yet."""
        if self.model is not None and self.tokenizer is not None:
            return
        from ragen_core.models import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(self.config.model or "tiny", device=self.config.device, dtype=self.config.dtype)
        if self.model is None:
            self.model = model
        if self.tokenizer is None:
            self.tokenizer = tokenizer

    def sync_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Sample from ``weights`` as policy ``version`` from now on (see :meth:`Engine.sync_weights`).

        When ``weights`` are the attached module's own tensors (same names, same storage: the
        trainer updated the shared module in place) nothing is copied; otherwise they are loaded
        into the attached module (``strict``: every name must match). Either way the kept KV
        caches, computed with the old weights, are dropped.

        Raises:
            RagenError: ``weights`` do not fit the attached module (missing, unexpected or
                mis-shaped entries).
        """
        self.load()
        if not _same_storage(weights, self.model.state_dict()):
            try:
                with torch.no_grad():
                    self.model.load_state_dict(weights, strict=True)
            except RuntimeError as exc:
                first = str(exc).strip().splitlines()[0]
                raise RagenError(
                    f"HFEngine.sync_weights: the state dict does not fit the attached model: {first}",
                    hints=["pass the policy's own state_dict() (merged adapters need the same wrapping as the attached model)"],
                ) from exc
        self.policy_version = int(version)
        self.clear_cache()

    def close(self) -> None:
        self.model = None
        self.clear_cache()

    @property
    def stop_ids(self) -> set[int]:
        """Ids that end a reply: the tokenizer's eos, ``<|im_end|>`` if known, config extras."""
        self.load()
        ids = set(self.config.stop_token_ids)
        tok = self.tokenizer
        if tok.eos_token_id is not None:
            ids.add(int(tok.eos_token_id))
        im_end = tok.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != tok.unk_token_id:
            ids.add(im_end)
        return ids

    # ------------------------------------------------------------- generation
    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None = None) -> list[Generation]:
        """Sample one reply per prompt (see :meth:`Engine.generate`).

        Reply ``i`` depends on ``prompts[i]``, ``seeds[i]``, the params and the weights only (see
        the module docstring). ``logprobs`` are taken under the distribution actually sampled
        from (temperature, top-k, top-p applied); for greedy decoding they are the model's plain
        log-softmax.
        """
        return self._generate(prompts, params, seeds, None)

    def generate_capped(
        self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None, max_new_tokens: Sequence[int],
    ) -> list[Generation]:
        """:meth:`generate` with a budget per prompt, in one batch: a row stops at its own budget
        (``finish_reason="length"``), with the ids, log-probs and seed stream it would have had
        alone with ``params.max_new_tokens`` equal to that budget (see :meth:`Engine.generate_capped`)."""
        return self._generate(prompts, params, seeds, checked_budgets(max_new_tokens, params, len(prompts)))

    def _generate(self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None,
                  caps: list[int] | None) -> list[Generation]:
        """Both ``generate`` methods; ``caps``: per-prompt budgets (None: ``params.max_new_tokens`` for all)."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise RagenError("HFEngine.generate got an empty prompt", hints=["every prompt needs at least one token"])
        started = time.perf_counter()
        row_seeds = per_prompt_seeds(seeds, len(prompts))
        budgets = caps if caps is not None else [params.max_new_tokens] * len(prompts)
        if row_seeds is None:
            row_seeds = [int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF for _ in prompts]
        self.load()
        size = self.config.max_batch_size or len(prompts)
        out: list[Generation] = []
        model = self.model
        if model is not self._store_model:
            self.clear_cache()
            self._store_model = model
        self._next_store = []
        was_training = model.training
        model.eval()
        threads = torch.get_num_threads()
        if self.config.torch_threads is not None and self._device().type == "cpu":
            torch.set_num_threads(self.config.torch_threads)
        try:
            with torch.no_grad():
                for start in range(0, len(prompts), size):
                    rows = slice(start, start + size)
                    out.extend(self._generate_batch(prompts[rows], params, row_seeds[rows], budgets[rows]))
        finally:
            model.train(was_training)
            torch.set_num_threads(threads)
            # Only the replies of the latest call are kept: the next turn extends exactly these.
            self._store, self._next_store = self._next_store, []
            self.stats["total_s"] += time.perf_counter() - started
        return out

    def _forward(self, model: Any, **kwargs: Any) -> torch.Tensor:
        """The last position's logits of one model call, timed into ``stats["forward_s"]``."""
        t0 = time.perf_counter()
        logits: torch.Tensor = model(use_cache=True, **kwargs).logits[:, -1, :]
        if logits.device.type == "cuda":
            torch.cuda.synchronize(logits.device)  # kernels run asynchronously: time them, not their launch
        self.stats["forward_s"] += time.perf_counter() - t0
        return logits

    def _device(self) -> torch.device:
        device: torch.device = next(self.model.parameters()).device
        return device

    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int], caps: list[int]) -> list[Generation]:
        """One batch; row ``i`` stops at an end token or after ``caps[i]`` new tokens."""
        from transformers import DynamicCache

        from ragen_core.engines._kv import use_growable_layers

        model, device = self.model, self._device()
        greedy = not params.do_sample or params.temperature == 0
        steps = max(caps)
        # One stream per reply: column t is the uniform of its t-th new token (see row_uniforms);
        # a stream's first values do not depend on its length, so a shorter cap samples a prefix.
        uniforms = None if greedy else row_uniforms(seeds, steps, device)
        stop = torch.tensor(sorted(self.stop_ids), device=device)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else int(stop[0])
        vocab_limit = len(self.tokenizer) if self.config.mask_unused_vocab else None
        n = len(prompts)

        # Identical prompts (a GRPO group's shared first turn) are prefilled once; the prefilled
        # rows are then repeated, KV cache and last logits included, one per prompt.
        first: dict[tuple[int, ...], int] = {}
        expand: list[int] = []  # batch row -> prefilled row
        uniq: list[list[int]] = []
        for p in prompts:
            key = tuple(p) if self.config.share_prompt_prefill else (len(uniq),)
            if key not in first:
                first[key] = len(uniq)
                uniq.append(p)
            expand.append(first[key])
        m = len(uniq)

        # Row layout: [left pad | reused cache of this row | left pad | new prompt tokens].
        hits = [self._lookup(p) for p in uniq]
        reused = [len(h.tokens) if h is not None else 0 for h in hits]
        suffixes = [p[c:] for p, c in zip(uniq, reused)]
        width_c, width_s = max(reused), max(len(x) for x in suffixes)
        input_ids = torch.full((m, width_s), pad, dtype=torch.long, device=device)
        positions = torch.zeros((m, width_s), dtype=torch.long, device=device)
        mask = torch.zeros((m, width_c + width_s), dtype=torch.long, device=device)
        for i, (c, suf) in enumerate(zip(reused, suffixes)):
            input_ids[i, width_s - len(suf) :] = torch.tensor(suf, dtype=torch.long, device=device)
            positions[i, width_s - len(suf) :] = torch.arange(c, c + len(suf), device=device)
            mask[i, width_c - c : width_c] = 1
            mask[i, width_c + width_s - len(suf) :] = 1
        cache = DynamicCache(config=model.config)
        use_growable_layers(cache, reserve=steps + 1)
        if width_c:
            self._fill_cache(cache, hits, width_c, width_s, device)
        cache_kw = _cache_kwarg(model)
        prefill_mask = additive_prefill_mask(mask, width_s, _model_dtype(model)) if _float_mask_pays(model, device) else mask
        logits = self._forward(
            model, input_ids=input_ids, attention_mask=prefill_mask, position_ids=positions, logits_to_keep=1, **{cache_kw: cache}
        )
        del prefill_mask
        next_pos = positions[:, -1] + 1
        if m < n:
            index = torch.tensor(expand, dtype=torch.long, device=device)
            cache.batch_select_indices(index)
            logits, mask, next_pos = logits[index], mask[index], next_pos[index]

        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        reasons: list[str] = ["length"] * n
        rows = torch.arange(n, device=device)  # original index of each live batch row
        alive = [True] * n  # per batch row
        store: list[_Entry] = []
        for step in range(steps):
            u = None if uniforms is None else uniforms[rows, step]
            tok, lp = sample_next(logits.float(), params, u, vocab_limit)
            stopped = torch.isin(tok, stop).tolist()
            for i, (row, t, logp) in enumerate(zip(rows.tolist(), tok.tolist(), lp.tolist())):
                if alive[i]:
                    tokens[row].append(t)
                    logps[row].append(logp)
                    if stopped[i]:
                        reasons[row], alive[i] = "stop", False
                    elif len(tokens[row]) == caps[row]:  # its budget is spent: "length", as for the run's own cap
                        alive[i] = False
            if not any(alive) or step == steps - 1:
                break
            if self.config.drop_finished and not all(alive):
                self._save(store, cache, mask, rows, [i for i, a in enumerate(alive) if not a], prompts, tokens)
                keep = torch.tensor(_fill_holes(alive))  # on the CPU: the cache plans its moves without a sync
                cache.batch_select_indices(keep)
                keep = keep.to(device)
                rows, tok, mask, next_pos = rows[keep], tok[keep], mask[keep], next_pos[keep]
                alive = [True] * len(keep)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            logits = self._forward(model, input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None], **{cache_kw: cache})
            next_pos = next_pos + 1
        self._save(store, cache, mask, rows, list(range(len(rows))), prompts, tokens)
        self._next_store.extend(store)
        st = self.stats
        st["calls"] += 1
        st["prompt_tokens"] += sum(len(p) for p in prompts)
        st["reused_tokens"] += sum(reused)
        st["prefill_tokens"] += sum(len(x) for x in suffixes)
        st["shared_tokens"] += sum(len(p) for p in prompts) - sum(len(p) for p in uniq)
        st["generated_tokens"] += sum(len(t) for t in tokens)
        return [
            Generation(token_ids=tokens[i], logprobs=logps[i], finish_reason=reasons[i], policy_version=self.policy_version)  # type: ignore[arg-type]
            for i in range(n)
        ]

    # ------------------------------------------------------- KV reuse across calls
    def clear_cache(self) -> None:
        """Forget all kept KV caches (done automatically when the model changes)."""
        self._store = []
        self._next_store = []

    def rollout_done(self) -> None:
        """The kept KV of a rollout's last turn is never extended: free it before the update
        (Sudoku's default rollout keeps ~300 MB with the tiny model; the cap, 500k tokens, is
        ~6 GB for a 0.5B Qwen)."""
        self.clear_cache()

    def _lookup(self, prompt: list[int]) -> _Entry | None:
        """The longest kept entry whose tokens are a strict prefix of ``prompt``."""
        if not self.config.reuse_kv_cache:
            return None
        best: _Entry | None = None
        for entry in self._store:
            k = len(entry.tokens)
            if k >= len(prompt) or (best is not None and k <= len(best.tokens)):
                continue
            # Cheap rejections first: most entries belong to other episodes.
            if prompt[k - 1] != entry.tokens[-1] or prompt[k // 2] != entry.tokens[k // 2]:
                continue
            if prompt[:k] == entry.tokens:
                best = entry
        return best

    @staticmethod
    def _fill_cache(cache: Any, hits: list[_Entry | None], width: int, room: int, device: Any) -> None:
        """Lay the kept caches of ``hits`` into ``cache``, right-aligned to ``width`` positions."""
        from ragen_core.engines._kv import GrowableLayer

        ref = next(h for h in hits if h is not None)
        layers = getattr(cache, "layers", None) or []
        if len(layers) == len(ref.kv) and all(type(x) is GrowableLayer for x in layers):
            for i, layer in enumerate(layers):  # straight into the buffers the prefill extends
                layer.fill_rows([None if h is None else h.kv[i] for h in hits], width, room)
            return
        for layer, (k0, v0) in enumerate(ref.kv):
            keys = k0.new_zeros((len(hits), k0.shape[0], width, k0.shape[2]))
            values = v0.new_zeros((len(hits), v0.shape[0], width, v0.shape[2]))
            for i, h in enumerate(hits):
                if h is not None:
                    c = len(h.tokens)
                    keys[i, :, width - c :] = h.kv[layer][0]
                    values[i, :, width - c :] = h.kv[layer][1]
            cache.update(keys.to(device), values.to(device), layer)

    def _save(
        self, store: list[_Entry], cache: Any, mask: torch.Tensor, rows: torch.Tensor, local: list[int],
        prompts: list[list[int]], tokens: list[list[int]],
    ) -> None:
        """Keep the KV of ``local`` batch rows: their prompt + reply minus the last token (not fed yet)."""
        if not self.config.reuse_kv_cache or not local:
            return
        layers = getattr(cache, "layers", None)
        if layers is None:  # very old transformers: no per-layer objects, no reuse
            return
        width = layers[0].keys.shape[2]
        kept = sum(len(e.tokens) for e in self._next_store) + sum(len(e.tokens) for e in store)
        for i in local:
            row = int(rows[i])
            seq = prompts[row] + tokens[row][:-1]
            if kept + len(seq) > self.config.reuse_kv_max_tokens:
                continue
            kept += len(seq)
            valid = mask[i, :width].nonzero().squeeze(-1)[: len(seq)]
            if len(valid) != len(seq):
                continue
            if len(seq) and int(valid[-1]) - int(valid[0]) + 1 == len(seq):  # no gap: plain slice copy
                a, b = int(valid[0]), int(valid[-1]) + 1
                kv = [(layer.keys[i, :, a:b].clone(), layer.values[i, :, a:b].clone()) for layer in layers]
            else:
                kv = [(layer.keys[i, :, valid], layer.values[i, :, valid]) for layer in layers]
            store.append(_Entry(tokens=seq, kv=kv))


def _fill_holes(alive: list[bool]) -> list[int]:
    """Rows to keep, in their new order: live rows stay put, the last live rows fill the holes.

    Moving a tail row into each finished row's place keeps the copy per finished row to one row
    (keeping the order would shift every row after the first hole).
    """
    n = sum(alive)
    tail = iter([i for i in range(n, len(alive)) if alive[i]])
    return [i if alive[i] else next(tail) for i in range(n)]


def _same_storage(weights: Mapping[str, Any], own: Mapping[str, Any]) -> bool:
    """True when ``weights`` are ``own``'s tensors themselves (same names, same memory)."""
    if weights.keys() != own.keys():
        return False
    for name, mine in own.items():
        w = weights[name]
        if not isinstance(w, torch.Tensor) or w.device != mine.device or w.data_ptr() != mine.data_ptr():
            return False
        if w.shape != mine.shape or w.dtype != mine.dtype:
            return False
    return True


@dataclass
class _Entry:
    """KV cache of one finished context (prompt + reply without its last sampled token)."""

    tokens: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]


def additive_prefill_mask(mask: torch.Tensor, queries: int, dtype: torch.dtype) -> torch.Tensor:
    """Causal + padding mask of a prefill as one additive ``[batch, 1, queries, keys]`` tensor.

    ``mask`` is the 2-D padding mask over all key columns (kept cache, then the ``queries``
    new tokens, which are the last columns). Allowed entries are 0, others the dtype's lowest
    value (not -inf: a pad query with no allowed key gets finite garbage, never NaN).

    Why: given a 2-D mask, ``transformers`` builds a boolean 4-D mask and PyTorch's CPU
    attention kernel turns it into an additive one in every layer; for a prefill of a few
    hundred tokens over a long kept history that conversion is ~10 % of the prefill. Built once
    here, the model uses it as is; the allowed positions, hence the result, are the same.
    """
    keys = mask.shape[1]
    cols = torch.arange(keys, device=mask.device)
    rows = torch.arange(keys - queries, keys, device=mask.device)
    allowed = (cols[None, :] <= rows[:, None])[None, :, :] & mask.bool()[:, None, :]
    out = torch.zeros((mask.shape[0], 1, queries, keys), dtype=dtype, device=mask.device)
    return out.masked_fill_(~allowed[:, None], torch.finfo(dtype).min)


def _float_mask_pays(model: Any, device: torch.device) -> bool:
    """Prebuild an additive mask only where it was measured to save work: sdpa on CPU."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return device.type == "cpu" and impl == "sdpa"


def _model_dtype(model: Any) -> torch.dtype:
    dtype: torch.dtype = next(model.parameters()).dtype
    return dtype


def _cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument: ``cache`` in recent transformers, ``past_key_values`` before
    (a PEFT wrapper is looked through: its own ``forward`` only takes ``**kwargs``)."""
    from ragen_core.models import cache_argument

    return cache_argument(model) or "past_key_values"
