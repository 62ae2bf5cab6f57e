"""Checkpoints: a loadable Hugging Face model folder plus everything needed to resume exactly.

``RUN_DIR/checkpoints/step_<N>/`` holds ``save_pretrained`` output and the tokenizer (so
``AutoModelForCausalLM.from_pretrained(path)`` and ``ragen eval --model path`` work directly),
plus ``trainer_state.pt`` with the optimiser, the critic (weights + optimiser), the step, the
RNG states of python/numpy/torch, the rollout runner's state (seed counter), the policy version, filter/early-stop
bookkeeping and any EMA states. A folder is written under a temporary name and renamed when
complete, so a run killed while saving never leaves a half-written ``step_<N>``.

LoRA runs (``optim.peft.rank > 0``) keep the merged folder (so evaluation needs no ``peft``) and
also write the adapter alone with PEFT's ``save_pretrained`` into ``step_<N>/adapter/``; its
``ragen_base.json`` records where the adapter's *base* model comes from: the run's ``model``
name, or -- when a warm start changed the base -- ``checkpoints/lora_base/`` (relative to the
run folder), a plain model folder written once before the adapters are added. ``--resume``
rebuilds that base, loads the adapter on top and restores the optimiser, so the KL reference
(the base with adapters disabled) and the AdamW moments are exactly those of the first run.

Trust. A run directory may come from someone else, so nothing in it may run code:
``trainer_state.pt`` holds plain data only (tensors, numbers, strings, lists, dicts; the RNG
states are stored in that form too) and is read with ``torch.load(weights_only=True)``, which
refuses anything else; model and adapter weights of a checkpoint are read from safetensors only.
Damage. The last file written into a checkpoint is ``manifest.json`` (every file's size and
SHA-256, each file flushed to disk first). :func:`verify_checkpoint` checks it, and
:func:`resume_checkpoint` resumes from the newest intact checkpoint whose step still has its
``metrics.jsonl`` row, saying which ones it skipped and why. Checkpoints written before manifests
existed are used unverified, with a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np

from ragen_core.errors import CheckpointError, shell_word

STATE_FILE = "trainer_state.pt"
MANIFEST_FILE = "manifest.json"
#: Files a checkpoint is read from (weights, trainer state, configs): each must be in the manifest.
LOADED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".json", ".model")
ADAPTER_DIR = "adapter"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
BASE_FILE = "ragen_base.json"
LORA_BASE_DIR = "lora_base"
_STEP_RE = re.compile(r"^step_(\d+)$")


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step}"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Checkpoint folders of a run, oldest first: each ``step_<N>`` with a trainer state or a
    manifest. One whose manifest lists a file that is gone is here too, so that a resume or an eval
    names what is missing (:func:`verify_checkpoint`) instead of passing it over unsaid."""
    root = Path(run_dir) / "checkpoints"
    found: list[tuple[int, Path]] = []
    if root.is_dir():
        for child in root.iterdir():
            match = _STEP_RE.match(child.name)
            if match and written_by_ragen(child):
                found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> tuple[int, Path] | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def rng_state() -> dict[str, Any]:
    """The python, numpy, torch (and CUDA) RNG states as plain data (numpy's key as a list of ints)."""
    import torch

    # numpy's stubs type the default call as the dict form; the global generator returns the tuple.
    name, key, pos, has_gauss, cached = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"bit_generator": str(name), "key": key.tolist(), "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Apply what :func:`rng_state` returned (a checkpoint of an older RAGEN holds numpy's state as a tuple)."""
    import torch

    random.setstate(state["python"])
    np_state = state["numpy"]
    if isinstance(np_state, dict):
        np_state = (np_state["bit_generator"], np.asarray(np_state["key"], dtype=np.uint32), np_state["pos"],
                    np_state["has_gauss"], np_state["cached_gaussian"])
    np.random.set_state(np_state)
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        # one state per GPU the saving process saw; a machine that shows fewer restores those it has
        # (set_rng_state_all raised IndexError: 8 GPUs saved, CUDA_VISIBLE_DEVICES=0 at resume)
        for index, cuda_state in enumerate(list(state["cuda"])[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, index)


_PLAIN = (type(None), bool, int, float, str, bytes)


def plain_data(value: Any, where: str = "state") -> Any:
    """``value`` as data ``torch.load(weights_only=True)`` reads back: numpy scalars and arrays become
    Python numbers and lists; tensors, numbers, strings, lists, tuples and dicts stay as they are.

    Raises:
        CheckpointError: Anything else (named by its path, e.g. ``diagnostics.collapse.tracker``): a
            checkpoint that could not be resumed is refused when it is written, not when it is read.
    """
    import torch

    if isinstance(value, np.generic):  # before the scalars: np.float64 is a float subclass
        return value.item()
    if type(value) in _PLAIN or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        items = [plain_data(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        out = {plain_data(k, f"{where} key"): plain_data(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, OrderedDict):  # a module's state_dict: keep its version metadata
            out = OrderedDict(out)
            if hasattr(value, "_metadata"):
                out._metadata = value._metadata  # type: ignore[attr-defined]
        return out
    raise CheckpointError(f"cannot save a checkpoint: {where} is a {type(value).__module__}.{type(value).__qualname__}, not plain data",
                          ["state_dict() of a diagnostic or runner must return tensors, numbers, strings, lists and dicts"])


def save_checkpoint(run_dir: str | Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``checkpoints/step_<step>`` atomically and keep only the newest ``keep`` folders.

    Removing older folders is said in one line on stdout (which ones, how many are kept).

    Args:
        model: The policy (``save_pretrained``; a PEFT model is merged into plain weights).
        tokenizer: Saved next to the model so the folder is self-contained.
        state: Extra trainer state (optimiser, critic, counters); RNG states are added here.

    Raises:
        CheckpointError: ``state`` holds more than plain data (nothing is written), or writing failed
            (disk full, unwritable folder); older checkpoints are left as they were.
    """
    import torch

    final = checkpoint_dir(run_dir, step)
    payload = plain_data({"rng": rng_state(), **state, "step": int(step)})  # a state's own "rng": as of an earlier moment
    to_save, weights = model, None
    if hasattr(model, "merge_and_unload") and hasattr(model, "peft_config"):
        weights = merged_lora_weights(model)
        if weights is not None:
            to_save = model.get_base_model()
        else:  # an adapter kind merged otherwise (DoRA): a merged copy (twice the model's memory for a moment)
            import copy

            to_save = copy.deepcopy(model).merge_and_unload()
    try:
        with _atomic_folder(final) as tmp:
            _save_model_folder(tmp, to_save, tokenizer, weights)
            if hasattr(model, "peft_config"):
                model.save_pretrained(str(tmp / ADAPTER_DIR))  # PEFT: the adapter weights and adapter_config.json only
                if state.get("lora_base"):
                    (tmp / ADAPTER_DIR / BASE_FILE).write_text(json.dumps({"lora_base": str(state["lora_base"])}), encoding="utf-8")
            try:
                torch.save(payload, tmp / STATE_FILE)
            except RuntimeError as exc:  # torch's writer says "file write failed" / "unexpected pos" (disk full, a file-size limit)
                raise OSError(f"writing {STATE_FILE} failed: {_first_line(exc)}") from exc
            write_manifest(tmp)
    except (OSError,) + _safetensors_errors() as exc:
        raise CheckpointError(f"could not write checkpoint {final}: {_first_line(exc)}",
                              [f"older checkpoints are intact; free disk space or fix {final.parent}, "
                               f"then 'ragen run --resume {shell_word(run_dir)}'"]) from exc
    if keep > 0:
        removed = _beyond_kept(run_dir, final, keep)
        for old in removed:
            if old.is_symlink():  # a linked step_N: the link goes, never what it points to (rmtree refused it quietly)
                old.unlink()
            else:
                shutil.rmtree(old, ignore_errors=True)
        if removed:
            from tqdm import tqdm  # above the trainer's progress bar, not through it

            tqdm.write(f"checkpoint {final.name} written; removed {', '.join(old.name for old in removed)} "
                       f"(the newest {keep} intact ones are kept: keep_checkpoints)")
    return final


def _sizes_match(folder: Path) -> bool:
    """A cheap intactness check (no hashing): every file the manifest lists, with its size. A folder
    without a manifest (an older RAGEN's) counts as intact."""
    try:
        verify_checkpoint(folder, hashes=False)
    except CheckpointError:
        return False
    return True


KNOWN_DAMAGED: set[Path] = set()
"""Checkpoint folders this process found damaged (a resume's full check): pruning, which checks
sizes only, does not count them among the intact ones to keep (a flipped byte keeps the size)."""


def _beyond_kept(run_dir: str | Path, final: Path, keep: int) -> list[Path]:
    """Checkpoints older than the newest ``keep`` intact ones (``final``, just written, among them):
    a damaged newer checkpoint never pushes out the intact one a resume would fall back to."""
    older = [p for _, p in reversed(list_checkpoints(run_dir)) if p != final]
    kept, intact = [], 1
    for folder in older:
        if intact >= keep:
            break
        kept.append(folder)  # newer than the oldest kept intact one: kept, damaged or not
        intact += folder.resolve() not in KNOWN_DAMAGED and _sizes_match(folder)
    return [p for p in older if p not in kept]


def load_state(path: str | Path) -> dict[str, Any]:
    """Read ``trainer_state.pt`` of a checkpoint folder as plain data (RNG states are *not* applied here).

    Raises:
        CheckpointError: The file holds anything but plain data (it is not unpickled), cannot be
            read, or lacks the step or RNG state.
    """
    import pickle

    file = Path(path) / STATE_FILE
    try:
        state: dict[str, Any] = _load_plain(file)
    except pickle.UnpicklingError as exc:
        if "weights only load failed" not in str(exc).lower():
            raise CheckpointError(f"{file} is damaged ({_first_line(exc)})") from None
        raise CheckpointError(f"{file} holds more than plain data (tensors, numbers, strings, lists, dicts); refusing to load it",
                              ["it was not written by RAGEN or was changed since: resume only from run directories you trust"]) from None
    except (OSError, EOFError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{file} is damaged ({_first_line(exc)})") from None
    _require(state, ("step", "rng"), file)
    return state


def _require(state: Any, keys: tuple[str, ...], file: Path) -> None:
    missing = [k for k in keys if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"{file} is not a RAGEN trainer state (no {', '.join(missing)})")


def _load_plain(file: Path) -> Any:
    """``torch.load(weights_only=True)``, also accepting numpy arrays of plain numbers.

    Checkpoints written before the RNG states were stored as lists hold numpy's as an ndarray.
    The extra globals only rebuild arrays and dtypes; the restricted unpickler still refuses
    every other global, so nothing else can be called while loading.
    """
    import torch

    # numpy's array and scalar constructors, wherever this numpy version keeps them
    allowed = [np.zeros(1).__reduce__()[0], np.float64(0).__reduce__()[0], np.ndarray, np.dtype, type(np.dtype(np.uint32)),
               type(np.dtype(np.float64))]
    serialization = torch.serialization
    if not hasattr(serialization, "safe_globals"):  # torch 2.4 has only the process-wide allow-list
        serialization.add_safe_globals(allowed)
        return torch.load(file, map_location="cpu", weights_only=True)
    with serialization.safe_globals(allowed):
        return torch.load(file, map_location="cpu", weights_only=True)


# ----------------------------------------------------------------------------- manifests
def write_manifest(folder: str | Path) -> None:
    """Record every file of ``folder`` (size, SHA-256) in ``manifest.json``, each file flushed to disk first.

    Called last when a checkpoint is written: a folder whose manifest matches is complete.
    """
    folder = Path(folder)
    files: dict[str, dict[str, Any]] = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE):
        with file.open("rb") as fh:
            files[file.relative_to(folder).as_posix()] = {"size": file.stat().st_size, "sha256": _sha256(fh)}
            os.fsync(fh.fileno())
    with (folder / MANIFEST_FILE).open("w", encoding="utf-8") as fh:
        json.dump({"format": 1, "files": files}, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())


def verify_checkpoint(folder: str | Path, *, hashes: bool = True, unused: tuple[str, ...] = ()) -> bool:
    """Check ``folder`` against its manifest (``hashes=False``: sizes only, no file is read;
    ``unused``: files the reader does not need, such as ``ragen eval`` the trainer state).

    Returns:
        True when every listed file is there with its size and hash; False for a folder without a
        manifest (written by an older RAGEN: nothing to check against).

    Raises:
        CheckpointError: Naming the folder and the first file that is missing or differs.
    """
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    if not path.exists():
        return False
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        entries = [(str(name), int(e["size"]), str(e["sha256"])) for name, e in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {folder}: {MANIFEST_FILE} is damaged ({_first_line(exc)})") from None
    listed = {name for name, _, _ in entries}
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in LOADED_SUFFIXES and p.name != MANIFEST_FILE):
        name = file.relative_to(folder).as_posix()
        if name not in listed and name not in unused:  # weights the manifest does not vouch for were used unchecked
            raise CheckpointError(f"checkpoint {folder}: {name} is not in its {MANIFEST_FILE}, so it cannot be verified",
                                  ["the manifest lists every file a checkpoint was written with: this folder was changed since"])
    for name, size, digest in entries:
        file = folder / name
        if name in unused:
            continue
        if not file.is_file():
            raise CheckpointError(f"checkpoint {folder}: {name} is missing")
        actual = file.stat().st_size
        if actual != size:
            raise CheckpointError(f"checkpoint {folder}: {name} is damaged ({actual} bytes, the manifest says {size})")
        if not hashes:
            continue
        with file.open("rb") as fh:
            if _sha256(fh) != digest:
                raise CheckpointError(f"checkpoint {folder}: {name} is damaged (its contents differ from the manifest)")
    return True


def written_by_ragen(path: str | Path) -> bool:
    """True for a folder RAGEN wrote (a checkpoint or ``lora_base``): its weights load from safetensors only."""
    p = Path(path)
    return p.is_dir() and ((p / MANIFEST_FILE).is_file() or (p / STATE_FILE).is_file())


def require_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """:func:`list_checkpoints` of a run ``--resume`` continues; refuses a run that has none.

    Raises:
        CheckpointError: no checkpoint folder at all (checked before the resumed settings are read,
            so nothing else is printed first).
    """
    found = list_checkpoints(run_dir)
    if not found:
        raise CheckpointError(f"--resume: no checkpoint found under {run_dir / 'checkpoints'}",
                              [f"start the run again with 'ragen run --overwrite --run-dir {shell_word(run_dir)} ...', or choose another --run-dir"])
    return found


def resume_checkpoint(run_dir: str | Path, log: Callable[[str], Any] = print) -> tuple[int, Path]:
    """The checkpoint ``--resume`` continues from: the newest intact one whose step has its metrics row.

    Damaged checkpoints are skipped. When ``metrics.jsonl`` ends before a checkpoint's step (a torn
    last line, see :func:`ragen_core.trainer.loggers.read_complete_rows`), an older checkpoint is
    chosen so the missing steps are computed again; without one, the newest intact checkpoint is
    used and the gap is reported. Every such decision is printed as one line through ``log``.

    Raises:
        CheckpointError: No checkpoint, or none of them intact.
    """
    from ragen_core.trainer.loggers import is_step, read_complete_rows

    run_dir = Path(run_dir)
    found = require_checkpoints(run_dir)
    rows, torn = read_complete_rows(run_dir / "metrics.jsonl")
    # the highest: rows may be out of order, or hold a hand-edited step
    logged = max((int(r["step"]) for r in rows if is_step(r.get("step"))), default=0)
    damaged: list[tuple[Path, str]] = []
    ahead: list[tuple[int, Path, bool]] = []  # intact, but newer than the last metrics row
    chosen: tuple[int, Path, bool] | None = None
    for step, path in reversed(found):
        try:
            verified = verify_checkpoint(path)
        except CheckpointError as exc:
            damaged.append((path, exc.message))
            KNOWN_DAMAGED.add(path.resolve())  # pruning must not count it as intact (it checks sizes only)
            continue
        if step <= logged:
            chosen = (step, path, verified)
            break
        ahead.append((step, path, verified))
    gap = chosen is None and bool(ahead)
    if gap:
        chosen = ahead[0]
    if chosen is None:
        listing = "; ".join(msg for _, msg in damaged)
        raise CheckpointError(f"--resume: no intact checkpoint under {run_dir / 'checkpoints'}: {listing}",
                              [f"start the run again with 'ragen run --overwrite --run-dir {shell_word(run_dir)} ...'"])
    step, path, verified = chosen
    for _, message in damaged:  # first: why the run goes on from an older checkpoint than its newest
        log(f"resume: {message}; resuming from {path.name}")
    if gap:
        log(f"resume: metrics.jsonl has no rows for steps {logged + 1}..{step} and no older intact checkpoint can recompute them; "
            f"continuing from {path.name} with that gap")
    elif torn or ahead or logged > step:
        reasons = [f"ends in a torn line after step {logged} (cut off)" if torn else f"ends at step {logged}"] if torn or ahead else []
        if logged > step:  # rows of steps the resume computes again: their new rows take their place
            reasons.append(f"rows of steps {step + 1}..{logged} (after checkpoints/{path.name}) are replaced")
        log(f"resume: metrics.jsonl {' and its '.join(reasons)}; resuming from {path.name} recomputes from step {step + 1}")
    if not verified:
        log(f"resume: checkpoints/{path.name} has no manifest (written by an older RAGEN): its files cannot be verified")
    return step, path


def _sha256(fh: Any) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: fh.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _safetensors_errors() -> tuple[type[BaseException], ...]:
    try:
        from safetensors import SafetensorError
    except ImportError:
        return ()
    return (SafetensorError,)


def save_lora_base(run_dir: str | Path, model: Any, tokenizer: Any) -> str:
    """Write the (plain) base model of a LoRA run to ``checkpoints/lora_base`` once.

    Returns the path relative to ``run_dir`` that :func:`resolve_lora_base` turns back into a
    folder. An existing complete folder is kept (a resumed run shares its first run's base).
    """
    final = Path(run_dir) / "checkpoints" / LORA_BASE_DIR
    if not (final / "config.json").is_file():
        with _atomic_folder(final) as tmp:
            _save_model_folder(tmp, model, tokenizer)
            write_manifest(tmp)
    return f"checkpoints/{LORA_BASE_DIR}"


@contextlib.contextmanager
def _atomic_folder(final: Path) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``final``; once the block succeeds it replaces ``final``.

    A process killed inside the block leaves only the ``.tmp`` folder, never a half-written
    ``final``; a block that fails removes it (a full disk gets its space back). An existing
    ``final`` is first renamed aside, so it is never half-deleted either.
    """
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = final.with_name(final.name + ".old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    KNOWN_DAMAGED.discard(final.resolve())  # written again: pruning counts it as intact now
    shutil.rmtree(old, ignore_errors=True)
    with contextlib.suppress(OSError):  # make the rename itself durable (not possible on every filesystem)
        fd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def merged_lora_weights(model: Any) -> dict[str, Any] | None:
    """The weights of a PEFT LoRA ``model`` with its active adapters merged, keyed as the base
    model's own (``merge_and_unload``'s result, bit for bit), or None where this does not give it:
    DoRA adapters, ``modules_to_save`` copies, or an adapted weight tied to another (an adapted
    ``lm_head`` of tied embeddings: merging changes both).

    Built one layer at a time: each merged weight is ``W + get_delta_weight()`` moved to the CPU,
    and the other weights are the model's own tensors. A merged deep copy of the model took twice
    its memory on the GPU at every checkpoint.
    """
    from collections import Counter

    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    layers: dict[str, Any] = {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    if any(any(getattr(module, "use_dora", {}).get(a, False) for a in module.active_adapters) for module in layers.values()):
        return None
    if any(type(module).__name__ == "ModulesToSaveWrapper" for module in base.modules()):
        return None
    state = base.state_dict()
    shared = Counter(tensor.data_ptr() for tensor in state.values())
    if any(shared[state[f"{path}.base_layer.weight"].data_ptr()] > 1 for path in layers if f"{path}.base_layer.weight" in state):
        return None
    merged: dict[str, Any] = {}
    for key, tensor in state.items():
        path, sep, leaf = key.rpartition(".base_layer.")
        if not sep:
            if ".lora_" not in key:  # the adapters' own weights are saved apart (adapter/)
                merged[key] = tensor
            continue
        if leaf == "weight" and path in layers:
            weight = tensor.detach().clone()
            layer = layers[path]
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A or adapter in getattr(layer, "lora_embedding_A", {}):
                    weight += layer.get_delta_weight(adapter)
            merged[f"{path}.weight"] = weight.cpu()
        else:
            merged[f"{path}.{leaf}"] = tensor
    return merged


def _save_model_folder(folder: Path, model: Any, tokenizer: Any, weights: dict[str, Any] | None = None) -> None:
    """A loadable Hugging Face folder: the model's weights (``weights`` when given, keyed as the
    model's state dict) and config, plus the tokenizer when given."""
    from ragen_core.models import quiet_progress

    with quiet_progress():  # no "Writing model shards" lines at every checkpoint
        model.save_pretrained(str(folder), safe_serialization=True, **({"state_dict": weights} if weights is not None else {}))
    if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(str(folder))
    # transformers writes the weights through a private temporary file (mode 0600): give them the
    # mode every other file of the folder gets, so whoever may read the run may read its weights
    for path in folder.iterdir():
        if path.is_file():
            usual_mode(path)


def usual_mode(path: Path) -> None:
    """Give the file ``path`` the mode a newly created file gets here (0666 less the umask): a
    weights file written through a private temporary file (safetensors, transformers) is 0600."""
    mode = 0o666 & ~current_umask()
    if path.stat().st_mode & 0o777 != mode:
        path.chmod(mode)


def current_umask() -> int:
    """This process's umask, read without changing it (Linux), else by setting it back at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def resolve_lora_base(run_dir: str | Path, ref: str) -> str:
    """The model name or folder to load for a recorded ``lora_base`` reference."""
    if ref == f"checkpoints/{LORA_BASE_DIR}":
        return str(Path(run_dir) / ref)
    return ref


def lora_resume_source(path: str | Path) -> tuple[str, Path] | None:
    """``(recorded base reference, adapter folder)`` of a LoRA checkpoint, or None.

    Load the base with ``resolve_lora_base(run_dir, ref)``.

    None means the checkpoint has no ``adapter/`` folder or no recorded base (a full fine-tuning
    run, or a LoRA checkpoint written before adapters were saved separately).
    """
    adapter = Path(path) / ADAPTER_DIR
    if not (adapter / "adapter_config.json").is_file():
        return None
    try:
        ref = json.loads((adapter / BASE_FILE).read_text(encoding="utf-8")).get("lora_base")
    except (OSError, ValueError, AttributeError):
        return None
    if not ref:
        return None
    return str(ref), adapter


class CheckpointMixin:
    """``save`` / ``_restore`` of :class:`ragen_core.trainer.trainer.Trainer` (everything a resume needs)."""

    config: Any
    run_dir: Path
    # Set by the Trainer's __init__ (declared here for the type checker).
    model: Any
    tokenizer: Any
    optimizer: Any
    critic: Any
    critic_optimizer: Any
    ref_model: Any
    runner: Any
    val_runner: Any
    stopper: Any
    _lora_base: Any

    def resume_point(self) -> dict[str, Any]:
        """What a step is about to use up: the training runner's seed counter, the random number
        generators and the diagnostics' state, as plain copies. Taken when a step starts, it lets a
        checkpoint of the step before be written after this one began (a failed, aborted or stalled
        step: :meth:`save` ``at=``), and a resume then replays this step exactly."""
        import copy

        return {"runner": copy.deepcopy(self._runner_state()), "rng": rng_state(),
                "diagnostics": {n: copy.deepcopy(p.state_dict()) for n, p in self._diagnostic_plugins().items() if hasattr(p, "state_dict")}}

    def save(self, step: int, at: dict[str, Any] | None = None) -> Path:
        """Write ``checkpoints/step_<step>`` with the policy and every piece of trainer state
        (``at``: a :meth:`resume_point` taken when the next step started, replacing the state that
        step has used up since)."""
        state: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "runner": self._runner_state(),
            "val_runner": self.val_runner.state_dict() if self.val_runner is not None and hasattr(self.val_runner, "state_dict") else None,
            "empty_streak": self.empty_streak,
            "policy_version": self.policy_version,
            "stopper": self.stopper.state_dict(),
            "timing_totals": dict(self.timing_totals),
            "diagnostics": {n: p.state_dict() for n, p in self._diagnostic_plugins().items() if hasattr(p, "state_dict")},
        }
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
            state["critic_optimizer"] = self.critic_optimizer.state_dict()
        if self.ref_model is not None:
            state["ref_model"] = self.ref_model.state_dict()
        if getattr(self, "_lora_base", None):
            state["lora_base"] = self._lora_base
        state.update(self._sharded_state())
        state.update(at or {})
        return save_checkpoint(self.run_dir, step, self.unsharded_policy, self.tokenizer, state, keep=self.config.keep_checkpoints)

    @property
    def unsharded_policy(self) -> Any:
        """The policy module a checkpoint writes (the trainer's FSDP run: its unsharded copy)."""
        return self.model

    def _load_trained(self, module: Any, optimizer: Any, module_state: Any, optimizer_state: Any) -> None:
        """Load a trained module's checkpointed weights (None: loaded already) and its optimiser's state."""
        if module_state is not None:
            module.load_state_dict(module_state)
        optimizer.load_state_dict(optimizer_state)

    def _sharded_state(self) -> dict[str, Any]:
        """Entries that replace the above when modules are sharded (the trainer's FSDP run: gathered whole)."""
        return {}

    def _runner_state(self) -> Any:
        """The training runner's checkpointed state (its seed counter)."""
        return self.runner.state_dict() if hasattr(self.runner, "state_dict") else None

    def _diagnostic_plugins(self) -> dict[str, Any]:
        pm = getattr(self, "pm", None)
        out: dict[str, Any] = {}
        if pm is None:
            return out
        for name in self.config.diagnostics:
            plugin = pm.get_plugin(f"diagnostic-{name}")
            if plugin is not None:
                out[name] = plugin
        return out

    def _restore(self, state: dict[str, Any]) -> None:
        """Apply a checkpoint's state (:func:`load_state`): optimisers, critic, runners, counters, diagnostics, RNGs."""
        _require(state, ("optimizer",), self.run_dir / "checkpoints" / f"step_{state['step']}" / STATE_FILE)
        self._load_trained(self.model, self.optimizer, None, state["optimizer"])  # the policy's weights are loaded already
        if self.critic is not None and "critic" in state:
            self._load_trained(self.critic, self.critic_optimizer, state["critic"], state["critic_optimizer"])
        o = self.config.optim
        for optimizer in (self.optimizer, self.critic_optimizer):  # the run's settings, not the checkpoint's
            for group in optimizer.param_groups if optimizer is not None else ():  # (a --resume may change them; lr: _set_lr)
                group["betas"], group["weight_decay"] = tuple(o.betas), o.weight_decay
        if self.ref_model is not None and "ref_model" in state:
            self.ref_model.load_state_dict(state["ref_model"])
        if state.get("runner") is not None and hasattr(self.runner, "load_state_dict"):
            self.runner.load_state_dict(state["runner"])
        if state.get("val_runner") is not None and self.val_runner is not None and hasattr(self.val_runner, "load_state_dict"):
            self.val_runner.load_state_dict(state["val_runner"])
        self.empty_streak = int(state.get("empty_streak", 0))
        self.policy_version = int(state.get("policy_version", state["step"]))  # older checkpoints: one update per step
        self.stopper.load_state_dict(state.get("stopper", {}))
        self.timing_totals = dict(state.get("timing_totals", {}))
        self._diag_states = dict(state.get("diagnostics", {}))
        set_rng_state(state["rng"])
        self.start_step = int(state["step"]) + 1

    _diag_states: dict[str, Any] = {}
