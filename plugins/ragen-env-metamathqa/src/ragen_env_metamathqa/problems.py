"""Problems and their train/validation splits: the built-in set or a dataset read by ``datasets``.

Sources (``MetaMathQAConfig.dataset_path``): ``None`` (the built-in problems of
:mod:`ragen_env_metamathqa.builtin`), a local ``.json`` / ``.jsonl`` / ``.parquet`` file or a
folder of them, or a Hugging Face hub name. All but the built-in set are read with
``datasets.load_dataset`` (imported only here, only when needed). Row layouts, recognised by
their column names:

* MetaMathQA -- ``query``, ``response`` (+ ``type``, ``original_question`` in the full
  release): the label is the text after the last ``The answer is:``; rows without it fall back
  to a GSM8K ``#### N`` line (MetaMath's own GSM8K evaluation copy uses these names).
* GSM8K -- ``question``, ``answer``: the label follows ``####``.
* MATH -- ``problem``, ``solution``: the label is the last ``\\boxed{...}``.

Rows with no label are dropped (the reference kept them with label ``None``, which no answer
can ever match). Validation never overlaps training: either a separate source
(``val_dataset_path``; training rows with one of its questions are removed) or the questions
whose SHA-256 hash falls below ``val_fraction`` (the hash of ``original_question`` when the row
has it, so the rephrasings of one GSM8K question stay on one side; a file of a few questions
still validates on one, :func:`ragen_core.datafiles.hash_holdout`). Loads are cached per
process, keyed by source and, for local files, modification time.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ragen_core.datafiles import hash_holdout, in_hash_share
from ragen_core.errors import ConfigError
from ragen_env_metamathqa.builtin import builtin_problem
from ragen_env_metamathqa.checker import extract_answer, stated_answers
from ragen_env_metamathqa.config import MetaMathQAConfig

logger = logging.getLogger(__name__)

_ANSWER_MARKER = "The answer is:"
_GSM_MARKER = re.compile(r"^####\s*(.+?)\s*$", re.MULTILINE)
_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


@dataclass(frozen=True)
class Problem:
    """One question with its reference answer."""

    question: str
    answer: str
    type: str = ""
    key: str = ""
    """What the validation split hashes: the normalised original question."""


@dataclass(frozen=True)
class Splits:
    """Training and validation problems of one configuration."""

    train: tuple[Problem, ...]
    val: tuple[Problem, ...]
    dropped: int = 0
    """Rows read but skipped for having no label."""


def question_key(text: str) -> str:
    """Case- and whitespace-insensitive identity of a question."""
    return " ".join(text.casefold().split())


def in_validation(key: str, fraction: float) -> bool:
    """True for the ``fraction`` of keys whose SHA-256 hash is smallest (stable everywhere)."""
    return in_hash_share(key, fraction)


# ------------------------------------------------------------------ row layouts
def label_from_response(response: str) -> str | None:
    """MetaMathQA label: after the last ``The answer is:``, else a GSM8K ``#### N`` line."""
    at = response.rfind(_ANSWER_MARKER)
    if at >= 0:
        return response[at + len(_ANSWER_MARKER):].strip() or None
    found = _GSM_MARKER.findall(response)
    return found[-1].strip() if found else None


def boxed_label(solution: str) -> str | None:
    r"""A MATH solution's label: its boxed answer, or its boxed answers when it has several
    (``\boxed{2}, \boxed{3}``: all of them must be given; the last one alone was the label, and half an answer was paid)."""
    if "boxed" not in solution:
        return None
    answers = stated_answers(solution)
    return ", ".join(f"\\boxed{{{a}}}" for a in answers) if len(answers) > 1 else extract_answer(solution)


def _layout(columns: list[str], where: str) -> tuple[str, str, Any]:
    """``(question column, solution column, label function)`` for the columns of a source."""
    names = set(columns)
    if {"query", "response"} <= names:
        return "query", "response", label_from_response
    if {"question", "answer"} <= names:
        return "question", "answer", label_from_response
    if {"problem", "solution"} <= names:
        return "problem", "solution", boxed_label
    raise ConfigError(
        f"{where}: unknown row layout with columns {sorted(names)}",
        ["expected MetaMathQA (query, response), GSM8K (question, answer) or MATH (problem, solution) columns"],
    )


def _rows_to_problems(table: Any, where: str, types: tuple[str, ...] | None) -> tuple[list[Problem], int]:
    q_col, s_col, label_of = _layout(list(table.column_names), where)
    columns = table.column_names
    questions, solutions = list(table[q_col]), list(table[s_col])
    kinds = list(table["type"]) if "type" in columns else [""] * len(questions)
    originals = list(table["original_question"]) if "original_question" in columns else questions
    problems, dropped = [], 0
    for question, solution, kind, original in zip(questions, solutions, kinds, originals):
        if types is not None and kind not in types:
            continue
        label = label_of(solution) if isinstance(solution, str) else None
        if not isinstance(question, str) or not question.strip() or not label:
            dropped += 1
            continue
        problems.append(Problem(question.strip(), label, str(kind or ""), question_key(original or question)))
    return problems, dropped


