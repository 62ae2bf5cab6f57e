"""What the rollout runner knows about each episode, and the rules of one turn (spec 4.2-4.4).

The runner owns the trajectories; the env pool only executes actions. Everything that decides
*what* a reply means and *when* an episode ends is here, as small functions a reader can check
against the spec in one place:

* :class:`SeedSchedule` -- base seeds of successive resets; :func:`reset_requests` turns a base
  into one :class:`~ragen_core.interfaces.env_pool.ResetRequest` per episode (a group shares a
  seed, members differ; episode id ``g * group_size + m``);
* :func:`map_actions` -- parsed actions onto the env's vocabulary, case-insensitively;
* :func:`plan_turn` -- which actions go to the env, the format penalty, validity;
* :func:`end_of_turn` -- whether the episode ends after a pool outcome, and why;
* :func:`apply_outcome` -- the record after the pool stepped the episode;
* :func:`aggregate_info` -- an episode's value of each declared info metric.

Deviation from the reference, on purpose: an explicit seed in train mode advances the counter
by ``env_groups`` (the reference adds 1, spec 4.2 / 17 L27), so explicit and implicit resets
never reuse seeds; the counter is part of the runner's state dict and so of checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ragen_core.interfaces.env_pool import LOST_END_REASONS, EnvFacts, ResetRequest, StepOutcome
from ragen_core.rollout.parser import ParsedReply
from ragen_core.rollout.types import Trajectory


class SeedSchedule:
    """Base seeds of successive resets (spec 4.2); group ``g`` of a reset gets ``base + g``.

    Train mode: ``base = train_base + counter``, then ``counter += env_groups``, so consecutive
    steps never repeat a task (10000..10007, then 10008..10015 with 8 groups). Val mode: always
    ``val_base``, a fixed validation set.
    """

    def __init__(self, train_base: int = 10000, val_base: int = 123) -> None:
        self.train_base = train_base
        self.val_base = val_base
        self.counter = 0

    def next_base(self, mode: str, env_groups: int, seed: int | None = None) -> int:
        """Base seed of the next reset of ``env_groups`` groups in ``mode``."""
        if mode == "train":
            base = seed if seed is not None else self.train_base + self.counter
            self.counter = base - self.train_base + env_groups
            return base
        return seed if seed is not None else self.val_base

    def state_dict(self) -> dict[str, int]:
        return {"counter": self.counter, "train_base": self.train_base, "val_base": self.val_base}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.counter = int(state["counter"])
        self.train_base = int(state.get("train_base", self.train_base))
        self.val_base = int(state.get("val_base", self.val_base))


def reset_requests(base: int, env_groups: int, group_size: int, mode: str, *, prompt_merge_quirk: bool = False) -> list[ResetRequest]:
    """One request per episode, group-major: episode ``g * group_size + m`` gets seed ``base + g``
    (``prompt_merge_quirk``: see :attr:`ResetRequest.prompt_merge_quirk`)."""
    if env_groups < 1 or group_size < 1:
        raise ValueError(f"env_groups and group_size must be >= 1, got {env_groups} x {group_size}")
    return [
        ResetRequest(episode_id=g * group_size + m, seed=base + g, member=m, mode=mode, prompt_merge_quirk=prompt_merge_quirk)
        for g in range(env_groups) for m in range(group_size)
    ]


@dataclass
class EpisodeRecord:
    """The runner's mutable state of one running episode; ``traj`` is handed to the trainer."""

    traj: Trajectory
    observation: str
    facts: EnvFacts
    num_actions: int = 0
    done: bool = False
    warn_invalid: bool = False
    """The previous turn had no usable action (the next prompt shows a warning)."""
    blocks: list[str] = field(default_factory=list)
    """State block of every turn so far (windowed context modes re-render them)."""
    parsed: list[ParsedReply] = field(default_factory=list)
    """Parse of every reply so far (single-turn mode digests them)."""
    sample_head: list[dict[str, str]] = field(default_factory=list)
    """``retokenized_text``: the training messages of the current turn's prompt (no warnings)."""
    max_new_tokens: int = 0
    """Reply budget of each of its turns (set by the runner: the rollout's ``max_new_tokens``, or
    the env's ``max_tokens`` when that is smaller and ``enforce_env_max_tokens`` is on)."""
    length_hint: int = 0
    """The "max response length" its prompts state (the env's ``max_tokens``, or the budget above
    when ``enforce_env_max_tokens`` is on)."""

    @property
    def actions_left(self) -> int:
        return max(0, self.facts.max_actions_per_episode - self.num_actions)

    def finish(self, reason: str, *, truncated: bool) -> None:
        """End the episode without the env saying done (turn limit, context limit, pool failure)."""
        self.done = True
        self.traj.end_reason = reason
        if truncated:
            self.traj.terminated = True
            self.traj.truncated = True
        self.traj.success = self.traj.terminated and not self.traj.truncated


