"""Lean: prove a theorem tactic by tactic, every verdict from a real Lean 4 checker (spec 13.9).

Task: the observation shows the theorem (informal statement, when known) and the numbered proof
text so far; each action is one tactic (a reply's ``<answer>`` holds several, separated by
``||``). The tactic is appended to the accepted ones and the whole proof text is checked by the
configured backend (:mod:`ragen_env_lean.checker`): a local Lean REPL or a Kimina server.

Per step (one tactic), with the reward table of the config:

* a tactic the parser refuses (empty, too long, a command word such as ``axiom``; see
  :func:`~ragen_env_lean.statements.parse_tactic`) is rejected without being sent:
  ``step_penalty + invalid_step_reward`` (-1.1);
* otherwise Lean's answer decides (:func:`~ragen_env_lean.checker.verdict`): accepted tactics are
  kept, rejected ones dropped (the agent may try again); reward ``step_penalty`` +
  ``valid_step_reward`` or ``invalid_step_reward`` + ``success_reward`` on success +
  ``timeout_penalty`` on a timeout;
* the episode ends on success, or when its tactic budget is spent, with ``max_steps_penalty``
  more. The budget (:attr:`LeanEnv.step_budget`, shown as ``Steps taken: i/N``) is the smallest of
  ``max_steps``, ``max_actions_per_episode`` and ``max_turns * max_actions_per_turn``: the rollout
  stops an episode at the latter two, so a larger ``max_steps`` (the reference's 100 against its
  tag's 30 actions) was a budget the observation showed and its penalty never met. An episode cut short by ``max_turns`` (fewer
  tactics per reply) ends without the penalty: the env does not see turns.

``info``: ``success``, ``action_is_valid`` = ``action_is_effective`` = accepted, ``status``
(``ok``, ``timeout``, ``server_error``, ``repl_error``, ``refused``), ``messages`` (Lean's, as
dicts), ``lean_time_s`` (the checker's seconds; an info metric, summed over the episode).

The env never guesses: constructing it without a configured checker (or with a ``server_url``
where nothing answers) raises the same one-line :class:`~ragen_core.errors.ConfigError` as the
start-up check (:func:`~ragen_env_lean.availability.check_available`). At reset the checker is
probed once per process with a tiny proof; a checker whose reply is not a Lean REPL response (a
``repl_command`` such as ``cat`` that echoes, a server answering ``{}``) raises a one-line
ConfigError naming ``env_config.repl_command`` / ``env_config.server_url`` there, and again at
any later step that gets such a reply: it is never turned into a reward.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from ragen_core.errors import ConfigError, EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.seeding import make_rng
from ragen_env_lean.availability import check_available
from ragen_env_lean.checker import Checker, CheckResult, make_checker, verdict
from ragen_env_lean.config import LeanConfig
from ragen_env_lean.render import feedback_lines, observation
from ragen_env_lean.statements import Theorem, body_text, parse_tactic, proof_text
from ragen_env_lean.theorems import theorem_set

#: Common one-word tactics: the random agent's (and warm start's) legal actions.
COMMON_TACTICS = ("simp", "norm_num", "linarith", "nlinarith", "omega", "ring", "positivity", "decide", "constructor",
                  "intro h", "rfl", "aesop", "field_simp", "ring_nf")


class LeanEnv(Env):
    """Tactic-by-tactic theorem proving checked by Lean (see the module docstring)."""

    config_class = LeanConfig
    config: LeanConfig
    info_metrics = {"lean_time_s": "sum"}  # the checker's seconds over an episode's tactics

    def __init__(self, config: LeanConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        check_available(self.config)
        self._checker: Checker | None = None
        self._theorem: Theorem | None = None
        self._tactics: list[str] = []
        self._log: list[tuple[str, bool]] = []
        self._feedback: list[str] | None = None
        self._steps = 0
        self._done = False
        self._success = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_checker"] = None  # rebuilt on first check in the receiving process
        return state

    # ------------------------------------------------------------------ theorems
    def theorems(self, mode: str = "train") -> tuple[Theorem, ...]:
        """The theorems ``reset`` draws from in ``mode`` (``val``: the fixed validation split)."""
        found = theorem_set(self.config)
        return found.val if mode == "val" else found.train

    def _pick(self, seed: int, mode: str) -> Theorem:
        pool = self.theorems(mode)
        if self.config.theorem is not None:
            every = theorem_set(self.config)
            named = [t for t in every.train + every.val if t.name == self.config.theorem]
            if not named:
                raise ConfigError(f"lean env: no theorem named {self.config.theorem!r}",
                                  [f"some names: {', '.join(t.name for t in every.train[:5])}"])
            return named[0]
        if not pool:
            raise ConfigError(f"lean env: the {mode} split has no theorem", ["set env_config.val_split (or dataset) to a split with theorems"])
        return pool[int(make_rng(seed, "lean", mode).integers(len(pool)))]

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Pick the theorem for ``(seed, mode)``; ``member`` is ignored (checking is deterministic)."""
        self._theorem = self._pick(seed, mode)
        probe = getattr(self._ready_checker(), "probe", None)  # the built-in backends; a test's stand-in has none
        if probe is not None:
            self._refuse_unless_proved(probe())
        self.seed = seed
        self._tactics, self._log, self._feedback = [], [], None
        self._steps, self._done, self._success = 0, False, False
        return self.render()

    def step(self, action: str) -> StepResult:
        """Check one tactic (see the module docstring for the reward table)."""
        theorem = self._require_reset()
        cfg = self.config
        if self._done:
            return StepResult(self.render(), 0.0, True, {"success": self._success, "action_is_valid": False,
                                                         "action_is_effective": False, "status": "done", "messages": []})
        self._steps += 1
        tactic, problem = parse_tactic(action, cfg.max_tactic_chars)
        result: CheckResult | None = None
        if problem is not None:
            accepted = success = timeout = False
            status = "refused"
        else:
            result = self._ready_checker().check(theorem.imports, body_text(theorem, [*self._tactics, tactic]))
            self._refuse_if_not_lean(result)
            judged = verdict(result)
            accepted, success, timeout, status = judged.accepted, judged.success, judged.timeout, result.status
        reward = cfg.step_penalty + (cfg.valid_step_reward if accepted else cfg.invalid_step_reward)
        reward += (cfg.success_reward if success else 0.0) + (cfg.timeout_penalty if timeout else 0.0)
        if accepted:
            self._tactics.append(tactic)
        self._log.append((tactic, accepted))
        self._feedback = feedback_lines(result, accepted, problem, cfg.message_truncate_limit)
        self._success = success
        self._done = success or self._steps >= self.step_budget
        if self._done and not success:
            reward += cfg.max_steps_penalty
        info = {"success": success, "action_is_valid": accepted, "action_is_effective": accepted, "status": status,
                "messages": [dataclasses.asdict(m) for m in result.messages] if result else [],
                "error": (result.error if result else problem) or "", "lean_time_s": result.time_s if result else 0.0}
        return StepResult(self.render(), self.finite(reward), self._done, info)

    # ------------------------------------------------------------------ views
    def proof_text(self) -> str:
        """The full Lean text of the accepted proof so far."""
        return proof_text(self._require_reset(), self._tactics)

    def render(self) -> str:
        theorem = self._require_reset()
        return observation(steps=self._steps, max_steps=self.step_budget, accepted=len(self._tactics),
                           informal=theorem.informal, proof=self.proof_text(), log=self._log, feedback=self._feedback)

    @property
    def step_budget(self) -> int:
        """Tactics an episode may take: ``min(max_steps, max_actions_per_episode)`` (and no more than
        ``max_turns * max_actions_per_turn``: :attr:`~ragen_core.interfaces.env.EnvConfig.action_budget`)."""
        return min(self.config.max_steps, self.config.action_budget)

    def instruction(self) -> str:
        """How to answer, in our own words (spec 13.9's instruction)."""
        return (
            "You are a Lean 4 prover working with Mathlib. You see a theorem and the proof written so far, with "
            "Lean's latest messages. Propose the next tactics that continue the proof, thinking step by step. "
            "Separate several tactics with ||, for example <answer>intro h || simp || linarith</answer>. "
            "Each tactic is checked by Lean: accepted tactics are added to the proof, rejected ones are dropped, "
            "and the proof is finished when Lean reports no goals, errors or sorry."
        )

    @property
    def theorem(self) -> Theorem:
        """The current theorem."""
        return self._require_reset()

    # ------------------------------------------------------------------ solvers
    def oracle_actions(self) -> list[str] | None:
        """The rest of the theorem's known proof, when the accepted tactics are its beginning."""
        theorem = self._require_reset()
        known = list(theorem.proof)
        if self._done or not known or known[: len(self._tactics)] != self._tactics:
            return None
        return known[len(self._tactics):]

    def random_action(self, rng: Any) -> str | None:
        """A common tactic (usually not the right one): the warm start's legal action."""
        self._require_reset()
        return COMMON_TACTICS[int(rng.integers(len(COMMON_TACTICS)))]

    def close(self) -> None:
        """Let go of the checker: the shared REPL processes stay for the other envs of this process
        (they are stopped at exit and die with it); a server checker holds nothing."""
        self._checker = None

    # ------------------------------------------------------------------ helpers
    def _ready_checker(self) -> Checker:
        if self._checker is None:
            self._checker = make_checker(self.config)
        return self._checker

    def _refuse_unless_proved(self, probe: CheckResult) -> None:
        """The checker must prove the probe (``example : True := trivial``): a program that exits, hangs,
        crashes or answers anything else is not a Lean checker, and every verdict must come from Lean."""
        if verdict(probe).success:
            return
        if probe.not_lean:
            self._refuse_if_not_lean(probe)
        why = probe.error or f"{probe.status}: " + "; ".join(m.text for m in probe.messages)
        self._refuse_if_not_lean(dataclasses.replace(probe, not_lean=True, error=f"it did not prove 'example : True := trivial': {why}"))

    def _refuse_if_not_lean(self, result: CheckResult) -> None:
        """Raise the one-line ConfigError when the checker's reply was not a Lean REPL response."""
        if not result.not_lean:
            return
        cfg = self.config
        if cfg.chosen_backend() == "server":
            what = f"env_config.server_url {cfg.server_url} is not a Kimina Lean server"
            fix = "point env_config.server_url at a running Kimina Lean server"
        else:
            what = f"env_config.repl_command {shlex.join(cfg.repl_command or [])!r} is not a Lean REPL"
            fix = ("set env_config.repl_command to the community Lean REPL (e.g. 'lake env /path/to/repl/.lake/build/bin/repl' "
                   "with env_config.repl_cwd the Mathlib project)")
        why = " ".join(result.error.split())  # one line, whatever the other end sent
        raise ConfigError(f"lean env: {what} ({why}); {fix}")

    def _require_reset(self) -> Theorem:
        if self._theorem is None:
            raise EnvError("LeanEnv.step/render called before reset(seed)")
        return self._theorem