# ------------------------------------------------------------------ sources
def _load_dataset(path: str, subset: str | None, split: str, cache_dir: str | None) -> Any:
    """One split of a local file/folder or hub dataset, through ``datasets.load_dataset``."""
    try:
        import datasets
    except ImportError as exc:  # declared dependency, but say what to install if it is missing
        raise ImportError("reading MetaMathQA data needs the datasets package: pip install datasets") from exc
    local = Path(path).expanduser()
    try:
        if local.is_file():
            builder = _SUFFIXES.get(local.suffix.lower())
            if builder is None:
                raise ConfigError(f"unsupported data file {local} (expected .json, .jsonl or .parquet)")
            from ragen_core.datafiles import load_local_file

            return load_local_file(builder, local, cache_dir=cache_dir, what="MetaMathQA data file")
        if local.is_dir():  # `datasets` picks the split's files by their names (train*.jsonl, *test*.jsonl, ...)
            from ragen_core.datafiles import quiet_datasets

            with quiet_datasets():
                return datasets.load_dataset(str(local.resolve()), split=split, cache_dir=cache_dir)
        if path.startswith((".", "/", "~")) or path.endswith(tuple(_SUFFIXES)):
            raise ConfigError(f"data file or folder not found: {local}")
        return datasets.load_dataset(path, subset, split=split, cache_dir=cache_dir)
    except ConfigError:
        raise
    except Exception as exc:  # the hub, the network and the builders raise many types
        hints = ["check the name or path; without network access use a local file, or leave dataset_path unset "
                 "for the built-in problems"]
        if local.is_dir():  # "An error occurred while generating the dataset": the reason sits causes deep
            from ragen_core.datafiles import deepest_cause

            exc_shown: BaseException = deepest_cause(exc)
            hints = ["datasets reads every data file of a folder with one set of columns, a *test* file beside the train "
                     "files too: give the train file itself (dataset_path=FOLDER/train.jsonl), or move files of other "
                     "columns out"]
            if "Unknown split" in str(exc_shown):  # datasets names splits by file names: no file says "train" here
                files = sorted(p.name for p in local.iterdir() if p.suffix.lower() in _SUFFIXES)
                hints = [f"datasets takes the {split!r} split from files named after it and {local} holds "
                         f"{', '.join(files[:4]) or 'no data file'}: give one file itself (dataset_path={local / files[0]})"
                         if files else f"put a .json, .jsonl or .parquet file in {local}"]
        else:
            exc_shown = exc
        first_line = f"{type(exc_shown).__name__}: {exc_shown}".split("\n")[0]
        raise ConfigError(f"could not load dataset {path!r} (subset={subset!r}, split={split!r}): {first_line}", hints) from exc


def _mtime(path: str) -> float:
    local = Path(path).expanduser()
    return local.stat().st_mtime if local.exists() else 0.0


@lru_cache(maxsize=8)
def _read(path: str, subset: str | None, split: str, cache_dir: str | None, max_rows: int | None,
          types: tuple[str, ...] | None, mtime: float) -> tuple[tuple[Problem, ...], int]:
    table = _load_dataset(path, subset, split, cache_dir)
    if max_rows is not None and len(table) > max_rows:
        table = table.select(range(max_rows))
    problems, dropped = _rows_to_problems(table, path, types)
    return tuple(problems), dropped


def read_problems(
    path: str, *, subset: str | None = None, split: str = "train", cache_dir: str | None = None,
    max_rows: int | None = None, types: list[str] | tuple[str, ...] | None = None,
) -> tuple[tuple[Problem, ...], int]:
    """``(problems, rows dropped for lack of a label)`` of one source (cached per process)."""
    return _read(path, subset, split, cache_dir, max_rows, None if types is None else tuple(types), _mtime(path))


def builtin_problems(size: int) -> tuple[Problem, ...]:
    """The first ``size`` built-in problems."""
    problems = []
    for index in range(size):
        question, answer = builtin_problem(index)
        problems.append(Problem(question, answer, "builtin", question_key(question)))
    return tuple(problems)


def _key(problem: Problem) -> str:
    return problem.key


