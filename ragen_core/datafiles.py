"""Reading a user's local data file through Hugging Face ``datasets``, with errors that say what is wrong.

``datasets.load_dataset("json", data_files=...)`` answers a truncated or malformed file with
``DatasetGenerationError: An error occurred while generating the dataset`` (the parse error sits
several causes deep) and prints "Generating train split" progress bars meanwhile.
:func:`load_local_file` reads the file quietly and, when that fails, parses a ``.json`` /
``.jsonl`` file itself to name the line and column (or the truncation), else reports the deepest
cause. Envs that read local data (DeepCoder, MetaMathQA) use it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ragen_core.errors import ConfigError

T = TypeVar("T")


def json_kind(value: Any) -> str:
    """What a parsed JSON value is called in messages: object, list, string, boolean, number or null."""
    kinds = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def not_an_object(row: Any, where: str) -> str | None:
    """``"<where> is not a JSON object (it is <its JSON, clipped to 40 characters>)"`` for a parsed row
    that is not an object (a dict), None for one: the phrase data loaders end their one-line refusal with."""
    if isinstance(row, dict):
        return None
    text = json.dumps(row)
    return f"{where} is not a JSON object (it is {text[:40]}{'...' * (len(text) > 40)})"


def describe_bad_file(path: Path) -> str | None:
    """What is wrong with a local ``.json`` / ``.jsonl`` file, found by parsing it (None: it parses,
    or it is another format)."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".jsonl"):
        return None
    try:
        text = path.read_bytes().decode("utf-8")  # whole: a decoding error's offset is then the file's
        if not text.strip():
            return "the file is empty (no rows)"
        if suffix == ".jsonl":
            for number, line in enumerate(text.split("\n"), 1):
                if line.strip():
                    try:
                        json.loads(line)
                    except json.JSONDecodeError as exc:
                        return f"line {number} is not JSON: {exc.msg} (column {exc.colno})"
        else:
            try:
                json.loads(text)
            except json.JSONDecodeError as exc:
                # a string left open runs to the end of the file, as does a structure left open
                ends = " (the file ends early: cut short?)" if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated") else ""
                return f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}){ends}"
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte {exc.start})"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    return None


def deepest_cause(exc: BaseException) -> BaseException:
    """The innermost exception of ``exc``'s ``__cause__`` / ``__context__`` chain."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


@contextmanager
def quiet_datasets() -> Iterator[Any]:
    """``datasets`` with its progress bars and logging off inside the block (restored after).

    Off means CRITICAL, not ERROR: the JSON builder logs "Failed to load JSON from file ..." at
    ERROR before it raises, and ``huggingface_hub`` warns "Repo card metadata block was not found"
    for a data folder whose README.md has no YAML block; the caller's own error says what is wrong.
    """
    import datasets

    bars = datasets.utils.logging.is_progress_bar_enabled()
    level = datasets.logging.get_verbosity()
    hub = logging.getLogger("huggingface_hub")
    hub_level = hub.level
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    hub.setLevel(logging.CRITICAL)
    try:
        yield datasets
    finally:
        hub.setLevel(hub_level)
        datasets.logging.set_verbosity(level)
        if bars:
            datasets.enable_progress_bars()


def load_local_file(builder: str, path: Path, *, cache_dir: str | None = None, what: str = "data file") -> Any:
    """``datasets.load_dataset(builder, data_files=path, split="train")``, quietly.

    Raises:
        ConfigError: the file cannot be read as ``builder`` data; the message names the file and
            what is wrong with it (line and column of a JSON error, a truncation, the deepest cause).
    """
    with quiet_datasets() as datasets:
        try:
            return datasets.load_dataset(builder, data_files=str(path.resolve()), split="train", cache_dir=cache_dir)
        except Exception as exc:  # the builders raise many types; the file is what the user can fix
            why = describe_bad_file(path)
            if why is None:
                cause = deepest_cause(exc)
                text = str(cause).strip().splitlines()
                why = f"{type(cause).__name__}: {text[0]}" if text else type(cause).__name__
            raise ConfigError(f"cannot read {what} {path}: {why}", ["fix the file, or point the env's data setting at another one"]) from exc


#: Suffixes that make a dataset setting a local file, not a Hugging Face hub id.
DATA_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv", ".arrow", ".txt")


def named_test_split_warnings(config: Any, fields: tuple[str, ...], *, prefix: str = "env_config", val_field: str = "val_dataset",
                               folders: bool = True) -> list[str]:
    """Warnings for training-data settings (dotted field names of ``config``) that name a local
    file whose name has the word ``test`` (``gsm8k_test_100.jsonl``): a run would train on test
    problems without a word. ``folders``: the env reads every data file of a folder as training
    data (DeepCoder), so a folder holding such a file is warned about too; False where a folder is
    read by ``datasets``, which takes its split from the file names (a test file is then not
    trained on). A warning, not a refusal: a file may be named so for other reasons."""
    out = []
    for field in fields:
        value: Any = config
        for part in field.split("."):
            value = getattr(value, part, None)
        if not isinstance(value, str) or not value or not names_local_path(value):
            continue
        path = Path(value).expanduser()
        if path.is_dir():
            names = sorted(p.name for p in path.iterdir() if p.suffix.lower() in DATA_SUFFIXES) if folders else []
        else:
            names = [path.name]
        named = next((n for n in names if "test" in re.split(r"[^a-z]+", n.lower())), None)
        if named is not None:
            out.append(f"{prefix}.{field}={value}: {named} is read as training data, but its name says it is a test "
                       f"split; train on a train split and evaluate on the test file with {prefix}.{val_field}")
    return out


def hash_rank(key: str) -> int:
    """A 64-bit number from the SHA-256 of ``key``: the same on every machine and Python run."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")


