"""Settings of the MetaMathQA env (spec 13.5; data splits and the checker are ours)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ragen_core.interfaces.env import EnvConfig


class MetaMathQAConfig(EnvConfig):
    """MetaMathQA settings: the built-in problems by default, or a dataset (hub name or files)."""

    max_actions_per_episode: int = Field(default=1, ge=1)
    """Answers per episode (the reference tag: 1; more gives reward 1/2^k on attempt k)."""
    max_actions_per_turn: int = Field(default=1, ge=1)
    """One answer per reply."""
    max_turns: int = Field(default=5, ge=1)
    """Model turns per episode: a reply without a parsable answer executes nothing, so later
    turns may still answer (the reference task file)."""
    max_tokens: int = Field(default=100, ge=1)
    """Response-length hint shown in the prompt."""

    checker: Literal["math", "exact"] = "math"
    """``math``: extract the final answer and compare values (fractions, decimals, percentages,
    LaTeX, units, Unicode digits); ``exact``: the reference rule (equal after lower-casing and
    deleting whitespace)."""
    check_time_limit_s: float = Field(default=0.25, gt=0, le=60)
    """Wall-clock backstop of one ``math`` check; an answer still unread by then is wrong."""
    symbolic_check: bool = True
    """``math`` only: when the values agree, ask sympy whether the two expressions are exactly
    equal (``1+10^{-12}`` is not 1; an identity must hold everywhere, not at three points). Runs in
    a worker process killed after ``symbolic_time_limit_s``; then the numeric verdict stands."""
    symbolic_time_limit_s: float = Field(default=1.0, gt=0, le=60)
    """Wall-clock limit of one exact sympy check."""

    dataset_path: str | None = None
    """Hugging Face hub name (``meta-math/MetaMathQA``, ``openai/gsm8k``) or a local ``.json``,
    ``.jsonl`` or ``.parquet`` file or folder of them, read with ``datasets``; ``None`` uses the
    built-in problems. Rows are MetaMathQA (``query``/``response``, label after
    ``The answer is:``), GSM8K (``question``/``answer``, label after ``####``) or MATH
    (``problem``/``solution``, label in the last ``\\boxed{}``)."""
    subset: str | None = None
    """Hub configuration name (``main`` for ``openai/gsm8k``)."""
    split: str = "train"
    """Hub split to train on (a local file is one split). Test splits are refused."""
    cache_dir: str | None = None
    """``datasets`` cache folder; ``None`` uses its default (``~/.cache/huggingface``)."""
    types: list[str] | None = None
    """Keep only rows whose ``type`` is listed (MetaMathQA: ``GSM_AnsAug``, ``MATH_FOBAR``, ...)."""
    max_rows: int | None = Field(default=None, ge=1)
    """Read only the first this-many rows of the source (before the validation split)."""

    val_dataset_path: str | None = None
    """Validation source (same forms as ``dataset_path``); ``None`` holds out ``val_fraction`` of
    the training source. Training rows whose question is also in it are dropped."""
    val_subset: str | None = None
    """Hub configuration name of ``val_dataset_path``."""
    val_split: str = "test"
    """Hub split of ``val_dataset_path`` (validation may read a test split)."""
    val_fraction: float = Field(default=0.05, gt=0, lt=1)
    """Share of the questions held out for validation when there is no ``val_dataset_path``:
    a question goes to validation when the hash of its text falls below this share, so train
    and validation never share a question and the split does not depend on row order."""
    builtin_size: int = Field(default=240, ge=20, le=100_000)
    """Number of built-in problems (before the validation split)."""

    @field_validator("split")
    @classmethod
    def _no_test_split(cls, value: str) -> str:
        if "test" in value.lower():
            raise ValueError(
                f"split {value!r} is a test split; train on a train split and evaluate on the test split "
                "with val_dataset_path / val_split"
            )
        return value
