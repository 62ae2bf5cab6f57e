"""Lifecycle hooks (pluggy) for one-to-many observers: diagnostics, loggers, progress displays.

Only events where many plugins may listen are hooks; selecting *the* env or *the* algorithm
goes through the registry. Implementations may accept fewer arguments than the spec lists, so
hooks can grow new arguments without breaking plugins. Plugins import ``hookimpl`` from
``ragen_core`` and never import pluggy themselves.

Call order per training step: ``ragen_on_rollout_end`` -> (filter, update) ->
``ragen_on_update_end`` -> ``ragen_on_step_end`` -> ``ragen_on_checkpoint`` (when one is saved).
``ragen_on_train_start`` runs once before step 1, ``ragen_on_train_end`` once at the end (also
after an interrupt).

One hook is for the command line: ``ragen_register_commands`` lets a distribution add ``ragen``
subcommands (``ragen diagnose`` comes from ``ragen-diagnostics`` this way).
"""

from __future__ import annotations

from typing import Any

import pluggy

from ragen_core.errors import PluginError, RagenError

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
        Metrics to log this step, named ``family/metric``, or ``None``. A key the run logs
        itself (``actor/entropy``) is not logged: the run's value stays; nor is a key another
        observer returned first (of two in one step, the one listed first in ``diagnostics``).
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


@hookspec
def ragen_register_commands(subparsers: Any) -> None:
    """Add ``ragen`` subcommands; implemented by a command plugin's module.

    A distribution names each command it adds in the entry-point group ``ragen_core.commands``,
    command name -> module (``diagnose = "ragen_diagnostics.cli"``). ``ragen --help`` lists those
    names from metadata alone; only when one of them runs does the CLI import that one module,
    register it and call this hook on it, so a broken command plugin breaks only its own
    commands (with a one-line error naming it and its distribution).

    Args:
        subparsers: The ``argparse`` subparsers action of the ``ragen`` parser. Add each command
            the module's entry points name with ``subparsers.add_parser(name, help=...,
            description=...)``, then its arguments, then ``set_defaults(func=run)``, where
            ``run(args) -> int`` runs the command and returns its exit status (raise
            :class:`ragen_core.errors.RagenError` for a user's mistake: one line, status 2).
    """


def make_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with RAGEN's hookspecs. Observers are registered by the trainer."""
    import sys

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(sys.modules[__name__])
    return pm


def call_hook(pm: pluggy.PluginManager, name: str, **kwargs: Any) -> Any:
    """``pm.hook.<name>(**kwargs)``, with an observer's exception turned into a one-line
    :class:`~ragen_core.errors.PluginError` naming that observer (found from the traceback)."""
    from ragen_core.registry import plugin_label

    hook = getattr(pm.hook, name)
    try:
        return hook(**kwargs)
    except RagenError:
        raise
    except Exception as exc:
        owners = {getattr(impl.function, "__code__", None): impl.plugin for impl in hook.get_hookimpls()}
        tb, owner = exc.__traceback__, None
        while tb is not None and owner is None:
            owner = owners.get(tb.tb_frame.f_code)
            tb = tb.tb_next
        raise _raised_in(plugin_label(owner) if owner is not None else "an observer", name, exc) from exc


def _raised_in(label: str, name: str, exc: Exception) -> PluginError:
    """The one-line :class:`~ragen_core.errors.PluginError` of observer ``label`` raising ``exc`` in hook ``name``."""
    return PluginError(f"{label} raised in {name}: {type(exc).__name__}: {exc}",
                       ["fix the plugin, or run without it; 'ragen -v ...' shows its traceback"])


METRIC_KEY_RULE = "a metric is named 'family/metric' (e.g. 'mine/mi')"
"""What :func:`is_metric_key` asks of the keys ``ragen_on_rollout_end`` returns, in words."""


#: Metric families the run logs itself (``actor/pg_loss``, ``critic/vf_loss``, ``train/success``, the filter's
#: ``rollout/...``), some only on some steps (``val-env/`` on validation steps, ``grad_norm/`` on analysis
#: steps, ``early_stopped/`` at a stop, none of the update's on a step the filter left empty): a plugin's
#: metric in one is not logged, from the first step on (it was, until the run's own key first appeared).
#: Here rather than in the trainer so that ``check_diagnostic`` reads them without importing torch.
CORE_FAMILIES = ("actor/", "critic/", "rollout/", "train/", "val-env/", "response_length/", "grad_norm/", "grad_norm_prefilter/",
                 "grad_analysis/", "trainer/", "warm_start/", "early_stopped/", "diverged/")

#: The run's own ``timing_s/`` keys, logged on every step or only on some (``testing``, ``grad_analysis``). The
#: family is shared: a diagnostic may time itself (``timing_s/collapse_first_turn_step``).
CORE_TIMINGS = tuple(f"timing_s/{phase}" for phase in ("gen", "collapse_metrics", "filter", "old_log_prob", "ref", "values", "adv",
                                                      "update_critic", "grad_analysis", "update_actor", "testing", "step", "total"))


def is_core_metric(key: str) -> bool:
    """Whether ``key`` is in one of the run's own families (:data:`CORE_FAMILIES`) or is one of its timings
    (:data:`CORE_TIMINGS`): a plugin's metric of that name is not logged."""
    return key.startswith(CORE_FAMILIES) or key in CORE_TIMINGS


def is_metric_key(key: object) -> bool:
    """Whether ``key`` names a metric as the hook's dict must (:data:`METRIC_KEY_RULE`): a string
    ``family/metric``, both parts non-empty. A key without a family can clash with the run's own
    (``step`` overwrote the step of the metrics.jsonl row); the run and ``check_diagnostic`` both
    ask this of every key."""
    if not isinstance(key, str):
        return False
    family, sep, metric = key.partition("/")
    return bool(family and sep and metric)


def hook_metrics(pm: pluggy.PluginManager, name: str, **kwargs: Any) -> list[tuple[str, dict[str, Any]]]:
    """Call hook ``name`` (one returning ``dict[str, float] | None``) on each observer in pluggy's
    order and return ``(observer label, its dict)`` pairs, so a bad return value can be named by
    its observer: one that returns something else than a dict (or None) is a one-line
    :class:`~ragen_core.errors.PluginError`. An observer's exception is named as :func:`call_hook` does.
    With a hook wrapper among the observers the calls go through pluggy (labels are then "an observer")."""
    from ragen_core.registry import plugin_label

    hook = getattr(pm.hook, name)
    impls = hook.get_hookimpls()
    if any(getattr(impl, "hookwrapper", False) or getattr(impl, "wrapper", False) for impl in impls):
        pairs = [("an observer", result) for result in call_hook(pm, name, **kwargs)]
    else:
        pairs = []
        for impl in reversed(impls):  # pluggy's order: the newest registered first
            try:
                given = {arg: kwargs[arg] for arg in impl.argnames}  # and arguments with a default, as pluggy passes them
                given.update({arg: kwargs[arg] for arg in getattr(impl, "kwargnames", ()) if arg in kwargs})
                result = impl.function(**given)
            except RagenError:
                raise
            except Exception as exc:
                raise _raised_in(plugin_label(impl.plugin), name, exc) from exc
            if result is not None:
                pairs.append((plugin_label(impl.plugin), result))
    for label, result in pairs:
        if not isinstance(result, dict):
            raise PluginError(f"{label} returned a {type(result).__name__} from {name}: it must return a dict of metric names "
                              "to numbers, or None", ["fix the plugin, or run without it"])
    return pairs

