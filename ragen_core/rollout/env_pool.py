"""Groups of environment instances, their seeds, and one turn of env logic (spec 4).

An :class:`EnvPool` owns ``env_groups x group_size`` instances of one env (name + config +
optional preset, built through the registry). On every reset all members of a group get the
same seed and their own ``member`` index, so they start from the same task instance (the group
baseline of GRPO and the filters relies on this). :meth:`EnvPool.step` applies one parsed reply
to one episode: map the actions onto the env's vocabulary, charge the format penalty, enforce
the action budget, execute, and update the episode status.

Deviation from the reference, on purpose: an explicit seed in train mode advances the counter
by ``env_groups`` (the reference adds 1, spec 4.2 / 17 L27), so explicit and implicit resets
never reuse seeds; the counter is part of :meth:`EnvPool.state_dict` and so of checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env
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


@dataclass
class Episode:
    """Mutable state of one running episode; ``traj`` is the record handed to the trainer."""

    env: Env
    traj: Trajectory
    observation: str
    max_actions: int
    num_actions: int = 0
    done: bool = False
    warn_invalid: bool = False
    """The previous turn had no usable action (the next prompt shows a warning)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Scratch space for the rollout runner (token context, ...)."""

    @property
    def actions_left(self) -> int:
        return max(0, self.max_actions - self.num_actions)

    def finish(self, reason: str, *, truncated: bool) -> None:
        """End the episode without the env saying done (turn limit, context limit)."""
        self.done = True
        self.traj.end_reason = reason
        if truncated:
            self.traj.terminated = True
            self.traj.truncated = True
        self.traj.success = self.traj.terminated and not self.traj.truncated


@dataclass
class TurnOutcome:
    """What one turn did in the environment."""

    actions: list[str]
    reward: float
    penalty: float
    valid: bool
    info: dict[str, Any]
    observation: str


class EnvPool:
    """``env_groups x group_size`` instances of one environment.

    Args:
        env_name: Registered env name.
        env_config: Config overrides (validated by the env's config model).
        preset: Optional named preset of the env spec (e.g. ``"CoordSokoban"``).
        env_groups: Number of groups (distinct task instances per reset).
        group_size: Members per group (same seed, own ``member`` index).
        format_penalty: Added to a turn's ``penalty`` when the reply had no usable action or
            some parsed action was unknown (spec 4.4 step 2).
        seeds: Shared seed schedule (a runner shares one between its train and val pools).
        tag: Label used in metric keys (default: the preset or the env name).
    """

    def __init__(
        self,
        env_name: str,
        env_config: dict[str, Any] | None = None,
        *,
        preset: str | None = None,
        env_groups: int = 1,
        group_size: int = 1,
        format_penalty: float = -0.1,
        seeds: SeedSchedule | None = None,
        tag: str | None = None,
    ) -> None:
        if env_groups < 1 or group_size < 1:
            raise ValueError(f"env_groups and group_size must be >= 1, got {env_groups} x {group_size}")
        self.env_name = env_name
        self.env_config = dict(env_config or {})
        self.preset = preset
        self.env_groups = env_groups
        self.group_size = group_size
        self.format_penalty = float(format_penalty)
        self.seeds = seeds if seeds is not None else SeedSchedule()
        self.tag = tag or preset or env_name
        self.envs: list[Env] = []

    @property
    def size(self) -> int:
        return self.env_groups * self.group_size

    def build(self) -> list[Env]:
        """Construct the env instances (lazily, on the first reset)."""
        if not self.envs:
            from ragen_core import registry

            self.envs = [registry.make_env(self.env_name, preset=self.preset, **self.env_config) for _ in range(self.size)]
        return self.envs

    # ----------------------------------------------------------------- reset
    def reset(self, mode: str = "train", seed: int | None = None) -> list[Episode]:
        """Reset every instance for a new rollout; return one :class:`Episode` per env id."""
        envs = self.build()
        base = self.seeds.next_base(mode, self.env_groups, seed)
        episodes = []
        for env_id, env in enumerate(envs):
            group, member = divmod(env_id, self.group_size)
            group_seed = base + group
            try:
                obs = env.reset(group_seed, member=member, mode=mode)
            except Exception as exc:
                raise EnvError(
                    f"env {self.env_name!r} failed to reset with seed {group_seed} (member {member}): {type(exc).__name__}: {exc}"
                ) from exc
            traj = Trajectory(env=self.env_name, tag=self.tag, group_id=group, member=member, seed=group_seed, env_id=env_id)
            episodes.append(Episode(env=env, traj=traj, observation=str(obs), max_actions=env.config.max_actions_per_episode))
        return episodes

    # ------------------------------------------------------------------ step
    def map_actions(self, env: Env, actions: list[str]) -> list[str]:
        """Map parsed actions onto ``env.action_names`` case-insensitively; drop unknown ones.

        Envs without a fixed vocabulary receive the action strings unchanged.
        """
        names = env.action_names
        if names is None:
            return list(actions)
        lookup = {n.lower(): n for n in names}
        return [lookup[a.strip().lower()] for a in actions if a.strip().lower() in lookup]

    def step(self, ep: Episode, parsed: ParsedReply) -> TurnOutcome:
        """Apply one parsed reply to ``ep`` (spec 4.4) and update its status.

        Raises:
            EnvError: the env raised, or returned a NaN/infinite reward; the message names the
                env, the seed and the member.
        """
        env, traj = ep.env, ep.traj
        kept = self.map_actions(env, parsed.actions)
        offending = not kept or len(kept) != len(parsed.actions)
        penalty = self.format_penalty if offending else 0.0
        to_run = kept[: ep.actions_left]
        reward = 0.0
        info: dict[str, Any] = {}
        executed: list[str] = []
        done = False
        observation = ep.observation
        for action in to_run:
            try:
                result = env.step(action)
            except Exception as exc:
                raise EnvError(
                    f"env {self.env_name!r} raised on action {action!r} (seed {traj.seed}, member {traj.member}): {type(exc).__name__}: {exc}",
                    hints=["envs must treat any action string as input and report invalid moves via info"],
                ) from exc
            observation, r, done, info = result
            value = float(r)
            if not math.isfinite(value):
                raise EnvError(
                    f"env {self.env_name!r} returned a non-finite reward {r!r} for action {action!r} (seed {traj.seed}, member {traj.member})"
                )
            reward += value
            executed.append(action)
            if done:
                break
        info = dict(info)
        if not kept:
            info["manager_invalid_action"] = True
            observation = env.render()
        ep.warn_invalid = not kept
        ep.num_actions += len(executed)
        ep.observation = str(observation)
        if done:
            ep.done = True
            traj.terminated = True
            traj.truncated = not bool(info.get("success", False))
            traj.end_reason = "done"
        elif ep.num_actions >= ep.max_actions:
            ep.done = True
            traj.terminated = traj.truncated = True
            traj.end_reason = "action_budget"
        traj.success = traj.terminated and not traj.truncated
        traj.final_observation = ep.observation
        return TurnOutcome(actions=executed, reward=reward, penalty=penalty, valid=parsed.ok and not offending, info=info, observation=ep.observation)

    # --------------------------------------------------------------- lifecycle
    def state_dict(self) -> dict[str, int]:
        """Checkpointable state: the seed counter."""
        return self.seeds.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.seeds.load_state_dict(state)

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []
