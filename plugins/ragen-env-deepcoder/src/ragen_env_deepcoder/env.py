"""DeepCoder: write a Python program that passes a problem's unit tests (spec 13.7).

Task: the observation is a programming problem (statement, plus starter code for function-call
problems); the answer is one complete Python program. It is run in the sandbox
(:mod:`ragen_env_deepcoder.sandbox`) on every test of the problem, each test with its own time
limit, and the reward is the fraction of tests passed (``partial_credit``; else 1 only when all
pass). One answer per episode: ``done`` is True after it, with the observation ``Correct!`` (all
tests passed) or ``Incorrect.``. An empty answer is ``Invalid action.``: reward
``invalid_action_score``, episode not over (spec; the rollout layer never sends one).

``info``: ``success`` (all passed), ``passed_tests``, ``total_tests``, ``pass_reward`` (the
fraction), ``runnable`` (a Python program was found and compiled), ``action_is_valid`` (a program
was found within the length limit), ``action_is_effective`` (at least one test passed), and ``detail`` (text: why the
first failing test failed). Line numbers in ``detail`` are lines of the answer's code, not of the program
that runs (which may start with ``from typing import *`` and the starter code): see
:class:`ragen_env_deepcoder.answer.Program`.

Answers may be fenced (```` ```python ````); see :mod:`ragen_env_deepcoder.answer` for the
extraction rules and the starter-code rules, and :mod:`ragen_env_deepcoder.grading` for how
outputs are compared. ``action_sep`` is ``None``: code is never split into several actions.

Problems: the built-in set (default), or DeepCoder-Preview rows from the hub or local files
(:mod:`ragen_env_deepcoder.problems`); ``reset(seed)`` picks a training problem uniformly with a
generator derived from ``(seed, mode)`` (validation: problem ``seed mod n``), so every member of a
group gets the same one.
"""

from __future__ import annotations

import re
from typing import Any

from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.seeding import make_rng
from ragen_env_deepcoder.answer import ANSWER, assemble_program, extract_code
from ragen_env_deepcoder.config import DeepCoderConfig
from ragen_env_deepcoder.grading import passed
from ragen_env_deepcoder.problems import Problem, problems_for
from ragen_env_deepcoder.sandbox import Sandbox

#: Trivial one-line programs that compile (and are almost always wrong): the warm start's
#: "random" answers. Short, so a demonstration fits the default reply length with its closing tag.
_TRIVIAL_PROGRAMS = ("pass", "print()", "print(0)", "print(input())")


_ANSWER_FRAME = re.compile(rf'File "{re.escape(ANSWER)}", line (\d+)')


def _error_note(stderr: str) -> str:
    """`` (its last stderr line, at line N)``: N is the innermost traceback frame in the answer's code."""
    if not stderr.strip():
        return ""
    frames = _ANSWER_FRAME.findall(stderr)
    return f" ({stderr.strip().splitlines()[-1]}" + (f", at line {frames[-1]}" if frames else "") + ")"


