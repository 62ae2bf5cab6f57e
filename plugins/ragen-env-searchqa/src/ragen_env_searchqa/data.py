"""Passages and questions: the records, the file loaders and the train/validation split.

Corpus (what the retrieval server searches), one passage per line of a JSONL file:

* the public wiki-passage layout (wiki-18, DPR, FlashRAG): ``{"id", "contents"}`` where
  ``contents`` is the title in double quotes on the first line, then the text;
* or ``{"id", "title", "text"}``.

Questions (what the env asks), by file suffix:

* HotpotQA's original JSON (a list of ``{"_id", "question", "answer", ...}``) or its JSONL;
* Search-R1 / FlashRAG rows, ``.parquet`` (read with ``datasets``), ``.jsonl`` or ``.json``:
  ``{"question", "golden_answers": [...]}``, or with ``reward_model.ground_truth.target``;
* the reference env's rows ``{"question", "ground_truth"}``;
* a ``.json`` file holds a list of rows, or an object whose ``data`` is that list;
* a Hugging Face hub name (read with ``datasets``; never in tests).

Validation (the reference validated on training questions): ``val_dataset`` when given, else
the ``val_fraction`` of questions whose SHA-256 hash of the normalised question falls lowest; a
training question equal to a validation question (after normalisation) is dropped, so the two
splits never share a question and the split does not depend on row order. A file of a few
questions still validates on one. Rows without a question or an answer are skipped, with a
warning that counts them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ragen_core.datafiles import describe_bad_file, hash_holdout, json_kind, not_an_object
from ragen_core.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Passage:
    """One retrievable passage."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The wiki-passage layout: ``"Title"`` newline text."""
        return f'"{self.title}"\n{self.text}' if self.title else self.text


@dataclass(frozen=True)
class Question:
    """One question with its acceptable answers."""

    question: str
    answers: tuple[str, ...]
    source: str = ""


def passage_from_row(row: Mapping[str, Any], line: int) -> Passage:
    """A :class:`Passage` from one corpus row (either layout); ValueError names what is missing.

    ``line``: the row's 0-based line, its id when it has none (the caller names the line in errors).
    """
    pid = str(row.get("id", line))
    if isinstance(row.get("contents"), str):
        contents: str = row["contents"]
        first, _, rest = contents.partition("\n")
        if rest and len(first) >= 2 and first.startswith('"') and first.endswith('"'):
            return Passage(pid, first[1:-1], rest)
        return Passage(pid, "", contents)
    if isinstance(row.get("text"), str):
        return Passage(pid, str(row.get("title") or ""), row["text"])
    raise ValueError(f"it has neither 'contents' nor 'text'; its keys: {sorted(row)}")  # "corpus row 3" on line 4 was 0-based


def iter_corpus(path: str) -> Iterator[Passage]:
    """Passages of a JSONL corpus file, in file order.

    Raises:
        ConfigError: the file is missing, or a line is not a JSON object of a known layout.
    """
    if not os.path.isfile(path):
        raise ConfigError(f"corpus file {path!r} does not exist", ["give a JSONL file with one {id, contents} passage per line"])
    with open(path, "rb") as f:  # decoded line by line: a bad byte is named with its line (it was a bare UnicodeDecodeError)
        for n, raw in enumerate(f):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ConfigError(f"{path}:{n + 1}: bad corpus line (not UTF-8 text: {e.reason} at byte {e.start} of the line)",
                                  ["save the corpus as UTF-8"]) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("not a JSON object")
                yield passage_from_row(row, n)
            except ValueError as e:
                raise ConfigError(f"{path}:{n + 1}: bad corpus line ({e})") from None


def question_from_row(row: Mapping[str, Any], source: str) -> Question | None:
    """A :class:`Question` from a HotpotQA, Search-R1/FlashRAG or reference row; None without answers."""
    text = row.get("question")
    if not isinstance(text, str) or not text.strip():
        return None
    answers: Any = row.get("golden_answers")
    if answers is None and isinstance(row.get("reward_model"), Mapping):
        answers = (row["reward_model"].get("ground_truth") or {}).get("target")
    if answers is None:
        answers = row.get("answer", row.get("ground_truth"))
    if isinstance(answers, str):
        answers = [answers]
    golds = tuple(str(a) for a in (answers if answers is not None else []) if str(a).strip())
    if not golds:
        return None
    return Question(text.strip(), golds, str(row.get("data_source") or source))


_QUESTION_HINT = 'give each question as an object, e.g. {"question": "...", "golden_answers": ["..."]}'
_FILE_HINT = 'give a .json file a list of question objects, or an object with a "data" list of them'


def _question_list(data: Any, path: str) -> list[Any]:
    """The question rows of a parsed ``.json`` file: a list, or an object's ``data`` list; else refused in one line."""
    if isinstance(data, dict):
        rows = data.get("data")
        if not isinstance(rows, list):  # one question object, or another wrapper: it said "no question with an answer"
            held = "no 'data' list" if rows is None else f"a 'data' that is a JSON {json_kind(rows)}, not a list"
            raise ConfigError(f"cannot read questions from {path!r}: it holds one JSON object with {held}", [_FILE_HINT, _QUESTION_HINT])
        return rows
    if not isinstance(data, list):  # it said "'int' object has no attribute 'get'"
        raise ConfigError(f"cannot read questions from {path!r}: it holds a JSON {json_kind(data)}, not a list of questions",
                          [_FILE_HINT, _QUESTION_HINT])
    return data


