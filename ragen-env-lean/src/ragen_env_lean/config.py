"""Settings of the Lean env (spec 13.9): where theorems come from, which checker runs the proofs,
and the reward table. Validated without importing any implementation."""

from __future__ import annotations

import shlex
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ragen_core.interfaces.env import EnvConfig

#: Header the reference puts before statements that bring none (Mathlib, Aesop, no heartbeat cap).
DEFAULT_IMPORTS = "import Mathlib\nimport Aesop"
DEFAULT_PREAMBLE = "set_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat"


class LeanConfig(EnvConfig):
    """Lean settings: theorem source, checker backend (local REPL or Kimina server), rewards."""

    max_actions_per_episode: int = Field(default=30, ge=1)
    """Tactics per episode (the reference tag's ``max_actions_per_traj``)."""
    max_actions_per_turn: int = Field(default=4, ge=1)
    """Tactics per reply, separated by ``||`` (the reference task file)."""
    max_turns: int = Field(default=15, ge=1)
    """Model turns per episode (the reference task file)."""
    max_tokens: int = Field(default=512, ge=1)
    """Response-length hint shown in the prompt."""

    # ------------------------------------------------------------------ theorems
    dataset: str | None = None
    """``None``: the built-in theorems (no download). A local ``.jsonl`` / ``.json`` file or a
    folder of ``.lean`` files in the miniF2F layout, or a Hugging Face hub name read with
    ``datasets`` (the reference used ``CoderBak/minif2f``)."""
    train_split: str = "valid"
    """Rows whose ``split`` column equals this are trained on (miniF2F: ``valid``); for a hub
    dataset it is the hub split. Rows without a ``split`` column are all in every split."""
    val_split: str = "test"
    """Rows (or the hub split) used for validation: fixed, never mixed with ``train_split``."""
    val_fraction: float = Field(default=0.2, gt=0, lt=1)
    """For rows without a ``split`` column (``.lean`` files, plain JSONL): the share whose name
    hashes lowest goes to validation (fixed, whatever the row order)."""
    cache_dir: str | None = None
    """``datasets`` cache folder (``None``: its default)."""
    max_theorems: int | None = Field(default=None, ge=1)
    """Keep at most this many theorems per split (the first ones)."""
    theorem: str | None = None
    """Always this theorem (by name, from either split) instead of a seeded draw: for
    ``ragen env play lean --set theorem=NAME``."""
    default_imports: str = DEFAULT_IMPORTS
    """Imports used when a statement brings none."""
    default_preamble: str = DEFAULT_PREAMBLE
    """Options and ``open`` lines used when a statement brings no preamble."""

    # ------------------------------------------------------------------ checker
    backend: Literal["auto", "repl", "server"] = "auto"
    """``repl``: a Lean 4 REPL process this env starts (``repl_command``); ``server``: a Kimina
    Lean server over HTTP (``server_url``); ``auto``: the server when ``server_url`` is set,
    else the REPL."""
    repl_command: list[str] | None = None
    """Command that starts the community Lean REPL speaking JSON on stdin/stdout, e.g.
    ``["lake", "env", "/opt/repl/.lake/build/bin/repl"]`` run in a Mathlib project
    (``repl_cwd``). ``None``: no local checker (the env refuses to start)."""
    repl_cwd: str | None = None
    """Folder the REPL runs in: the Lean project whose packages (Mathlib) the imports need."""
    repl_workers: int = Field(default=1, ge=1, le=64)
    """REPL processes shared by the envs of one process, each checking one proof at a time
    (each holds its own copy of the imports: Mathlib needs several GB per process)."""
    repl_memory_mb: int = Field(default=16_384, ge=64)
    """Resident memory of the REPL process above which it is restarted between two checks."""
    repl_start_timeout: float = Field(default=600.0, gt=0)
    """Seconds the REPL may take to elaborate the imports of a header the first time."""
    server_url: str | None = None
    """Base URL of a Kimina Lean server (``http://host:8000``). ``None``: no server; the spec's
    reference default ``http://127.0.0.1:8000`` is not assumed, so a missing server refuses at
    start-up instead of failing every step."""
    api_key: str | None = None
    """Sent as ``Authorization: Bearer <key>`` to the server (``None``: no header)."""
    request_timeout: float = Field(default=30.0, gt=0)
    """Seconds Lean may spend on one check (the server's per-snippet timeout; the REPL's wait)."""
    http_timeout: float = Field(default=60.0, gt=0)
    """Seconds one HTTP request may take."""
    max_retries: int = Field(default=3, ge=0, le=20)
    """Extra attempts after a transport failure (connection error, HTTP 5xx, 429, malformed reply)."""
    retry_backoff: float = Field(default=1.0, ge=0)
    """Seconds before the first retry; doubled for each further one (capped at 30 s)."""
    batch_size: int = Field(default=8, ge=1)
    """Proofs per HTTP request when several are checked together (:meth:`Checker.check_many`)."""
    max_tactic_chars: int = Field(default=2000, ge=1)
    """Longer tactics are rejected without being sent to Lean."""

    # ------------------------------------------------------------------ rewards
    max_steps: int = Field(default=100, ge=1)
    """Tactics (accepted or not) after which an unfinished proof ends with ``max_steps_penalty``;
    the budget is the smallest of this, ``max_actions_per_episode`` (30 by default) and
    ``max_turns * max_actions_per_turn``, where the rollout would stop the episode anyway."""
    step_penalty: float = -0.1
    """Added to every tactic's reward."""
    valid_step_reward: float = 1.0
    """Added when Lean accepts the tactic (no error but ``unsolved goals``, no ``sorry``)."""
    invalid_step_reward: float = -1.0
    """Added when the tactic is rejected (by Lean, a transport failure, or the tactic parser)."""
    success_reward: float = 10.0
    """Added when the proof is finished (no error at all, no ``sorry``)."""
    timeout_penalty: float = -1.0
    """Added when the check timed out."""
    max_steps_penalty: float = -2.0
    """Added when the tactic budget (:attr:`LeanEnv.step_budget <ragen_env_lean.env.LeanEnv.step_budget>`)
    is spent without success (the episode then ends)."""
    message_truncate_limit: int = Field(default=0, ge=0)
    """Characters of each Lean message shown in the observation (0: no truncation)."""

    @field_validator("server_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"server_url must start with http:// or https://, got {value!r}")
        return value.rstrip("/") if value else value

    @field_validator("repl_command", mode="before")
    @classmethod
    def _split_command(cls, value: object) -> object:
        if isinstance(value, bool):  # an override's bare word: repl_command=true is the program 'true'
            value = "true" if value else "false"
        elif isinstance(value, int | float):
            value = str(value)
        return shlex.split(value) if isinstance(value, str) else value  # "lake env repl" -> a list

    @field_validator("repl_command")
    @classmethod
    def _non_empty_command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0]):
            raise ValueError("repl_command must name a program (e.g. ['lake', 'env', '/path/to/repl'])")
        return value

    @model_validator(mode="after")
    def _splits_differ(self) -> LeanConfig:
        if self.dataset is not None and self.train_split == self.val_split:
            raise ValueError(f"train_split and val_split are both {self.train_split!r}: validation must be held out")
        return self

    def chosen_backend(self) -> Literal["repl", "server"]:
        """The backend ``auto`` resolves to."""
        if self.backend != "auto":
            return self.backend
        return "server" if self.server_url else "repl"
