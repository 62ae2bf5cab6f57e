"""vLLM engine: offline ``vllm.LLM`` in the trainer's process, fed and read as token ids.

Needs ``pip install 'ragen-core[vllm]'`` and a CUDA GPU; vLLM is imported only when the engine
is built, and a missing install raises a :class:`~ragen_core.errors.RagenError` saying what to
install. Prompts go in as ``{"prompt_token_ids": ids}`` and replies come back as the sampled ids
with the log-prob of each (``logprobs=0`` asks vLLM for the sampled token only), so the rollout
layer's token contract holds exactly as with :class:`~ragen_core.engines.hf.HFEngine`.

Weight sync copies the trainer's ``state_dict`` into vLLM's model through the model's own
``load_weights``. How to reach that model object has changed across vLLM releases; we try, in
order, ``LLM.apply_model`` (recent releases; in-process only with
``VLLM_ENABLE_V1_MULTIPROCESSING=0``) and the single-process executor's driver worker (older
releases). If neither exists the error says so instead of silently sampling stale weights.

Status: written against vLLM's documented offline API; not exercised by the CPU test suite
(only the missing-dependency path is). Validate on a GPU machine before relying on it.
"""

from __future__ import annotations

from typing import Any

from ragen_core.engines.config import VLLMEngineConfig
from ragen_core.errors import RagenError
from ragen_core.interfaces.engine import Engine, Generation, SamplingParams


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise RagenError(
            f"engine 'vllm' needs the vllm package: {exc}",
            hints=["pip install 'ragen-core[vllm]'   (a CUDA build of vllm matching your torch)", "or use --engine hf"],
        ) from exc
    return vllm


class VLLMEngine(Engine):
    """Samples with vLLM; see the module docstring for requirements and weight sync."""

    config_class = VLLMEngineConfig
    config: VLLMEngineConfig

    def __init__(self, config: VLLMEngineConfig | None = None, *, model: Any = None, tokenizer: Any = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._vllm = _import_vllm()
        name = self.config.model or getattr(getattr(model, "config", None), "_name_or_path", "")
        if not name:
            raise RagenError("engine 'vllm' needs a model to load", hints=["set engine.vllm.model to a Hub id or local folder"])
        self.llm = self._vllm.LLM(
            model=name,
            dtype=self.config.dtype,
            gpu_memory_utilization=self.config.gpu_memory_utilization,
            max_model_len=self.config.max_model_len,
            enforce_eager=self.config.enforce_eager,
            enable_prefix_caching=self.config.enable_prefix_caching,
        )
        self.tokenizer = tokenizer
        if model is not None:
            self.sync_weights(model)

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Generation]:
        """One batched ``LLM.generate`` call; per-prompt seeds derive from ``seed``."""
        if not prompts:
            return []
        greedy = not params.do_sample or params.temperature == 0
        requests = []
        for i in range(len(prompts)):
            requests.append(
                self._vllm.SamplingParams(
                    temperature=0.0 if greedy else params.temperature,
                    top_p=1.0 if greedy else params.top_p,
                    top_k=-1 if greedy or params.top_k <= 0 else params.top_k,
                    max_tokens=params.max_new_tokens,
                    logprobs=0,
                    seed=None if seed is None else (seed * 1_000_003 + i) % (2**31),
                )
            )
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], requests, use_tqdm=False)
        result = []
        for out in outputs:
            choice = out.outputs[0]
            ids = list(choice.token_ids)
            logprobs = None
            if choice.logprobs is not None:
                logprobs = [float(step[tid].logprob) for step, tid in zip(choice.logprobs, ids)]
            reason = "length" if choice.finish_reason == "length" else "stop"
            result.append(Generation(token_ids=ids, logprobs=logprobs, finish_reason=reason))
        return result

    def sync_weights(self, model: Any) -> None:
        """Copy ``model``'s weights into vLLM (see the module docstring for how)."""
        weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
        if hasattr(self.llm, "apply_model"):
            self.llm.apply_model(lambda m: m.load_weights(weights))
        else:
            try:
                target = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
            except AttributeError as exc:
                raise RagenError(
                    "this vllm version exposes no in-process model to update weights",
                    hints=["use --engine hf, or a vllm release with LLM.apply_model"],
                ) from exc
            target.load_weights(weights)
        if self.config.enable_prefix_caching and hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def close(self) -> None:
        self.llm = None
