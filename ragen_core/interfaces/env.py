"""The environment interface: text observation in, one parsed action string out.

An environment is a Gym-like object that speaks text. The rollout layer (not the env) turns a
model reply into action strings (``<answer>Up || Left</answer>`` -> ``["Up", "Left"]``), maps them
through the env's action vocabulary when it has one, enforces the per-turn and per-episode
action limits, and applies the format penalty. The env only ever sees one action string at a
time and must treat *any* string as input: unknown or malformed actions are invalid moves
reported through ``info["action_is_valid"] = False``, never exceptions.

Seeding contract (fixes the reference's group-invariant bug, spec 17 L29): ``reset(seed, member)``
must produce the *same initial observation* for every ``member`` of a group sharing ``seed``;
``member`` may only influence stochastic dynamics (slippery ice, stochastic arm payouts). Use
:func:`ragen_core.seeding.make_rng` to derive independent generators; never touch the global
``random``/``numpy.random`` state.
"""

from __future__ import annotations

import functools
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, NamedTuple, get_args

from pydantic import Field

from ragen_core.specs import PluginConfig, with_overrides


class EnvConfig(PluginConfig):
    """Settings every environment has. Env packages subclass this and add their own fields."""

    max_actions_per_episode: int = Field(default=10, ge=1)
    """Hard cap on executed actions per episode (the reference's ``max_actions_per_traj``)."""
    max_actions_per_turn: int = Field(default=2, ge=1)
    """Actions beyond this many in one reply are dropped (the reference's agent-proxy default 2)."""
    max_turns: int = Field(default=5, ge=1)
    """Model turns per episode."""
    max_tokens: int = Field(default=100, ge=1)
    """Response-length hint shown in the prompt ("max response length: N words (tokens)"); a run with
    ``rollout.enforce_env_max_tokens=true`` also stops each reply there (when below its ``max_new_tokens``)."""

    @property
    def action_budget(self) -> int:
        """The most actions a rollout executes in one episode: ``max_actions_per_episode``, or
        fewer when ``max_turns`` replies of ``max_actions_per_turn`` actions cannot reach it. A
        budget an env states in its prompt or observation should not exceed it."""
        return min(self.max_actions_per_episode, self.max_turns * self.max_actions_per_turn)


class StepResult(NamedTuple):
    """What :meth:`Env.step` returns; unpacks like Gym's ``(obs, reward, done, info)``."""

    observation: str
    reward: float
    done: bool
    info: dict[str, Any]


RESET_MODES = ("train", "val")
"""The modes an env is reset in: the training split, or the validation split."""


def check_reset_args(where: str, seed: Any, member: Any = 0, mode: Any = "train") -> None:
    """Refuse reset arguments an env would take silently: a seed that is not an int (``"3"`` and
    ``3`` seed different episodes; ``3.5`` is no seed; numpy integers are ints, see
    :func:`~ragen_core.seeding.is_int`), one outside 0 to 2**64 - 1, a negative or non-int
    member, a mode other than ``train`` / ``val`` (``"test"`` reset the training split).

    Raises:
        UsageError: naming ``where`` (``ResetRequest.``, ``SokobanEnv.reset: ``) and the argument.
    """
    from ragen_core.errors import UsageError
    from ragen_core.seeding import check_key, is_int

    for name, value in (("seed", seed), ("member", member)):
        if not is_int(value):
            raise UsageError(f"{where}{name} takes an int, not {type(value).__name__} {value!r}")
    check_key(int(seed), f"{where}seed")
    if member < 0:
        raise UsageError(f"{where}member takes an int >= 0 (the env's index in its group), not {member}")
    if mode not in RESET_MODES:
        raise UsageError(f"{where}mode takes 'train' or 'val', not {mode!r}")


InfoAggregation = Literal["mean", "sum", "last", "max", "min"]
"""How an episode folds the values one info key took over its actions (:attr:`Env.info_metrics`)."""
INFO_AGGREGATIONS: tuple[str, ...] = get_args(InfoAggregation)