def _say_conflicting_labels(problems: tuple[Problem, ...], source: str) -> None:
    """Warn once when one question text comes with different labels (one of them is wrong for the
    reward; a merged or hand-edited file). Labels equal under the reference's exact rule agree."""
    from ragen_env_metamathqa.checker import exact_match

    first: dict[str, Problem] = {}
    clashes: list[tuple[Problem, Problem]] = []
    for problem in problems:
        seen = first.setdefault(question_key(problem.question), problem)
        if seen is not problem and not exact_match(problem.answer, seen.answer):
            clashes.append((seen, problem))
    if clashes:
        a, b = clashes[0]
        logger.warning("%s: %d question(s) appear with different labels (e.g. %r: %r and %r); every row is kept as given, so the "
                       "reward of such a question depends on the row drawn", source, len(clashes), a.question[:80], a.answer, b.answer)


@lru_cache(maxsize=8)
def _splits(key: str, mtimes: tuple[float, ...]) -> Splits:
    config = MetaMathQAConfig.model_validate_json(key)
    source = config.dataset_path or "built-in problems"
    dropped = 0
    if config.dataset_path is None:
        rows: tuple[Problem, ...] = builtin_problems(config.builtin_size)
    else:
        rows, dropped = read_problems(config.dataset_path, subset=config.subset, split=config.split,
                                      cache_dir=config.cache_dir, max_rows=config.max_rows, types=config.types)
    if dropped:
        logger.warning("%s: %d row(s) without a label skipped (%d question(s) read)", source, dropped, len(rows))
    _say_conflicting_labels(rows, source)
    if config.val_dataset_path is not None:
        val, val_dropped = read_problems(config.val_dataset_path, subset=config.val_subset, split=config.val_split,
                                         cache_dir=config.cache_dir, types=config.types)
        if not val:
            raise ConfigError(f"no validation problems in env_config.val_dataset_path {config.val_dataset_path}: "
                              f"{val_dropped} row(s) without a label" + (f", types={config.types}" if config.types else ""),
                              ["name a validation source with labelled rows, or unset env_config.val_dataset_path to hold out "
                               "env_config.val_fraction of the training source"])
        held_out = {p.key for p in val}
        train = tuple(p for p in rows if p.key not in held_out)
    else:
        train, val = hash_holdout(rows, _key, config.val_fraction, source=source, what="question",
                                  val_setting="env_config.val_dataset_path") if rows else ((), ())
    if not train and not rows and config.types and config.dataset_path is not None:
        unmatched = _no_row_of_types(config)
        if unmatched is not None:
            raise unmatched
    if not train:
        read = f"{len(rows)} question(s) read" + (f" (max_rows={config.max_rows})" if config.max_rows else "") + \
            (f", types={config.types}" if config.types else "") + (f", {dropped} row(s) without a label" if dropped else "")
        if config.val_dataset_path is not None and rows:
            why = f"every one is also in env_config.val_dataset_path {config.val_dataset_path} (such rows are held out of training)"
            fix = "name another training source, or a validation source that is not the training one"
        else:
            why = "none is usable"
            fix = "check env_config.dataset_path (and types / max_rows)"
        raise ConfigError(f"no training problems left in {source}: {read}; {why}", [fix])
    return Splits(train, val, dropped)


def _no_row_of_types(config: MetaMathQAConfig) -> ConfigError | None:
    """The error for ``types`` that no row of ``config.dataset_path`` has, naming the types it has
    (None: some row has one; an error path only: the table is read again, from the ``datasets`` cache)."""
    table = _load_dataset(config.dataset_path, config.subset, config.split, config.cache_dir)
    if config.max_rows is not None and len(table) > config.max_rows:
        table = table.select(range(config.max_rows))
    read = f"{len(table)} row(s) read" + (f" (max_rows={config.max_rows})" if config.max_rows else "")
    if "type" not in table.column_names:
        return ConfigError(f"no training problems left in {config.dataset_path}: {read}, but it has no type column, so "
                           f"types={config.types} keeps none", ["drop env_config.types (only MetaMathQA rows have a type)"])
    found = sorted({str(kind) for kind in table["type"] if kind})
    if set(found) & set(config.types or ()):
        return None  # rows of those types exist: they were dropped for another reason
    return ConfigError(f"no training problems left in {config.dataset_path}: {read}, none of a type in types={config.types} "
                       f"(its types: {', '.join(found) or 'none'})", ["set env_config.types to types the data has, or drop it"])


_SPLIT_FIELDS = ("dataset_path", "subset", "split", "cache_dir", "types", "max_rows", "val_dataset_path",
                 "val_subset", "val_split", "val_fraction", "builtin_size")


def splits_for(config: MetaMathQAConfig) -> Splits:
    """The train/validation problems of ``config`` (cached per process by the data settings)."""
    mtimes = tuple(_mtime(path) if path else 0.0 for path in (config.dataset_path, config.val_dataset_path))
    return _splits(config.model_dump_json(include=set(_SPLIT_FIELDS)), mtimes)
