"""Lifecycle hooks (pluggy) for one-to-many observers: diagnostics, loggers, progress displays.

Only events where many plugins may listen are hooks; selecting *the* env or *the* algorithm
goes through the registry. Implementations may accept fewer arguments than the spec lists, so
hooks can grow new arguments without breaking plugins. Plugins import ``hookimpl`` from
``ragen_core`` and never import pluggy themselves.

Call order per training step: ``ragen_on_rollout_end`` -> (filter, update) ->
``ragen_on_update_end`` -> ``ragen_on_step_end`` -> ``ragen_on_checkpoint`` (when one is saved).
``ragen_on_train_start`` runs once before step 1, ``ragen_on_train_end`` once at the end (also
after an interrupt).
"""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT = "ragen"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def ragen_on_train_start(config: Any, run_dir: Any, context: Any) -> None:
    """Called once before the first step.

    Args:
        config: The resolved, validated run config (pydantic model).
        run_dir: ``pathlib.Path`` of the run directory.
        context: The trainer's :class:`ragen_core.trainer.context.TrainContext` (model, tokenizer, engine).
    """


@hookspec
def ragen_on_rollout_end(trajectories: Any, step: int, context: Any) -> dict[str, float] | None:
    """Called after the rollout phase, before filtering, with the *unfiltered* batch.

    Args:
        trajectories: ``list[ragen_core.rollout.types.Trajectory]``; treat as read-only.
        step: 1-based training step.
        context: The trainer context (current policy model, tokenizer, config).

    Returns:
        Metrics to log this step, or ``None``.
    """


@hookspec
def ragen_on_update_end(stats: dict[str, float], step: int, context: Any) -> None:
    """Called after the optimiser steps of a training step with the update statistics."""


@hookspec
def ragen_on_step_end(metrics: dict[str, float], step: int, context: Any) -> None:
    """Called at the end of every step with all metrics of that step (loggers live here)."""


@hookspec
def ragen_on_checkpoint(path: Any, step: int, context: Any) -> None:
    """Called after a checkpoint was written to ``path``."""


@hookspec
def ragen_on_train_end(run_dir: Any, context: Any) -> None:
    """Called once when training ends, normally or by interrupt."""


def make_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with RAGEN's hookspecs. Observers are registered by the trainer."""
    import sys

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(sys.modules[__name__])
    return pm
