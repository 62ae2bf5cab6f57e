"""A tiny deterministic env for core tests: walk a corridor to the goal.

Not installed as an entry point; tests register it in-process with :func:`register_toy_env`
so core tests never depend on env packages. :class:`SlowCorridorEnv` adds an action that blocks,
for env-pool timeout checks; pools in other processes build it from :data:`SLOW_TOY_FACTORY`.
:class:`UnsaidCorridorEnv` (:data:`UNSAID_TOY_FACTORY`) never reports ``info["success"]``;
:class:`MarkedCorridorEnv` (:data:`MARKED_TOY_FACTORY`) shows a run variable of its process;
:class:`ScoredCorridorEnv` (:data:`SCORED_TOY_FACTORY`) declares info metrics.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from ragen_core.interfaces.env import Env, EnvConfig, InfoAggregation, StepResult
from ragen_core.seeding import make_rng
from ragen_core.specs import EnvSpec

TOY_ENV_NAME = "toy-corridor"


class CorridorConfig(EnvConfig):
    length: int = Field(default=5, ge=2)
    """Cells in the corridor."""
    slip: float = Field(default=0.0, ge=0, le=1)
    """Probability that a move does nothing (seeded by seed and member)."""


class CorridorEnv(Env):
    """``P`` walks over ``_`` towards ``G`` with ``Left``/``Right``; reaching G pays 1.0."""

    config_class = CorridorConfig
    config: CorridorConfig

    def __init__(self, config: CorridorConfig | None = None, **overrides: object) -> None:
        super().__init__(config, **overrides)
        self.player, self.goal = 0, 1
        self._rng = make_rng(0)

    @property
    def action_names(self) -> list[str]:
        return ["Left", "Right"]

    def instruction(self) -> str:
        return "Walk to G. Actions: Left, Right. Example: <answer>Right || Right</answer>"

    def merge_quirk_instruction(self) -> str:
        """A text of its own, so checks can tell which instruction a reset carried (the corridor
        has no default-config appendices to show)."""
        return "Walk to G. Example: <answer>Right || Right</answer>"

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        cells = make_rng(seed, "corridor").choice(self.config.length, size=2, replace=False)
        self.player, self.goal = int(cells[0]), int(cells[1])
        self._rng = make_rng(seed, member, "slip")
        self.seed = seed
        return self.render()

    def render(self) -> str:
        row = ["_"] * self.config.length
        row[self.goal] = "G"
        row[self.player] = "P"
        return "".join(row)

    def step(self, action: str) -> StepResult:
        move = {"left": -1, "right": 1}.get(action.strip().lower())
        if move is None:
            return StepResult(self.render(), 0.0, False, {"success": False, "action_is_valid": False, "action_is_effective": False})
        before = self.player
        if self._rng.random() >= self.config.slip:
            self.player = min(max(self.player + move, 0), self.config.length - 1)
        success = self.player == self.goal
        info = {"success": success, "action_is_valid": True, "action_is_effective": self.player != before}
        return StepResult(self.render(), 1.0 if success else 0.0, success, info)

    def oracle_actions(self) -> list[str]:
        d = self.goal - self.player
        return ["Right" if d > 0 else "Left"] * abs(d)


class SlowCorridorConfig(CorridorConfig):
    sleep_s: float = Field(default=60.0, ge=0)
    """How long the action ``Wait`` blocks (longer than any step timeout it is meant to trip)."""
    reset_sleep_s: float = Field(default=0.0, ge=0)
    """How long each reset blocks first (0: not at all; for reset timeouts)."""


class SlowCorridorEnv(CorridorEnv):
    """The corridor plus ``Wait``, which blocks ``sleep_s`` seconds and then does nothing, and a
    reset that first blocks ``reset_sleep_s`` seconds."""

    config_class = SlowCorridorConfig
    config: SlowCorridorConfig

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        time.sleep(self.config.reset_sleep_s)
        return super().reset(seed, member=member, mode=mode)

    @property
    def action_names(self) -> list[str]:
        return ["Left", "Right", "Wait"]

    def step(self, action: str) -> StepResult:
        if action.strip().lower() == "wait":
            time.sleep(self.config.sleep_s)
            return StepResult(self.render(), 0.0, False, {"success": False, "action_is_valid": True, "action_is_effective": False})
        return super().step(action)


#: Import string of :class:`SlowCorridorEnv` for ``EnvRef(factory=...)`` (usable in any process).
SLOW_TOY_FACTORY = "ragen_core.testing.toy_env:SlowCorridorEnv"


class UnsaidCorridorEnv(CorridorEnv):
    """The corridor without ``info["success"]``: a finished episode makes the pool log a warning
    (for checks that a worker's warnings reach the trainer's process)."""

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        result.info.pop("success", None)
        return result


#: Import string of :class:`UnsaidCorridorEnv` for ``EnvRef(factory=...)``.
UNSAID_TOY_FACTORY = "ragen_core.testing.toy_env:UnsaidCorridorEnv"

#: The run variable :class:`MarkedCorridorEnv` reads where it runs.
TOY_MARK_VARIABLE = "RAGEN_RUN_TOY_MARK"


class MarkedCorridorEnv(CorridorEnv):
    """The corridor whose instruction ends with ``Mark: <value>``: the value of :data:`TOY_MARK_VARIABLE`
    in the process it runs in (for checks that a pool's workers see the trainer's run variables)."""

    def instruction(self) -> str:
        return f"{super().instruction()} Mark: {os.environ.get(TOY_MARK_VARIABLE, '')}"


#: Import string of :class:`MarkedCorridorEnv` for ``EnvRef(factory=...)``.
MARKED_TOY_FACTORY = "ragen_core.testing.toy_env:MarkedCorridorEnv"


class ScoredCorridorEnv(CorridorEnv):
    """The corridor declaring info metrics: a valid move reports ``distance`` (cells left to G
    after it) and ``moved`` (a bool); an invalid action reports neither (absent, not 0)."""

    info_metrics: ClassVar[Mapping[str, InfoAggregation]] = {"distance": "mean", "moved": "sum"}

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        if result.info["action_is_valid"]:
            result.info.update(distance=abs(self.goal - self.player), moved=result.info["action_is_effective"])
        return result


#: Import string of :class:`ScoredCorridorEnv` for ``EnvRef(factory=...)``.
SCORED_TOY_FACTORY = "ragen_core.testing.toy_env:ScoredCorridorEnv"


class DyingCorridorConfig(CorridorConfig):
    die_on_reset: str | None = None
    """A file path: a reset ends the process (exit code 3) unless that file exists, creating it
    first when ``die_on_reset_once`` (so only the first reset anywhere dies)."""
    die_on_reset_once: bool = True


class DyingCorridorEnv(CorridorEnv):
    """The corridor whose ``Die`` action logs a warning and ends its process at once (exit code 3):
    for checks that a pool worker's last words reach the trainer's process. With ``die_on_reset``
    it ends its process while resetting instead."""

    config_class = DyingCorridorConfig
    config: DyingCorridorConfig

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        marker = self.config.die_on_reset
        if marker is not None and not os.path.exists(marker):
            if self.config.die_on_reset_once:
                with open(marker, "w", encoding="utf-8"):
                    pass
            os._exit(3)
        return super().reset(seed, member=member, mode=mode)

    def step(self, action: str) -> StepResult:
        if action == "Die":
            import logging

            logging.getLogger(__name__).warning("about to die (pid %d)", os.getpid())
            os._exit(3)
        return super().step(action)


#: Import string of :class:`DyingCorridorEnv` for ``EnvRef(factory=...)``.
DYING_TOY_FACTORY = "ragen_core.testing.toy_env:DyingCorridorEnv"

TOY_ENV_SPEC = EnvSpec(
    name=TOY_ENV_NAME,
    summary="Walk a corridor to the goal (core test env)",
    config_model=CorridorConfig,
    factory="ragen_core.testing.toy_env:CorridorEnv",
    presets={"Long": {"length": 9}},
)


def register_toy_env() -> str:
    """Register the corridor env in the default registry (idempotent); returns its name."""
    from ragen_core import registry

    registry.register(TOY_ENV_SPEC)
    return TOY_ENV_NAME