# ----------------------------------------------------------------------------- turn rules
def map_actions(actions: list[str], names: tuple[str, ...] | None) -> list[str]:
    """Map parsed actions onto ``names`` case-insensitively; drop unknown ones.

    Envs without a fixed vocabulary (``names is None``) receive the action strings unchanged.
    """
    if names is None:
        return list(actions)
    lookup = {n.lower(): n for n in names}
    return [lookup[a.strip().lower()] for a in actions if a.strip().lower() in lookup]


@dataclass(frozen=True)
class TurnPlan:
    """What the runner does with one parsed reply before the env sees it."""

    actions: tuple[str, ...]
    """Known actions, cut to the episode's remaining budget: what the pool executes."""
    penalty: float
    """Format penalty of this turn (0 or the configured penalty)."""
    valid: bool
    """The reply parsed and every parsed action was known."""
    usable: bool
    """At least one action was known; otherwise the env is not stepped and the next prompt warns."""


def plan_turn(parsed: ParsedReply, facts: EnvFacts, actions_left: int, format_penalty: float) -> TurnPlan:
    """Spec 4.4: map, charge the penalty when no action or some unknown action, cut to the budget."""
    kept = map_actions(parsed.actions, facts.action_names)
    offending = not kept or len(kept) != len(parsed.actions)
    return TurnPlan(
        actions=tuple(kept[:actions_left]),
        penalty=format_penalty if offending else 0.0,
        valid=parsed.ok and not offending,
        usable=bool(kept),
    )


@dataclass(frozen=True)
class TurnEnd:
    """How an episode ends after a turn: the trajectory's end fields."""

    reason: str
    terminated: bool
    truncated: bool


def end_of_turn(outcome: StepOutcome, num_actions: int, facts: EnvFacts) -> TurnEnd | None:
    """Whether the episode ends after ``outcome`` (``num_actions`` already counts its actions).

    * the env said done: terminated, truncated unless ``info["success"]`` (``"done"``);
    * the pool ended it (``"timeout"``/``"failed"``): truncated, that reason;
    * the per-episode action budget is used up: truncated (``"action_budget"``);
    * else the episode goes on (None).
    """
    if outcome.done:
        return TurnEnd("done", terminated=True, truncated=not bool(outcome.info.get("success", False)))
    if outcome.end_reason in LOST_END_REASONS:
        return TurnEnd(outcome.end_reason, terminated=True, truncated=True)
    if num_actions >= facts.max_actions_per_episode:
        return TurnEnd("action_budget", terminated=True, truncated=True)
    return None


def turn_info(outcome: StepOutcome, plan: TurnPlan) -> dict[str, Any]:
    """The turn's info: the env's info of its last action plus the runner's flags."""
    info = dict(outcome.info)
    if not plan.usable:
        info["manager_invalid_action"] = True
    if outcome.error:
        info["pool_error"] = outcome.error
    return info


def apply_outcome(ep: EpisodeRecord, plan: TurnPlan, outcome: StepOutcome) -> None:
    """Update ``ep`` after the pool stepped it: observation, budget, warning, end of episode.

    An episode the pool gave up on keeps its last observation (its env is gone).
    """
    ep.warn_invalid = not plan.usable
    ep.num_actions += len(outcome.executed)
    if outcome.end_reason not in LOST_END_REASONS:
        ep.observation = outcome.observation
    end = end_of_turn(outcome, ep.num_actions, ep.facts)
    if end is not None:
        ep.done = True
        ep.traj.end_reason = end.reason
        ep.traj.terminated, ep.traj.truncated = end.terminated, end.truncated
    ep.traj.success = ep.traj.terminated and not ep.traj.truncated
    ep.traj.final_observation = ep.observation


def aggregate_info(records: Iterable[dict[str, float]], declared: Iterable[tuple[str, str]]) -> dict[str, float]:
    """An episode's value of each ``declared`` ``(key, mode)`` from its actions' info ``records``
    in order: the ``mean``, ``sum``, ``last``, ``max`` or ``min`` of the values reported for the
    key. A key no action reported is left out (an action without it does not count as 0)."""
    values: dict[str, list[float]] = {}
    for record in records:
        for key, value in record.items():
            values.setdefault(key, []).append(value)
    out: dict[str, float] = {}
    for key, mode in declared:
        seen = values.get(key)
        if not seen:
            continue
        if mode == "mean":
            out[key] = sum(seen) / len(seen)
        elif mode == "sum":
            out[key] = float(sum(seen))
        elif mode == "last":
            out[key] = seen[-1]
        elif mode == "max":
            out[key] = max(seen)
        elif mode == "min":
            out[key] = min(seen)
        else:
            raise ValueError(f"info metric {key!r}: unknown aggregation {mode!r}")
    return out
