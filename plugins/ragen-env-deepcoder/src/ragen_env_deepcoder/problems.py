"""DeepCoder problems: the record type, conversion from the public schema, and loading.

Rows keep the original DeepCoder-Preview layout: ``problem`` (statement), ``tests`` (a JSON
string on the hub, a list in the rLLM files), optional ``starter_code`` and ``metadata``
(``{"func_name": ...}``). Test formats by subset, all converted to :class:`TestCase`:

* ``primeintellect``: ``[{"type": "stdin_stdout" | "function_call", "fn_name"?, "input", "output"}]``
* ``lcbv5`` / ``codeforces``: ``[{"input", "output", "testtype"?: "stdin" | "functional"}]``
  (function name from ``metadata.func_name``, else from the starter code)
* ``taco`` (dict form): ``{"inputs": [...], "outputs": [...], "fn_name"?}``: with ``fn_name``
  these are function-call tests (``inputs[i]`` is the argument list), otherwise stdin tests.
  (The spec says dict-form tests become stdin tests; a TACO row that names a function is a
  call-based problem, and running it through stdin would fail every correct answer.)

Loading goes through Hugging Face ``datasets`` (imported only here, when a dataset is asked
for): a hub name reads the ``train`` split of ``train_subsets`` for training and the ``test``
split of ``val_subsets`` for validation (the reference trained and validated on the test
split); a local JSON, JSONL or parquet file, or a directory of them, is read as one set, and
without a ``val_dataset`` the ``val_fraction`` of its problems whose statement hashes lowest
(SHA-256) is held out for validation. A given ``val_dataset`` removes its statements from
training. Problems are cached per process, so every env of a pool shares one copy.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from ragen_core.datafiles import hash_holdout
from ragen_core.errors import ConfigError
from ragen_env_deepcoder.answer import function_name
from ragen_env_deepcoder.config import DeepCoderConfig

_STDIN_TYPES = {"stdin", "stdin_stdout", "stdio", "standard_io"}
_CALL_TYPES = {"functional", "function_call", "call", "call_based"}
_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TestCase:
    """One test: stdin -> expected stdout, or arguments -> expected return value."""

    __test__ = False  # not a pytest test class, whatever its name

    kind: Literal["stdin", "call"]
    input: Any
    """stdin text; or (call) the arguments: a list, or text with one JSON value per line."""
    output: Any
    """Expected stdout text; or (call) the expected value, as JSON text or as a value."""
    fn_name: str | None = None
    wrapped: bool = False
    """(call) The layout may wrap the expected value in a one-element list (TACO's ``outputs``,
    PrimeIntellect's ``function_call``): that list also matches its element. Not LiveCodeBench's
    ``functional`` tests, whose ``[2]`` is a list (returning ``2`` passed them)."""

    def payload(self) -> dict[str, Any]:
        """What the sandbox gets (never the expected output)."""
        return {"kind": self.kind, "input": self.input, "fn_name": self.fn_name}


@dataclass(frozen=True)
class Problem:
    """One coding problem with its tests (``solution``: a reference program, when known)."""

    statement: str
    tests: tuple[TestCase, ...]
    starter_code: str = ""
    solution: str | None = None
    source: str = field(default="", compare=False)
    """Where the row came from (``lcbv5/train``, a file name, ``builtin/3``)."""
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def question(self) -> str:
        """The observation: the statement, with the starter code appended when there is one."""
        if not self.starter_code.strip():
            return self.statement
        return f"{self.statement.rstrip()}\n\nComplete this starter code:\n```python\n{self.starter_code.rstrip()}\n```"


# ------------------------------------------------------------------------------ conversion
def _json_or_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def short(text: str, limit: int = 40) -> str:
    """``text``'s repr, cut to about ``limit`` characters."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return "" if value is None else str(value)


def _expected_text(value: Any, n: int) -> str:
    """A stdin test's expected output; null is refused (read as "", a program that prints nothing passed it)."""
    if value is None:
        raise ValueError(f"test {n} has output null: a stdin test needs the expected output text (\"\" if it prints nothing)")
    return _text(value)


def convert_tests(tests: Any, fn_name: str | None = None) -> tuple[TestCase, ...]:
    """Tests in any of the public layouts (module docstring) as :class:`TestCase` objects.

    ``fn_name`` is the function named by the row's metadata or starter code, used by
    function-call tests that do not name one themselves.

    Raises:
        ValueError: ``tests`` is none of the known layouts.
    """
    tests = _json_or_value(tests)
    if isinstance(tests, dict):
        inputs, outputs = tests.get("inputs"), tests.get("outputs")
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise ValueError("dict-form tests need lists 'inputs' and 'outputs' of equal length")
        name = tests.get("fn_name") or None
        if name:
            return tuple(TestCase("call", i if isinstance(i, list) else _text(i), o, str(name), wrapped=True) for i, o in zip(inputs, outputs))
        return tuple(TestCase("stdin", _text(i), _expected_text(o, n)) for n, (i, o) in enumerate(zip(inputs, outputs), 1))
    if isinstance(tests, str):
        raise ValueError(f"tests is text that is not JSON ({short(tests)}); it must be a JSON list or an {{inputs, outputs}} dict")
    if not isinstance(tests, list):
        raise ValueError(f"tests must be a list or an {{inputs, outputs}} dict, got {type(tests).__name__}")
    converted = []
    for n, test in enumerate(tests, 1):
        if not isinstance(test, dict) or "input" not in test or "output" not in test:
            raise ValueError("each test needs 'input' and 'output'")
        kind = str(test.get("testtype") or test.get("type") or "stdin").lower()
        if kind in _CALL_TYPES:
            name = test.get("fn_name") or fn_name
            if not name:
                raise ValueError("a function-call test without a function name (no fn_name, metadata or starter code)")
            value = test["input"]
            converted.append(TestCase("call", value if isinstance(value, list) else _text(value), test["output"], str(name),
                                      wrapped=kind != "functional"))
        elif kind in _STDIN_TYPES:
            converted.append(TestCase("stdin", _text(test["input"]), _expected_text(test["output"], n)))
        else:
            raise ValueError(f"unknown test type {kind!r}")
    return tuple(converted)


def problem_from_row(row: dict[str, Any], source: str = "") -> Problem:
    """A :class:`Problem` from one row of the public schema.

    Raises:
        ValueError: the row has no statement or its tests cannot be read.
    """
    statement = row.get("problem") or row.get("question")
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError("row has no 'problem' text")
    starter = row.get("starter_code") or ""
    metadata = _json_or_value(row.get("metadata")) or {}
    if not isinstance(metadata, dict):
        metadata = {}
    name = metadata.get("func_name") or metadata.get("fn_name") or function_name(starter)
    solutions = row.get("solutions")
    solution = row.get("solution") or (solutions[0] if isinstance(solutions, list) and solutions else None)
    return Problem(
        statement=statement,
        tests=convert_tests(row.get("tests"), name),
        starter_code=str(starter),
        solution=solution if isinstance(solution, str) else None,
        source=source,
        metadata=metadata,
    )


# ------------------------------------------------------------------------------ loading
def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:  # a plugin dependency, but an install may have skipped it
        raise ImportError("loading DeepCoder data needs Hugging Face datasets: pip install datasets "
                          "(or pip install ragen-env-deepcoder)") from exc
    return datasets


def _local_files(path: Path) -> list[Path]:
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in _SUFFIXES) if path.is_dir() else [path]
    if not files or any(p.suffix.lower() not in _SUFFIXES for p in files):
        raise ConfigError(f"no DeepCoder data in {path} (expected .json, .jsonl or .parquet files)")
    return files


