"""Configuration of the two-armed bandit and the arm-name pairs of both splits (spec 13.3)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragen_core.interfaces.env import EnvConfig

#: (low-risk, high-risk) arm names used for training (spec 13.3, in the spec's order).
TRAIN_PAIRS: tuple[tuple[str, str], ...] = (
    ("Teacher", "Trader"),
    ("Nurse", "StartupFounder"),
    ("Librarian", "Investor"),
    ("Accountant", "StockBroker"),
    ("Engineer", "RealEstateAgent"),
    ("Pharmacist", "Musician"),
    ("Clerk", "Freelancer"),
    ("Technician", "Youtuber"),
    ("Planner", "Artist"),
    ("Postman", "Pilot"),
    ("Banker", "VentureCapitalist"),
    ("Gardener", "Cryptominer"),
)

#: (low-risk, high-risk) arm names held out for testing (spec 13.3, in the spec's order).
TEST_PAIRS: tuple[tuple[str, str], ...] = (
    ("Receptionist", "Explorer"),
    ("Archivist", "Filmmaker"),
    ("Bookkeeper", "Consultant"),
    ("SocialWorker", "Photographer"),
    ("Mechanic", "GameDesigner"),
    ("Secretary", "Entrepreneur"),
    ("Cashier", "DataScientist"),
    ("CivilServant", "StartupAccelerator"),
)


class BanditConfig(EnvConfig):
    """Settings of :class:`ragen_env_bandit.env.BanditEnv`."""

    split: Literal["train", "test", "by-mode"] = "train"
    """Which name pairs to draw from. ``"by-mode"`` uses the train pairs when ``reset`` is
    called with ``mode="train"`` and the test pairs for any other mode (``"val"``)."""
    lo_arm_score: float = 0.1
    """Constant payout of the low-risk arm (the v1 paper used 0.15; the code uses 0.1)."""
    hi_arm_loscore: float = 0.0
    """Payout of the high-risk arm when it does not hit."""
    hi_arm_hiscore: float = 1.0
    """Payout of the high-risk arm when it hits."""
    hi_arm_hiscore_prob: float = Field(default=0.25, ge=0.0, le=1.0)
    """Probability that the high-risk arm hits."""
    action_space_start: int = 1
    """Accepted for reference configs; has no effect (actions are arm names, not indices)."""
    render_mode: Literal["text"] = "text"
    """Only text rendering exists (kept for reference configs)."""
    max_actions_per_episode: int = Field(default=1, ge=1)
    """One pull per episode."""
    max_actions_per_turn: int = Field(default=1, ge=1)
    """One arm name per reply."""
    max_turns: int = Field(default=1, ge=1)
    """One turn per episode."""
    max_tokens: int = Field(default=100, ge=1)
    """Response-length hint shown in the prompt."""
