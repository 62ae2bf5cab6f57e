"""Theorem sets: the built-in set, miniF2F-style JSONL/JSON files, folders of ``.lean`` files, or a
Hugging Face dataset, each split into a training and a fixed validation part.

Row fields (miniF2F layouts of DeepSeek-Prover and of the reference's ``CoderBak/minif2f``):
``formal_statement`` (required, non-empty; a ``header`` column, when present, is put before it),
``name`` (or ``id``), the informal statement from ``natural_language_statement``,
``informal_statement`` or ``informal_prefix`` (a ``/-- ... -/`` doc comment, unwrapped), and
``split``. A ``.lean`` file is one theorem named after the file.

Splits are fixed: rows whose ``split`` equals ``train_split`` are trained on and those equal to
``val_split`` validate (miniF2F: ``valid`` / ``test``); a hub dataset is read split by split.
Rows without a ``split`` column (``.lean`` files, plain JSONL) go to validation when the SHA-256
of their name falls below ``val_fraction``, so the split does not depend on row order. Rows that
cannot be split into imports / preamble / statement are skipped, counted and warned about (once:
loads are cached per process).
"""

from __future__ import annotations

import json
import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from ragen_core.datafiles import in_hash_share, json_kind, not_an_object
from ragen_core.errors import ConfigError
from ragen_env_lean.builtin import builtin_theorems
from ragen_env_lean.statements import Theorem, TheoremSet, make_theorem

_INFORMAL_FIELDS = ("natural_language_statement", "informal_statement", "informal_prefix", "problem")
_ROW_HINT = "give miniF2F-style rows: a JSON object a line in .jsonl, or a JSON list of them (or {\"data\": [...]}) in .json"

logger = logging.getLogger(__name__)


def in_validation(name: str, fraction: float) -> bool:
    """True for the ``fraction`` of names with the smallest SHA-256 hash (stable everywhere)."""
    return in_hash_share(name, fraction)


def informal_text(row: dict[str, Any]) -> str:
    """The natural-language statement of a row, without a doc-comment's ``/--`` and ``-/``."""
    for key in _INFORMAL_FIELDS:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            text = value.strip()
            text = re.sub(r"^/-[-!]?\s*", "", text)
            text = re.sub(r"\s*-/$", "", text)
            return text.strip()
    return ""


def row_to_theorem(row: dict[str, Any], index: int, default_imports: str, default_preamble: str) -> Theorem:
    """One dataset row as a :class:`Theorem` (raises ValueError when it cannot be split)."""
    formal = row.get("formal_statement")
    if not isinstance(formal, str) or not formal.strip():
        raise ValueError("no formal_statement")
    header = row.get("header")
    if isinstance(header, str) and header.strip() and not re.search(r"^import\b", formal, re.MULTILINE):
        formal = header.rstrip() + "\n\n" + formal
    name = str(row.get("name") or row.get("id") or f"row{index}")
    return make_theorem(name, formal, informal=informal_text(row), default_imports=default_imports, default_preamble=default_preamble)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".lean":
        return [{"name": path.stem, "formal_statement": path.read_text(encoding="utf-8")}]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.split("\n"), 1):  # named by the file's line, not json's line 1 of one line
            if line.strip():
                try:
                    rows.append(_row_object(json.loads(line), path, f"line {number}"))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"lean dataset {path}: cannot read it (line {number} is not JSON: {exc.msg}, column {exc.colno})") from None
        return rows
    data = json.loads(text)
    if isinstance(data, dict):  # one object is a row list's wrapper; without one, "the file is empty" was said
        data = next((data[key] for key in ("data", "rows") if isinstance(data.get(key), list)), None)
        if data is None:
            raise ConfigError(f"lean dataset {path} holds one JSON object with no 'data' or 'rows' list", [_ROW_HINT])
    if not isinstance(data, list):
        raise ConfigError(f"lean dataset {path} holds a JSON {json_kind(data)}, not a list of rows", [_ROW_HINT])
    return [_row_object(row, path, f"row {number}") for number, row in enumerate(data, 1)]


def _row_object(row: Any, path: Path, where: str) -> dict[str, Any]:
    """``row``, refused in one line when it is not a JSON object (it was an AttributeError at the first reset)."""
    problem = not_an_object(row, where)
    if problem is not None:
        raise ConfigError(f"lean dataset {path} {problem}", [_ROW_HINT])
    return row


def _local_rows(source: Path) -> list[dict[str, Any]]:
    files = sorted(p for p in source.iterdir() if p.suffix in {".lean", ".jsonl", ".json"}) if source.is_dir() else [source]
    if not files:
        raise ConfigError(f"lean dataset folder {source} holds no .lean, .jsonl or .json file")
    rows: list[dict[str, Any]] = []
    for path in files:
        if path.suffix not in {".lean", ".jsonl", ".json"}:
            raise ConfigError(f"lean dataset {path}: unsupported file type (expected .jsonl, .json or .lean)")
        try:
            rows += _read_rows(path)
        except ConfigError:
            raise
        except (OSError, ValueError) as exc:
            raise ConfigError(f"lean dataset {path}: cannot read it ({type(exc).__name__}: {str(exc).splitlines()[0]})") from exc
    return rows