def _rows_of(source: str, split: str, subsets: tuple[str, ...], cache_dir: str | None) -> list[tuple[str, Any]]:
    """``(label, dataset)`` pairs of one split of ``source``."""
    datasets = _datasets()
    path = Path(source).expanduser()
    if path.exists():
        from ragen_core.datafiles import load_local_file

        return [(p.name, load_local_file(_SUFFIXES[p.suffix.lower()], p, cache_dir=cache_dir, what="DeepCoder data file"))
                for p in _local_files(path)]
    hub_split = "train" if split == "train" else "test"
    return [(f"{subset}/{hub_split}", datasets.load_dataset(source, subset, split=hub_split, cache_dir=cache_dir)) for subset in subsets]


def _check_columns(columns: list[str], where: str) -> None:
    """A table without the statement or the tests column is refused by naming the columns it has
    (not by its first row's missing value). An empty list (columns unknown) passes."""
    if not columns:
        return
    missing = [name for name, found in (("problem", {"problem", "question"} & set(columns)), ("tests", "tests" in columns))
               if not found]
    if missing:
        raise ConfigError(f"{where}: no {' or '.join(repr(m) for m in missing)} column (its columns: {', '.join(sorted(columns))})",
                          ["give every row a 'problem' (the statement) and a 'tests' column, as DeepCoder-Preview-Dataset does "
                           "('starter_code' and 'metadata' are optional)"])


