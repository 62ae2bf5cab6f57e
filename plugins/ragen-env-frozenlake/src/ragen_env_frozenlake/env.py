"""FrozenLake: reach the goal on a random ice map without falling into a hole.

Task: the player starts on a random cell of a ``size`` x ``size`` lake and must reach the goal
cell by moving ``Left``, ``Down``, ``Right`` or ``Up``. Holes end the episode. On slippery ice
a move goes in the intended direction with probability ``success_rate`` and in each of the two
perpendicular directions with probability ``(1 - success_rate) / 2``; moving off the board leaves
the player in place. Dynamics are Gymnasium's ``FrozenLakeEnv`` built from our own ``desc`` map.

Observation (spec 13.2): ``grid`` rows of ``P`` player, ``_`` frozen (the start cell too),
``O`` hole, ``G`` goal, ``X`` player in a hole, ``√`` player on the goal; ``coord`` lists
``Board size``, ``Start``, ``Goal``, the player line and ``Holes``; ``grid_coord`` shows both.

Reward 1.0 on reaching the goal, else 0. ``done`` on goal or hole. ``info``: ``success`` (player
on the goal), ``action_is_valid`` (the string named an action), ``action_is_effective``
(the player moved).

Seeding: the map comes from ``make_rng(seed, "frozenlake/map")`` (or ``map_seed``), so every
member of a group sees the same lake; the slip generator comes from
``make_rng(seed, "frozenlake/slip", member)``, so members may slip differently. The global
``random``/``numpy.random`` state is never used.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as _GymFrozenLake

from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.seeding import make_rng
from ragen_env_frozenlake.config import FrozenLakeConfig
from ragen_env_frozenlake.lake import generate_map, shortest_path

#: Action names in Gymnasium's id order (LEFT=0, DOWN=1, RIGHT=2, UP=3).
ACTION_NAMES = ["Left", "Down", "Right", "Up"]
_ACTION_IDS = {name.lower(): i for i, name in enumerate(ACTION_NAMES)}
_LONGEST_NAME = max(len(n) for n in ACTION_NAMES)

#: Render symbols and their meanings, in the reference legend order.
LEGEND = {
    "P": "player",
    "_": "empty",
    "O": "hole",
    "G": "goal",
    "X": "player in hole",
    "√": "player on goal",
}
_CELL_SYMBOL = {"S": "_", "F": "_", "H": "O", "G": "G"}
_PLAYER_SYMBOL = {"S": "P", "F": "P", "H": "X", "G": "√"}


@lru_cache(maxsize=1024)
def _template(desc: tuple[str, ...], slippery: bool, success_rate: float) -> _GymFrozenLake:
    """A Gymnasium env for ``desc``, cached: building its transition table costs ~250 us.

    Callers get shallow copies, which share the read-only table ``P`` but own their position
    and generator; members of a group (same seed, same map) then build it once per process.
    """
    return _GymFrozenLake(desc=list(desc), is_slippery=slippery, success_rate=success_rate)


def _fmt(cell: tuple[int, int]) -> str:
    return f"({cell[0]}, {cell[1]})"


class FrozenLakeEnv(Env):
    """Text FrozenLake with random maps and configurable slipperiness (see module docstring)."""

    config_class = FrozenLakeConfig
    config: FrozenLakeConfig

    def __init__(self, config: FrozenLakeConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._gym: _GymFrozenLake | None = None
        self._desc: list[str] = []
        self._rows: list[str] = []  # grid text without the player
        self._start = (0, 0)
        self._goal = (0, 0)
        self._holes: list[tuple[int, int]] = []
        self._done = False

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Draw the map for ``seed`` and place the player on its start cell."""
        cfg = self.config
        map_key = seed if cfg.map_seed is None else cfg.map_seed
        desc = generate_map(make_rng(map_key, "frozenlake/map"), cfg.size, cfg.p)
        return self.load_map(desc, seed=seed, member=member)

    def load_map(self, desc: list[str], *, seed: int = 0, member: int = 0) -> str:
        """Start an episode on a given map instead of a generated one (tests, curricula).

        Args:
            desc: Equal-length rows of ``S`` (exactly one), ``F``, ``H`` and ``G`` (exactly one).
            seed: Seeds the slip generator together with ``member``.
            member: Index of this env inside its group.
        """
        cfg = self.config
        cells = [(r, c, ch) for r, row in enumerate(desc) for c, ch in enumerate(row)]
        kinds = [ch for _, _, ch in cells]
        if (
            not desc
            or len({len(row) for row in desc}) != 1
            or set(kinds) - set("SFHG")
            or kinds.count("S") != 1
            or kinds.count("G") != 1
        ):
            raise ValueError(f"invalid FrozenLake map {desc!r}: need equal rows of S/F/H/G, one S, one G")
        self.seed = seed
        slippery = not cfg.deterministic
        gym_env = copy.copy(_template(tuple(desc), slippery, cfg.success_rate if slippery else 1.0))
        # Our own generator, keyed by (seed, member): group members share the map, not the slips.
        gym_env.np_random = make_rng(seed, "frozenlake/slip", member)
        gym_env.reset()
        self._gym = gym_env
        self._desc = list(desc)
        self._rows = ["".join(_CELL_SYMBOL[ch] for ch in row) for row in desc]
        self._start = next((r, c) for r, c, ch in cells if ch == "S")
        self._goal = next((r, c) for r, c, ch in cells if ch == "G")
        self._holes = [(r, c) for r, c, ch in cells if ch == "H"]
        self._done = False
        return self.render()

    def step(self, action: str) -> StepResult:
        """Apply one action name (case-insensitive); anything else is an invalid no-op."""
        gym_env = self._require_reset()
        action_id = self._parse(action)
        if self._done or action_id is None:
            info = {"success": self._on_goal(), "action_is_valid": False, "action_is_effective": False}
            return StepResult(self.render(), 0.0, self._done, info)
        before = gym_env.s
        state, reward, terminated, _truncated, _ = gym_env.step(action_id)
        self._done = bool(terminated)
        info = {
            "success": self._on_goal(),
            "action_is_valid": True,
            "action_is_effective": int(state) != int(before),
        }
        return StepResult(self.render(), float(reward), self._done, info)

    # ------------------------------------------------------------------ views
    def render(self) -> str:
        """The observation in the configured ``observation_format``."""
        fmt = self.config.observation_format
        if fmt == "grid":
            return self._render_grid()
        if fmt == "coord":
            return self._render_coord()
        return f"Coordinates: \n{self._render_coord()}\nGrid Map: \n{self._render_grid()}"

    def _render_grid(self) -> str:
        row, col = self.player
        rows = list(self._rows)
        line = rows[row]
        rows[row] = line[:col] + _PLAYER_SYMBOL[self._desc[row][col]] + line[col + 1 :]
        return "\n".join(rows)

    def _render_coord(self) -> str:
        player = self.player
        cell = self._desc[player[0]][player[1]]
        label = {"G": "Player on goal", "H": "Player in hole"}.get(cell, "Player")
        lines = [
            f"Board size: {len(self._desc)} rows x {len(self._desc[0])} cols (zero-indexed).",
            f"Start: {_fmt(self._start)}",
            f"Goal: {_fmt(self._goal)}",
            f"{label}: {_fmt(player)}",
        ]
        if self._holes:
            lines.append("Holes: " + ", ".join(_fmt(h) for h in self._holes))
        return "\n".join(lines)

    def instruction(self) -> str:
        """Task text for the system prompt, written from this instance's size and slipperiness."""
        fmt = self.config.observation_format
        return self._instruction(coordinates=fmt != "grid", legend=fmt != "coord")

    def merge_quirk_instruction(self) -> str:
        """The reference's text (spec 3.2, 5.1, 17 L30): the symbol legend whenever the default
        format (``grid``) shows one, so a ``coord`` config gets it too. Coordinates are explained
        only for ``grid_coord``, which the reference's CoordFrozenLake instruction names itself;
        ``coord`` alone gets no hint (the reference's hint reads the default format)."""
        fmt = self.config.observation_format
        return self._instruction(coordinates=fmt == "grid_coord", legend=FrozenLakeConfig().observation_format != "coord")

    def _instruction(self, *, coordinates: bool, legend: bool) -> str:
        """The instruction: rules, the coordinate sentence if ``coordinates``, the answer format,
        the symbol legend if ``legend``, and the action list."""
        cfg = self.config
        rows, cols = (len(self._desc), len(self._desc[0])) if self._desc else (cfg.size, cfg.size)
        intro = (
            f"You stand on a frozen lake laid out as a {rows}x{cols} grid. Walk to the goal cell without "
            "stepping into a hole: a hole ends the episode, and so does reaching the goal, which "
            "is the only move that earns a reward (1 point). Moving into the edge of the board "
            "leaves you where you are."
        )
        parts = [intro]
        if cfg.deterministic:
            parts.append("The ice is not slippery: every move goes exactly where you aim it.")
        else:
            side = (1.0 - cfg.success_rate) / 2.0
            parts.append(
                f"The ice is slippery: a move goes the way you aim it only {cfg.success_rate:.0%} of "
                f"the time; otherwise you slide to one of the two sideways directions "
                f"({side:.0%} each)."
            )
        if coordinates:
            parts.append(
                "The state lists zero-indexed (row, col) coordinates of the start, the goal, your "
                f"position and the holes, from (0, 0) at the top-left to ({rows - 1}, {cols - 1}) at the "
                "bottom-right" + (", followed by the symbol grid." if cfg.observation_format == "grid_coord" else ".")
            )
        parts.append("Reply with one or more moves separated by ' || ', for example <answer>Left || Up</answer>.")
        text = " ".join(parts)
        if legend:
            text += "\nGrid symbols:\n" + ", ".join(f"{k}: {v}" for k, v in LEGEND.items())
        text += "\nAvailable actions:\n" + ", ".join(ACTION_NAMES)
        return text

    @property
    def action_names(self) -> list[str]:
        """``["Left", "Down", "Right", "Up"]`` (the reference's action order)."""
        return list(ACTION_NAMES)

    # ------------------------------------------------------------------ solver
    def shortest_plan(self) -> list[str] | None:
        """Fewest intended moves from the current cell to the goal (ignores slipping)."""
        self._require_reset()
        if self._done:
            return [] if self._on_goal() else None
        path = shortest_path(self._desc, self.player)
        return None if path is None else [ACTION_NAMES[a] for a in path]

    def oracle_actions(self) -> list[str] | None:
        """A winning action list on deterministic ice, ``None`` on slippery ice.

        On slippery ice no fixed action list is guaranteed to win, so there is no oracle; use
        :meth:`shortest_plan` for the intended-direction plan. Oracle tests use deterministic
        configs (``success_rate=1`` or ``is_slippery=False``).
        """
        if not self.config.deterministic:
            return None
        return self.shortest_plan()

    # ------------------------------------------------------------------ helpers
    @property
    def player(self) -> tuple[int, int]:
        """Current ``(row, col)`` of the player."""
        gym_env = self._require_reset()
        return divmod(int(gym_env.s), int(gym_env.ncol))

    @property
    def desc(self) -> list[str]:
        """The current map as Gymnasium ``desc`` rows (``S``/``F``/``H``/``G``)."""
        return list(self._desc)

    def _on_goal(self) -> bool:
        row, col = self.player
        return self._desc[row][col] == "G"

    @staticmethod
    def _parse(action: Any) -> int | None:
        if not isinstance(action, str) or len(action) > _LONGEST_NAME + 32:
            return None  # also keeps megabyte replies from being copied by strip()/lower()
        return _ACTION_IDS.get(action.strip().lower())

    def _require_reset(self) -> _GymFrozenLake:
        if self._gym is None:
            raise EnvError("FrozenLakeEnv.step/render called before reset(seed)")
        return self._gym

    def close(self) -> None:
        """Drop the Gymnasium env; idempotent. A later ``reset`` builds a new one."""
        self._gym = None
