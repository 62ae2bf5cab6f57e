"""Sudoku as a text game: place numbers one action at a time (spec 13.10, fixes of 17.5).

Task: fill an ``n x n`` grid (n = 4, 9 or 16) so every row, column and box holds 1..n once.
Puzzles are generated from the seed with exactly one solution (``puzzle.py``) or drawn from a
CSV (``data_path``). The observation is the rendered board (``render.py``); an action is one
placement such as ``place 5 at row 2 col 3`` or ``2,3,5`` (``parsing.py``), several per reply
joined with ``||``.

Rewards (spec 13.10): an unreadable or out-of-range action, a given cell, or a number already
present in the row, column or box costs ``invalid_action_score`` (-0.1) and does not end the
episode. A valid placement into an empty cell pays ``correct_placement_score`` (1.0) when it
matches the solution and ``valid_placement_score`` (0.5) otherwise. Overwriting a placed cell
is allowed but pays 0 unless ``reward_overwrites`` (the reference pays, which can be farmed);
repeating the value a cell already holds pays 0 and is not effective. When the board is full
and conflict-free, ``completion_bonus`` (10) is added and the episode ends: the final correct
placement pays 1.0 + 10 = 11.0. The episode also ends after ``config.step_limit`` steps.

The initial state depends only on ``seed``; ``member`` is ignored (Sudoku has no randomness
after reset). ``mode`` is ignored too: generated puzzles are unlimited and a CSV is one pool.
"""

from __future__ import annotations

from typing import Any

from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.seeding import make_rng
from ragen_env_sudoku.config import SudokuConfig
from ragen_env_sudoku.parsing import ParseError, parse_in_range
from ragen_env_sudoku.puzzle import (
    Puzzle,
    generate_puzzle,
    geometry,
    is_complete_solution,
)
from ragen_env_sudoku.render import BoardView, allowed_numbers, render


