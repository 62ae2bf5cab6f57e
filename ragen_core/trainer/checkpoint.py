"""Checkpoints: a loadable Hugging Face model folder plus everything needed to resume exactly.

``RUN_DIR/checkpoints/step_<N>/`` holds ``save_pretrained`` output and the tokenizer (so
``AutoModelForCausalLM.from_pretrained(path)`` and ``ragen eval --model path`` work directly),
plus ``trainer_state.pt`` with the optimiser, the critic (weights + optimiser), the step, the
RNG states of python/numpy/torch, the rollout runner's state (seed counter), filter/early-stop
bookkeeping and any EMA states. A folder is written under a temporary name and renamed when
complete, so a run killed while saving never leaves a half-written ``step_<N>``.

LoRA runs (``optim.peft.rank > 0``) keep the merged folder (so evaluation needs no ``peft``) and
also write the adapter alone with PEFT's ``save_pretrained`` into ``step_<N>/adapter/``; its
``ragen_base.json`` records where the adapter's *base* model comes from: the run's ``model``
name, or -- when a warm start changed the base -- ``checkpoints/lora_base/`` (relative to the
run folder), a plain model folder written once before the adapters are added. ``--resume``
rebuilds that base, loads the adapter on top and restores the optimiser, so the KL reference
(the base with adapters disabled) and the AdamW moments are exactly those of the first run.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

STATE_FILE = "trainer_state.pt"
ADAPTER_DIR = "adapter"
BASE_FILE = "ragen_base.json"
LORA_BASE_DIR = "lora_base"
_STEP_RE = re.compile(r"^step_(\d+)$")


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step}"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    found: list[tuple[int, Path]] = []
    if root.is_dir():
        for child in root.iterdir():
            match = _STEP_RE.match(child.name)
            if match and (child / STATE_FILE).is_file():
                found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> tuple[int, Path] | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def rng_state() -> dict[str, Any]:
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: str | Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``checkpoints/step_<step>`` atomically and keep only the newest ``keep`` folders.

    Args:
        model: The policy (``save_pretrained``; a PEFT model is merged into plain weights).
        tokenizer: Saved next to the model so the folder is self-contained.
        state: Extra trainer state (optimiser, critic, counters); RNG states are added here.
    """
    import torch

    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    to_save = model
    if hasattr(model, "merge_and_unload") and hasattr(model, "peft_config"):
        import copy

        to_save = copy.deepcopy(model).merge_and_unload()
    to_save.save_pretrained(str(tmp), safe_serialization=True)
    if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(str(tmp))
    payload = dict(state)
    payload["step"] = int(step)
    payload["rng"] = rng_state()
    if hasattr(model, "peft_config"):
        payload["adapter_state"] = {k: v.detach().cpu() for k, v in model.state_dict().items() if "lora" in k}
        model.save_pretrained(str(tmp / ADAPTER_DIR))  # PEFT: the adapter weights and adapter_config.json only
        if state.get("lora_base"):
            (tmp / ADAPTER_DIR / BASE_FILE).write_text(json.dumps({"lora_base": str(state["lora_base"])}), encoding="utf-8")
    torch.save(payload, tmp / STATE_FILE)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    if keep > 0:
        for _, old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_state(path: str | Path) -> dict[str, Any]:
    """Read ``trainer_state.pt`` of a checkpoint folder (RNG states are *not* applied here)."""
    import torch

    return torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)


def save_lora_base(run_dir: str | Path, model: Any, tokenizer: Any) -> str:
    """Write the (plain) base model of a LoRA run to ``checkpoints/lora_base`` once.

    Returns the path relative to ``run_dir`` that :func:`resolve_lora_base` turns back into a
    folder. An existing complete folder is kept (a resumed run shares its first run's base).
    """
    final = Path(run_dir) / "checkpoints" / LORA_BASE_DIR
    if not (final / "config.json").is_file():
        tmp = final.with_name(final.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        model.save_pretrained(str(tmp), safe_serialization=True)
        if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(str(tmp))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    return f"checkpoints/{LORA_BASE_DIR}"


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
