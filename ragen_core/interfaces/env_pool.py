"""Env-pool interface: where environments run, spoken to in plain data only.

The rollout runner never holds an :class:`~ragen_core.interfaces.env.Env` object. It asks a pool
to reset a list of episodes and then, once per turn, to step all live episodes at once; every
value that crosses this seam is plain data (ints, strings, floats, lists, dicts of those), so
the same runner drives envs in this process (the ``local`` pool), in worker processes
(``process``), in Ray actors or behind HTTP (separate distributions that register a pool under
the ``ragen_core.env_pools`` entry-point group).

Division of labour:

* the **runner** owns the trajectories (one writer of an episode's status): prompts, parsing,
  mapping actions onto the env's vocabulary, the format penalty, the action budget, and deciding
  when an episode ends;
* the **pool** owns env instances: it builds them from ``(name, config JSON, preset)`` wherever
  it runs them, resets them with the seeds it is given, executes the actions it is sent in order
  (stopping at the first ``done``), and reports what happened. A pool enforces its per-step
  timeout: an episode whose env does not answer in time comes back failed (``end_reason =
  "timeout"``) instead of hanging the run.

Seeds and groups are the runner's business: a :class:`ResetRequest` carries the seed and the
member index; the pool does not know about groups.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, Field

from ragen_core.interfaces.env import INFO_AGGREGATIONS, check_reset_args, checked_info_metrics
from ragen_core.specs import CheckedModel, PluginConfig, with_overrides

#: Environment variables a run sets in the trainer's process for the envs wherever they run (a
#: plugin's "already said" marker: DeepCoder prints its sandbox line once per run) are named with
#: this prefix. Worker processes the trainer starts inherit them; a pool whose workers do not
#: inherit the trainer's environment (Ray actors on other machines) passes them on with
#: :func:`run_variables`.
RUN_VARIABLE_PREFIX = "RAGEN_RUN_"


def run_variables() -> dict[str, str]:
    """This process's environment variables named with :data:`RUN_VARIABLE_PREFIX`, by name."""
    return {name: value for name, value in os.environ.items() if name.startswith(RUN_VARIABLE_PREFIX)}


#: Why a pool ended an episode: ``"done"`` (the env said so), ``"timeout"`` (no answer within the
#: pool's step timeout), ``"failed"`` (the env worker crashed or the env raised; see ``error``).
PoolEndReason = Literal["", "done", "timeout", "failed"]
#: The end reasons of an episode the pool gave up on (its env timed out or its worker failed): the
#: episode has no env any more, and its score is not the policy's.
LOST_END_REASONS = ("timeout", "failed")


class EnvRef(CheckedModel):
    """Which env to build, as data: a registered name, config overrides and an optional preset.

    ``factory`` builds an env that is not installed (a test env, an env in a notebook's module)
    from an import string instead of the registry; it is still plain data, so a pool in another
    process can use it as long as that process can import the module.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Registered env name (also the ``env`` label of trajectories)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Overrides validated by the env's config model (JSON-serialisable)."""
    preset: str | None = None
    factory: str | None = None
    """``"package.module:attr"`` of an Env class (or function) called as ``attr(**config)``,
    used instead of looking ``name`` up in the registry; presets do not apply to it."""

    def build(self) -> Any:
        """A new env instance (in the calling process).

        Raises:
            PluginNotFoundError / PluginConfigError: unknown env name, bad config or preset.
            ConfigError: ``factory`` cannot be imported.
        """
        if self.factory is not None:
            from ragen_core.errors import ConfigError
            from ragen_core.specs import import_string

            try:
                make = import_string(self.factory)
            except (ImportError, AttributeError, ValueError) as exc:
                raise ConfigError(f"env factory {self.factory!r} cannot be imported: {type(exc).__name__}: {exc}",
                                  ["give EnvRef(factory='package.module:Class') naming a class this process can import"]) from exc
            return make(**self.config)
        from ragen_core import registry

        return registry.make_env(self.name, preset=self.preset, **self.config)


