"""The built-in rollout engine (HF). ``plugin`` holds the light spec; the implementation loads lazily.

Other engines are plugins of their own (vLLM: ``plugins/ragen-engine-vllm``)."""

from __future__ import annotations

from ragen_core.engines.config import HFEngineConfig

__all__ = ["HFEngineConfig"]
