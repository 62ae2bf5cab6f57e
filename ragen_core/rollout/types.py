"""Plain-Python records of what happened during a rollout.

Token ids are the truth: ``Turn.prompt_ids`` is exactly the context the engine was given and
``Turn.response_ids`` exactly what it sampled. Text fields are for parsing and for humans.
These records are what hooks, filters, diagnostics, ``ragen eval`` exports and the training
batch builder consume; they are JSON-serialisable via :meth:`Trajectory.to_dict`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Turn:
    prompt_ids: list[int]
    """Full context the model saw for this turn (chat template + generation prefix)."""
    response_ids: list[int]
    """Exactly the sampled token ids (including EOS if sampled)."""
    response_text: str
    """Decoded reply with the generation prefix (``<think>``) put back in front."""
    reasoning: str | None = None
    """Text inside ``<think>...</think>`` (None if the reply had no valid think block)."""
    reasoning_ids: list[int] | None = None
    """``reasoning`` tokenised without special tokens (the Z of the collapse diagnostics)."""
    answer: str | None = None
    """Text inside ``<answer>...</answer>`` or None when the reply did not parse."""
    actions: list[str] = field(default_factory=list)
    """Actions that were executed this turn."""
    reward: float = 0.0
    """Sum of env rewards of this turn's actions (format penalty excluded)."""
    penalty: float = 0.0
    """Format penalty charged for this turn (<= 0)."""
    valid: bool = False
    """The reply parsed and every parsed action was known."""
    info: dict[str, Any] = field(default_factory=dict)
    """Info of the last executed action, plus rollout flags."""
    observation: str = ""
    """The observation text shown before this turn."""
    response_logprobs: list[float] | None = None
    finish_reason: str = ""
    """Why generation stopped: ``"stop"`` (an end token was sampled) or ``"length"`` (cut)."""
    policy_version: int = 0
    """Version of the policy weights that sampled this reply (see ``Engine.sync_weights``)."""
    info_records: list[dict[str, float]] = field(default_factory=list)
    """One record per executed action: its values of the env's declared ``info_metrics`` keys
    (a key the action's info lacked is absent)."""
    sample_messages: list[dict[str, str]] | None = None
    """Runs with ``compat.retokenized_text`` (spec 17 L1): the chat messages this turn trains on,
    rendered and tokenised again by :func:`ragen_core.trainer.batch.build_batch` (system prompt,
    user messages without the invalid-action warning, replies reconstructed, this turn's last);
    None otherwise."""


@dataclass
class Trajectory:
    env: str
    """Env plugin name."""
    tag: str
    """Env instance label (preset name or env name) used in metric keys."""
    group_id: int
    member: int
    seed: int
    env_id: int
    system_prompt: str = ""
    turns: list[Turn] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    success: bool = False
    final_observation: str = ""
    end_reason: str = ""
    """Why the episode ended: ``"done"`` (the env said so), ``"action_budget"`` (per-episode action
    cap reached), ``"max_turns"``, ``"context_length"`` (the next prompt would not fit in
    ``max_model_len`` minus its reply budget, see ``RolloutConfig.max_model_len``; the episode counts as truncated), or ``"timeout"`` /
    ``"failed"`` (the env pool gave up on the episode's env; truncated, the last turn's
    ``info["pool_error"]`` says why)."""
    info_metrics: dict[str, float] = field(default_factory=dict)
    """The episode's value of each declared info-metric key some action reported, aggregated over
    its turns' ``info_records`` as the env declares (``mean``, ``sum``, ``last``, ``max``, ``min``)."""

    @property
    def env_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def penalty(self) -> float:
        return float(sum(t.penalty for t in self.turns))

    @property
    def total_reward(self) -> float:
        """Episode score used for training: env rewards plus format penalties."""
        return self.env_reward + self.penalty

    @property
    def num_actions(self) -> int:
        return sum(len(t.actions) for t in self.turns)

    @property
    def num_generated_tokens(self) -> int:
        return sum(len(t.response_ids) for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for turn in data["turns"]:  # recorded by compat.retokenized_text runs only: other rollout files keep their keys
            if turn["sample_messages"] is None:
                del turn["sample_messages"]
        data.update(total_reward=self.total_reward, env_reward=self.env_reward, penalty=self.penalty)
        return data