def checked_info_metrics(env: Any) -> tuple[tuple[str, str], ...]:
    """An env's (or env class's) :attr:`Env.info_metrics` as ``((key, mode), ...)``, the rule the
    class definition, the pools and the conformance kit share; ``()`` for an env without one.

    Raises:
        EnvError: the declaration is not a dict of non-empty str keys to one of
            :data:`INFO_AGGREGATIONS`, naming the env class.
    """
    declared = getattr(env, "info_metrics", None)
    if declared is None:
        return ()
    from ragen_core.config import short_repr
    from ragen_core.errors import EnvError

    kind = env if isinstance(env, type) else type(env)
    where = f"{kind.__module__}.{kind.__qualname__}.info_metrics"
    hint = "declare e.g. info_metrics = {'raw_reward': 'last', 'hit': 'mean'}: info keys to one of " + ", ".join(INFO_AGGREGATIONS)
    if not isinstance(declared, Mapping):
        raise EnvError(f"{where} must be a dict of info key -> aggregation, not {type(declared).__name__} {short_repr(declared, 60)}", [hint])
    for key, mode in declared.items():
        if not isinstance(key, str) or not key.strip():
            raise EnvError(f"{where} has key {short_repr(key, 40)} of type {type(key).__name__}: keys are info keys, non-empty str", [hint])
        if mode not in INFO_AGGREGATIONS:
            raise EnvError(f"{where}[{key!r}] is {short_repr(mode, 40)}, not one of {', '.join(INFO_AGGREGATIONS)}", [hint])
    return tuple((key, str(mode)) for key, mode in declared.items())