def _hub_rows(name: str, split: str, cache_dir: str | None) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as exc:  # a declared dependency; say what to install if it is missing
        raise ImportError("reading a hub theorem set needs the datasets package: pip install datasets") from exc
    try:
        table = datasets.load_dataset(name, split=split, cache_dir=cache_dir)
    except Exception as exc:  # the hub, the network and the builders raise many types
        first = f"{type(exc).__name__}: {exc}".split("\n")[0]
        raise ConfigError(f"could not load theorem set {name!r} split {split!r}: {first}",
                          ["check the name and split; offline, use a local .jsonl file or leave dataset unset for the built-in theorems"]) from exc
    return [dict(row) for row in table]


def _convert(rows: list[dict[str, Any]], config_key: tuple[str, str, int | None]) -> tuple[list[Theorem], int]:
    imports, preamble, limit = config_key
    out, skipped = [], 0
    for index, row in enumerate(rows):
        try:
            out.append(row_to_theorem(row, index, imports, preamble))
        except ValueError:
            skipped += 1
    return (out[:limit] if limit else out), skipped


@lru_cache(maxsize=8)
def _load(source: str, train_split: str, val_split: str, val_fraction: float, cache_dir: str | None, imports: str,
          preamble: str, limit: int | None, mtime: float) -> TheoremSet:
    key = (imports, preamble, None)
    local = Path(source).expanduser()
    if local.exists():
        rows = _local_rows(local)
        if rows and all("split" in r for r in rows):
            train_rows = [r for r in rows if r["split"] == train_split]
            val_rows = [r for r in rows if r["split"] == val_split]
        else:
            theorems, skipped = _convert(rows, key)
            train = [t for t in theorems if not in_validation(t.name, val_fraction)]
            val = [t for t in theorems if in_validation(t.name, val_fraction)]
            return _counted(source, TheoremSet(tuple(train[:limit] if limit else train), tuple(val[:limit] if limit else val), skipped))
    elif source.startswith((".", "/", "~")) or source.endswith((".jsonl", ".json", ".lean")):
        raise ConfigError(f"lean dataset not found: {local}")
    else:
        train_rows, val_rows = _hub_rows(source, train_split, cache_dir), _hub_rows(source, val_split, cache_dir)
    train, skipped_t = _convert(train_rows, (imports, preamble, limit))
    val, skipped_v = _convert(val_rows, (imports, preamble, limit))
    return _counted(source, TheoremSet(tuple(train), tuple(val), skipped_t + skipped_v))


def _counted(source: str, found: TheoremSet) -> TheoremSet:
    """``found``, after a warning that counts the rows it skipped (once: loads are cached; they were dropped without a word)."""
    if found.skipped:
        logger.warning("%s: %d row(s) whose formal_statement does not split into imports, preamble and a declaration skipped "
                       "(%d theorem(s) read)", source, found.skipped, len(found.train) + len(found.val))
    return found


def theorem_set(config: Any) -> TheoremSet:
    """The training and validation theorems of ``config`` (cached per process)."""
    if config.dataset is None:
        return builtin_theorems()
    local = Path(config.dataset).expanduser()
    mtime = local.stat().st_mtime if local.exists() else 0.0
    found = _load(config.dataset, config.train_split, config.val_split, config.val_fraction, config.cache_dir,
                  config.default_imports, config.default_preamble, config.max_theorems, mtime)
    if not found.train:
        raise _no_training_theorem(config)
    return found


def _no_training_theorem(config: Any) -> ConfigError:
    """Why ``config.dataset`` gave no training theorem, with the hint that fits that cause (an error
    path only: the rows are read again to tell an empty file, a missing column and a wrong split apart)."""
    source = config.dataset
    local = Path(source).expanduser()
    rows = _local_rows(local) if local.exists() else _hub_rows(source, config.train_split, config.cache_dir)
    if not rows and not local.exists():  # a hub dataset is read split by split
        return ConfigError(f"lean dataset {source!r} has no rows in split {config.train_split!r}",
                           ["set env_config.train_split to a split the data has"])
    if not rows:
        why = ("its files hold no row" if not local.is_file()
               else "the file is empty" if not local.read_text(encoding="utf-8").strip() else "its JSON list is empty")
        return ConfigError(f"lean dataset {source!r} has no rows ({why})",
                           ["fill it with miniF2F-style rows (a JSON object a line, with a formal_statement), "
                            "or point env_config.dataset at another file"])
    if local.exists() and all("split" in r for r in rows):
        every, rows = rows, [r for r in rows if r["split"] == config.train_split]
        if not rows:
            splits = sorted({str(r["split"]) for r in every})
            return ConfigError(f"lean dataset {source!r} has no row whose split is {config.train_split!r} (its splits: {', '.join(splits)})",
                               ["set env_config.train_split to a split the data has"])
    stated = [r for r in rows if isinstance(r.get("formal_statement"), str) and r["formal_statement"].strip()]
    if not stated:
        columns = sorted({str(k) for r in rows for k in r})
        return ConfigError(f"lean dataset {source!r}: no row has a non-empty formal_statement column "
                           f"({len(rows)} rows; their columns: {', '.join(columns) or 'none'})",
                           ["give each row the Lean theorem in a formal_statement column (miniF2F layout), or rename the column that holds it"])
    try:
        row_to_theorem(stated[0], 0, config.default_imports, config.default_preamble)
        why = ""
    except ValueError as exc:
        why = f" (first: {exc})"
    return ConfigError(f"lean dataset {source!r}: none of its {len(rows)} training rows holds a formal_statement that splits into "
                       f"imports, preamble and a declaration{why}",
                       ["fix the formal_statement texts: each needs a theorem/lemma line and must end with ':= by' or ':= sorry'"])