@dataclass(frozen=True)
class EnvFacts:
    """What the prompt and the runner's turn rules need from an env instance (spec 5, 4.4)."""

    action_names: tuple[str, ...] | None
    """Fixed action vocabulary the runner maps replies onto (case-insensitively), or None."""
    action_sep: str | None
    """Separator of several actions in one answer; None for free-form single answers."""
    max_actions_per_episode: int
    max_actions_per_turn: int
    max_turns: int
    max_tokens: int
    """Response-length hint shown in the prompt (a reply cap too under the runner's ``enforce_env_max_tokens``)."""
    info_metrics: tuple[tuple[str, str], ...] = ()
    """The env's :attr:`~ragen_core.interfaces.env.Env.info_metrics` as ``((key, mode), ...)``:
    how the runner aggregates each episode's :attr:`StepOutcome.info_records`."""

    def __post_init__(self) -> None:
        # pairs that travelled as JSON come back as lists; a pool that copied an env's own dict gives a dict
        declared: Any = self.info_metrics
        pairs = list(declared.items()) if isinstance(declared, Mapping) else \
            list(declared) if isinstance(declared, Iterable) and not isinstance(declared, (str, bytes)) else None
        if pairs is None or not all(
                isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) and p[1] in INFO_AGGREGATIONS for p in pairs):
            from ragen_core.config import short_repr

            raise ValueError(f"EnvFacts.info_metrics takes (key, mode) pairs or a dict of info key -> mode, each mode one of "
                             f"{', '.join(INFO_AGGREGATIONS)}, not {short_repr(declared, 80)} (EnvFacts.of(env) builds it)")
        object.__setattr__(self, "info_metrics", tuple((str(k), str(m)) for k, m in pairs))

    @classmethod
    def of(cls, env: Any) -> EnvFacts:
        """Facts of a live env (used by pools, on the side where the env lives)."""
        c = env.config
        return cls(
            action_names=checked_action_names(env.action_names),
            action_sep=env.action_sep,
            max_actions_per_episode=int(c.max_actions_per_episode),
            max_actions_per_turn=int(c.max_actions_per_turn),
            max_turns=int(c.max_turns),
            max_tokens=int(c.max_tokens),
            info_metrics=checked_info_metrics(env),
        )


def checked_action_names(names: Any) -> tuple[str, ...] | None:
    """An env's ``action_names`` as a tuple, the rule the runtime and the conformance kit share.

    Raises:
        EnvError: ``names`` is not None nor a list or tuple of non-empty str (a str would be read
            as its letters, an empty name matches every reply).
    """
    if names is None:
        return None
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n.strip() for n in names):
        from ragen_core.config import short_repr
        from ragen_core.errors import EnvError

        raise EnvError(f"action_names must be None or a list of non-empty str, not {type(names).__name__} {short_repr(names, 60)}",
                       ["return the env's fixed action vocabulary, e.g. ['Up', 'Down'], or None for free-text actions"])
    return tuple(names)


def _require_ints(request: Any, *names: str) -> None:
    """Refuse a request whose fields ``names`` are not integers (a bool is not one), and make a
    numpy integer there a Python int (requests are pickled to workers and their ids logged)."""
    from ragen_core.errors import UsageError
    from ragen_core.seeding import is_int

    for name in names:
        value = getattr(request, name)
        if not is_int(value):
            raise UsageError(f"{type(request).__name__}.{name} takes an int, not {type(value).__name__} {value!r}")
        object.__setattr__(request, name, int(value))  # the requests are frozen dataclasses


@dataclass(frozen=True)
class ResetRequest:
    """Start episode ``episode_id`` from ``seed`` (member ``member`` of its group) in ``mode``."""

    episode_id: int
    seed: int
    member: int = 0
    mode: str = "train"
    """``"train"`` or ``"val"``."""
    prompt_merge_quirk: bool = False
    """Start the episode with ``env.merge_quirk_instruction()`` instead of ``env.instruction()``
    (the run's ``compat.prompt_merge_quirk``, spec 17 L30)."""

    def __post_init__(self) -> None:
        _require_ints(self, "episode_id")
        check_reset_args("ResetRequest.", self.seed, self.member, self.mode)  # an env would be blamed for a seed it cannot take
        _require_ints(self, "seed", "member")  # checked above; numpy integers become ints


@dataclass
class EpisodeStart:
    """What a reset returns for one episode."""

    episode_id: int
    observation: str
    instruction: str
    """Task instruction for the system prompt, from this instance's config."""
    facts: EnvFacts


@dataclass(frozen=True)
class StepRequest:
    """Execute ``actions`` in order in episode ``episode_id``'s env.

    The runner has already mapped them onto the env's vocabulary and cut them to the action
    budget. An empty list means the reply had no usable action: the pool executes nothing and
    returns the env's current rendering.
    """

    episode_id: int
    actions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from ragen_core.errors import UsageError

        _require_ints(self, "episode_id")
        if isinstance(self.actions, (str, bytes)) or not isinstance(self.actions, Iterable):
            raise UsageError(f"StepRequest.actions takes a sequence of action strings, not {self.actions!r}")
        actions = tuple(self.actions)  # a generator was used up by the check below and executed nothing
        if not all(isinstance(a, str) for a in actions):
            raise UsageError(f"StepRequest.actions takes a sequence of action strings, not {actions!r}")
        object.__setattr__(self, "actions", actions)


@dataclass
class StepOutcome:
    """What one turn did in one episode's env."""

    episode_id: int
    observation: str
    reward: float = 0.0
    """Sum of the rewards of the executed actions (finite)."""
    done: bool = False
    """The env ended the episode (``info["success"]`` says whether it was solved)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Info of the last executed action (empty when nothing ran)."""
    executed: list[str] = field(default_factory=list)
    """Actions actually executed (a ``done`` stops the rest)."""
    end_reason: PoolEndReason = ""
    """Set when the pool ended the episode (see :data:`PoolEndReason`)."""
    error: str = ""
    """One line saying what went wrong when ``end_reason`` is ``"timeout"`` or ``"failed"``."""
    info_records: list[dict[str, float]] = field(default_factory=list)
    """One record per executed action: the values its info gave for the env's declared
    ``info_metrics`` keys, as floats (a bool as 1.0/0.0); a key the action's info lacked is absent."""


