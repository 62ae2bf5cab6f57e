"""Built-in rollout engines. ``plugin`` holds the light specs; implementations load lazily."""

from __future__ import annotations

from ragen_core.engines.config import HFEngineConfig, VLLMEngineConfig

__all__ = ["HFEngineConfig", "VLLMEngineConfig"]