class DeepCoderEnv(Env):
    """Code generation graded by unit tests in a sandbox (see the module docstring)."""

    config_class = DeepCoderConfig
    config: DeepCoderConfig
    #: The share of unit tests the final answer passed.
    info_metrics = {"pass_reward": "last"}
    #: The answer is one program; never split it (the reference split code on ``||``).
    action_sep = None

    def __init__(self, config: DeepCoderConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._sandbox: Sandbox | None = Sandbox(self.config.sandbox)
        self._problem: Problem | None = None
        self._message: str | None = None
        self._done = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sandbox"] = None  # rebuilt on first use in the receiving process
        return state

    # ------------------------------------------------------------------ problems
    def problems(self, mode: str = "train") -> tuple[Problem, ...]:
        """The problems ``reset`` draws from in ``mode``."""
        return problems_for(self.config, "val" if mode == "val" else "train")

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Pick the problem for ``(seed, mode)``: training draws one uniformly with a generator of
        ``(seed, mode)``; validation takes problem ``seed mod n``, so consecutive seeds (a
        validation rollout, ``ragen eval``) cover the held-out set without repeats. ``member`` is
        ignored (grading is deterministic)."""
        problems = self.problems(mode)
        index = seed % len(problems) if mode == "val" else int(make_rng(seed, "deepcoder", mode).integers(len(problems)))
        self._problem = problems[index]
        self.seed = seed
        self._message = None
        self._done = False
        return self.render()

    def grade(self, answer: str) -> tuple[float, dict[str, Any]]:
        """``(reward, info)`` of ``answer`` for the current problem; ends nothing."""
        problem = self._require_reset()
        cfg = self.config
        tests = problem.tests[: cfg.max_tests] if cfg.max_tests else problem.tests
        info: dict[str, Any] = {"success": False, "passed_tests": 0, "total_tests": len(tests), "pass_reward": 0.0,
                                "runnable": False, "action_is_valid": True, "action_is_effective": False, "detail": ""}
        if isinstance(answer, str) and len(answer) > 2 * cfg.sandbox.max_code_chars:
            info["detail"] = f"answer longer than {2 * cfg.sandbox.max_code_chars} characters: not run"
            info["action_is_valid"] = False  # no program to run (the warm start's valid rate and env play read it)
            return 0.0, info
        found = extract_code(answer)
        if not found.code:
            info["detail"] = f"no program: {found.problem}"
            info["action_is_valid"] = False  # no program to run (the warm start's valid rate and env play read it)
            return 0.0, info
        program = assemble_program(problem.starter_code, found.code)
        code = program.text
        if len(code) > cfg.sandbox.max_code_chars:
            info["detail"] = f"program longer than {cfg.sandbox.max_code_chars} characters: not run"
            info["action_is_valid"] = False  # no program to run (the warm start's valid rate and env play read it)
            return 0.0, info
        if self._sandbox is None:
            self._sandbox = Sandbox(cfg.sandbox)
        run = self._sandbox.run(code, [t.payload() for t in tests])
        if run.compile_error is not None:
            info["detail"] = f"does not compile: {program.locate(run.compile_error, compile_error=True)}"
            return 0.0, info
        results = [passed(t, r) for t, r in zip(tests, run.tests)]
        count = sum(results)
        info.update(passed_tests=count, runnable=True, action_is_effective=count > 0)
        info["pass_reward"] = count / len(tests) if tests else 0.0
        info["success"] = bool(tests) and count == len(tests)
        if not info["success"] and tests:
            i = results.index(False)
            r = run.tests[i]
            why = r.status if r.status != "ok" else "wrong answer"
            info["detail"] = f"test {i + 1}/{len(tests)}: {why}" + _error_note(program.locate(r.stderr))
        reward = info["pass_reward"] if cfg.partial_credit else float(info["success"])
        return float(reward), info

    def step(self, action: str) -> StepResult:
        """Run the program on the problem's tests and end the episode (an empty answer ends nothing)."""
        self._require_reset()
        if self._done:
            info = {"success": False, "action_is_valid": False, "action_is_effective": False}
            return StepResult(self.render(), 0.0, True, info)
        if not isinstance(action, str) or not action.strip():
            info = {"success": False, "action_is_valid": False, "action_is_effective": False, "passed_tests": 0,
                    "total_tests": len(self._require_reset().tests), "pass_reward": 0.0, "runnable": False, "detail": "empty answer"}
            return StepResult("Invalid action.", self.finite(self.config.invalid_action_score), False, info)
        reward, info = self.grade(action)
        self._done = True
        self._message = "Correct!" if info["success"] else "Incorrect."
        return StepResult(self.render(), self.finite(reward), True, info)

    # ------------------------------------------------------------------ views
    def render(self) -> str:
        """The problem before the answer, ``Correct!`` / ``Incorrect.`` after it."""
        problem = self._require_reset()
        return self._message if self._message is not None else problem.question

    def instruction(self) -> str:
        """What to answer and how it is graded, in our own words."""
        limit = self.config.sandbox.time_limit_s
        return (
            "You are solving a programming problem. Answer with one complete Python 3 program inside "
            "<answer>...</answer> (a ```python code block inside the answer is fine). Programs for problems "
            "with input read standard input and print to standard output; when starter code is given, "
            "complete it (a class Solution or the named function). Only the standard library is available. "
            f"Each test has a {limit:g} s time limit; your score is the fraction of tests passed."
        )

    @property
    def problem(self) -> Problem:
        """The current problem."""
        return self._require_reset()

    # ------------------------------------------------------------------ solvers
    def oracle_actions(self) -> list[str] | None:
        """``[reference solution]`` when the problem carries one (the built-in set always does)."""
        problem = self._require_reset()
        if self._done or not problem.solution:
            return None
        return [problem.solution]

    def random_action(self, rng: Any) -> str | None:
        """A trivial program that compiles (usually wrong): the warm start's legal answer."""
        self._require_reset()
        return _TRIVIAL_PROGRAMS[int(rng.integers(len(_TRIVIAL_PROGRAMS)))]

    def close(self) -> None:
        """Nothing to release: sandbox runs end with their step; the worker pool is process-wide."""

    # ------------------------------------------------------------------ helpers
    def _require_reset(self) -> Problem:
        if self._problem is None:
            raise EnvError("DeepCoderEnv.step/render called before reset(seed)")
        return self._problem
