"""Recompute the collapse diagnostics from a saved checkpoint plus saved rollouts.

A run directory holds ``checkpoints/step_<N>/`` (a loadable Hugging Face model folder) and
``rollouts/step_<N>.jsonl`` (one ``Trajectory.to_dict()`` per line). :func:`diagnose_offline`
loads both, runs :class:`~ragen_diagnostics.diagnostic.CollapseDiagnostic` once and returns its
metrics; :func:`save_offline_metrics` appends them to ``RUN_DIR/diagnostics_offline.jsonl``,
which :func:`ragen_diagnostics.report.build_report` shows next to the training-time values.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragen_core.errors import RagenError
from ragen_core.rollout.types import Trajectory, Turn
from ragen_diagnostics.config import CollapseConfig
from ragen_diagnostics.report import OFFLINE_FILE

_TRAJ_FIELDS = {f.name for f in dataclasses.fields(Trajectory)}
_TURN_FIELDS = {f.name for f in dataclasses.fields(Turn)}


def trajectory_from_dict(data: dict[str, Any]) -> Trajectory:
    """Inverse of ``Trajectory.to_dict()`` (derived fields such as ``total_reward`` are dropped)."""
    turns = [Turn(**{k: v for k, v in t.items() if k in _TURN_FIELDS}) for t in data.get("turns", [])]
    fields = {k: v for k, v in data.items() if k in _TRAJ_FIELDS and k != "turns"}
    return Trajectory(**fields, turns=turns)


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Trajectories of a rollouts JSONL file.

    Raises:
        RagenError: The file is missing, or not one line of it is a trajectory.
    """
    p = Path(path)
    if p.is_dir():
        steps = sorted((f.name for f in p.glob("step_*.jsonl")), key=lambda n: (len(n), n))
        raise RagenError(f"rollouts {p} is a folder; --rollouts takes one step's file",
                         [f"e.g. --rollouts {p / steps[-1]} (the latest)" if steps else "rollouts are saved as RUN_DIR/rollouts/step_<N>.jsonl"])
    if not p.is_file():
        raise RagenError(f"rollouts file {p} does not exist", ["rollouts are saved as RUN_DIR/rollouts/step_<N>.jsonl when the trainer keeps them"])
    out: list[Trajectory] = []
    not_json = other = chats = 0
    for line in p.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            not_json += 1
            continue
        if isinstance(row, dict) and "messages" in row and "turns" not in row:  # a 'ragen eval --out' line
            chats += 1
            continue
        try:
            out.append(trajectory_from_dict(row))
        except (TypeError, AttributeError, KeyError):
            other += 1
    saved = "rollouts are what a run saves with save_rollouts=true (RUN_DIR/rollouts/step_<N>.jsonl)"
    if not out and chats:
        raise RagenError(f"rollouts file {p} is a 'ragen eval --out' export (chat messages per episode), not saved rollouts",
                         [f"{saved}; resume the run with save_rollouts=true for a step to diagnose"])
    if not out:
        counts = ", ".join(part for part in (f"{not_json} not JSON" if not_json else "",
                                             f"{other} JSON but not a trajectory" if other else "") if part) or "no lines"
        raise RagenError(f"rollouts file {p} holds no readable trajectory ({counts})", [saved])
    return out


def step_of(path: str | Path) -> int | None:
    """The N of ``step_<N>`` / ``step_<N>.jsonl``, or None."""
    match = re.search(r"step_(\d+)", Path(path).name)
    return int(match.group(1)) if match else None


def load_model(checkpoint_dir: str | Path, device: str = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer or None) from a Hugging Face folder; the model is in eval mode.

    A checkpoint RAGEN wrote is checked against its manifest and read from safetensors only, as
    ``--resume`` reads it; in any folder, weights that are a pickle holding more than tensors are
    refused (:func:`ragen_core.models.load_weights`).

    Raises:
        RagenError: No ``config.json``, a damaged checkpoint, or weights that cannot be loaded.
    """
    ckpt = Path(checkpoint_dir)
    if not (ckpt / "config.json").is_file():
        raise RagenError(f"checkpoint {ckpt} is not a Hugging Face model folder (no config.json)",
                         ["pass a folder under RUN_DIR/checkpoints/, e.g. --checkpoint step_100"])
    from transformers import AutoTokenizer

    from ragen_core.models import load_weights, quiet_progress
    from ragen_core.trainer.checkpoint import verify_checkpoint, written_by_ragen

    ours = written_by_ragen(ckpt)
    if ours:
        verify_checkpoint(ckpt)
    with quiet_progress():  # a local folder: no "Loading weights" bar (the stage line said what is loading)
        model = load_weights(str(ckpt), safetensors_only=ours).to(device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(ckpt))
    except Exception:  # noqa: BLE001 - a checkpoint without tokenizer files still scores token ids fine
        tokenizer = None
    return model, tokenizer


def diagnose_offline(
    checkpoint_dir: str | Path,
    rollouts_jsonl: str | Path,
    *,
    config: CollapseConfig | dict[str, Any] | None = None,
    device: str = "cpu",
    step: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """Collapse metrics of a checkpoint on saved rollouts.

    Args:
        checkpoint_dir: Hugging Face model folder (``RUN_DIR/checkpoints/step_<N>``).
        rollouts_jsonl: ``RUN_DIR/rollouts/step_<N>.jsonl``.
        config: Diagnostic settings (the schedule is ignored: it always runs).
        device: Torch device for scoring.
        step: Step number used to seed the pair sampling; default the N of the rollouts file.
        progress: Called with a short line as each stage starts (loading, each family's scoring).

    Returns:
        The metrics the diagnostic logs during training, same keys.
    """
    from ragen_core.trainer.context import TrainContext
    from ragen_diagnostics.diagnostic import CollapseDiagnostic

    cfg = config if isinstance(config, CollapseConfig) else CollapseConfig(**(config or {}))
    cfg = cfg.model_copy(update={"compute_freq": 1})
    say = progress or (lambda _line: None)
    say(f"reading rollouts {rollouts_jsonl}")
    trajectories = load_trajectories(rollouts_jsonl)
    say(f"loading checkpoint {checkpoint_dir} on {device} ({len(trajectories)} trajectories read)")
    model, tokenizer = load_model(checkpoint_dir, device)
    ctx = TrainContext(config=None, run_dir=Path(checkpoint_dir), model=model, tokenizer=tokenizer, device=device)
    step = step if step is not None else (step_of(rollouts_jsonl) or 1)
    diag = CollapseDiagnostic(cfg)
    diag.progress = progress
    # family failures are logged by the diagnostic and counted in ``collapse/error``
    return diag.ragen_on_rollout_end(trajectories, max(step, 1), ctx) or {}


def save_offline_metrics(run_dir: str | Path, step: int, metrics: dict[str, float], checkpoint: str | Path,
                         rollouts: str | Path | None = None, *, step_from: str = "rollouts") -> Path:
    """Append one row ``{"step", "checkpoint", "rollouts", "step_from", **metrics}`` to
    ``RUN_DIR/diagnostics_offline.jsonl``; ``step_from`` says where the step came from: the
    rollouts file's name (``rollouts/step_N.jsonl``) or, when it names none, the checkpoint's
    (``checkpoint``: its step + 1)."""
    out = Path(run_dir) / OFFLINE_FILE
    row = {"step": step, "checkpoint": str(checkpoint), "rollouts": None if rollouts is None else str(rollouts), "step_from": step_from,
           **metrics}
    with out.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    return out
