"""Two-armed bandit whose arms carry job titles instead of payout tables (spec 13.3).

Task: the model sees two arm names, one "safe" (Teacher, Nurse, ...) and one "risky" (Trader,
StartupFounder, ...), and must pull one. It never sees the payouts: it has to infer from the
symbolism of the names which arm pays more on average. With the defaults the low-risk arm
always pays 0.1 and the high-risk arm pays 1.0 with probability 0.25 (else 0.0), so the risky
arm is the better bet (expected 0.25 vs 0.1).

Observation: a short description of the game naming both arms in action order. Action: one arm
name (the rollout layer maps replies case-insensitively onto :attr:`BanditEnv.action_names`).
One pull ends the episode; the final observation is ``"{arm}: {reward} points"``.

Seeding (fixes spec 17 L29): the arm pair and the order in which the arms are listed depend
only on ``seed`` (``make_rng(seed, "bandit-prompt")``), so every member of a group sees the
same prompt. Payout luck depends on ``(seed, member)``, so members of one group can be paid
differently for the same choice -- which is what gives group-relative estimators a signal.

``info["success"]`` is ``True`` when the high-risk arm was chosen (the spec's definition, which
equals "chose the arm with the higher expected payout" under the default scores). An
unrecognised action string ends the episode with reward 0 and ``action_is_valid=False``: the
episode has a single action, so there is nothing left to play for.
"""

from __future__ import annotations

from typing import Any

from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.seeding import make_rng
from ragen_env_bandit.config import TEST_PAIRS, TRAIN_PAIRS, BanditConfig


def _normalise(name: str) -> str:
    """Lower-case and drop everything that is not a letter or digit ("Startup Founder" -> "startupfounder")."""
    return "".join(ch for ch in name.lower() if ch.isascii() and ch.isalnum())


class BanditEnv(Env):
    """Two-armed bandit with symbolic arm names; see the module docstring."""

    config_class = BanditConfig
    config: BanditConfig
    action_sep = "||"
    #: Per pull, averaged over the episode: the chosen arm's expected payout, whether it was the best arm.
    info_metrics = {"expected_reward": "mean", "chose_best_arm": "mean"}

    def __init__(self, config: BanditConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.member = 0
        self._arms: tuple[str, str] | None = None
        self._low_arm = ""
        self._high_arm = ""
        self._payout_rng = make_rng(0, 0, "bandit-payout")
        self._observation = ""
        self._done = False

    # ----------------------------------------------------------------- episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Draw the arm pair and order from ``seed`` alone; draw payout luck from ``(seed, member)``."""
        split = self.config.split
        if split == "by-mode":
            split = "train" if mode == "train" else "test"
        pairs = TRAIN_PAIRS if split == "train" else TEST_PAIRS

        prompt_rng = make_rng(seed, "bandit-prompt")
        low, high = pairs[int(prompt_rng.integers(len(pairs)))]
        low_first = bool(prompt_rng.random() < 0.5)

        self.seed = seed
        self.member = member
        self._low_arm, self._high_arm = low, high
        self._arms = (low, high) if low_first else (high, low)
        self._payout_rng = make_rng(seed, member, "bandit-payout")
        self._done = False
        self._observation = self._game_text()
        return self._observation

    def step(self, action: str) -> StepResult:
        """Pull the named arm; any other string is an invalid action that ends the episode."""
        if self._arms is None:
            raise EnvError("BanditEnv.step/render called before reset(seed)")
        if self._done:
            info = self._info(chose=None)
            return StepResult(self._observation, 0.0, True, info)

        chose = self._resolve(action)
        self._done = True
        if chose is None:
            self._observation = (
                f"'{str(action)[:40]}' is not an arm of this game "
                f"(the arms are {self._arms[0]} and {self._arms[1]}). No points."
            )
            return StepResult(self._observation, 0.0, True, self._info(chose=None))

        reward = self._payout(chose)
        self._observation = f"{chose}: {reward} points"
        return StepResult(self._observation, self.finite(reward), True, self._info(chose=chose))

    def render(self) -> str:
        if self._arms is None:
            raise EnvError("BanditEnv.step/render called before reset(seed)")
        return self._observation

    def instruction(self) -> str:
        return (
            "You are playing a bandit game: pull one of two arms to win points. "
            "Reply with the name of the arm you choose."
        )

    # ----------------------------------------------------------------- optional API
    @property
    def action_names(self) -> list[str] | None:
        """The two arm names of the current episode in action order (``None`` before reset)."""
        return list(self._arms) if self._arms is not None else None

    def oracle_actions(self) -> list[str] | None:
        """Pull the high-risk arm, which the spec counts as success."""
        return [self._high_arm] if self._arms is not None else None

    @property
    def low_arm(self) -> str:
        """Name of the low-risk arm of the current episode."""
        return self._low_arm

    @property
    def high_arm(self) -> str:
        """Name of the high-risk arm of the current episode."""
        return self._high_arm

    @property
    def expected_rewards(self) -> dict[str, float]:
        """Expected payout of each arm of the current episode, keyed by arm name."""
        cfg = self.config
        p = cfg.hi_arm_hiscore_prob
        return {
            self._low_arm: cfg.lo_arm_score,
            self._high_arm: p * cfg.hi_arm_hiscore + (1.0 - p) * cfg.hi_arm_loscore,
        }

    @property
    def best_arm(self) -> str:
        """The arm with the higher expected payout (the high-risk arm on ties)."""
        ev = self.expected_rewards
        return self._low_arm if ev[self._low_arm] > ev[self._high_arm] else self._high_arm

    # ----------------------------------------------------------------- internals
    def _game_text(self) -> str:
        assert self._arms is not None
        first, second = self._arms
        return (
            "This is a bandit game: you pick one arm and receive its points, and the aim is "
            "to collect as many points as you can.\n"
            f"There are 2 arms, called {first} and {second}.\n"
            "Each arm pays out according to its own reward distribution, and that "
            "distribution is tied to what the arm's name stands for.\n"
            "Think about what each name suggests and choose the arm you expect to pay more "
            "points on average.\n"
            f"Answer with the arm's name, e.g. <answer> {first} </answer> or "
            f"<answer> {second} </answer>."
        )

    def _resolve(self, action: str) -> str | None:
        if not isinstance(action, str) or self._arms is None:
            return None
        key = _normalise(action)
        for arm in self._arms:
            if key == _normalise(arm):
                return arm
        return None

    def _payout(self, arm: str) -> float:
        cfg = self.config
        if arm == self._low_arm:
            return float(cfg.lo_arm_score)
        hit = bool(self._payout_rng.random() < cfg.hi_arm_hiscore_prob)
        return float(cfg.hi_arm_hiscore if hit else cfg.hi_arm_loscore)

    def _info(self, chose: str | None) -> dict[str, Any]:
        valid = chose is not None
        chose_high = chose == self._high_arm and valid
        info: dict[str, Any] = {
            "success": chose_high,
            "chose_high_arm": chose_high,
            "action_is_valid": valid,
            "action_is_effective": valid,
        }
        # Always present (0 / False when invalid) so per-turn averages see the same keys.
        info["expected_reward"] = self.expected_rewards[chose] if valid else 0.0
        info["chose_best_arm"] = valid and chose == self.best_arm
        return info
