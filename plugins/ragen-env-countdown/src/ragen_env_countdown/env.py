"""Countdown: one answer, an arithmetic expression that reaches the target.

Task: given a target and 3-4 numbers, answer with an expression over ``+ - * /`` and parentheses
that uses every number exactly once and equals the target. The episode is a single answer.

Observation at reset (spec 13.4): ``Target: {target}, nums: {nums}`` (``nums`` as a Python list).
Scoring (reference semantics, scores configurable):

* the digit runs of the answer are not exactly the multiset ``nums`` -> 0;
* they are, but the expression does not parse, divides by zero, or misses the target -> ``format_score`` (0.1);
* ``|value - target| < 1e-5`` -> ``score`` (1.0).

The answer is evaluated by :func:`ragen_env_countdown.arith.evaluate`, a size-capped parser,
never ``eval``. After the answer: ``done`` is True and the observation is
``Your answer get {reward} points.``; ``info`` has ``success`` (full score),
``action_is_effective`` (reward > 0) and ``action_is_valid`` (True: any text is an answer).

Instances are procedural (seeded with :func:`ragen_core.seeding.make_rng`, always solvable with
every number) or rows of a task file (``data_path``; row ``seed mod len`` of the mode's split).
Validation reads ``val_data_path`` or, without one, the ``val_fraction`` (5 %) of ``data_path``'s
problems held out of training (:func:`ragen_env_countdown.problems.task_splits`). All members of
a group see the same instance; ``member`` does not matter (there is nothing stochastic).
"""

from __future__ import annotations

from typing import Any

from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.seeding import make_rng
from ragen_env_countdown.arith import (
    ArithmeticParseError,
    equals_target,
    evaluate,
    solve,
    uses_numbers_exactly,
)
from ragen_env_countdown.config import CountdownConfig
from ragen_env_countdown.problems import Problem, generate, task_splits


class CountdownEnv(Env):
    """Countdown arithmetic puzzle with one free-form answer (see module docstring)."""

    config_class = CountdownConfig
    config: CountdownConfig
    #: The answer is one expression; never split it.
    action_sep = None

    def __init__(self, config: CountdownConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._problem: Problem | None = None
        self._done = False
        self._last_reward: float | None = None
        self._correct = False

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Pick the instance for ``seed`` (``member`` is ignored: nothing here is random)."""
        cfg = self.config
        splits = task_splits(cfg.data_path, cfg.val_data_path, max_instances=cfg.max_instances,
                             plus_minus_only=cfg.plus_minus_only, val_fraction=cfg.val_fraction)
        problems = splits.val if mode == "val" else splits.train
        if problems is None:
            self._problem = generate(
                make_rng(seed, "countdown", mode),
                min_numbers=cfg.min_numbers,
                max_numbers=cfg.max_numbers,
                max_number=cfg.max_number,
                min_target=cfg.min_target,
                max_target=cfg.max_target,
                ops="+-" if cfg.plus_minus_only else "+-*/",
            )
        else:
            self._problem = problems[seed % len(problems)]
        self.seed = seed
        self._done = False
        self._last_reward = None
        self._correct = False
        return self.render()

    def grade(self, answer: str) -> tuple[float, bool]:
        """``(reward, correct)`` of ``answer`` for the current instance; ends nothing."""
        problem = self._require_reset()
        cfg = self.config
        if not isinstance(answer, str) or not uses_numbers_exactly(answer, list(problem.nums)):
            return 0.0, False
        try:
            value = evaluate(answer)
        except (ArithmeticParseError, ZeroDivisionError):
            return float(cfg.format_score), False
        if equals_target(value, problem.target):
            return float(cfg.score), True
        return float(cfg.format_score), False

    def step(self, action: str) -> StepResult:
        """Score the answer and end the episode; further steps score nothing."""
        self._require_reset()
        if self._done:
            info = {"success": self._correct, "action_is_valid": False, "action_is_effective": False}
            return StepResult(self.render(), 0.0, True, info)
        reward, correct = self.grade(action)
        reward = self.finite(reward)
        self._done = True
        self._last_reward = reward
        self._correct = correct
        info = {"success": correct, "action_is_valid": True, "action_is_effective": reward > 0}
        return StepResult(self.render(), reward, True, info)

    # ------------------------------------------------------------------ views
    def render(self) -> str:
        """The instance before the answer, the score message after it."""
        problem = self._require_reset()
        if self._last_reward is not None:
            return f"Your answer get {self._last_reward:g} points."
        return f"Target: {problem.target}, nums: {list(problem.nums)}"

    def instruction(self) -> str:
        """Rules, scoring and an example answer, in our own words."""
        cfg = self.config
        ops = "+ and -" if cfg.plus_minus_only else "+, -, * and /"
        return (
            "Countdown: combine the numbers you are given into one arithmetic expression whose "
            f"value is the target. You may use {ops} and parentheses; use every number exactly "
            "once and add no other numbers. Write only the expression as your answer, for "
            "example <answer>(9 - 3) * 4 + 2</answer> for the numbers [2, 3, 4, 9] and target 26. "
            f"Scoring: {cfg.score:g} for a correct expression, {cfg.format_score:g} for one that uses "
            "exactly the given numbers but misses the target, 0 for anything else."
        )

    @property
    def problem(self) -> Problem:
        """The current instance (target, nums and, for generated ones, the solution)."""
        return self._require_reset()

    # ------------------------------------------------------------------ solvers
    def oracle_actions(self) -> list[str] | None:
        """``[expression]`` that scores full marks, or ``None`` if the instance has none.

        Generated instances carry their solution; file rows are solved by exhaustive search
        (some public rows cannot be solved using every number, and then there is no oracle).
        """
        problem = self._require_reset()
        if self._done:
            return None
        if problem.solution is not None:
            return [problem.solution]
        found = solve(list(problem.nums), problem.target, "+-" if self.config.plus_minus_only else "+-*/")
        if found is None:
            found = solve(list(problem.nums), problem.target)
        return None if found is None else [found]

    def random_action(self, rng: Any) -> str | None:
        """A well-formed random guess: every number once, random operators (usually wrong)."""
        problem = self._require_reset()
        order = [int(i) for i in rng.permutation(len(problem.nums))]
        ops = "+-" if self.config.plus_minus_only else "+-*/"
        parts = [str(problem.nums[order[0]])]
        for idx in order[1:]:
            parts.append(f"{ops[int(rng.integers(len(ops)))]} {problem.nums[idx]}")
        return " ".join(parts)

    # ------------------------------------------------------------------ helpers
    def _require_reset(self) -> Problem:
        if self._problem is None:
            raise EnvError("CountdownEnv.step/render called before reset(seed)")
        return self._problem
