"""Settings of the Sokoban environment (spec 13.1), validated by pydantic.

Defaults describe the reference's ``SimpleSokoban`` tag (6x6 room, one box). The reference
dataclass defaults to three boxes, but every reference tag overrides that, so one box is the
useful default here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ragen_core.interfaces.env import EnvConfig

#: Cell code -> symbol, codes as in spec 13.1 (6 = player standing on a target).
DEFAULT_GRID_LOOKUP: dict[int, str] = {
    0: "#",
    1: "_",
    2: "O",
    3: "√",
    4: "X",
    5: "P",
    6: "S",
}

#: Symbol -> meaning, shown as the legend in the instruction.
DEFAULT_GRID_VOCAB: dict[str, str] = {
    "#": "wall",
    "_": "empty",
    "O": "target",
    "√": "box on target",
    "X": "box",
    "P": "player",
    "S": "player on target",
}


class SokobanConfig(EnvConfig):
    """Room size, difficulty, symbols and observation format of a Sokoban env."""

    dim_room: tuple[int, int] = (6, 6)
    """Grid size as (rows, cols), outer wall included."""
    num_boxes: int = Field(default=1, ge=1)
    """Boxes (and targets) per room."""
    max_steps: int = Field(default=100, ge=1)
    """Env-side step limit per episode (the rollout cap ``max_actions_per_episode`` is lower)."""
    search_depth: int = Field(default=300, ge=3)
    """Reverse-play depth bound (the reference TTL): start states are at most this minus 2 moves
    from the solved room. Small values give easier rooms and more failed attempts."""
    grid_lookup: dict[int, str] = Field(
        default_factory=lambda: dict(DEFAULT_GRID_LOOKUP)
    )
    """Cell code (0 wall, 1 empty, 2 target, 3 box on target, 4 box, 5 player, 6 player on
    target) -> one-character symbol used by the text grid."""
    grid_vocab: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_GRID_VOCAB))
    """Symbol -> meaning, the legend shown in the instruction; keys must be the grid symbols."""
    observation_format: Literal["grid", "coord", "grid_coord"] = "grid"
    """Text observation: symbol grid, coordinate lists, or both (coordinates first)."""
    render_mode: Literal["text", "rgb_array"] = "text"
    """``rgb_array`` marks a visual env: the rollout layer shows ``render_image()``; ``render()``
    still returns the text observation."""
    include_walls: bool = False
    """List wall cells in coordinate observations (the reference never does)."""
    solvable_within_budget: bool = True
    """Reject rooms whose optimal solution needs more than ``max_actions_per_episode`` actions
    and regenerate from a derived seed, so every episode can be won within the cap. False keeps
    the reference's room family, where about 0.6% of 6x6 rooms need 11 actions."""

    @model_validator(mode="after")
    def _check(self) -> SokobanConfig:
        rows, cols = self.dim_room
        if rows < 4 or cols < 4:
            raise ValueError(f"dim_room must be at least (4, 4), got {self.dim_room}")
        if self.num_boxes + 1 >= (rows - 2) * (cols - 2):
            raise ValueError(
                f"{self.num_boxes} boxes plus the player do not fit in a {rows}x{cols} room "
                f"(interior has {(rows - 2) * (cols - 2)} cells)"
            )
        if set(self.grid_lookup) != set(range(7)):
            raise ValueError(
                f"grid_lookup needs exactly the cell codes 0..6, got {sorted(self.grid_lookup)}"
            )
        symbols = list(self.grid_lookup.values())
        if any(len(s) != 1 for s in symbols) or len(set(symbols)) != 7:
            raise ValueError(
                f"grid_lookup symbols must be 7 distinct single characters, got {symbols}"
            )
        if set(self.grid_vocab) != set(symbols):
            raise ValueError(
                f"grid_vocab keys {sorted(self.grid_vocab)} must be the grid_lookup symbols {sorted(symbols)}"
            )
        return self
