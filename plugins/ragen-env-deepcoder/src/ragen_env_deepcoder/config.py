"""Settings of the DeepCoder env (spec 13.7) and of the sandbox that runs the model's programs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragen_core.interfaces.env import EnvConfig
from ragen_core.specs import PluginConfig

#: The public dataset on the Hugging Face hub.
HUB_DATASET = "agentica-org/DeepCoder-Preview-Dataset"


class SandboxConfig(PluginConfig):
    """How each program runs: isolation level, limits per test case, parallel workers."""

    isolation: Literal["auto", "bwrap", "unshare", "limits"] = "auto"
    """``auto`` picks the strongest level this machine supports: ``bwrap`` (bubblewrap: new
    network, pid, ipc and mount namespaces, read-only view of only the Python prefix and system
    libraries, private size-capped /tmp), ``unshare`` (new network and pid namespaces, private
    temporary directory, the host filesystem visible), ``limits`` (resource limits and a private
    temporary directory only). Naming a level makes it mandatory."""
    allow_unisolated: bool = False
    """Allow the ``limits`` level, where a program can reach the network and read the host's
    files. Without it, a machine with neither bubblewrap nor ``unshare`` refuses to run code."""
    time_limit_s: float = Field(default=2.0, gt=0, le=600)
    """CPU seconds each test case may use (the reference gave 3 s to all tests together)."""
    wall_factor: float = Field(default=3.0, ge=1.0, le=100)
    """Wall-clock limit of a test case = ``time_limit_s * wall_factor`` (sleeping and waiting
    programs, a loaded machine). A test that reaches it having used under a tenth of that time on
    the CPU was waiting, not computing: the program's later tests are not run (they fail)."""
    total_time_limit_s: float = Field(default=60.0, gt=0)
    """Wall-clock budget of one program over all its tests; tests not started in time fail."""
    memory_mb: int = Field(default=512, ge=32)
    """Address-space limit (RLIMIT_AS) of each process of the program."""
    max_processes: int = Field(default=4, ge=1, le=1024)
    """Processes and threads one test may have at once, itself included (RLIMIT_NPROC). The
    worst-case memory of a test is ``memory_mb * max_processes``."""
    max_output_bytes: int = Field(default=1_000_000, ge=1024)
    """Captured stdout (or serialised return value) per test; a program writing more fails."""
    max_file_bytes: int = Field(default=16_000_000, ge=0)
    """Largest file a program may write (RLIMIT_FSIZE)."""
    tmp_size_mb: int = Field(default=64, ge=1)
    """Size of the private /tmp (bwrap level; a RAM-backed tmpfs)."""
    max_code_chars: int = Field(default=100_000, ge=1)
    """Longer answers are not run (scored as a failed program)."""
    python: str | None = None
    """Interpreter the programs run with (standard library only); ``None``: this process's base
    Python. When running as root without bubblewrap it must be readable by every user."""
    workers: int = Field(default=0, ge=0)
    """Programs running at once in this process; 0 = the number of CPUs."""


class DeepCoderConfig(EnvConfig):
    """DeepCoder settings: where problems come from, how answers are scored, the sandbox."""

    max_actions_per_episode: int = Field(default=1, ge=1)
    """One program per episode (the reference tag's ``max_actions_per_traj``)."""
    max_actions_per_turn: int = Field(default=1, ge=1)
    """One program per reply."""
    max_turns: int = Field(default=1, ge=1)
    """One model turn (the reference task file)."""
    max_tokens: int = Field(default=8000, ge=1)
    """Response-length hint shown in the prompt (the reference tag's value)."""

    dataset: str | None = None
    """``None``: the built-in problem set (no download). A Hugging Face hub name (e.g.
    ``agentica-org/DeepCoder-Preview-Dataset``, read with ``datasets``), or a local JSON, JSONL
    or parquet file (or a directory of them) in the original schema."""
    val_dataset: str | None = None
    """Problems of ``mode="val"``; ``None``: the built-in validation problems, the hub
    dataset's ``val_subsets`` test splits, or (local files) the ``val_fraction`` of ``dataset``'s
    problems held out by hash. When given, training problems whose statement is also in it are
    dropped."""
    val_fraction: float = Field(default=0.1, gt=0, lt=1)
    """Share of a local ``dataset``'s problems held out for validation when there is no
    ``val_dataset``: a problem goes to validation when the SHA-256 hash of its normalised statement
    falls below this share, so train and validation never share a problem and the split does not
    depend on row order (each side keeps at least one problem: a file of a few problems still
    validates on one). Unused for the built-in set and hub datasets (they have their own splits)."""
    train_subsets: list[str] = Field(default_factory=lambda: ["primeintellect", "taco", "lcbv5"])
    """Hub subsets whose ``train`` split is trained on (never a test split)."""
    val_subsets: list[str] = Field(default_factory=lambda: ["codeforces", "lcbv5"])
    """Hub subsets whose ``test`` split is used for validation."""
    cache_dir: str | None = None
    """``datasets`` cache folder (``None``: its default)."""
    max_problems: int | None = Field(default=None, ge=1)
    """Keep at most this many problems per split (the first ones, after the split)."""
    max_tests: int | None = Field(default=None, ge=1)
    """Run at most this many tests per problem (the first ones); ``None`` runs all."""

    partial_credit: bool = True
    """Reward = passed / total tests (the reference); ``False`` gives 1 only when all pass."""
    invalid_action_score: float = 0.0
    """Reward of an empty answer (no code at all), which does not end the episode."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """Isolation and limits of the program runs."""