@lru_cache(maxsize=16)
def _load_cached(source: str, split: str, subsets: tuple[str, ...], cache_dir: str | None, max_problems: int | None,
                 stamp: float) -> tuple[Problem, ...]:
    problems: list[Problem] = []
    skipped = 0
    for label, rows in _rows_of(source, split, subsets, cache_dir):
        _check_columns(list(getattr(rows, "column_names", None) or []), f"{source} ({label})")
        for i, row in enumerate(rows):
            if max_problems is not None and len(problems) >= max_problems:
                break
            try:
                problem = problem_from_row(dict(row), label)
            except ValueError as exc:
                raise ConfigError(f"{source} ({label}) row {i + 1}: {exc}") from exc  # counted from 1, as lines are
            if problem.tests:  # a problem without tests can never be solved: skip it
                problems.append(problem)
            else:
                skipped += 1
    if not problems:
        raise ConfigError(f"no DeepCoder problems with tests in {source} ({split})")
    if skipped:
        logger.warning("%s (%s): %d problem(s) without tests skipped (%d read)", source, split, skipped, len(problems))
    return tuple(problems)


def load_problems(source: str, split: Literal["train", "val"], subsets: list[str] | tuple[str, ...] = (),
                  cache_dir: str | None = None, max_problems: int | None = None) -> tuple[Problem, ...]:
    """Problems of one split of a hub dataset or local file(s); cached per process.

    Raises:
        ImportError: ``datasets`` is not installed.
        ValueError: a row cannot be converted, or nothing is left.
    """
    path = Path(source).expanduser()
    stamp = max((p.stat().st_mtime for p in _local_files(path)), default=0.0) if path.exists() else 0.0
    key = str(path.resolve()) if path.exists() else source
    return _load_cached(key, split, tuple(subsets), cache_dir, max_problems, stamp)


def split_source(dataset: str | None, val_dataset: str | None, mode: str) -> str | None:
    """Which source serves ``mode``: ``None`` means the built-in problem set."""
    if mode == "val" and val_dataset is not None:
        return val_dataset
    return dataset


def statement_key(problem: Problem) -> str:
    """Case- and whitespace-insensitive identity of a problem (its statement and starter code)."""
    return " ".join(f"{problem.statement}\n{problem.starter_code}".casefold().split())


def _is_local(source: str) -> bool:
    return Path(source).expanduser().exists()


def problems_for(config: DeepCoderConfig, split: Literal["train", "val"]) -> tuple[Problem, ...]:
    """The problems of ``split`` under ``config``: built-in, hub splits, or a local file's share.

    Raises:
        ImportError: ``datasets`` is not installed.
        ValueError: a row cannot be converted, or the split is empty.
    """
    source = split_source(config.dataset, config.val_dataset, split)
    if source is None:
        from ragen_env_deepcoder.builtin import builtin_problems  # builtin.py builds on this module

        return builtin_problems(split)
    cache_dir = env_cache_dir(config.cache_dir)
    if config.val_dataset is None and _is_local(source):
        train, val = hash_holdout(load_problems(source, "train", (), cache_dir), statement_key, config.val_fraction,
                                  source=source, what="DeepCoder problem", val_setting="env_config.val_dataset")
        return (val if split == "val" else train)[: config.max_problems]
    subsets = config.val_subsets if split == "val" else config.train_subsets
    if split == "val" or config.val_dataset is None:
        return load_problems(source, split, subsets, cache_dir, config.max_problems)
    held_out = {statement_key(p) for p in load_problems(config.val_dataset, "val", config.val_subsets, cache_dir)}
    problems = tuple(p for p in load_problems(source, split, subsets, cache_dir) if statement_key(p) not in held_out)
    if not problems:
        raise ConfigError(f"no DeepCoder training problems left in {source}: every one is also in "
                         f"env_config.val_dataset {config.val_dataset}")
    return problems[: config.max_problems]  # after the overlap is removed


def env_cache_dir(cache_dir: str | None) -> str | None:
    """``cache_dir`` with ``~`` expanded (``datasets`` does not expand it)."""
    return os.path.expanduser(cache_dir) if cache_dir else None
