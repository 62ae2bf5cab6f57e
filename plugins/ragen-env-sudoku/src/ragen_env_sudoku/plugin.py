"""Entry-point target of the ``sudoku`` env: a light spec, no implementation imports."""

from __future__ import annotations

from ragen_core.specs import EnvSpec
from ragen_env_sudoku.config import SudokuConfig

_SHOWN = {"render_format": "with_feedback", "show_conflicts": True, "show_valid_numbers": True}

SPEC = EnvSpec(
    name="sudoku",
    summary="Sudoku (4x4 / 9x9 / 16x16) with unique-solution puzzles and reachable budgets.",
    config_model=SudokuConfig,
    factory="ragen_env_sudoku.env:SudokuEnv",
    presets={
        # The reference tags allowed 20 / 30 actions for 32 / 40 blanks; these budgets reach.
        "SimpleSudoku": {"grid_size": 9, "difficulty": "easy", "max_actions_per_episode": 48,
                         "max_actions_per_turn": 4, "max_turns": 12, "max_steps": 81,
                         "max_tokens": 150, **_SHOWN},
        "MediumSudoku": {"grid_size": 9, "difficulty": "medium", "max_actions_per_episode": 60,
                         "max_actions_per_turn": 5, "max_turns": 12, "max_steps": 81,
                         "max_tokens": 150, **_SHOWN},
        # 4x4 with 6 blanks: small enough for a tiny model.
        "TinySudoku": {"grid_size": 4, "difficulty": "easy", "max_actions_per_episode": 12,
                       "max_actions_per_turn": 2, "max_turns": 6, "max_tokens": 150, **_SHOWN},
    },
)
