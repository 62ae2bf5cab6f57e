"""Settings of the built-in engine (light: pydantic only, safe to import from specs)."""

from __future__ import annotations

from pydantic import Field

from ragen_core.specs import PluginConfig


class HFEngineConfig(PluginConfig):
    """Settings of the in-process Hugging Face ``transformers`` engine."""

    model: str = ""
    """Model the engine loads when none is attached (a standalone engine): ``tiny``,
    ``tiny-qwen-tok``, a Hub id or a folder; empty = ``tiny``. In a run the trainer attaches its
    policy (the run's ``model``), so this is not read there: a run's config.yaml said ``tiny`` for
    a run of another model."""
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