def _question_object(row: Any, path: str, where: str) -> Mapping[str, Any]:
    """``row``, refused in one line when it is not a JSON object (it was "'list' object has no attribute 'get'")."""
    problem = not_an_object(row, where)
    if problem is not None:
        raise ConfigError(f"cannot read questions from {path!r}: {problem}", [_QUESTION_HINT])
    return row


def _rows(path: str, split: str, cache_dir: str | None) -> Iterator[Mapping[str, Any]]:
    lower = path.lower()
    if os.path.isfile(path) and lower.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    yield _question_object(json.loads(line), path, f"line {number}")
    elif os.path.isfile(path) and lower.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for number, row in enumerate(_question_list(data, path), 1):
            yield _question_object(row, path, f"row {number}")
    else:  # parquet files and hub names go through `datasets`
        import datasets

        if os.path.exists(path):
            table = datasets.load_dataset("parquet", data_files=path, split="train", cache_dir=cache_dir)
        else:
            table = datasets.load_dataset(path, split=split, cache_dir=cache_dir)
        yield from table


def read_questions(path: str, *, split: str = "train", max_rows: int | None = None, cache_dir: str | None = None) -> list[Question]:
    """Questions of a file or hub dataset (see module docstring); rows without answers are skipped.

    Raises:
        ConfigError: a local file that is missing or holds no usable question.
    """
    if path.endswith((".json", ".jsonl", ".parquet")) and not os.path.exists(path):
        raise ConfigError(f"question file {path!r} does not exist", ["set dataset to a .json, .jsonl or .parquet file"])
    if os.path.isdir(path):  # `datasets` read it as a parquet file and failed with a traceback
        files = sorted(f for f in os.listdir(path) if f.endswith((".json", ".jsonl", ".parquet")))
        raise ConfigError(f"question file {path!r} is a folder", [f"set dataset to one file in it, e.g. {os.path.join(path, files[0])}"
                                                                 if files else "set dataset to a .json, .jsonl or .parquet file"])
    source = os.path.splitext(os.path.basename(path))[0]
    out: list[Question] = []
    skipped = 0
    try:
        for row in _rows(path, split, cache_dir):
            q = question_from_row(row, source)
            if q is not None:
                out.append(q)
            else:
                skipped += 1
            if max_rows is not None and len(out) >= max_rows:
                break
    except (json.JSONDecodeError, AttributeError) as e:  # json's line is that of one line's text: the file's is found again
        why = describe_bad_file(Path(path)) if isinstance(e, json.JSONDecodeError) else None
        raise ConfigError(f"cannot read questions from {path!r}: {why or e}") from None
    if not out:
        raise ConfigError(f"no question with an answer in {path!r}",
                          ["rows need 'question' and one of 'golden_answers', 'answer' or 'ground_truth'"])
    if skipped:
        logger.warning("%s: %d row(s) without a question or an answer skipped (%d question(s) read)", path, skipped, len(out))
    return out


def question_key(text: str) -> str:
    """What the split hashes and deduplicates on: the answer scorer's SQuAD normalisation (lower
    case, no punctuation or articles, single spaces), so copies of a dataset that differ in a
    trailing "?" (Search-R1's NQ and FlashRAG's) are one question and cannot sit in both splits."""
    from ragen_env_searchqa.answer import normalize

    return normalize(text)


@dataclass(frozen=True)
class Splits:
    train: tuple[Question, ...]
    val: tuple[Question, ...]


def _key(question: Question) -> str:
    return question_key(question.question)


def split(questions: list[Question], fraction: float, val: list[Question] | None = None, *,
          source: str = "the built-in world") -> Splits:
    """Train and validation questions (``val`` given, or a hash holdout of ``source``'s questions
    that gives each side at least one: :func:`ragen_core.datafiles.hash_holdout`); no question in both."""
    if val is None:
        train, held_out = hash_holdout(questions, _key, fraction, source=source, what="question", val_setting="env_config.val_dataset")
        return Splits(train, held_out)
    held = {question_key(q.question) for q in val}
    train = [q for q in questions if question_key(q.question) not in held]
    return Splits(tuple(train), tuple(val))


@lru_cache(maxsize=8)
def load_splits(dataset: str | None, val_dataset: str | None, val_fraction: float, max_rows: int | None,
                cache_dir: str | None, world_seed: int, world_size: int) -> Splits:
    """The env's questions for one configuration, read once per process."""
    if dataset is None:
        from ragen_env_searchqa.world import build_world

        return split(list(build_world(world_seed, world_size).questions), val_fraction)
    questions = read_questions(dataset, max_rows=max_rows, cache_dir=cache_dir)
    val = read_questions(val_dataset, split="validation", max_rows=max_rows, cache_dir=cache_dir) if val_dataset else None
    return split(questions, val_fraction, val, source=dataset)