class SudokuEnv(Env):
    """Sudoku with unique-solution puzzles and reachable budgets; see the module docstring."""

    config_class = SudokuConfig
    config: SudokuConfig
    action_sep = "||"
    #: The share of an episode's actions that placed a correct number.
    info_metrics = {"correct_placement": "mean"}

    def __init__(self, config: SudokuConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.member = 0
        self._puzzle: Puzzle | None = None
        self._grid: list[int] = []
        self._steps = 0
        self._done = False
        self._success = False
        self._feedback = ""

    # ----------------------------------------------------------------- episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Load the puzzle of ``seed`` (generated, or a CSV row chosen from the seed)."""
        cfg = self.config
        if cfg.data_path is not None:
            from ragen_env_sudoku.data import load_puzzles

            pool = load_puzzles(cfg.data_path)
            puzzle = pool[int(make_rng(seed, "sudoku-data").integers(len(pool)))]
        else:
            puzzle = generate_puzzle(int(seed), cfg.grid_size, cfg.difficulty)
        self.seed = seed
        self.member = member
        self._puzzle = puzzle
        self._grid = list(puzzle.givens)
        self._steps = 0
        self._done = False
        self._success = False
        self._feedback = f"New puzzle with {puzzle.blanks} empty cells."
        return self.render()

    def step(self, action: str) -> StepResult:
        """Apply one placement; never raises on any input."""
        cfg = self.config
        if self._puzzle is None:
            raise EnvError("SudokuEnv.step/render called before reset(seed)")
        if self._done:
            return StepResult(self.render(), 0.0, True, self._info(valid=False, effective=False))
        n = self._puzzle.grid_size
        self._steps += 1
        try:
            place = parse_in_range(action, n)
        except ParseError as err:
            return self._invalid(f"Invalid move: {err}.")

        cell = (place.row - 1) * n + (place.col - 1)
        where = f"row {place.row} col {place.col}"
        if self._puzzle.givens[cell]:
            return self._invalid(f"Invalid move: the cell at {where} is a given and cannot change.", well_formed=True)

        clashes = self._clashes(cell, place.number)
        if clashes:
            allowed = allowed_numbers(self._grid, n, cell)
            message = f"Invalid move: {place.number} already appears in the same {' and '.join(clashes)} as {where}."
            if cfg.show_valid_numbers:
                shown = ", ".join(map(str, allowed)) or "none"
                message += f" Numbers allowed there: {shown}."
            return self._invalid(message, valid_numbers=allowed, well_formed=True)

        previous = self._grid[cell]
        correct = place.number == self._puzzle.solution[cell]
        if previous == place.number:
            self._feedback = f"The cell at {where} already holds {place.number}; nothing changed."
            return self._finish(0.0, valid=True, effective=False, correct=correct)

        self._grid[cell] = place.number
        reward = 0.0
        if previous == 0 or cfg.reward_overwrites:
            reward = cfg.correct_placement_score if correct else cfg.valid_placement_score
        verb = "Placed" if previous == 0 else f"Replaced {previous} with"
        self._feedback = f"Valid move: {verb} {place.number} at {where}."
        if is_complete_solution(self._grid, n):
            reward += cfg.completion_bonus
            self._success = True
            self._done = True
            self._feedback += " The puzzle is solved!"
        return self._finish(reward, valid=True, effective=True, correct=correct)

    def render(self) -> str:
        if self._puzzle is None:
            raise EnvError("SudokuEnv.step/render called before reset(seed)")
        view = BoardView(
            n=self._puzzle.grid_size,
            givens=self._puzzle.givens,
            grid=self._grid,
            feedback=self._feedback,
            steps=self._steps,
            max_steps=self.config.step_limit,
            show_coordinates=self.config.show_coordinates,
            show_conflicts=self.config.show_conflicts,
            show_valid_numbers=self.config.show_valid_numbers,
        )
        return render(view, self.config.render_format)

    def instruction(self) -> str:
        cfg = self.config
        n = cfg.grid_size
        b = geometry(n).box
        num, row, col = min(5, n), 2, min(3, n)
        alt = (1, 1, 2)  # number 1 at row 1 col 2
        k = cfg.max_actions_per_turn
        text = (
            f"Solve a {n}x{n} Sudoku: every row, every column and every {b}x{b} box must contain "
            f"each number from 1 to {n} exactly once. Numbers in brackets such as [{num}] are "
            "given and cannot be changed; dots are empty cells. Rows and columns are numbered "
            f"from 1 to {n}, starting at the top-left corner. Place a number with "
            f"<answer>place {num} at row {row} col {col}</answer> or the short form "
            f"<answer>{row},{col},{num}</answer> (row, column, number). "
        )
        if k > 1:
            text += (
                f"You may place up to {k} numbers in one answer, separated by ||, e.g. "
                f"<answer>place {num} at row {row} col {col} || {alt[1]},{alt[2]},{alt[0]}</answer>. "
            )
        text += "After each move you are told whether it was valid and which cells conflict."
        return text

    # ----------------------------------------------------------------- optional API
    def oracle_actions(self) -> list[str] | None:
        """Placements that finish the puzzle from the current state, in an order that stays legal.

        From a fresh reset this fills every blank with its solution value. Wrong placements are
        overwritten first when that is legal; a set of wrong placements that block each other
        cannot be undone without an erase action and is left as is.
        """
        if self._puzzle is None:
            return None
        n = self._puzzle.grid_size
        sim = list(self._grid)
        todo = [i for i, v in enumerate(sim) if v != self._puzzle.solution[i]]
        actions: list[str] = []
        progress = True
        while todo and progress:
            progress = False
            for i in list(todo):
                target = self._puzzle.solution[i]
                if target in allowed_numbers(sim, n, i):
                    sim[i] = target
                    todo.remove(i)
                    actions.append(f"place {target} at row {i // n + 1} col {i % n + 1}")
                    progress = True
        return actions

    def random_action(self, rng: Any) -> str | None:
        """A random legal placement: a uniformly chosen empty, non-given cell and a number
        that breaks no rule there (not necessarily the solution's). ``None`` when no such
        placement exists. Used by ``ragen env play --agent random`` and warm-start demos."""
        if self._puzzle is None:
            return None
        n = self._puzzle.grid_size
        options = [(i, allowed_numbers(self._grid, n, i)) for i, v in enumerate(self._grid) if v == 0]
        options = [(i, nums) for i, nums in options if nums]
        if not options:
            return None
        cell, nums = options[int(rng.integers(len(options)))]
        number = nums[int(rng.integers(len(nums)))]
        return f"place {number} at row {cell // n + 1} col {cell % n + 1}"

    @property
    def puzzle(self) -> Puzzle | None:
        """The current puzzle (givens and solution), ``None`` before the first reset."""
        return self._puzzle

    @property
    def grid(self) -> tuple[int, ...]:
        """The current board, row by row, 0 for empty."""
        return tuple(self._grid)

    # ----------------------------------------------------------------- internals
    def _clashes(self, cell: int, number: int) -> list[str]:
        g = geometry(self._puzzle.grid_size if self._puzzle else self.config.grid_size)
        found = []
        for label, unit_of in (("row", g.row_of), ("column", g.col_of), ("box", g.box_of)):
            unit = unit_of[cell]
            if any(v == number and i != cell and unit_of[i] == unit for i, v in enumerate(self._grid)):
                found.append(label)
        return found

    def _invalid(self, message: str, valid_numbers: list[int] | None = None, *, well_formed: bool = False) -> StepResult:
        """An illegal move; ``well_formed`` when it parsed as a placement (a given cell, a clash)."""
        self._feedback = message
        extra = {"valid_numbers": valid_numbers} if valid_numbers is not None else {}
        return self._finish(
            self.config.invalid_action_score, valid=False, effective=False, correct=False, action_is_well_formed=well_formed, **extra
        )

    def _finish(self, reward: float, *, valid: bool, effective: bool, correct: bool, **extra: Any) -> StepResult:
        if self._steps >= self.config.step_limit:
            self._done = True
            if not self._success:
                self._feedback += " Out of steps."
        info = self._info(valid=valid, effective=effective, correct=correct)
        info["action_is_well_formed"] = valid
        info.update(extra)
        return StepResult(self.render(), self.finite(reward), self._done, info)

    def _info(self, *, valid: bool, effective: bool, correct: bool = False) -> dict[str, Any]:
        filled = sum(1 for v in self._grid if v)
        total = len(self._grid)
        return {
            "success": self._success,
            "action_is_valid": valid,
            "action_is_effective": effective,
            "correct_placement": correct,
            "steps_remaining": max(0, self.config.step_limit - self._steps),
            "cells_filled": filled,
            "cells_remaining": total - filled,
        }
