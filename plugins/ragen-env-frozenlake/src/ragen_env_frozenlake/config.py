"""Settings of the FrozenLake env (defaults from spec 13.2)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragen_core.interfaces.env import EnvConfig


class FrozenLakeConfig(EnvConfig):
    """FrozenLake settings; every reset draws a new map from the reset seed."""

    size: int = Field(default=4, ge=2, le=64)
    """Side length of the square map."""
    p: float = Field(default=0.9, ge=0.0, le=1.0)
    """Probability that a generated cell is frozen (walkable); the rest are holes."""
    is_slippery: bool = True
    """If False, every move goes exactly where it was aimed (``success_rate`` is ignored)."""
    success_rate: float = Field(default=0.8, ge=0.0, le=1.0)
    """On slippery ice: probability of moving in the intended direction; each of the two
    perpendicular directions gets ``(1 - success_rate) / 2``. 1.0 makes the lake deterministic."""
    map_seed: int | None = None
    """Fixed map seed for every reset; ``None`` derives the map from the reset seed."""
    observation_format: Literal["grid", "coord", "grid_coord"] = "grid"
    """Text observation: symbol grid, coordinate lists, or both (coordinates first)."""

    @property
    def deterministic(self) -> bool:
        """True when moves never slip."""
        return (not self.is_slippery) or self.success_rate >= 1.0
