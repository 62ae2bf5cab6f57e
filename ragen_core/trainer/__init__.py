"""StarPO trainer: rollout -> diagnostics -> filter -> advantages -> update -> checkpoint.

Modules (importing this package is cheap; torch is imported only when training starts):

* :mod:`~ragen_core.trainer.config` -- :class:`RunConfig`, the validated ``ragen run`` config.
* :mod:`~ragen_core.trainer.trainer` -- :class:`Trainer` (``Trainer(config).train()``).
* :mod:`~ragen_core.trainer.batch` -- trajectories -> tensors over the exact sampled ids.
* :mod:`~ragen_core.trainer.selection` -- filter + keep mask -> a ``Selection`` (kept rows, weights).
* :mod:`~ragen_core.trainer.update` -- ``prepare`` (log-probs, values, advantages), ``update_critic``, ``update_actor``.
* :mod:`~ragen_core.trainer.checkpoint` -- HF model folders + ``trainer_state.pt``; exact resume (LoRA too).
* :mod:`~ragen_core.trainer.grad_analysis` -- per reward-std bucket gradient norms (spec 11).
* :mod:`~ragen_core.trainer.warmstart` -- format warm start on random legal actions (no oracle).
* :mod:`~ragen_core.trainer.loggers` -- JSONL / TensorBoard / W&B-offline hook loggers.
* :mod:`~ragen_core.trainer.metrics` -- episode metrics and early-stopping rules.
* :mod:`~ragen_core.trainer.setup` -- model/engine/runner construction and pre-flight checks.
* :mod:`~ragen_core.trainer.context` / :mod:`~ragen_core.trainer.losses` -- run-dir layout, loss maths.

Programmatic use::

    from ragen_core.config import load_config
    from ragen_core.trainer import RunConfig, Trainer

    config = load_config(RunConfig, ["exp.yaml"], ["env=bandit", "steps=10"])
    history = Trainer(config).train()          # list of per-step metric dicts
"""

from __future__ import annotations

from typing import Any

__all__ = ["RunConfig", "Trainer"]


def __getattr__(name: str) -> Any:
    if name == "RunConfig":
        from ragen_core.trainer.config import RunConfig

        return RunConfig
    if name == "Trainer":
        from ragen_core.trainer.trainer import Trainer

        return Trainer
    raise AttributeError(f"module 'ragen_core.trainer' has no attribute {name!r}")