def in_hash_share(key: str, fraction: float) -> bool:
    """True for the ``fraction`` of keys whose SHA-256 hash is smallest: the envs' validation
    holdout, which never depends on row order and is stable everywhere."""
    return hash_rank(key) < fraction * 2**64


def hash_holdout(items: Sequence[T], key: Callable[[T], str], fraction: float, *, source: str, what: str,
                 val_setting: str) -> tuple[tuple[T, ...], tuple[T, ...]]:
    """``(train, val)``: the items whose key's hash falls in the lowest ``fraction``
    (:func:`in_hash_share`) validate, and items sharing a key stay on one side. Where that leaves
    a side empty (a file of a few items), each side still gets one key: the lowest hash validates,
    the highest trains, so a small file validates on something instead of failing when the first
    validation starts.

    Raises:
        ConfigError: fewer than two distinct keys, which cannot be split (``what`` names the items,
            ``val_setting`` the setting that gives a separate validation source).
    """
    ranks = {key(item): hash_rank(key(item)) for item in items}
    if len(ranks) < 2:
        raise ConfigError(f"{source} holds {len(ranks)} distinct {what}(s): holding one out for validation needs at least two",
                          [f"add {what}s, or name a validation source with {val_setting}"])
    order = sorted(ranks, key=ranks.__getitem__)
    count = sum(rank < fraction * 2**64 for rank in ranks.values())
    held = set(order[: min(max(count, 1), len(order) - 1)])
    return tuple(i for i in items if key(i) not in held), tuple(i for i in items if key(i) in held)


def names_local_path(value: str) -> bool:
    """True when ``value`` is read as a local path, never a hub id ``owner/name``: it starts with
    ``.``, ``/`` or ``~``, has more than one ``/``, ends in a data-file suffix, names a file or
    folder that exists here (``datasets`` reads that before asking the hub), or its first part is
    a folder that exists here."""
    parts = Path(value).parts
    return (value.startswith((".", "/", "~")) or value.count("/") > 1 or value.lower().endswith(DATA_SUFFIXES)
            or Path(value).exists() or (len(parts) > 1 and Path(parts[0]).is_dir()))


def only_local_sources(*sources: str | None) -> bool:
    """True when at least one source is given and every given one is a local path
    (:func:`names_local_path`): an env's availability check can then read and split its data
    before a run loads a model (a hub dataset is left to the first reset)."""
    given = [s for s in sources if s is not None]
    return bool(given) and all(names_local_path(s) for s in given)


def check_data_paths(config: Any, *, hub_or_path: tuple[str, ...] = (), paths: tuple[str, ...] = (), files: tuple[str, ...] = (),
                     prefix: str = "env_config") -> list[str]:
    """An env's availability check for its data settings (dotted field names of ``config``): a
    ``hub_or_path`` setting that can only be a local path (:func:`names_local_path`), or any
    ``paths`` setting, must exist; a ``files`` setting must be a file (not a folder). Said in one
    line naming the setting, before a run loads a model or warm-starts, instead of at the first env
    reset. A hub id while the hub cannot be reached
    turns ``datasets`` to its offline mode (:func:`offline_unless_hub_answers`); the returned
    warnings say so.

    Raises:
        ConfigError: the first setting that names nothing.
    """
    hub_ids: list[str] = []
    for field in (*hub_or_path, *paths, *files):
        value: Any = config
        for part in field.split("."):
            value = getattr(value, part, None)
        if not isinstance(value, str) or not value:
            continue
        if field in hub_or_path and not names_local_path(value):
            hub_ids.append(f"{prefix}.{field}={value}")
            continue
        path = Path(value).expanduser()
        if not path.exists():
            parent = next((p for p in path.parents if p.is_dir()), None)
            near = f" ({parent} exists)" if parent is not None and str(parent) not in (".", "/") else ""
            what = ("a local file or folder, or a Hugging Face dataset id (owner/name)" if field in hub_or_path
                    else "an existing file" if field in files else "an existing file or folder")
            raise ConfigError(f"{prefix}.{field}: {value} does not exist{near}", [f"{prefix}.{field} takes {what}"])
        if field in files and path.is_dir():
            raise ConfigError(f"{prefix}.{field}: {value} is a folder", [f"{prefix}.{field} takes a file"])
    return offline_unless_hub_answers(hub_ids) if hub_ids else []


def offline_unless_hub_answers(settings: list[str], timeout: float = 3.0) -> list[str]:
    """When the Hugging Face hub does not answer (probed once, ``timeout`` seconds) and offline
    mode is not set already, set ``HF_DATASETS_OFFLINE`` and ``HF_HUB_OFFLINE`` for this process
    and the workers it starts, so ``datasets`` reads ``settings``' datasets from its cache at once
    (or fails at once) instead of retrying for about 25 s per load. Returns the warning that says
    so (empty when the hub answers or offline mode was set by the user)."""
    import os
    import sys

    from ragen_core.services import why_unreachable

    if any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on") for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")):
        return []
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    why = why_unreachable(endpoint, timeout=timeout)
    if why is None:
        return []
    os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "1"
    for module, names in (("datasets.config", ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")), ("huggingface_hub.constants", ("HF_HUB_OFFLINE",))):
        loaded = sys.modules.get(module)  # read at import: already-imported modules are told too
        for name in names if loaded is not None else ():
            setattr(loaded, name, True)
    return [f"the Hugging Face hub cannot be reached ({why}), so {', '.join(settings)} "
            f"{'is' if len(settings) == 1 else 'are'} read from the local datasets cache only (offline mode set for this "
            "run); a dataset never downloaded here fails at its first load"]
