"""Settings of the Countdown env (spec 13.4; reference scores, configurable here)."""

from __future__ import annotations

from pydantic import Field, model_validator

from ragen_core.interfaces.env import EnvConfig


class CountdownConfig(EnvConfig):
    """Countdown settings: procedural instances by default, or rows of a task file."""

    max_actions_per_episode: int = Field(default=1, ge=1)
    """One answer per episode."""
    max_actions_per_turn: int = Field(default=1, ge=1)
    """One answer per reply."""
    max_turns: int = Field(default=1, ge=1)
    """One model turn per episode (the reference task file)."""
    max_tokens: int = Field(default=100, ge=1)
    """Response-length hint shown in the prompt."""

    data_path: str | None = None
    """Task file (``.parquet`` with columns ``target`` and ``nums``, or ``.jsonl``); ``None``
    generates instances procedurally from the seed."""
    val_data_path: str | None = None
    """Task file used when ``mode == "val"`` (its problems are dropped from ``data_path``'s
    training rows); ``None`` holds out ``val_fraction`` of ``data_path`` (procedural without one)."""
    val_fraction: float = Field(default=0.05, gt=0, lt=1)
    """Share of ``data_path``'s problems held out for validation when there is no
    ``val_data_path``: a problem validates when the hash of its target and numbers falls below
    this share, so training and validation never share a problem and the split does not depend
    on row order (a file of a few problems still validates on one)."""
    max_instances: int = Field(default=20_000, ge=1)
    """Keep only the first this-many rows of a task file (before filtering)."""
    plus_minus_only: bool = False
    """Keep only problems solvable with + and - alone (the reference's dataset filter);
    procedural instances then use only + and -."""
    min_numbers: int = Field(default=3, ge=2, le=6)
    """Procedural: fewest numbers per instance."""
    max_numbers: int = Field(default=4, ge=2, le=6)
    """Procedural: most numbers per instance."""
    max_number: int = Field(default=99, ge=1, le=10_000)
    """Procedural: numbers are drawn uniformly from 1..max_number."""
    min_target: int = Field(default=1)
    """Procedural: smallest accepted target."""
    max_target: int = Field(default=100)
    """Procedural: largest accepted target."""
    score: float = 1.0
    """Reward for an expression that uses every number once and equals the target."""
    format_score: float = 0.1
    """Reward for an expression that uses the right numbers but misses the target or fails to
    evaluate (division by zero, syntax error)."""

    @model_validator(mode="after")
    def _check_ranges(self) -> CountdownConfig:
        if self.min_numbers > self.max_numbers:
            raise ValueError(f"min_numbers ({self.min_numbers}) > max_numbers ({self.max_numbers})")
        if self.min_target > self.max_target:
            raise ValueError(f"min_target ({self.min_target}) > max_target ({self.max_target})")
        return self
