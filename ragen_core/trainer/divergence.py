"""Divergence: say when optimiser steps are skipped, stop a run that keeps skipping them, and
never leave a diverged state as the checkpoint ``--resume`` would pick.

:func:`~ragen_core.trainer.update.clip_and_step` skips an optimiser step whose gradient norm is
not finite (a NaN or infinite loss): the weights and the AdamW moments stay as they were. One
such step now and then is harmless; a run that diverged (a learning rate far too high) skips
every step from then on and, before this module, still finished with exit code 0, printed
nothing, and checkpointed the broken weights until they had rotated every good checkpoint out.

:class:`SkipMonitor` follows the ``actor/skipped_steps`` and ``critic/skipped_steps`` metrics of
each training step:

* every training step that skipped an optimiser step prints one line on stderr (through tqdm,
  so the progress bar stays intact);
* skipped steps are counted *in a row*: the count grows while consecutive training steps each
  skip at least one optimiser step, and a training step without a skip resets it. When the count
  exceeds ``optim.max_skipped_steps`` the run stops with
  :class:`~ragen_core.errors.TrainingError` (exit code 2 through ``ragen run``), naming the
  checkpoint to resume from.

What "the last good checkpoint" means. A checkpoint holds the weights after its step's update.
Those weights are known to be good only once the *next* optimiser step found a finite gradient
with them: a learning rate that blows the weights up to huge but finite values passes every
check at its own step, and only the step after it turns NaN. So:

* no checkpoint is written while optimiser steps are being skipped, or when any weight of the
  policy or critic is not finite (:meth:`SkipMonitor.unsafe_to_save`; a line on stderr says so):
  such a state can never rotate a good checkpoint out of the ``keep`` newest;
* an update that leaves a weight that is not finite (its gradient was finite: float16 weights
  overflowing, a huge learning rate) stops the run at once (:meth:`SkipMonitor.weights_broke`):
  every later gradient would be NaN, so there is nothing to wait for;
* when the run stops as diverged, a checkpoint this process wrote at the step right before the
  skipping began holds exactly the weights whose gradients went non-finite: it is renamed
  ``step_<N>.diverged`` (kept for inspection; ``--resume`` and ``ragen eval`` no longer see it),
  so the newest ``step_<N>`` left is one whose next step still trained. A checkpoint read at
  ``--resume`` is never renamed (its weights trained fine before; a new setting may be to blame).

A written checkpoint always has a count of 0, so the count needs no place in the checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ragen_core.errors import TrainingError, shell_word

#: ``stop_reason`` of a run stopped by :class:`SkipMonitor`.
DIVERGED = "diverged/skipped_optimizer_steps"

#: Suffix of a checkpoint folder set aside after a divergence (not a ``step_<N>`` name any more).
DIVERGED_SUFFIX = ".diverged"


def report(line: str) -> None:
    """One line on stderr, printed above an active tqdm progress bar instead of through it."""
    from tqdm.auto import tqdm

    tqdm.write(line, file=sys.stderr)


def weights_finite(*modules: Any) -> bool:
    """Whether every parameter of ``modules`` (None entries ignored) is finite.

    The per-parameter checks stay on their device and are reduced there, so a GPU model costs one
    host sync per device rather than one per parameter. Sharded parameters (FSDP2's DTensors) are
    checked on this rank's shard, and the verdict is then agreed across ranks by one all-reduce:
    every rank gets the same answer, so they stop (or go on) together.
    """
    import torch

    flags: dict[Any, list[Any]] = {}
    shard_device = None
    for module in modules:
        if module is None:
            continue
        for p in module.parameters():
            t = p.detach()
            if hasattr(t, "to_local"):  # a DTensor: its local shard (a stack of DTensor flags cannot be reduced)
                t = t.to_local()
                shard_device = t.device
            flags.setdefault(t.device, []).append(torch.isfinite(t).all())
    ok = all(bool(torch.stack(found).all()) for found in flags.values())
    if shard_device is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        verdict = torch.tensor([1 if ok else 0], device=shard_device)
        torch.distributed.all_reduce(verdict, op=torch.distributed.ReduceOp.MIN)
        ok = bool(verdict.item())
    return ok


class SkipMonitor:
    """Counts skipped optimiser steps in a row and decides when a run has diverged (module docstring).

    Args:
        limit: ``optim.max_skipped_steps``; None never stops the run.
        ppo_epochs: Optimiser steps per mini-batch and model (``optim.ppo_epochs``).
    """

    def __init__(self, limit: int | None, ppo_epochs: int) -> None:
        self.limit = limit
        self.ppo_epochs = ppo_epochs
        self.in_a_row = 0
        """Skipped optimiser steps of the current run of training steps that each skipped one."""
        self.first_skipping_step: int | None = None
        """The training step that began the current run of skips."""
        self.saved_steps: list[int] = []
        """Steps this process checkpointed (:meth:`saved`)."""
        self.broken_at: int | None = None
        """The training step whose update left a weight that is not finite (:meth:`weights_broke`)."""

    def observe(self, step: int, metrics: dict[str, float]) -> bool:
        """Count the skips of training step ``step`` (its metrics), report them; True when over the limit."""
        skipped = {k: int(metrics.get(f"{k}/skipped_steps", 0.0)) for k in ("actor", "critic")}
        total = sum(skipped.values())
        if total == 0:
            self.in_a_row, self.first_skipping_step = 0, None
            return False
        if self.in_a_row == 0:
            self.first_skipping_step = step
        self.in_a_row += total
        per_model = int(self.ppo_epochs * metrics.get("train/num_mini_batches", 1.0))
        parts = ", ".join(f"{k} {n}/{per_model}" for k, n in skipped.items() if f"{k}/skipped_steps" in metrics)
        limit = "no limit (optim.max_skipped_steps=null)" if self.limit is None else f"the run stops after {self.limit}"
        report(f"step {step}: skipped optimiser steps ({parts}): non-finite gradient norm; {self.in_a_row} in a row, {limit}")
        return self.limit is not None and self.in_a_row > self.limit

    def weights_broke(self, step: int) -> None:
        """Step ``step``'s update left a weight that is not finite: every later gradient is NaN, so the
        run stops now (no skipped steps to wait for). The checkpoint of the step before stays: its
        weights gave that update a finite gradient, so they are good by this module's rule."""
        self.broken_at = step

    def unsafe_to_save(self, *modules: Any) -> str | None:
        """Why the current state must not become a checkpoint, or None when it may."""
        if self.in_a_row > 0:
            return f"the last {self.in_a_row} optimiser step(s) were skipped (non-finite gradient norm)"
        if not weights_finite(*modules):
            return "some weights are not finite (NaN or inf)"
        return None

    def saved(self, step: int) -> None:
        """Record that this process wrote the checkpoint of ``step``."""
        self.saved_steps.append(step)

    def stop(self, step: int, run_dir: str | Path) -> TrainingError:
        """Set aside the checkpoint of the diverged weights (module docstring); the error that ends the run."""
        from ragen_core.trainer.checkpoint import checkpoint_dir, latest_checkpoint

        note = ""
        newest = latest_checkpoint(run_dir)
        suspect = None if self.first_skipping_step is None else self.first_skipping_step - 1
        if newest is not None and newest[0] == suspect and suspect in self.saved_steps:
            aside = newest[1].with_name(newest[1].name + DIVERGED_SUFFIX)
            if not aside.exists():
                newest[1].rename(aside)
                note = f"{newest[1].name} holds the weights whose next step went non-finite, so it was renamed {aside.name}; "
                newest = latest_checkpoint(run_dir)
        if newest is not None:
            kept = f"{note}the last good checkpoint is {checkpoint_dir(run_dir, newest[0])}"
            hint = f"lower optim.lr and resume from it: ragen run --resume {shell_word(run_dir)} optim.lr=..."
        else:
            kept = f"{note}no good checkpoint was written"
            hint = "lower optim.lr and start again"
        if self.broken_at is not None:
            why = f"step {self.broken_at}'s update left weights that are not finite (NaN or inf)"
        else:
            why = (f"{self.in_a_row} optimiser steps in a row were skipped for a non-finite gradient norm "
                   f"(optim.max_skipped_steps={self.limit})")
        return TrainingError(f"training diverged at step {step}: {why}; {kept}", [hint])
