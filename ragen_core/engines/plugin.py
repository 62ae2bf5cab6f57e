"""Entry-point target of the built-in engine (light: no torch, no transformers).

The vLLM engine is its own distribution, ``plugins/ragen-engine-vllm`` (the core never imports vllm)."""

from __future__ import annotations

from ragen_core.engines.config import HFEngineConfig
from ragen_core.specs import EngineSpec

HF_SPEC = EngineSpec(
    name="hf",
    summary="In-process Hugging Face transformers sampling with a KV cache (CPU or one GPU)",
    config_model=HFEngineConfig,
    factory="ragen_core.engines.hf:HFEngine",
    aliases=("transformers",),
)

