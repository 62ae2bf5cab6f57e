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
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

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
    to_save = model
    if hasattr(model, "merge_and_unload") and hasattr(model, "peft_config"):
        import copy

        to_save = copy.deepcopy(model).merge_and_unload()
    with _atomic_folder(final) as tmp:
        _save_model_folder(tmp, to_save, tokenizer)
        payload = dict(state)
        payload["step"] = int(step)
        payload["rng"] = rng_state()
        if hasattr(model, "peft_config"):
            model.save_pretrained(str(tmp / ADAPTER_DIR))  # PEFT: the adapter weights and adapter_config.json only
            if state.get("lora_base"):
                (tmp / ADAPTER_DIR / BASE_FILE).write_text(json.dumps({"lora_base": str(state["lora_base"])}), encoding="utf-8")
        torch.save(payload, tmp / STATE_FILE)
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
        with _atomic_folder(final) as tmp:
            _save_model_folder(tmp, model, tokenizer)
    return f"checkpoints/{LORA_BASE_DIR}"


@contextlib.contextmanager
def _atomic_folder(final: Path) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``final``; once the block succeeds it replaces ``final``.

    A process killed inside the block leaves only the ``.tmp`` folder, never a half-written ``final``.
    """
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    yield tmp
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


def _save_model_folder(folder: Path, model: Any, tokenizer: Any) -> None:
    """A loadable Hugging Face folder: the model's weights and config, plus the tokenizer when given."""
    model.save_pretrained(str(folder), safe_serialization=True)
    if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(str(folder))


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

    def save(self, step: int) -> Path:
        """Write ``checkpoints/step_<step>`` with the policy and every piece of trainer state."""
        state: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "runner": self.runner.state_dict() if hasattr(self.runner, "state_dict") else None,
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
        return save_checkpoint(self.run_dir, step, self.model, self.tokenizer, state)

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

    def _restore(self, path: Path) -> None:
        """Load optimisers, critic, runners, counters, diagnostics and RNG states of a checkpoint."""
        state = load_state(path)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
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

    _diag_states: ClassVar[dict[str, Any]] = {}