class EnvPoolConfig(PluginConfig):
    """Settings every pool has."""

    step_timeout_s: float | None = Field(default=None, gt=0)
    """Longest one episode's step may take: 600 s in a run (``ragen run`` sets it), none (wait
    forever) for a pool made in code. A step past it fails its episode with ``end_reason="timeout"``."""
    reset_timeout_s: float | None = Field(default=None, gt=0)
    """Longest one reset may take (a worker's resets of one rollout, in the process and Ray pools):
    600 s in a run, none for a pool made in code. A reset that does not finish in time is an
    :class:`~ragen_core.errors.EnvError` naming the env and seed."""


class EnvPool(ABC):
    """Runs env instances of one env for the rollout runner (see the module docstring).

    Args:
        env: The env to build (name, config overrides, preset).
        config: The pool's settings (subclasses extend :class:`EnvPoolConfig`).

    Call order: ``reset(requests)`` -> ``step(requests)`` * n -> ``reset`` again or ``close()``.
    Episode ids are chosen by the runner; ids of a reset replace every earlier episode of the
    pool. ``close`` is idempotent. The registry builds a pool as
    ``factory(config, env=ref)`` (:meth:`from_config`). Conformance checks every pool should
    pass: :mod:`ragen_core.testing.pool_checks`. What they check, and the helpers of
    :mod:`ragen_core.rollout.env_pool` that the shipped pools share to pass them:

    * a caller's mistake (a dict for a request, an episode named twice in one batch, a step for an
      episode that is not running or has ended) is a :class:`~ragen_core.errors.UsageError` before
      anything runs: ``check_resets(requests)`` and ``check_steps(requests, running_ids, ended)``,
      ``ended`` kept by ``note_ended(ended, outcomes, label)`` after each step;
    * an env is reset and stepped as the other pools do (its rewards checked, the action budget and
      ``done`` honoured, an episode ending without ``info["success"]`` warned about):
      ``reset_env`` and ``run_actions``, where the env runs;
    * warnings logged where the envs run reach the trainer's process, under their own logger and
      prefixed with the worker: ``WorkerLogs.install()`` there (with ``forward`` set, each sent as
      it is logged) and ``replay_worker_logs`` here;
    * the trainer's ``RAGEN_RUN_*`` variables are set where the envs run: inherited by processes it
      starts, given explicitly (``run_variables()``) to workers that do not inherit its environment.

    The runner checks the replies: one per request, for that request's episode, in request order
    (a :class:`~ragen_core.errors.PluginError` naming the pool otherwise).
    """

    config_class: type[EnvPoolConfig] = EnvPoolConfig

    def __init__(self, env: EnvRef, config: EnvPoolConfig | None = None, **overrides: Any) -> None:
        if not isinstance(env, EnvRef):  # it failed at the first reset with an AttributeError
            from ragen_core.errors import UsageError

            raise UsageError(f"{type(self).__name__} takes the env as an EnvRef, not {type(env).__name__} {env!r}",
                             [f"{type(self).__name__}(EnvRef(name='sokoban'), ...)"])
        self.env = env
        self.config = with_overrides(self.config_class, config, overrides)

    @classmethod
    def from_config(cls, config: EnvPoolConfig, *, env: EnvRef, **kwargs: Any) -> EnvPool:
        """Registry factory: ``registry.make("pool", name, config, env=ref)`` calls this."""
        return cls(env, config, **kwargs)

    @abstractmethod
    def reset(self, requests: list[ResetRequest]) -> list[EpisodeStart]:
        """Reset one env instance per request; return the starts in request order.

        Raises:
            EnvError: an env failed to reset (the message names env, seed and member).
        """

    @abstractmethod
    def step(self, requests: list[StepRequest]) -> list[StepOutcome]:
        """Step every requested episode once (all live episodes of a turn); outcomes in request order.

        An episode ends with the outcome that says ``done`` or has ``end_reason`` ``"timeout"`` or
        ``"failed"``; from then until the next reset a step for it is refused (an episode whose
        worker was lost while another episode's step ran comes back ``"failed"`` at its next step).

        Raises:
            UsageError: a request is not a :class:`StepRequest`, names an episode twice, or names
                one that is not running or has ended (named by env, seed and member);
                nothing is stepped.
            EnvError: an env raised or returned a non-finite reward (a bug in the env; the
                message names env, seed and member). A worker that crashes or hangs is not an
                env bug: its episodes come back with ``end_reason`` ``"failed"``/``"timeout"``.
        """

    def close(self) -> None:  # noqa: B027 - optional hook: by default there is nothing to release
        """Release every env instance and worker. Idempotent."""

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
