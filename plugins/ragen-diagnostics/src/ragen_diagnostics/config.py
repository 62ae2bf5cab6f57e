"""Settings of the reasoning-collapse diagnostic (spec 2.8 and 10).

Defaults follow the reference's base config (``compute_freq`` 5, ``num_samples`` 64, both
families on, ``std_eps`` 1e-3, ``ema_decay`` 0.9). The fields beyond the reference select the
fixes of spec 17.3: shared-prefix scoring (L21), trajectory sampling without replacement (L22).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from ragen_core.interfaces.diagnostic import DiagnosticConfig


class CollapseConfig(DiagnosticConfig):
    """Configuration of :class:`ragen_diagnostics.diagnostic.CollapseDiagnostic`."""

    compute_freq: int = Field(default=5, ge=1)
    """Run at step 1 and whenever ``step % compute_freq == 0``."""
    num_samples: Annotated[int, Field(ge=2)] | Literal["all"] = 64
    """Maximum number of (prompt, reasoning) pairs scored per family, or ``"all"``."""

    @field_validator("num_samples", mode="before")
    @classmethod
    def _samples(cls, value: Any) -> Any:
        """One line for a bad value (pydantic named both arms of the union: ``num_samples.constrained-int: ...``)."""
        if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value >= 2):
            return value
        if isinstance(value, str) and value.strip().isdigit() and int(value) >= 2:
            return int(value)
        raise ValueError("is an integer >= 2 (pairs scored per family) or 'all'")
    first_turn_enabled: bool = True
    """Compute the first-turn family (columns = env groups)."""
    multi_turn_enabled: bool = True
    """Compute the trajectory-uniform multi-turn family."""
    trajectory_without_replacement: bool = True
    """Fixed mode (L22): draw (episode, turn) pairs without replacement and merge identical prompts
    into one column. False reproduces the reference (with replacement, one column per draw)."""
    z_source: Literal["reasoning", "response", "auto"] = "reasoning"
    """What Z is: the think-block reasoning (spec 10.2), the whole sampled reply (no-think mode,
    spec 17 L24), or ``auto`` (reasoning when the turn has one, else the reply)."""
    std_eps: float = Field(default=1e-3, gt=0)
    """Added to the marginal std in the z-scores."""
    ema_decay: float = Field(default=0.9, ge=0, lt=1)
    """Decay of the marginal-std moving average (first observation initialises it)."""
    scoring: Literal["shared-prefix", "naive"] = "shared-prefix"
    """Cross-scoring backend: encode each prompt once and reuse its KV cache (L21), or the
    reference's full teacher-forced pass per (prompt, reasoning) pair."""
    micro_batch_size: int = Field(default=16, ge=1)
    """Reasoning sequences scored per forward pass."""
    seed: int = 0
    """Seed of the pair sampling (combined with the step and the family name)."""
    warn_mi_ratio: float = Field(default=0.5, ge=0, le=1)
    """Warn when MI falls below this fraction of its first measurement."""
    warn_entropy_ratio: float = Field(default=0.5, ge=0, le=1)
    """Conditional entropy at or above this fraction of its first value "holds" (template collapse);
    below it, entropy "fell" as well (low-entropy collapse)."""
    warn_min_baseline_mi: float = Field(default=0.02, ge=0)
    """No collapse warning unless the first measured MI exceeds this (nats per token)."""
