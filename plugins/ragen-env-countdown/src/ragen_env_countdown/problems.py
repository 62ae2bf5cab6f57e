"""Countdown instances: a seeded procedural generator and a loader for public task files.

Generated instances are solvable using *every* number exactly once, because the reference
format check (kept here) requires the numbers in the answer to be exactly ``nums``. The
generator builds a random expression tree over all numbers and keeps its value as the target,
so the solution is known without search.

Task files keep the original Countdown-Tasks-3to4 layout: parquet with columns ``target`` and
``nums`` (read with ``pyarrow``), or JSON lines with those keys (extra keys such as TinyZero's
``prompt`` are ignored). With one task file and no validation file, :func:`task_splits` holds out
``val_fraction`` of its problems for validation (by hash, :func:`ragen_core.datafiles.hash_holdout`),
so validation never scores a problem the run trained on; with a validation file, training drops
the problems that file has.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np

from ragen_core.datafiles import hash_holdout
from ragen_core.errors import ConfigError
from ragen_env_countdown.arith import Node, combine, plus_minus_solvable

#: Procedural draws before giving up (the default ranges accept roughly one draw in three).
MAX_ATTEMPTS = 10_000


@dataclass(frozen=True)
class Problem:
    """One Countdown instance. ``solution`` is known for generated instances, else ``None``."""

    target: int
    nums: tuple[int, ...]
    solution: str | None = None


def generate(
    rng: np.random.Generator,
    *,
    min_numbers: int = 3,
    max_numbers: int = 4,
    max_number: int = 99,
    min_target: int = 1,
    max_target: int = 100,
    ops: str = "+-*/",
) -> Problem:
    """Draw a count, numbers, combine all of them at random, and keep the result as the target.

    Merges a random pair with a random operator until one expression is left. Subtraction
    takes the larger operand first and division is used only when it is exact, so every
    intermediate is a non-negative integer, as in the TV game. The draw is accepted when the
    final value lies in ``[min_target, max_target]``.

    Raises:
        ValueError: no instance within :data:`MAX_ATTEMPTS` draws (ranges that cannot meet).
    """
    # Draw the count once: retrying it would favour short instances (their values stay small).
    count = int(rng.integers(min_numbers, max_numbers + 1))
    for _ in range(MAX_ATTEMPTS):
        nums = [int(n) for n in rng.integers(1, max_number + 1, size=count)]
        pool: list[Node] = [(Fraction(n), str(n), 3) for n in nums]
        while len(pool) > 1:
            i, j = (int(k) for k in rng.choice(len(pool), size=2, replace=False))
            a, b = pool[i], pool[j]
            op = ops[int(rng.integers(len(ops)))]
            if op in "-/" and a[0] < b[0]:
                a, b = b, a
            if op == "/" and (b[0] == 0 or a[0] % b[0] != 0):
                op = "+"  # inexact division: fall back to addition rather than redraw
            node = combine(a, op, b)
            assert node is not None
            pool = [pool[k] for k in range(len(pool)) if k not in (i, j)] + [node]
        value, text, _ = pool[0]
        if value.denominator == 1 and min_target <= value <= max_target:
            return Problem(int(value), tuple(nums), text)
    raise ValueError(
        f"no Countdown instance with targets in [{min_target}, {max_target}] after {MAX_ATTEMPTS} draws"
    )


def _parse_row(row: dict[str, object], where: str) -> Problem:
    try:
        target = row["target"]
        nums = row["nums"]
        if not isinstance(nums, (list, tuple)) or not nums:
            raise TypeError("nums must be a non-empty list")
        return Problem(int(target), tuple(int(n) for n in nums))  # type: ignore[call-overload]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: expected integer 'target' and list 'nums' ({exc})") from exc


def _read_rows(path: Path, limit: int) -> list[Problem]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:  # optional dependency
            raise ImportError(
                "reading Countdown parquet files needs pyarrow: pip install pyarrow "
                "(or pip install 'ragen-env-countdown[data]')"
            ) from exc
        table = pq.read_table(path, columns=["target", "nums"])
        rows = table.slice(0, limit).to_pylist()
        return [_parse_row(row, f"{path} row {i}") for i, row in enumerate(rows)]
    if suffix in (".jsonl", ".json"):
        problems: list[Problem] = []
        with path.open(encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, 1):
                if len(problems) >= limit:
                    break
                if line.strip():
                    problems.append(_parse_row(json.loads(line), f"{path}:{lineno}"))
        return problems
    raise ValueError(f"unsupported Countdown task file {path} (expected .parquet or .jsonl)")


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime: float, limit: int, plus_minus_only: bool) -> tuple[Problem, ...]:
    problems = _read_rows(Path(path), limit)
    if plus_minus_only:
        problems = [p for p in problems if plus_minus_solvable(list(p.nums), p.target)]
    if not problems:
        raise ValueError(f"no Countdown problems left in {path} (plus_minus_only={plus_minus_only})")
    return tuple(problems)


def load_problems(path: str | os.PathLike[str], max_instances: int = 20_000, plus_minus_only: bool = False) -> tuple[Problem, ...]:
    """Rows of a task file: the first ``max_instances``, then optionally the ±-only filter.

    Cached per process (keyed by path and modification time), so every env of a pool shares
    one copy.
    """
    return _load_cached(*_file(path), int(max_instances), bool(plus_minus_only))


def problem_key(problem: Problem) -> str:
    """The identity of a problem: its target and its numbers in any order."""
    return f"{problem.target}:{sorted(problem.nums)}"


@dataclass(frozen=True)
class Splits:
    """Training and validation problems of the task files (``None``: that side is procedural)."""

    train: tuple[Problem, ...] | None
    val: tuple[Problem, ...] | None


@lru_cache(maxsize=8)
def _splits(train_file: tuple[str, float] | None, val_file: tuple[str, float] | None, limit: int, plus_minus_only: bool,
            val_fraction: float) -> Splits:
    train_problems = _load_cached(*train_file, limit, plus_minus_only) if train_file else None
    val_problems = _load_cached(*val_file, limit, plus_minus_only) if val_file else None
    if train_problems is None or train_file is None:
        return Splits(None, val_problems)
    source = train_file[0]
    if val_problems is None:
        train, val = hash_holdout(train_problems, problem_key, val_fraction, source=source, what="problem",
                                  val_setting="env_config.val_data_path")
        return Splits(train, val)
    held = {problem_key(p) for p in val_problems}
    train = tuple(p for p in train_problems if problem_key(p) not in held)
    if not train:
        raise ConfigError(f"no Countdown training problems left in {source}: every one is also in env_config.val_data_path",
                          ["name a validation file that is not the training one, or unset env_config.val_data_path to hold out "
                           "env_config.val_fraction of env_config.data_path"])
    return Splits(train, val_problems)


def _file(path: str | os.PathLike[str]) -> tuple[str, float]:
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise FileNotFoundError(f"Countdown task file not found: {resolved}")
    return str(resolved), resolved.stat().st_mtime


def task_splits(data_path: str | None, val_data_path: str | None, *, max_instances: int = 20_000, plus_minus_only: bool = False,
                val_fraction: float = 0.05) -> Splits:
    """The problems of training and validation: ``data_path`` less the validation ones, which are
    ``val_data_path``'s or, without one, the ``val_fraction`` of ``data_path`` held out by hash
    (no problem, by target and numbers, on both sides). Cached per process, like :func:`load_problems`."""
    return _splits(_file(data_path) if data_path else None, _file(val_data_path) if val_data_path else None,
                   int(max_instances), bool(plus_minus_only), float(val_fraction))
