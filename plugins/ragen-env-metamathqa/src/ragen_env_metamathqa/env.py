"""MetaMathQA: answer a math word problem; the final answer is checked against the label.

Behaviour (spec 13.5): ``reset`` picks a question uniformly from the mode's split with a
generator seeded by ``(seed, mode)`` -- every member of a group gets the same question -- and
shows the question text. ``step(answer)`` is one attempt: a correct answer on attempt ``k``
(``k = 0`` first) earns ``1 / 2**k`` and ends the episode; a wrong one earns 0, says
``Incorrect, think again.`` and leaves the episode open (with the default
``max_actions_per_episode = 1`` the rollout layer ends it after that one answer; a reply with
no parsable ``<answer>`` executes nothing, so up to ``max_turns`` turns may be used to give
one). ``info``: ``success`` (correct), ``action_is_valid`` (non-empty answer),
``action_is_effective`` (correct).

Differences from the reference, all configurable: the default checker is ``math``
(:func:`ragen_env_metamathqa.checker.math_equal`; ``checker="exact"`` or the ``ExactMatch``
preset restores exact matching); validation reads held-out questions instead of the training
split; rows without a label are dropped; the default data is the built-in problem set.
"""

from __future__ import annotations

import re
from typing import Any

from ragen_core.errors import ConfigError, EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.seeding import make_rng
from ragen_env_metamathqa.checker import exact_match, math_equal
from ragen_env_metamathqa.config import MetaMathQAConfig
from ragen_env_metamathqa.problems import Problem, splits_for

CORRECT = "Correct!"
INCORRECT = "Incorrect, think again."
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class MetaMathQAEnv(Env):
    """Math word problems with one checked final answer (see module docstring)."""

    config_class = MetaMathQAConfig
    config: MetaMathQAConfig
    #: The answer is free-form text (it may contain any separator); never split it.
    action_sep = None

    def __init__(self, config: MetaMathQAConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._problem: Problem | None = None
        self._attempts = 0
        self._correct = False
        self._feedback: str | None = None

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Pick the question for ``(seed, mode)``: training draws one uniformly with a generator of
        ``(seed, mode)``; validation takes question ``seed mod n``, so consecutive seeds (a
        validation rollout, ``ragen eval``) cover the held-out set without repeats. ``member`` is
        ignored (nothing is random)."""
        splits = splits_for(self.config)
        problems = splits.val if mode == "val" else splits.train
        if not problems:
            raise ConfigError(
                f"no validation problems in {self.config.dataset_path or 'the built-in set'}",
                ["raise env_config.val_fraction or set env_config.val_dataset_path"],
            )
        index = seed % len(problems) if mode == "val" else int(make_rng(seed, "metamathqa", mode).integers(len(problems)))
        self._problem = problems[index]
        self.seed = seed
        self._attempts = 0
        self._correct = False
        self._feedback = None
        return self.render()

    def is_correct(self, answer: str) -> bool:
        """Whether ``answer`` matches the current label under the configured checker."""
        problem = self._require_reset()
        if self.config.checker == "exact":
            return exact_match(answer, problem.answer)
        return math_equal(
            answer,
            problem.answer,
            time_limit_s=self.config.check_time_limit_s,
            symbolic=self.config.symbolic_check,
            symbolic_time_limit_s=self.config.symbolic_time_limit_s,
        )

    def step(self, action: str) -> StepResult:
        """Score one attempt; a correct one ends the episode, later steps score nothing."""
        self._require_reset()
        if self._correct:
            info = {"success": True, "action_is_valid": False, "action_is_effective": False}
            return StepResult(self.render(), 0.0, True, info)
        valid = isinstance(action, str) and bool(action.strip())
        correct = valid and self.is_correct(action)
        reward = 0.5**self._attempts if correct else 0.0
        self._attempts += 1
        self._correct = correct
        self._feedback = CORRECT if correct else INCORRECT
        info = {"success": correct, "action_is_valid": valid, "action_is_effective": correct}
        return StepResult(self.render(), self.finite(reward), correct, info)

    # ------------------------------------------------------------------ views
    def render(self) -> str:
        """The question before any answer, then the feedback on the last answer."""
        problem = self._require_reset()
        return problem.question if self._feedback is None else self._feedback

    def instruction(self) -> str:
        """Task, answer format and what the checker accepts, in our own words."""
        if self.config.checker == "exact":
            accepted = "Your answer is compared with the reference as text (case and spaces ignored), so write it exactly."
        else:
            accepted = ("Numbers, fractions, decimals, percentages and LaTeX such as \\frac{3}{4} or 2\\sqrt{3} "
                        "are all accepted.")
        return (
            "You are solving math problems. Work the problem out, then give only the final answer "
            f"inside the answer tags, for example <answer>42</answer>. {accepted}"
        )

    @property
    def problem(self) -> Problem:
        """The current question and its reference answer."""
        return self._require_reset()

    # ------------------------------------------------------------------ solvers
    def oracle_actions(self) -> list[str] | None:
        """``[label]``: the reference answer, correct under both checkers."""
        problem = self._require_reset()
        return None if self._correct else [problem.answer]

    def random_action(self, rng: Any) -> str | None:
        """A guess (never the label on purpose): a number of the question, or 0..100."""
        problem = self._require_reset()
        numbers = _NUMBER.findall(problem.question)
        if numbers and rng.random() < 0.5:
            return numbers[int(rng.integers(len(numbers)))]
        return str(int(rng.integers(0, 101)))

    # ------------------------------------------------------------------ helpers
    def _require_reset(self) -> Problem:
        if self._problem is None:
            raise EnvError("MetaMathQAEnv.step/render called before reset(seed)")
        return self._problem