def _checked_reset(reset: Any) -> Any:
    """``reset`` refusing what :func:`check_reset_args` refuses, before the env sees it. The
    arguments are read by the subclass's own signature (keyword-only ``seed``, a gym-style
    ``seed=None``, ``member`` given by position all work as written); a ``seed`` left None and
    arguments the signature does not have are not checked."""
    signature = inspect.signature(reset)

    @functools.wraps(reset)
    def checked(self: Env, *args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # the call does not fit the signature: Python's own error says how
            return reset(self, *args, **kwargs)
        given = bound.arguments
        seed = given.get("seed")
        if seed is None:
            return reset(self, *args, **kwargs)
        check_reset_args(f"{type(self).__name__}.reset: ", seed, given.get("member", 0), given.get("mode", "train"))
        for name in ("seed", "member"):  # numpy integers become ints: the env stores and logs them
            if name in given:
                given[name] = int(given[name])
        return reset(*bound.args, **bound.kwargs)

    checked.__ragen_checked__ = True  # type: ignore[attr-defined]
    return checked


class Env(ABC):
    """Base class of every RAGEN environment.

    Subclasses set ``config_class`` and implement :meth:`reset`, :meth:`step`, :meth:`render`
    and :meth:`instruction`. Optional: :attr:`action_names` (a fixed action vocabulary the
    rollout layer maps replies onto, case-insensitively), :meth:`oracle_actions` (a solver used
    by conformance and oracle tests), :meth:`render_image`, :attr:`info_metrics` (info keys logged
    as metrics, each with how an episode aggregates it).

    Call order: ``__init__(config)`` -> ``reset(seed, ...)`` -> ``step(action)`` * n ->
    ``reset`` again or ``close()``. ``close`` must be idempotent.

    A subclass's ``reset`` is wrapped when the class is defined: a seed that is not an int, a
    negative member or a mode other than ``train`` / ``val`` is refused with a one-line
    :class:`~ragen_core.errors.UsageError` before the env sees it (:func:`check_reset_args`).
    A subclass's :attr:`info_metrics` is checked there too (:func:`checked_info_metrics`).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "info_metrics" in cls.__dict__:
            checked_info_metrics(cls)  # a bad declaration fails where the class is defined, naming it
        own = cls.__dict__.get("reset")
        if callable(own) and not getattr(own, "__ragen_checked__", False):
            cls.reset = _checked_reset(own)  # type: ignore[method-assign]

    config_class: type[EnvConfig] = EnvConfig
    #: Separator between several actions in one ``<answer>``; ``None`` for envs whose answer is
    #: one free-form string that may itself contain the separator (code, proofs, expressions).
    action_sep: str | None = "||"
    #: Info keys logged as metrics, each with how an episode aggregates the values its actions
    #: reported: ``"mean"``, ``"sum"``, ``"last"``, ``"max"`` or ``"min"``. The run logs
    #: ``train/<tag>/info/<key>`` (``val-env/...`` in validation): the mean over the episodes that
    #: reported the key of each one's aggregate. A value must be a finite number or a bool (1/0);
    #: an action whose info lacks the key adds nothing (it does not count as 0).
    info_metrics: ClassVar[Mapping[str, InfoAggregation]] = {}

    def __init__(self, config: EnvConfig | None = None, **overrides: Any) -> None:
        self.config = with_overrides(self.config_class, config, overrides)  # overrides validated, also beside a config
        self.seed: int | None = None

    # ----------------------------------------------------------------- required
    @abstractmethod
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Start a new episode and return the first observation text.

        Args:
            seed: The task-instance seed. Same seed -> same initial state and observation,
                whatever ``member`` is.
            member: Index of this env inside its group; may seed stochastic dynamics only.
            mode: ``"train"`` or ``"val"``; envs with data splits pick the split from it.
        """

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one action string and return ``(observation, reward, done, info)``.

        ``info`` should carry ``success`` (bool), ``action_is_valid`` and
        ``action_is_effective``. Rewards must be finite floats. Never raise on bad input.
        """

    @abstractmethod
    def render(self) -> str:
        """Current observation as text."""

    @abstractmethod
    def instruction(self) -> str:
        """Task instruction for the system prompt, built from *this* instance's config.

        Include symbol legends and the action list where the env has them (the reference built
        these from default configs only, spec 17 L30).
        """

    def merge_quirk_instruction(self) -> str:
        """:meth:`instruction` as the reference built it, for the run's ``compat.prompt_merge_quirk``
        (spec 3.2 "merge quirk", 5.1, 17 L30): this config's task text, but the symbol legend, the
        coordinate hint and the action list of the env type's *default* config.

        Override it where those appendices depend on the config (Sokoban's ``grid_vocab``, an
        ``observation_format``); the default returns :meth:`instruction`.
        """
        return self.instruction()

    # ----------------------------------------------------------------- optional
    @property
    def action_names(self) -> list[str] | None:
        """Fixed action vocabulary (e.g. ``["Up", "Down", "Left", "Right"]``) or ``None``."""
        return None

    def oracle_actions(self) -> list[str] | None:
        """Action strings that solve the episode from the *current* state, or ``None``.

        Used by conformance and oracle tests to prove a perfect agent reaches full reward
        through the same text interface the LLM uses.
        """
        return None

    def random_action(self, rng: Any) -> str | None:
        """A uniformly random *legal* action string for the current state, or ``None``.

        Used by ``ragen env play --agent random`` and by the warm-start stage, which wraps random
        legal actions in the reply format (never oracle solutions). ``rng`` is a
        ``numpy.random.Generator``. The default picks from :attr:`action_names`; free-text envs
        (Countdown, Sudoku) should override it.
        """
        names = self.action_names
        if not names:
            return None
        return str(names[int(rng.integers(len(names)))])

    def render_image(self) -> Any:
        """RGB ``numpy`` array of the current state, for visual agents (optional)."""
        raise NotImplementedError(f"{type(self).__name__} has no image rendering")

    def close(self) -> None:  # noqa: B027 - optional hook: by default there is nothing to release
        """Release resources. Idempotent."""

    # ----------------------------------------------------------------- helpers
    @staticmethod
    def finite(reward: float) -> float:
        """Return ``reward`` as float; raise ValueError if it is NaN or infinite."""
        value = float(reward)
        if not math.isfinite(value):
            raise ValueError(f"non-finite reward {reward!r}")
        return value

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
