"""Rollout engine interface: batched generation over token ids, with weight sync.

The trainer hands the engine prompt *token ids* (never text) and receives the sampled ids and
their log-probs, so the update trains on exactly what was sampled. After each optimiser step the
trainer calls :meth:`Engine.sync_weights`; an in-process HF engine shares the policy module and
does nothing, a vLLM engine copies the weights into its workers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ragen_core.specs import PluginConfig


class SamplingParams(PluginConfig):
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int = -1
    """-1 disables top-k."""
    max_new_tokens: int = Field(default=400, ge=1)
    do_sample: bool = True
    """False = greedy."""


@dataclass
class Generation:
    token_ids: list[int]
    """Exactly the sampled ids (including the EOS token if one was sampled)."""
    logprobs: list[float] | None
    """Log-prob of each sampled id under the sampling distribution, when the engine reports them."""
    finish_reason: Literal["stop", "length"]


class Engine(ABC):
    """Base class of engine plugins."""

    config_class: type[PluginConfig] = PluginConfig

    def __init__(self, config: PluginConfig | None = None, **overrides: Any) -> None:
        self.config = config if config is not None else self.config_class(**overrides)

    @abstractmethod
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Generation]:
        """Generate one continuation per prompt, in one batched call."""

    def sync_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights."""

    def close(self) -> None:
        """Release resources. Idempotent."""
