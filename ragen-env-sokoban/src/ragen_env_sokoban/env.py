"""Sokoban: push every box onto a target in a small generated room (spec 13.1).

The agent is the player. Each action (``Up``, ``Down``, ``Left``, ``Right``) moves the player one
cell; walking into a box pushes it one cell further if that cell is free. Boxes cannot be
pulled or pushed into walls or other boxes, so a careless push can make a room unsolvable,
which is why the env tests multi-step planning.

Observation: a symbol grid, zero-based coordinate lists, or both (``observation_format``).
Reward per step: -0.1; +1 when a box lands on a target, -1 when one leaves a target; +10 when
every box is on a target (the solving push of a one-box room earns -0.1 + 1 + 10 = 10.9).
An episode ends when every box is on a target or after ``max_steps`` actions.

Choices where the reference gives no answer:

* Unknown actions (any string that is not an action name, case-insensitively; integers 1-4 are
  accepted as the reference's action ids) leave the state unchanged, earn reward 0.0, do not
  count as a step, and report ``action_is_valid=False``. The rollout layer normally filters
  them out through :attr:`SokobanEnv.action_names` before they get here.
* Steps after the episode ended are no-ops with reward 0.0 and ``done=True``.
* Rooms come from :func:`ragen_env_sokoban.generator.generate_room`; the same seed gives the
  same room for every group member and in every process. Nothing is generated at construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.seeding import derive_seed
from ragen_env_sokoban.config import SokobanConfig
from ragen_env_sokoban.generator import (
    BOX,
    BOX_ON_TARGET,
    FLOOR,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
    Room,
    generate_room,
)
from ragen_env_sokoban.render import render_rgb, render_text
from ragen_env_sokoban.solver import ACTION_NAMES, solve

#: The reference's integer action ids (spec 13.1 ``action_lookup``).
REFERENCE_ACTION_IDS: dict[int, str] = {1: "Up", 2: "Down", 3: "Left", 4: "Right"}

_ACTION_INDEX = {name.lower(): i for i, name in enumerate(ACTION_NAMES)}


@lru_cache(maxsize=4096)
def _cached_room(
    seed: int, dim_room: tuple[int, int], num_boxes: int, search_depth: int
) -> Room:
    # Groups reset K members with one seed; generating once per seed keeps that cheap.
    return generate_room(seed, dim_room, num_boxes, search_depth)


@lru_cache(maxsize=4096)
def _budgeted_room(
    seed: int, dim_room: tuple[int, int], num_boxes: int, search_depth: int, budget: int | None
) -> Room:
    """The room of ``seed``; with a budget, the first of a deterministic retry chain whose optimal
    solution fits it (seed, then ``derive_seed(seed, k)`` for k = 1, 2, ...)."""
    room = _cached_room(seed, dim_room, num_boxes, search_depth)
    if budget is None:
        return room
    for attempt in range(1, 65):
        plan = solve(room.structure, room.cols, room.player, list(room.boxes))
        if plan is not None and len(plan) <= budget:
            return room
        room = _cached_room(derive_seed(seed, attempt, "sokoban-budget"), dim_room, num_boxes, search_depth)
    raise EnvError(
        f"sokoban: no room of {dim_room} with {num_boxes} boxes solvable within {budget} actions after 64 tries (seed {seed})",
        ["raise max_actions_per_episode or set solvable_within_budget=false"],
    )


class SokobanEnv(Env):
    """Text Sokoban with the reference's rewards, renders and room family.

    Example:
        >>> env = SokobanEnv(SokobanConfig())
        >>> obs = env.reset(7)
        >>> result = env.step(env.oracle_actions()[0])
    """

    config_class = SokobanConfig
    config: SokobanConfig

    def __init__(self, config: SokobanConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._structure: tuple[int, ...] = ()
        self._cols = 0
        self._boxes = 0  # bitboard of box cells
        self._player = -1
        self._steps = 0
        self._done = False

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Load the room of ``seed`` (``member`` and ``mode`` do not change it)."""
        cfg = self.config
        budget = cfg.max_actions_per_episode if cfg.solvable_within_budget else None
        room = _budgeted_room(int(seed), tuple(cfg.dim_room), cfg.num_boxes, cfg.search_depth, budget)
        self.seed = int(seed)
        self._load(room)
        return self.render()

    def load_room(
        self, grid: str | Sequence[str] | Sequence[Sequence[int]] | np.ndarray
    ) -> str:
        """Start an episode on a hand-built room and return its observation.

        Args:
            grid: Rows of symbols in this env's ``grid_lookup`` (a list of strings or one
                newline-separated string), or a 2-D array of cell codes 0-6.

        Raises:
            ValueError: If the grid is ragged, has an unknown symbol or code, not exactly one
                player, no box, or more boxes than targets.
        """
        if isinstance(grid, str):
            grid = grid.strip("\n").split("\n")
        rows: list[list[int]]
        if len(grid) and isinstance(grid[0], str):
            decode = {symbol: code for code, symbol in self.config.grid_lookup.items()}
            try:
                rows = [[decode[ch] for ch in line] for line in grid]  # type: ignore[union-attr]
            except KeyError as exc:
                raise ValueError(f"unknown symbol {exc.args[0]!r} in room") from None
        else:
            rows = [[int(c) for c in row] for row in grid]
        if not rows or len({len(r) for r in rows}) != 1:
            raise ValueError("room must be a non-empty rectangle")
        codes = [c for row in rows for c in row]
        if any(c not in range(7) for c in codes):
            raise ValueError("cell codes must be in 0..6")
        players = [i for i, c in enumerate(codes) if c in (PLAYER, PLAYER_ON_TARGET)]
        boxes = tuple(i for i, c in enumerate(codes) if c in (BOX, BOX_ON_TARGET))
        on_target = {TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET}
        structure = tuple(
            WALL if c == WALL else TARGET if c in on_target else FLOOR for c in codes
        )
        if len(players) != 1:
            raise ValueError(f"room needs exactly one player, found {len(players)}")
        if not boxes or len(boxes) > structure.count(TARGET):
            raise ValueError(f"room needs 1..#targets boxes, found {len(boxes)} boxes")
        self.seed = None
        self._load(Room(len(rows), len(rows[0]), structure, boxes, players[0]))
        return self.render()

    def _load(self, room: Room) -> None:
        self._structure = room.structure
        self._cols = room.cols
        self._boxes = sum(1 << b for b in room.boxes)
        self._target_mask = sum(
            1 << i for i, c in enumerate(room.structure) if c == TARGET
        )
        self._player = room.player
        self._steps = 0
        self._done = self._all_on_target()

    def _require_room(self) -> None:
        if self._player < 0:
            raise EnvError(
                "SokobanEnv has no room yet",
                ["call reset(seed) or load_room(grid) first"],
            )

    def _on_target(self) -> int:
        return (self._boxes & self._target_mask).bit_count()

    def _all_on_target(self) -> bool:
        return not self._boxes & ~self._target_mask

    @staticmethod
    def _parse(action: object) -> int | None:
        if isinstance(action, str):
            return _ACTION_INDEX.get(action.strip().lower())
        if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
            name = REFERENCE_ACTION_IDS.get(int(action))
            return None if name is None else ACTION_NAMES.index(name)
        return None

    def step(self, action: str) -> StepResult:
        """Apply one action name; see the module docstring for rewards and edge cases."""
        self._require_room()
        index = self._parse(action)
        if index is None or self._done:
            info = {
                "success": self._all_on_target(),
                "action_is_valid": index is not None,
                "action_is_effective": False,
            }
            return StepResult(self.render(), 0.0, self._done, info)
        delta = (-self._cols, self._cols, -1, 1)[index]
        n = len(self._structure)
        before = self._on_target()
        p = self._player
        q = p + delta
        if 0 <= q < n and self._structure[q] != WALL:
            if self._boxes >> q & 1:
                r = q + delta
                if (
                    0 <= r < n
                    and self._structure[r] != WALL
                    and not self._boxes >> r & 1
                ):
                    self._boxes ^= (1 << q) | (1 << r)
                    self._player = q
            else:
                self._player = q
        self._steps += 1
        after = self._on_target()
        reward = -0.1
        if after > before:
            reward += 1.0
        elif after < before:
            reward -= 1.0
        success = self._all_on_target()
        if success:
            reward += 10.0
        self._done = success or self._steps >= self.config.max_steps
        info = {
            "success": success,
            "action_is_valid": True,
            "action_is_effective": self._player != p,
        }
        return StepResult(self.render(), reward, self._done, info)

    # ------------------------------------------------------------------ views
    def cell_codes(self) -> np.ndarray:
        """Current state as a ``(rows, cols)`` int array of cell codes 0-6."""
        self._require_room()
        return np.asarray(self._codes(), dtype=np.int64).reshape(-1, self._cols)

    def _codes(self) -> list[int]:
        codes = list(self._structure)
        boxes = self._boxes
        while boxes:
            low = boxes & -boxes
            boxes ^= low
            i = low.bit_length() - 1
            codes[i] = BOX_ON_TARGET if codes[i] == TARGET else BOX
        codes[self._player] = (
            PLAYER_ON_TARGET if codes[self._player] == TARGET else PLAYER
        )
        return codes

    def render(self) -> str:
        """The observation text in this env's ``observation_format``."""
        self._require_room()
        cfg = self.config
        return render_text(
            self._codes(),
            self._cols,
            cfg.observation_format,
            cfg.grid_lookup,
            include_walls=cfg.include_walls,
        )

    def render_image(self) -> np.ndarray:
        """``(rows * 16, cols * 16, 3)`` uint8 RGB picture of the current state."""
        self._require_room()
        return render_rgb(self._codes(), self._cols)

    @property
    def action_names(self) -> list[str]:
        """``["Up", "Down", "Left", "Right"]`` (Up = row - 1, Left = col - 1)."""
        return list(ACTION_NAMES)

    def instruction(self) -> str:
        """Rules, answer format, legend, coordinate hint and action list for this config."""
        cfg = self.config
        fmt = cfg.observation_format
        legend = cfg.grid_vocab if fmt in ("grid", "grid_coord") else None
        return self._instruction(coordinates=fmt in ("coord", "grid_coord"), legend=legend)

    def merge_quirk_instruction(self) -> str:
        """The reference's text (spec 3.2, 5.1, 17 L30): the legend of the default vocabulary
        (its default format is ``grid``), whatever this config's symbols and format. Coordinates
        are explained only for ``grid_coord``, which the reference's CoordSokoban instruction
        names itself; ``coord`` alone gets no hint (the reference's hint reads the default format)."""
        defaults = SokobanConfig()
        legend = defaults.grid_vocab if defaults.observation_format in ("grid", "grid_coord") else None
        return self._instruction(coordinates=self.config.observation_format == "grid_coord", legend=legend)

    def _instruction(self, *, coordinates: bool, legend: dict[str, str] | None) -> str:
        """The instruction: rules, the coordinate sentence if ``coordinates``, the answer format,
        the symbol legend ``legend`` (none: left out) and the action list."""
        cfg = self.config
        rows, cols = cfg.dim_room
        fmt = cfg.observation_format
        text = (
            "You control the player in a Sokoban puzzle. Get every box onto a target square. "
            "Walking into a box pushes it one square in the same direction, as long as the square "
            "behind it is free; boxes cannot go through walls or other boxes, and you can never "
            "pull a box, so a box stuck in a corner stays stuck. "
        )
        if coordinates:
            shown = (
                "a symbol grid and coordinate lists"
                if fmt == "grid_coord"
                else "coordinate lists"
            )
            text += (
                f"Each state is given as {shown}: zero-indexed (row, col) positions of the player, "
                f"the boxes and the targets, from (0, 0) in the top-left corner to ({rows - 1}, {cols - 1}) "
                "in the bottom-right corner. Up decreases the row, Down increases it, Left decreases "
                "the column and Right increases it. "
            )
        text += "Reply with your moves in order, for example: <answer>Right || Right || Up</answer>\n"
        if legend is not None:
            pairs = ", ".join(f"{symbol}: {meaning}" for symbol, meaning in legend.items())
            text += f"\nWhat the grid symbols mean:\n{pairs}\n"
        # the per-episode cap sentence follows from the core's system prompt (envs with action names, spec 5.1)
        text += f"\nAvailable actions:\n{', '.join(ACTION_NAMES)}\n"
        return text

    # ------------------------------------------------------------------ solver
    def oracle_actions(self) -> list[str] | None:
        """A shortest action list that solves the room from the current state, or ``None``."""
        self._require_room()
        boxes = [i for i in range(len(self._structure)) if self._boxes >> i & 1]
        return solve(self._structure, self._cols, self._player, boxes)

    def optimal_moves(self) -> int | None:
        """Length of the shortest solution from the current state (``None`` if unsolvable)."""
        plan = self.oracle_actions()
        return None if plan is None else len(plan)

    def close(self) -> None:
        """Nothing to release; safe to call any number of times."""
