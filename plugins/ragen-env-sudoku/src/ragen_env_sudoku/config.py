"""Configuration of the Sudoku env, with budgets that make a solve reachable (spec 13.10, 17.5).

The reference's tags allow at most 10 placements per episode while an easy 9x9 puzzle has 32
blanks, so success is impossible. Here the action budget defaults to twice the number of blanks
the chosen difficulty produces, the turn count follows from it, and a validator rejects an
explicit budget below the number of blanks (``enforce_reachable_budget=False`` turns that off).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from ragen_core.interfaces.env import EnvConfig

#: Fraction of cells blanked per difficulty (spec 13.10). Kept in sync with ``puzzle.py``.
_BLANK_FRACTION = {"easy": 0.4, "medium": 0.5, "hard": 0.6}
_DEFAULT_ACTIONS_PER_TURN = 4


def blanks_upper_bound(grid_size: int, difficulty: str, data_path: str | None = None) -> int:
    """Most blanks an episode of this configuration can have.

    Generated puzzles have at most ``int(n^2 * f)`` blanks (fewer when uniqueness stops the
    removal early). A loaded 9x9 puzzle with a unique solution has at least 17 givens, so at
    most 64 blanks.
    """
    if data_path is not None:
        return grid_size * grid_size - 17 if grid_size == 9 else grid_size * grid_size
    return int(grid_size * grid_size * _BLANK_FRACTION[difficulty])


class SudokuConfig(EnvConfig):
    """Settings of :class:`ragen_env_sudoku.env.SudokuEnv`.

    Unset budget fields are computed from ``grid_size`` / ``difficulty``:
    ``max_actions_per_episode = 2 * blanks``,
    ``max_turns = ceil(max_actions_per_episode / max_actions_per_turn)``.
    """

    grid_size: Literal[4, 9, 16] = 9
    """Side of the board: 4 (2x2 boxes), 9 (3x3 boxes) or 16 (4x4 boxes; slow for ``hard``)."""
    difficulty: Literal["easy", "medium", "hard"] = "easy"
    """Blank fraction 0.4 / 0.5 / 0.6 of the cells (32 / 40 / 48 blanks for 9x9)."""
    data_path: str | None = None
    """CSV of puzzles (``quizzes,solutions`` columns, digits row by row, 0 = empty) to draw
    from instead of generating; the row is chosen from the seed. 9x9 only."""
    max_steps: int | None = Field(default=None, ge=1)
    """Env-side cap on steps (invalid ones included); ``None`` means ``max_actions_per_episode``."""
    max_actions_per_episode: int = Field(default=64, ge=1)
    """Executed-action budget; default ``2 * blanks`` of the chosen grid and difficulty."""
    max_actions_per_turn: int = Field(default=_DEFAULT_ACTIONS_PER_TURN, ge=1)
    """Placements accepted per reply (joined with ``||``)."""
    max_turns: int = Field(default=16, ge=1)
    """Turns per episode; default ``ceil(max_actions_per_episode / max_actions_per_turn)``."""
    max_tokens: int = Field(default=150, ge=1)
    """Response-length hint shown in the prompt."""
    enforce_reachable_budget: bool = True
    """Reject budgets (actions, turns x actions per turn, steps) smaller than the blank count."""
    render_format: Literal["simple", "detailed", "with_feedback"] = "detailed"
    """``simple``: digits and dots; ``detailed``: banner, grid, legend, feedback;
    ``with_feedback``: also conflicts, hints, progress and step count."""
    render_mode: Literal["text"] = "text"
    """Only text rendering exists (kept for reference configs)."""
    show_coordinates: bool = True
    """Print row and column numbers around the grid (detailed / with_feedback)."""
    show_conflicts: bool = True
    """Mark conflicting cells as ``*N*`` and list the conflicts."""
    show_valid_numbers: bool = True
    """List the allowed numbers of each empty cell once at most 10 cells are empty, and name
    the allowed numbers in rule-violation feedback."""
    show_candidates: bool = False
    """Accepted for reference configs; has no effect (as in the reference)."""
    correct_placement_score: float = 1.0
    """Reward for a placement that equals the solution."""
    valid_placement_score: float = 0.5
    """Reward for a placement that breaks no rule but differs from the solution."""
    invalid_action_score: float = -0.1
    """Reward for an unreadable, out-of-range, given-cell or rule-breaking action."""
    completion_bonus: float = 10.0
    """Added when the grid is full and conflict-free (the episode then ends)."""
    reward_overwrites: bool = False
    """Pay placement rewards when a placed cell is overwritten. The reference does, which lets
    a policy farm reward by flipping one cell between two valid values; by default only
    filling an empty cell pays (overwrites are allowed but pay 0)."""

    @model_validator(mode="before")
    @classmethod
    def _computed_budgets(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        n = int(data.get("grid_size", 9))
        difficulty = str(data.get("difficulty", "easy"))
        if difficulty not in _BLANK_FRACTION or n not in (4, 9, 16):
            return data  # field validation reports the bad value
        blanks = blanks_upper_bound(n, difficulty, data.get("data_path"))
        data.setdefault("max_actions_per_episode", 2 * blanks)
        per_turn = data.setdefault("max_actions_per_turn", _DEFAULT_ACTIONS_PER_TURN)
        try:
            turns = math.ceil(int(data["max_actions_per_episode"]) / max(1, int(per_turn)))
        except (TypeError, ValueError):
            return data  # field validation reports the bad value
        data.setdefault("max_turns", max(1, turns))
        return data

    @model_validator(mode="after")
    def _budget_reaches_every_blank(self) -> SudokuConfig:
        if self.data_path is not None and self.grid_size != 9:
            raise ValueError("data_path puzzles are 9x9; set grid_size=9")
        if not self.enforce_reachable_budget:
            return self
        blanks = blanks_upper_bound(self.grid_size, self.difficulty, self.data_path)
        budgets = {
            "max_actions_per_episode": self.max_actions_per_episode,
            "max_turns * max_actions_per_turn": self.max_turns * self.max_actions_per_turn,
        }
        if self.max_steps is not None:
            budgets["max_steps"] = self.max_steps
        short = {k: v for k, v in budgets.items() if v < blanks}
        if short:
            detail = ", ".join(f"{k} = {v}" for k, v in short.items())
            raise ValueError(
                f"a {self.grid_size}x{self.grid_size} {self.difficulty} puzzle can have {blanks} "
                f"blanks but {detail}, so it could never be solved; raise the budget or set "
                "enforce_reachable_budget=False"
            )
        return self

    @property
    def step_limit(self) -> int:
        """The env-side step cap actually used (``max_steps`` or ``max_actions_per_episode``)."""
        return self.max_steps if self.max_steps is not None else self.max_actions_per_episode
