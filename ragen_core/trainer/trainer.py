"""The StarPO training loop (spec 1.3, 7, 8, 9.5-9.7, 12).

One step is a chain of values, each made by a plain function from the one before
(:meth:`Trainer.train_step` reads in this order)::

    trajectories = runner.run(...)                         # rollout (engine + env pool)
        -> ragen_on_rollout_end hooks                      # diagnostics see the unfiltered rollout
    batch       = build_batch(trajectories, ...)           # tokens, masks, rewards  (batch.py)
    selection   = select(batch, filter, algorithm)         # kept groups, rows, weights, ratio  (selection.py)
        -> empty: count the streak, maybe stop, validate; no update
        -> compat.batch_adjust: copy or delete random kept rows to a batch multiple (spec 7.3, L8; off by default)
    prepared    = prepare(batch.select(selection.rows), ...)   # old/ref log-probs, values, advantages  (update.py)
    update_critic(prepared, ...)                           # when the algorithm has a critic
        -> gradient analysis when due (grad_analysis.py, spec 11)
    update_actor(prepared, ...)                            # epochs x mini-batches x micro-batches, clip, step
    engine.sync_weights(model.state_dict(), version)       # the engine samples the new policy
        -> validation every test_freq, checkpoint every save_freq, ragen_on_step_end

The trainer object holds only what lives across steps: the model, optimisers, plugins, engine
and runners, and the counters a resume restores (step, policy version, empty-filter streak,
early-stop history). Nothing of one step is kept on it for the next. ``with Trainer(config) as
trainer:`` closes its engine when the block ends (:meth:`Trainer.shutdown`); ``ragen run`` trains so.

The first Ctrl-C finishes the current step, saves a checkpoint and returns; a second one aborts
immediately. Metrics of a step are logged only after the step completed, so a killed run
loses at most the steps since its last checkpoint (``--resume`` truncates ``metrics.jsonl``).

A step that skips optimiser steps (non-finite gradient norm) says so on stderr; past
``optim.max_skipped_steps`` in a row the run stops with a :class:`~ragen_core.errors.TrainingError`,
and a state reached while skipping, or with non-finite weights, is never checkpointed
(:mod:`ragen_core.trainer.divergence`). A run that makes no progress (no step, checkpoint or
rollout turn) for ``watchdog_s`` is ended by :mod:`ragen_core.trainer.watchdog` with every
thread's stack dumped; env steps slower than ``rollout.pool_config.step_timeout_s`` end their
episode instead, and the step says so.

Launched by ``torchrun`` the same loop is data-parallel (:mod:`ragen_core.trainer.distributed`):
each rank rolls out its share of the groups, every rank holds the gathered global batch, rank 0's
selection is every rank's, the update's gradients are summed over ranks, and only rank 0 writes
the run folder, logs and checkpoints and runs validation.

With ``rollout.async_rollout`` the rollout of step t+1 runs in a background thread on a behaviour
copy of the policy while step t updates (:mod:`ragen_core.trainer.async_rollout`): each step
*takes* the rollout the previous one started, starts the next, then trains one version
off-policy against the behaviour log-probs that came with the episodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ragen_core.config import short_repr
from ragen_core.errors import shell_word
from ragen_core.hookspecs import CORE_FAMILIES, CORE_TIMINGS, METRIC_KEY_RULE, call_hook, hook_metrics, is_metric_key
from ragen_core.interfaces.algorithm import check_agg_kwargs, check_metric_names
from ragen_core.interfaces.env_pool import LOST_END_REASONS
from ragen_core.rollout.chat import turn_start_id
from ragen_core.seeding import make_rng
from ragen_core.trainer.async_rollout import AsyncRollout, PolicyCopy, policy_lag
from ragen_core.trainer.batch import TrainBatch, adjust_batch, batch_divisor, build_batch, check_retokenized_template, per_turn_rows
from ragen_core.trainer.checkpoint import STATE_FILE, CheckpointMixin
from ragen_core.trainer.config import RunConfig, check_plugin_configs, check_run_available, run_warnings
from ragen_core.trainer.context import TrainContext
from ragen_core.trainer.distributed import World, rank_lost, rollout_share
from ragen_core.trainer.divergence import DIVERGED, SkipMonitor, report, weights_finite
from ragen_core.trainer.metrics import EarlyStopper, episode_metrics, is_number
from ragen_core.trainer.selection import mean_entropies, select
from ragen_core.trainer.update import PreparedBatch, prepare, update_actor, update_critic
from ragen_core.trainer.watchdog import Watchdog, report_pool_failures

#: Seconds an async rollout in flight is given to end once its env pool is closed under it (a
#: process or Ray pool ends it at once; an in-process env stuck in a step never does).
IN_FLIGHT_WAIT_S = 30.0


def _check_marked(label: str, plugin: Any) -> None:
    """Refuse an observer that defines a hook's method without ``@hookimpl``: pluggy ignores it, so
    it would never be called (a diagnostic ran with no metric and no word).

    Raises:
        PluginLoadError: naming the observer and the method.
    """
    from ragen_core import hookspecs
    from ragen_core.errors import PluginLoadError

    for hook in (name for name in dir(hookspecs) if name.startswith("ragen_on_")):
        method = getattr(type(plugin), hook, None)
        if callable(method) and not hasattr(method, f"{hookspecs.PROJECT}_impl"):
            raise PluginLoadError(f"{label}: its method {hook} has no @hookimpl, so it would never be called",
                                  ["decorate it: from ragen_core import hookimpl, then @hookimpl above the method"])


class Trainer(CheckpointMixin):
    """Train one policy on one env with one algorithm.

    Args:
        config: The run config: a :class:`RunConfig`, or a dict of its settings (validated here).
        resume: Continue from the newest intact checkpoint of ``config.run_dir``.
        overwrite: A fresh run into a ``config.run_dir`` that holds a run first removes that run's
            files (without it, a non-empty folder is refused; see :mod:`ragen_core.trainer.run_dir`).
        world: The ranks of a data-parallel run; default: the ``torchrun`` environment
            (:func:`ragen_core.trainer.distributed.from_env`), one process without it.
    """

    def __init__(self, config: RunConfig | Mapping[str, Any], *, resume: bool = False, overwrite: bool = False,
                 world: World | None = None) -> None:
        from ragen_core.config import validate
        from ragen_core.errors import ConfigError, UsageError
        from ragen_core.trainer.distributed import check_supported, from_env
        from ragen_core.trainer.run_dir import default_run_dir

        if isinstance(config, Mapping):  # Trainer({"env": "bandit", "steps": 30}): validated as the CLI validates a --config file
            config = validate(RunConfig, dict(config))
        elif not isinstance(config, RunConfig):
            raise UsageError(f"Trainer takes a RunConfig or a dict of its settings, not {type(config).__name__}")
        if resume and (overwrite or not config.run_dir):
            raise ConfigError("resume needs the run directory (config.run_dir) and cannot be combined with overwrite")
        self.config = config
        self.world = world if world is not None else from_env(config.device)
        """This process's rank among the run's ranks (:data:`~ragen_core.trainer.distributed.ONE` without torchrun)."""
        # refused before a default run folder is created (a refused run leaves nothing behind)
        check_plugin_configs(config)  # every plugin's settings, from specs only: a typo fails before the run folder or a model
        self._warnings = check_run_available(config)  # no Lean toolchain, no vllm, a Ray address that does not answer: before any work
        check_supported(config, self.world)
        self._made_run_dir = not (config.run_dir and Path(config.run_dir).exists())
        """This run creates its folder (removed again when a fresh run's set-up fails leaving it empty)."""
        self._default_dir = not config.run_dir
        """The folder is the default one chosen here (rank 0's choice), created when set-up starts."""
        if config.run_dir:
            self.run_dir = Path(config.run_dir)
        else:
            self.run_dir = Path(self.world.broadcast(str(default_run_dir(config)) if self.world.main else None))
        self.resume = resume
        self.overwrite = overwrite
        self.start_step = 1
        self.stop_reason: str | None = None
        self._interrupts = 0
        self.interrupted_by: int | None = None
        """The signal (SIGINT, SIGTERM) that ended training early, else None."""
        self._updating = False
        """True from the first weight change of a step until it ends (its weights are then no step's)."""
        self._in_update = False
        """True while a step's critic / actor update runs (a second interrupt then waits for its end)."""
        self._said_not_numbers: set[tuple[str, str]] = set()
        """(observer, metric key) pairs whose key, non-number value or clash with the run's own metric was reported (once each)."""
        self._plugin_metrics: list[tuple[str, str, float]] = []
        """This step's ``(observer, key, value)`` metrics from ``ragen_on_rollout_end`` (in the order ``diagnostics``
        lists the observers), added to its row at its end."""
        self._plugin_metric_owners: dict[str, str] = {}
        """Metric key -> the observer whose value of it is logged: the first to return it (two returning one key
        in one step: the one listed first); another observer's value of that key is said once and not logged."""
        self._core_metric_keys: set[str] = set(CORE_TIMINGS)
        """Keys the run logs itself: a plugin's metric of that name is not logged over (or under) it. Besides these
        (its timings from the start, every other key it has logged), every key of :data:`CORE_FAMILIES` is the
        run's from the start: a family may first appear late (``val-env/`` at the first validation), and a
        plugin's key would pass for the run's until then."""
        self._abort_pending = False
        """A second interrupt came during an update: the step skips its validation and is saved as the last."""
        self._validating: tuple[int, dict[str, float], dict[str, Any]] | None = None
        """While a step's validation runs: the step, its metrics and the resume point after its
        update (a validation that fails then checkpoints the step, whose update had finished)."""
        self._built = False
        self._shut = False
        self._trained = False
        self.history: list[dict[str, float]] = []
        self._bar: Any = None
        """The progress bar while :meth:`train` runs (None without one)."""
        self._dir_lock: Any = None
        """The :class:`~ragen_core.trainer.run_dir.RunDirLock` held from set-up to the end of training (rank 0)."""

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Build model, plugins, engine and runners; run the pre-flight checks.

        A fresh run whose set-up fails before it wrote anything (a model that does not load, an env
        that cannot reset during the warm start) removes the run folder it created, then empty.
        """
        if self._built:
            return
        try:
            self._setup()
        except BaseException as exc:
            ours = self._dir_lock is not None  # a run refused by another's lock on the folder must not remove it:
            self._unlock()  # both saw it missing, and the other, about to write there, lost its folder
            if not self.resume and self.world.main and self._made_run_dir and ours:
                with contextlib.suppress(OSError):  # not empty, or gone: leave it as it is
                    self.run_dir.rmdir()
            if isinstance(exc, KeyboardInterrupt) and self.world.main:
                report(self._interrupted_setup_line())
            raise

    def _interrupted_setup_line(self) -> str:
        """What a Ctrl-C / SIGTERM during set-up (a model load, a warm start) left behind."""
        head = "interrupted during set-up, before step 1: nothing was trained"
        rounds = self._saved_warm_start_rounds()
        if rounds is not None:
            head += f" (the warm start's finished rounds are kept in {rounds}: the next run of these settings resumes after them)"
        if self.resume:
            return f"{head}; {self.run_dir} is as it was (--resume {shell_word(self.run_dir)} continues from its checkpoint)"
        if not self.run_dir.is_dir() or not any(self.run_dir.iterdir()):
            return f"{head} and nothing was written: the same command starts again"
        return f"{head}; {self.run_dir} holds no checkpoint: start again with --overwrite or another --run-dir"

    def _saved_warm_start_rounds(self) -> Path | None:
        """The folder holding an interrupted warm start's finished rounds for this run's settings, if any."""
        from ragen_core.trainer import warmstart

        try:
            folder = warmstart.cache_folder(self.config)
        except Exception:  # noqa: BLE001 - only a note in an interruption message
            return None
        rounds = warmstart.rounds_folder(folder)
        return rounds if rounds.is_dir() else None

    def _setup(self) -> None:
        import torch

        from ragen_core import registry
        from ragen_core.hookspecs import make_plugin_manager
        from ragen_core.trainer import grad_analysis as gan
        from ragen_core.trainer import setup as su
        from ragen_core.trainer.checkpoint import load_state, resume_checkpoint, written_by_ragen
        from ragen_core.trainer.loggers import make_loggers, truncate_metrics
        from ragen_core.trainer.run_dir import (
            RunDirLock,
            claim_run_dir,
            read_run_config,
            record_resume_changes,
            remove_rollouts_after,
            resume_changes,
            write_run_config,
        )

        cfg = self.config
        world = self.world
        if world.parallel and cfg.distributed.strategy == "fsdp":
            world = self.world = dataclasses.replace(world, sharded=True)
        for warning in [*run_warnings(cfg), *self._warnings] if world.main else []:
            print(f"warning: {warning}", file=sys.stderr)
        changes: dict[str, list[Any]] = {}
        # this machine's device: a device=cuda on a CPU machine is refused before --overwrite removes anything
        self.device = world.device if world.device.startswith("cuda") else su.resolve_device(cfg.device)
        if world.main and self._default_dir:
            try:
                self.run_dir.mkdir(parents=True)
            except FileExistsError:  # a name free when the Trainer chose it (a random suffix): another run's now
                from ragen_core.errors import ConfigError

                raise ConfigError(f"run directory {self.run_dir} was created by another run after this Trainer chose it",
                                  ["build the Trainer again (it picks a new name), or pass run_dir"]) from None
        if world.main and self.run_dir.is_dir():  # before a checkpoint is read or --overwrite removes anything
            self._dir_lock = RunDirLock(self.run_dir)
        if self.resume:  # every rank reads the checkpoint; rank 0's weights are sent to all below anyway
            changes = resume_changes(read_run_config(self.run_dir), cfg)
            ckpt = resume_checkpoint(self.run_dir, log=print if world.main else _quiet)  # the newest intact one with its metrics
            state = load_state(ckpt[1])  # plain data only, read before anything else is built
            if int(state["step"]) != ckpt[0]:  # another run's checkpoint put (or linked) there: metrics would jump
                from ragen_core.errors import CheckpointError

                raise CheckpointError(f"checkpoints/{ckpt[1].name}/{STATE_FILE} holds step {int(state['step'])}, not {ckpt[0]}: "
                                      "the folder holds another step's (or another run's) checkpoint",
                                      [f"restore checkpoints/{ckpt[1].name} from this run, or remove it to resume from an older one"])
        else:
            ckpt = None
            if world.main:
                claim_run_dir(self.run_dir, overwrite=self.overwrite)  # a fresh run starts in an empty folder
                self._dir_lock = self._dir_lock or RunDirLock(self.run_dir)
        torch.manual_seed(cfg.seed)
        self.algorithm = registry.make("algorithm", cfg.algo, cfg.algo_config, preset=cfg.algo_preset)
        check_agg_kwargs(self.algorithm)
        check_metric_names(self.algorithm)
        acfg = self.algorithm.config
        self.estimator = registry.make("estimator", acfg.estimator, acfg.estimator_config, preset=acfg.estimator_preset)
        self.filter = registry.make("filter", cfg.filter, cfg.filter_config, preset=cfg.filter_preset)
        self.needs_critic = bool(acfg.use_critic or self.estimator.needs_critic)
        self.needs_ref = bool(acfg.use_kl_loss or acfg.use_kl_in_reward)
        model_path, lora_src = su.model_source(cfg, self.run_dir, ckpt[1] if ckpt else None)
        lora = cfg.optim.lora
        self.model, self.tokenizer = su.load_policy(model_path, device=self.device, safetensors_only=written_by_ragen(model_path), lora=lora,
                                                    float32=cfg.optim.float32_weights)
        su.check_lora_targets(cfg, self.model)  # before a warm start or lora_base/ in the run folder
        su.preflight(cfg, self.model, self.tokenizer, needs_critic=self.needs_critic, needs_ref=self.needs_ref, device=self.device,
                     lora=lora)
        self.turn_start: int | None = turn_start_id(self.tokenizer) if cfg.compat.shifted_mask else None
        """The chat template's turn-start token with ``compat.shifted_mask`` (the reference's mask), else None."""
        if cfg.compat.retokenized_text:  # a template it cannot use fails now, not at the first batch
            check_retokenized_template(self.tokenizer)
        self.warm_start_meta: dict[str, Any] = {}
        """The warm start's record (``valid_rate``, rounds, ...) when this run made or loaded one."""
        if ckpt is None and self._warm_start_enabled() and world.main:  # the other ranks receive its weights below
            from ragen_core.trainer.warmstart import warm_start

            self.model = warm_start(cfg, self.model, self.tokenizer, device=self.device)
            self.warm_start_meta = dict(getattr(self.model, "ragen_warm_start", None) or {})
            if self.warm_start_meta:  # what this run started from, a missed gate included (on_gate_miss=continue)
                (self.run_dir / "warm_start.json").write_text(json.dumps(self.warm_start_meta, indent=1), encoding="utf-8")
        self.model, self._lora_base = su.wrap_lora(cfg, self.model, self.tokenizer, self.run_dir, lora_src, fresh_base=ckpt is None,
                                                   write=world.main)
        world.sync_module(self.model)  # every rank starts from rank 0's weights (as DDP's constructor does)
        self.model.eval()  # no dropout: the PPO ratio starts at exactly 1
        self.policy_copy: PolicyCopy | None = None
        """FSDP: the whole, unsharded policy on every rank: the engine samples it, checkpoints write it."""
        if world.sharded:
            from ragen_core.trainer import prefix
            from ragen_core.trainer.distributed import shard

            self.policy_copy = PolicyCopy(self.model)
            shard(self.model)
            prefix.ENABLED = False  # shared prompts make data-dependent forward calls: ranks would fall out of step
        params = [p for p in self.model.parameters() if p.requires_grad]
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(params, lr=o.lr, betas=o.betas, weight_decay=o.weight_decay)
        self.critic = self.critic_optimizer = None
        if self.needs_critic:
            from ragen_core.trainer.modeling import build_critic

            self.critic = build_critic(self.unsharded_policy, float32=cfg.optim.float32_weights).to(self.device)
            world.sync_module(self.critic)
            self.critic.eval()
            if world.sharded:
                from ragen_core.trainer.distributed import shard

                shard(self.critic)
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=o.critic_lr, betas=o.betas, weight_decay=o.weight_decay)
        self.ref_model = None
        if self.needs_ref and not hasattr(self.model, "disable_adapter"):
            import copy

            self.ref_model = copy.deepcopy(self.unsharded_policy).requires_grad_(False).eval()
        self.overlap: AsyncRollout | None = None
        """The behaviour copy and the rollout in flight (``rollout.async_rollout``), else None."""
        if cfg.rollout.async_rollout:
            self.overlap = AsyncRollout(self.model, self._collect, lambda: self.runner.state_dict())
        self.engine = su.make_engine(cfg, self.overlap.behaviour if self.overlap is not None else self.unsharded_policy, self.tokenizer)
        self.runner = su.make_runner(cfg, self.engine, self.tokenizer, "train")
        validates = cfg.test_freq > 0 or cfg.val_before_train
        self.val_runner = su.make_runner(cfg, self.engine, self.tokenizer, "val", pool=self.runner.pool) if validates else None
        self.analysis_rollout = None
        if cfg.grad_analysis.every > 0 and gan.uses_separate_rollout(cfg):
            self.analysis_rollout = gan.AnalysisRollout(cfg, self.engine, self.tokenizer, pool=self.runner.pool)
        self.watchdog = Watchdog(cfg.watchdog_s, self.run_dir if world.main else self.run_dir / f"rank{world.rank}")
        """Ends a run that makes no progress for ``watchdog_s`` (steps and every rollout turn count)."""
        for runner in (self.runner, self.val_runner, getattr(self.analysis_rollout, "runner", None)):
            if runner is not None:
                runner.progress = self._beat
        self.train_sampling = cfg.sampling.train
        self.val_sampling = cfg.sampling.val
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        self.empty_streak = 0
        self.empty_causes: list[str] = []
        """What emptied each step of the current :attr:`empty_streak` run in this process (the filter, the env
        pool, the keep mask, ``compat.batch_adjust=delete``), in words; ``ragen run`` names them when the run
        stopped without an update. A resumed streak's earlier steps are not in it."""
        self.policy_version = 0
        """Actor updates so far: the version the engine samples (``Generation.policy_version``)."""
        self.stopper = EarlyStopper(cfg.early_stop.reward_variance_collapse, cfg.early_stop.low_val_success, cfg.early_stop.low_val_success_patience,
                                    empty_stop_steps=self.filter.config.empty_stop_steps)
        self.skips = SkipMonitor(cfg.optim.max_skipped_steps, cfg.optim.ppo_epochs)
        """Skipped optimiser steps in a row: reported, and the run stops past ``optim.max_skipped_steps``."""
        self.timing_totals: dict[str, float] = {}
        if ckpt is not None:
            self._restore(state)
            if world.main:
                tidied = truncate_metrics(self.run_dir / "metrics.jsonl", self.start_step - 1)
                if tidied:
                    print(f"resume: metrics.jsonl: {tidied}; the file now holds one row per step")
                removed = remove_rollouts_after(self.run_dir, self.start_step - 1, ckpt[1].name)  # their steps run again
                if removed:
                    print(removed)
                done = self.start_step - 1
                if done >= cfg.steps:  # config.yaml keeps the settings its steps ran with; nothing is recorded
                    unused = f" (settings not applied: {', '.join(changes)})" if changes else ""
                    print(f"resume: the run is at step {done} of steps={cfg.steps}: nothing to train "
                          f"(pass --steps N with N > {done} to train further){unused}")
                else:
                    print(f"resume: from checkpoints/{ckpt[1].name}, training steps {done + 1}..{cfg.steps}")
                    note = record_resume_changes(self.run_dir, changes, done + 1)
                    if note:
                        print(note)
            if self.overlap is not None:
                self.overlap.sync(self.model, self.policy_version, self.engine)
            else:
                self._sync_engine()
        self.context = TrainContext(config=cfg, run_dir=self.run_dir, model=self.unsharded_policy, tokenizer=self.tokenizer, engine=self.engine,
                                    device=self.device)
        self.pm = make_plugin_manager()  # the other ranks observe nothing: no loggers, no diagnostics
        diagnostics = {}
        for name in cfg.diagnostics if world.main else []:
            diag = diagnostics[name] = registry.make("diagnostic", name, cfg.diagnostics_config.get(name))
            _check_marked(f"diagnostic-{name}", diag)  # before the run folder is written: a refused one leaves no folder behind
            if ckpt is not None and hasattr(diag, "load_state_dict") and name in self._diag_states:
                diag.load_state_dict(self._diag_states[name])
        if world.main and (ckpt is None or self.start_step <= cfg.steps):
            write_run_config(self.run_dir, cfg.model_copy(update={"run_dir": str(self.run_dir)}), fresh=ckpt is None)
            self._write_plugins_json()
        for i, logger in enumerate(make_loggers(list(cfg.loggers), self.run_dir, cfg) if world.main else []):
            self.pm.register(logger, name=f"logger-{i}")
        for name, diag in diagnostics.items():  # after the loggers: pluggy calls the last registered first
            self.pm.register(diag, name=f"diagnostic-{name}")
        self._check_hooks()
        self._built = True

    def _check_hooks(self) -> None:
        """Refuse observers whose ``ragen_*`` methods match no hookspec (a typo would never fire)."""
        import pluggy

        from ragen_core.errors import PluginLoadError

        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginLoadError(
                f"a logger or diagnostic implements a hook that RAGEN does not define: {exc}",
                ["hook names are listed in ragen_core/hookspecs.py (ragen_on_rollout_end, ragen_on_step_end, ...)"],
            ) from None

    def _warm_start_enabled(self) -> bool:
        ws = self.config.warm_start.enabled
        return bool(ws) if ws != "auto" else self.config.model in ("tiny", "tiny-qwen-tok")

    def _write_plugins_json(self) -> None:
        """``plugins.json`` (every plugin the run uses: name, distribution, version) and
        ``versions.json`` (Python, torch, transformers, ragen-core and the checkout's commit)."""
        from ragen_core import registry
        from ragen_core.distributions import software_versions
        from ragen_core.trainer.run_dir import record_versions

        cfg = self.config
        rows = []
        for kind, name in [("env", cfg.env), ("algorithm", cfg.algo), ("estimator", self.algorithm.config.estimator),
                           ("filter", cfg.filter), ("engine", cfg.engine), ("pool", cfg.rollout.pool)] + \
                [("diagnostic", d) for d in cfg.diagnostics]:
            try:
                entry = registry.find(kind, name)
                rows.append({"kind": kind, "name": entry.name, "dist": entry.dist_name, "version": entry.dist_version})
            except Exception:  # noqa: BLE001 - informational file only
                rows.append({"kind": kind, "name": name, "dist": "?", "version": "?"})
        (self.run_dir / "plugins.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
        record_versions(self.run_dir / "versions.json", software_versions(), self.start_step)

    # ------------------------------------------------------------------ loop
    def train(self) -> list[dict[str, float]]:
        """Run to ``config.steps`` (or an early stop / Ctrl-C); returns this call's per-step metrics,
        one row per step with its ``"step"`` as in metrics.jsonl. Once
        per Trainer: a second call is refused (it trained from step 1 again, appending the same
        steps to metrics.jsonl); continue with ``Trainer(config, resume=True)``."""
        self._check_open()
        if self._trained:
            from ragen_core.errors import RagenError

            raise RagenError(f"this Trainer has trained already (to step {self.start_step - 1 + len(self.history)}): a Trainer "
                             "trains once", [f"to go further, Trainer(config with more steps, resume=True) continues from "
                                             f"{self.run_dir}'s newest checkpoint"])
        self._trained = True
        self.setup()
        self.versions_at_start = self.policy_version
        """:attr:`policy_version` when this call began: the updates it made are the difference."""
        cfg = self.config
        call_hook(self.pm, "ragen_on_train_start", config=cfg, run_dir=self.run_dir, context=self.context)
        old_handler = self._install_sigint()
        nothing_left = self.start_step > cfg.steps  # a resume of a run that is already there
        bar = self._bar = None if nothing_left else self._progress()
        above = contextlib.ExitStack()
        if bar is not None:
            above.enter_context(_LogAboveBar.installed())
        t_start = time.perf_counter()
        step = self.start_step - 1
        failed = True  # until the loop ends without an exception
        raised: BaseException | None = None
        try:
            self.watchdog.start()
            if cfg.val_before_train and self.start_step == 1 and self.val_runner is not None:
                pre = self.validate(0)
                call_hook(self.pm, "ragen_on_step_end", metrics=pre, step=0, context=self.context)
            # the step in progress, the newest checkpoint's step and the step's resume point (read by the watchdog's rescue too)
            where: dict[str, Any] = {"step": self.start_step, "saved": self.start_step - 1, "at": None}
            self.watchdog.rescue = lambda: self._save_after_error(where["step"], where["saved"], where["at"], "stalled")
            for step in range(self.start_step, cfg.steps + 1):
                self.context.step = step
                self._updating = self._in_update = False
                self._validating = None
                where["step"], where["at"] = step, self.resume_point() if self.world.main else None
                try:
                    metrics = self.train_step(step)
                except Exception as exc:
                    self._save_after_error(step, where["saved"], where["at"])
                    lost = rank_lost(self.world, exc)
                    if lost is not None:  # a raw backend error from FSDP's own collectives: one line too
                        raise lost from exc
                    raise
                except KeyboardInterrupt:  # a second Ctrl-C / SIGTERM aborts the step: keep the steps before it
                    stuck = next((r.waiting_on for r in (self.runner, self.val_runner) if r is not None and r.waiting_on), None)
                    if stuck and self.overlap is None and self.world.main:  # (an async rollout's is said when it is closed)
                        report(f"step {step} was aborted in {stuck}")  # the env that hung, for one
                    self._save_after_error(step, where["saved"], where["at"], "aborted")
                    raise
                self._agree_on_interrupts()
                self.timing_totals["total"] = time.perf_counter() - t_start
                metrics["timing_s/total"] = self.timing_totals["total"]
                self.history.append({"step": step, **metrics})
                call_hook(self.pm, "ragen_on_step_end", metrics=metrics, step=step, context=self.context)
                self.watchdog.beat(f"the end of step {step}")
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(_step_summary(metrics))
                last = step == cfg.steps or self.stop_reason is not None or self._interrupts > 0
                exited = self.stop_reason == "trainer/exited_after_gradient_analysis"
                # after logging: a checkpointed step always has its metrics line
                save_now = self.world.main and self._should_save(step, last) and not exited
                if self.policy_copy is None:
                    save_now = save_now and self._good_to_save(step)
                else:  # FSDP: checking the sharded critic and gathering the state are collectives: on every rank
                    save_now = bool(self.world.broadcast(save_now)) and self._good_to_save(step)
                    self._gathered = self._gather_sharded() if save_now else {}
                if save_now and self.world.main:
                    path = self.save(step)
                    self._gathered = {}
                    self.skips.saved(step)
                    where["saved"] = step
                    self.watchdog.beat(f"the checkpoint of step {step}")
                    call_hook(self.pm, "ragen_on_checkpoint", path=path, step=step, context=self.context)
                if self.stop_reason is not None or self._interrupts > 0:
                    break
            failed = False
        except BaseException as exc:
            raised = exc
            raise
        finally:
            self.watchdog.stop()
            if bar is not None:
                bar.close()
                self._bar = None
            above.close()
            if failed and self.world.main:
                self._say_if_nothing_saved(raised)
            for sig, previous in (old_handler or {}).items():
                if previous is not None:  # None: a handler not set from Python, which cannot be put back
                    signal.signal(sig, previous)
            try:
                call_hook(self.pm, "ragen_on_train_end", run_dir=self.run_dir, context=self.context)
            except Exception as exc:
                if not failed:
                    raise
                # training already failed: that error is the one to report; an observer failing at
                # the end too must neither hide it nor keep the pool (workers, services) open
                report(f"also: {str(exc).splitlines()[0]}")
            finally:
                self.close()
                self._unlock()
        if self.stop_reason == DIVERGED:
            raise self.skips.stop(step, self.run_dir)
        if self.stop_reason and self.world.main:
            why = self.stopper.explain(self.stop_reason)
            print(f"training stopped early at step {step}: {self.stop_reason}" + (f": {why}" if why else ""))
        return self.history

    def close(self) -> None:
        """Close the env pool the runners share (envs, worker processes, services; rebuilt on a
        later rollout) and end an async rollout in flight. :meth:`train` calls it when it ends.

        A rollout in flight (after an early stop, an error, a second Ctrl-C) is not trained on: its
        env pool is closed under it first, so it ends at once instead of running to its end (or
        never, in an env that hangs: a second SIGTERM then waited forever), then it is given
        :data:`IN_FLIGHT_WAIT_S` to notice; one the step stopped waiting for (a second Ctrl-C) is given
        :data:`~ragen_core.trainer.async_rollout.ABANDONED_GRACE_S`. One left behind is named by the call
        it is stuck in (env, reset or step, turn)."""
        if self.overlap is not None and (self.overlap.in_flight or self.overlap.abandoned):
            waited = self.overlap.in_flight
            self.runner.close()
            if not self.overlap.close(timeout_s=IN_FLIGHT_WAIT_S):
                where = self.runner.waiting_on or "an env that does not return"
                what = (f"the async rollout in flight did not end within {IN_FLIGHT_WAIT_S:g} s of its env pool closing" if waited
                        else "the async rollout the aborted step waited for did not end")
                report(f"{what}: left behind, stuck in {where}")
        self.runner.close()

    def shutdown(self) -> None:
        """:meth:`close`, then close the engine for good (vLLM's engine core and its GPU memory, the HF
        engine's kept caches): the trainer cannot roll out again, while its model, history and run
        folder stay readable. Leaving ``with Trainer(config) as trainer:`` calls it, also on an error;
        ``ragen run`` does. Idempotent."""
        if self._shut:
            return
        self._shut = True
        self._unlock()
        try:
            if self._built:
                self.close()
        finally:  # also an engine a failed setup() had already built (a started vLLM)
            engine = getattr(self, "engine", None)
            if engine is not None:
                engine.close()

    def _unlock(self) -> None:
        """Let another process train in this run folder (training is over, or set-up failed)."""
        lock, self._dir_lock = self._dir_lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _check_open(self) -> None:
        if self._shut:
            from ragen_core.errors import RagenError

            raise RagenError("this Trainer was shut down (its engine is closed)", hints=["build a new Trainer to train or validate again"])

    def _runner_state(self) -> Any:
        """The runner's checkpoint state; async: from before the rollout in flight (it is not in the checkpoint)."""
        if self.overlap is not None and self.overlap.unplayed_state is not None:
            return self.overlap.unplayed_state
        return super()._runner_state()

    @property
    def unsharded_policy(self) -> Any:
        """The policy as one whole module with the current weights: :attr:`model`, or with FSDP its
        unsharded copy (synced after every update) -- what the engine, observers and checkpoints use."""
        policy_copy = getattr(self, "policy_copy", None)  # set in setup()
        return policy_copy.model if policy_copy is not None else self.model

    def _gather_sharded(self) -> dict[str, Any]:
        """FSDP: the sharded state a checkpoint holds, gathered whole (on every rank; rank 0 writes it)."""
        from ragen_core.trainer.distributed import full_optimizer_state, full_state_dict

        out = {"optimizer": full_optimizer_state(self.model, self.optimizer)}
        if self.critic is not None:
            out |= {"critic": full_state_dict(self.critic), "critic_optimizer": full_optimizer_state(self.critic, self.critic_optimizer)}
        return out

    def _sharded_state(self) -> dict[str, Any]:
        return dict(getattr(self, "_gathered", {}))

    def _load_trained(self, module: Any, optimizer: Any, module_state: Any, optimizer_state: Any) -> None:
        if self.policy_copy is None:
            return super()._load_trained(module, optimizer, module_state, optimizer_state)
        from ragen_core.trainer.distributed import load_full_state

        load_full_state(module, optimizer, module_state, optimizer_state)

    def _sync_engine(self) -> None:
        """The engine samples the current weights, as policy version :attr:`policy_version`."""
        if self.policy_copy is not None:  # FSDP: every rank gathers the whole weights into its copy
            from ragen_core.trainer.distributed import full_state_dict

            self.policy_copy.sync(full_state_dict(self.model), self.policy_version, self.engine)
        else:
            self.engine.sync_weights(self.model.state_dict(), version=self.policy_version)

    def _save_after_error(self, step: int, saved: int, at: dict[str, Any] | None, why: str = "failed") -> Path | None:
        """Step ``step`` raised (``why``: ``failed``), was aborted by a second interrupt (``aborted``)
        or hangs (``stalled``: called by the watchdog's thread while the main thread is stuck) before
        changing any weight: checkpoint step ``step - 1`` (no lost work), with the seed counter, random
        generators and diagnostics as they were when step ``step`` started (``at``, its
        :meth:`resume_point`), so a resume replays step ``step`` as an uninterrupted run would.
        Returns the checkpoint written, if any.

        The weights, optimiser and metrics rows are those of the last finished step. With
        several DDP ranks (another rank died, so a collective failed) rank 0 saves alone: every rank
        holds the same whole weights and optimiser state, so no collective is needed. Not with FSDP
        (gathering the shards needs every rank) or after an error inside the update (the weights are
        then no step's). With an async rollout, ``at`` holds the runner's state from before the
        rollout in flight (:attr:`AsyncRollout.unplayed_state`), as a regular checkpoint does: a
        resume plays that rollout's seeds again (it threw away every finished step).
        """
        done = step - 1
        if self._validating is not None and self._validating[0] == step:  # the update finished: keep it
            return self._save_unvalidated(step, why)
        if not self.world.main:
            return None
        if done <= saved:  # the last finished step is saved already: say how to go on from it (it said nothing)
            if saved > 0:
                fixed = "" if why == "aborted" else "once the cause is fixed, "
                report(f"step {step} {why}: checkpoints/step_{saved} holds the last finished step; "
                       f"{fixed}continue with 'ragen run --resume {shell_word(self.run_dir)}'")
            return None
        if self._updating or self.world.sharded:
            if self.world.parallel:  # say why a torchrun run that lost a rank kept nothing newer
                when = "during the update (the weights are part-way through it)" if self._updating else "with FSDP (saving needs every rank)"
                newest = f"checkpoints/step_{saved} stays the newest" if saved > 0 else "no checkpoint was written before (save_freq sets how often)"
                report(f"step {step} {why} {when}: step {done} was not saved; {newest}")
            return None
        if not self._good_to_save(done):
            return None
        return self._rescue_save(done, at, f"step {step} {why}", "the last finished step", aborted=why == "aborted")

    def _rescue_save(self, done: int, at: dict[str, Any] | None, what: str, saved: str, *, aborted: bool,
                     metrics: dict[str, float] | None = None) -> Path | None:
        """Write the rescue checkpoint of step ``done`` (after ``metrics``, its metrics line, when
        given) and say so: ``what`` happened, what was ``saved``, how to continue."""
        try:
            if metrics is not None:
                self.history.append({"step": done, **metrics})
                call_hook(self.pm, "ragen_on_step_end", metrics=metrics, step=done, context=self.context)
            path = self.save(done, at)
        except Exception as exc:  # noqa: BLE001 - the original error is the one to report
            report(f"{what}, and saving step {done} failed too ({type(exc).__name__}: {exc})")
            return None
        fixed = "" if aborted else "once the cause is fixed, "
        report(f"{what}: saved checkpoints/{path.name}, {saved}; {fixed}continue with 'ragen run --resume {shell_word(self.run_dir)}'")
        return path

    def _save_unvalidated(self, step: int, why: str) -> Path | None:
        """Step ``step``'s validation failed, was aborted or hangs after the step's update had
        finished: log the step's training metrics and checkpoint it (with the resume point of
        before the validation), so the update is not lost. Same limits as :meth:`_save_after_error`."""
        assert self._validating is not None
        _, metrics, at = self._validating
        self._validating = None  # once (the watchdog's thread and the main thread may both get here)
        if not self.world.main or self.world.sharded or not self._good_to_save(step):
            return None
        return self._rescue_save(step, at, f"step {step}'s validation {why} after its update", "with the step's training metrics",
                                 aborted=why == "aborted", metrics=metrics)

    def _say_if_nothing_saved(self, raised: BaseException | None) -> None:
        """After a failed or aborted run: when the folder holds no checkpoint there is nothing to
        resume, and a new run in the same folder needs --overwrite. Said as a hint of the error that
        ended the run (printed after its own line; before, this line came first and read as the
        error), or as one line of its own for other exceptions."""
        from ragen_core.errors import RagenError
        from ragen_core.trainer.checkpoint import list_checkpoints

        if list_checkpoints(self.run_dir):
            return
        note = f"no checkpoint in {self.run_dir}, so there is nothing to resume: start again with --overwrite or another --run-dir"
        if isinstance(raised, RagenError):
            raised.hints.append(note)
        else:
            report(note)

    def _good_to_save(self, step: int) -> bool:
        """False (saying why on stderr) while a diverged state must not become a checkpoint (see divergence.py)."""
        why = self.skips.unsafe_to_save(self.unsharded_policy, self.critic)
        if why is not None and self.world.main:
            report(f"step {step}: no checkpoint written: {why}; the newest checkpoint stays as it was")
        return why is None

    def _set_lr(self, step: int, metrics: dict[str, float]) -> None:
        """Apply the linear warm-up of ``optim.lr_warmup_steps`` (stateless: resume-safe)."""
        o = self.config.optim
        factor = min(1.0, step / o.lr_warmup_steps) if o.lr_warmup_steps > 0 else 1.0
        for opt, base in ((self.optimizer, o.lr), (self.critic_optimizer, o.critic_lr)):
            if opt is not None:
                for group in opt.param_groups:
                    group["lr"] = base * factor
        metrics["actor/lr_factor"] = factor

    def _should_save(self, step: int, last: bool) -> bool:
        freq = self.config.save_freq
        if freq == 0:
            return self._interrupts > 0
        return last or (freq > 0 and step % freq == 0)

    def _install_sigint(self) -> dict[int, Any] | None:
        """Ctrl-C (SIGINT) and SIGTERM (a scheduler's stop, ``kill``) finish the step, checkpoint it and
        end the run; a second one aborts. Returns the handlers to put back (None off the main thread)."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return None

        def handler(signum: int, frame: Any) -> None:
            self._interrupts += 1
            self.interrupted_by = signum
            how = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
            if self._interrupts == 2 and self._in_update:  # aborting now would leave weights that are no step's: nothing to save
                self._abort_pending = True
                if self.world.main:
                    print(f"\ninterrupt ({how}) during step {self.context.step}'s update: it finishes (seconds), then the step is "
                          f"saved without its validation ({how} a third time quits at once, saving nothing newer)", flush=True)
                return
            if self._interrupts > 1:
                from ragen_core.errors import Terminated

                raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
            if self.world.main:  # under torchrun every rank gets the signal; one line says it
                if self.world.parallel and signum == signal.SIGTERM:  # torchrun also stops the other ranks so when one ends
                    how = "SIGTERM, from a user or from torchrun after another rank ended"
                print(f"\ninterrupt ({how}): finishing this step and saving a checkpoint ({how.split(',')[0]} again to abort)", flush=True)

        return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _progress(self) -> Any:
        if not self.config.progress or not self.world.main:
            return None
        from ragen_core.trainer.progress import step_progress

        return step_progress(self.config.steps, self.start_step - 1, f"ragen {self.config.env}/{self.config.algo}")

    def _beat(self, what: str) -> None:
        """Progress within a step: the watchdog's heartbeat, and the progress bar's note (every
        rollout turn, update and validation; after a step, beside that step's reward and success)."""
        self.watchdog.beat(what)
        bar = self._bar
        if bar is not None:
            bar.set_postfix_str(f"{_step_summary(self.history[-1])} | {what}" if self.history else what)

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> dict[str, float]:
        """One StarPO step; returns its metrics (the data flow is in the module docstring)."""
        self._plugin_metrics = []
        return self._with_plugin_metrics(self._train_step(step))

    def _with_plugin_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """``metrics`` (the run's own) with this step's plugin metrics added, except one named as a
        metric the run logs itself: that one would overwrite the run's value or be overwritten by
        it, depending on which came last (``actor/lr_factor``, ``actor/entropy``), and is said once;
        likewise a key another observer returned first (:attr:`_plugin_metric_owners`): the later
        one silently won."""
        self._core_metric_keys.update(metrics)
        for label, key, value in self._plugin_metrics:
            owner = self._plugin_metric_owners.get(key, label)
            if key in self._core_metric_keys or key.startswith(CORE_FAMILIES):
                what = "a metric" if key in self._core_metric_keys else f"in {key.split('/')[0] + '/'!r}, a metric family"
                why = f"{what} the run logs itself: not logged (name it in a family of the plugin's own, e.g. 'mine/...')"
            elif owner != label:
                why = f"as {owner} does: not logged (only the first observer's value of a key is; name the two metrics apart)"
            else:
                self._plugin_metric_owners[key] = label
                metrics[key] = value
                continue
            if (label, key) not in self._said_not_numbers:
                report(f"{label} returned {key!r} from ragen_on_rollout_end, {why}")
                self._said_not_numbers.add((label, key))
        return metrics

    def _train_step(self, step: int) -> dict[str, float]:
        cfg = self.config
        metrics: dict[str, float] = {}
        timer = _Timer(metrics)
        t_step = time.perf_counter()
        self._set_lr(step, metrics)

        # rollout
        with timer("gen"):  # async: waiting for the rollout the last step started (made now on the first step)
            trajs, built = self.overlap.take() if self.overlap is not None else (rollout_share(self.runner, self.train_sampling, self.world), None)
        if self.world.main:
            report_pool_failures(step, trajs)
            self._save_rollouts(trajs, step)
        with timer("collapse_metrics"):
            # in the order diagnostics lists them (pluggy calls the newest registered first): of two returning one key, the first's is logged
            for label, result in reversed(hook_metrics(self.pm, "ragen_on_rollout_end", trajectories=trajs, step=step, context=self.context)):
                # added at the step's end, where the run's own metrics are known (_with_plugin_metrics)
                self._plugin_metrics += [(label, k, float(v)) for k, v in result.items() if is_metric_key(k) and is_number(v)]
                for key in [k for k in result if (label, k) not in self._said_not_numbers]:
                    if not is_metric_key(key):  # a bare key could overwrite the run's own ('step')
                        report(f"{label} returned {short_repr(key, 40)} from ragen_on_rollout_end: {METRIC_KEY_RULE}: not logged")
                    elif not is_number(result[key]):
                        report(f"{label} returned {key!r}: {short_repr(result[key], 40)} from ragen_on_rollout_end, not a number: "
                               "not logged (metrics are numbers; NaN is logged as null)")
                    else:
                        continue
                    self._said_not_numbers.add((label, key))  # once per observer and key
        metrics.update(episode_metrics(trajs, "train"))
        metrics["rollout/policy_lag"] = policy_lag(trajs, self.policy_version)
        if self.overlap is not None and step < cfg.steps:  # step t+1's rollout runs from here on, on the current weights
            self.overlap.start(self.model, self.policy_version, self.engine)
        if step == 1 and "valid_rate" in self.warm_start_meta:  # the format-valid rate the warm start reached
            metrics["warm_start/valid_rate"] = float(self.warm_start_meta["valid_rate"])
            metrics["warm_start/reached_target"] = float(self.warm_start_meta.get("reached_target") is True)
        batch = built if built is not None else self._build_batch(trajs)

        # selection: which groups and rows train, with which weights
        with timer("filter"):
            entropies = None
            if self.filter.needs_entropies:
                entropies = mean_entropies(self.model, batch, cfg.optim.micro_batch_size, self.train_sampling.temperature, self.world)
            # rank 0 selects for all: a filter drawing random numbers cannot pick differently per rank
            lost = {t.group_id for t in trajs if t.end_reason in LOST_END_REASONS}  # not the policy's scores: never trained
            selection = self.world.broadcast(select(batch, self.filter, self.algorithm, entropies=entropies, lost_groups=lost,
                                                    signal=cfg.filter_signal)
                                             if self.world.main else None)
        metrics.update(selection.metrics)
        metrics["train/rollout_attempts"] = 1.0
        if selection.empty:
            return self._empty_step(step, metrics, timer, t_step, cause=self._emptied_by(selection, lost))
        kept = batch.select(selection.rows)
        if cfg.compat.batch_adjust != "none":  # the reference's padding by copies or deletion (spec 7.3, 17 L8)
            divisor = batch_divisor(cfg.rollout.env_groups, cfg.optim.mini_batch_size, self.world.size)
            kept = adjust_batch(kept, divisor, cfg.compat.batch_adjust, make_rng(cfg.seed, "compat.batch_adjust", step),
                                per_turn=per_turn_rows(self.runner.config))
            if not len(kept):  # an empty step like one the filter left empty: its streak counts towards empty_stop_steps
                return self._empty_step(step, metrics, timer, t_step, cause="compat.batch_adjust=delete removed every kept row", why=(
                    f"compat.batch_adjust=delete removed all {len(selection.rows)} kept rows (fewer than the batch multiple "
                    f"{divisor} = lcm(rollout.env_groups, optim.mini_batch_size, ranks); compat.batch_adjust=copy pads instead)"))
        self.empty_streak = 0
        self.empty_causes = []
        metrics["rollout/empty_after_filter"] = 0.0
        metrics["rollout/consecutive_empty_after_filter_steps"] = 0.0
        stop = self.stopper.observe_reward_std(selection.reward_std)
        unfiltered = batch if cfg.grad_analysis.log_prefilter else None  # for the pre-filter gradient analysis
        metrics["train/batch_size"] = float(len(kept))
        metrics["train/num_mini_batches"] = float(math.ceil(len(kept) / cfg.optim.mini_batch_size))

        # prepared batch: old/ref log-probs, values, advantages of the kept rows
        self._beat(f"the log-probs of step {step}'s batch")
        prepared = prepare(kept, model=self.model, ref_model=self.ref_model, critic=self.critic, algorithm=self.algorithm,
                           estimator=self.estimator, optim=cfg.optim, sampling=self.train_sampling,
                           group_weights=selection.group_weights, kept_ratio=selection.kept_ratio, timer=timer, world=self.world)
        metrics.update(prepared.metrics)

        # update
        only_analyse = cfg.grad_analysis.only
        self._updating = self._in_update = True  # from here on the weights change (critic, then actor)
        if self.critic is not None and not only_analyse:  # no timing_s/update_critic of 0 s in a run without a critic
            with timer("update_critic"):
                metrics.update(update_critic(prepared, critic=self.critic, optimizer=self.critic_optimizer,
                                             algorithm_config=self.algorithm.config, optim=cfg.optim, world=self.world))
        if self._grad_analysis(step, prepared, unfiltered, metrics, timer):
            metrics["timing_s/step"] = time.perf_counter() - t_step
            return metrics  # exit_after: no actor update, checkpoint or validation
        self._beat(f"the update of step {step}" + ("" if self.history else " (a process's first update sets torch up: up to ~20 s)"))
        with timer("update_actor"):
            if not only_analyse:
                metrics.update(update_actor(prepared, model=self.model, optimizer=self.optimizer, algorithm=self.algorithm,
                                            optim=cfg.optim, temperature=self.train_sampling.temperature, world=self.world))
                self.policy_version += 1
        if self.overlap is None:  # async: the behaviour copy is synced when the next rollout starts
            self._sync_engine()
        self._in_update = False
        update_stats = {k: v for k, v in metrics.items() if k.startswith(("actor/", "critic/"))}
        call_hook(self.pm, "ragen_on_update_end", stats=update_stats, step=step, context=self.context)
        diverged = self.skips.observe(step, metrics)  # reports every skip; True past optim.max_skipped_steps
        if not diverged and self.stop_reason is None and not weights_finite(self.unsharded_policy, self.critic):  # (sharded: every rank)
            self.skips.weights_broke(step)
            diverged = True
        if diverged and self.stop_reason is None:
            self.stop_reason = DIVERGED
            metrics[DIVERGED] = 1.0

        if stop and self.stop_reason is None:
            self.stop_reason = stop
            metrics[stop] = 1.0
        metrics["timing_s/step"] = time.perf_counter() - t_step
        self._maybe_validate(step, metrics)
        for key in ("gen", "update_actor", "update_critic", "testing"):
            self.timing_totals[key] = self.timing_totals.get(key, 0.0) + metrics.get(f"timing_s/{key}", 0.0)
        return metrics

    def _build_batch(self, trajs: list[Any]) -> TrainBatch:
        """The training tensors of a rollout (episodes whose first prompt did not fit the context have no tokens to train on)."""
        cfg = self.config
        return build_batch([t for t in trajs if t.turns], self.pad_id, turn_level=cfg.reward.turn_level,
                           normalization=cfg.reward.normalization, grouping=cfg.reward.grouping, per_turn=per_turn_rows(self.runner.config),
                           turn_start_id=self.turn_start, chat=self.runner.chat if cfg.compat.retokenized_text else None)

    def _collect(self, behaviour: Any) -> tuple[list[Any], TrainBatch]:
        """Async rollout's job (a background thread): a training rollout, its batch, and the old
        log-probs of every row under ``behaviour``, the weights that sampled it."""
        from ragen_core.trainer.modeling import batched_logprobs

        trajs = self.runner.run(mode="train", sampling=self.train_sampling)
        batch = self._build_batch(trajs)
        if len(batch):
            batch.old_log_probs = batched_logprobs(behaviour, batch, list(range(len(batch))), self.config.optim.micro_batch_size,
                                                   self.train_sampling.temperature)[0]
        return trajs, batch

    def _emptied_by(self, selection: Any, lost: set[int]) -> str:
        """What left ``selection`` with no group, in words: the env pool (every group had a lost episode),
        the filter, or the algorithm's keep mask (it drops a group with any dropped row)."""
        if not selection.grouped.group_ids:
            return "the env pool lost every group (an episode in each timed out or failed)" if lost else "the rollout had no episode to train on"
        if not selection.result.kept_groups:
            return f"the filter {self.config.filter!r} kept no group"
        return f"the algorithm {self.config.algo!r}'s keep mask dropped every group the filter kept"

    def _empty_step(self, step: int, metrics: dict[str, float], timer: _Timer, t_step: float, why: str | None = None,
                    cause: str = "the filter kept no group") -> dict[str, float]:
        """Nothing survived the filter (or ``why``: what else removed every row): no update; count the
        streak (spec 12 rule 1), note its ``cause`` (:attr:`empty_causes`) and validate."""
        self.empty_streak += 1
        self.empty_causes.append(cause)
        metrics["rollout/empty_after_filter"] = 1.0
        if self.world.main:
            stop_after = self.stopper.empty_stop_steps
            limit = f"; the run stops after {stop_after} in a row (filter_config.empty_stop_steps)" if stop_after else ""
            if why is None:
                lost = int(metrics.get("rollout/env_lost_groups", 0))
                why = "nothing left to train after " + (f"the filter and the env pool (which lost {lost} group(s))" if lost else "the filter")
            report(f"step {step}: {why}: no update ({self.empty_streak} such step(s) in a row{limit})")
        if self.config.grad_analysis.only and self._grad_analysis(step, None, None, metrics, timer):  # a separate analysis rollout still runs
            metrics["timing_s/step"] = time.perf_counter() - t_step
            return metrics
        metrics["rollout/consecutive_empty_after_filter_steps"] = float(self.empty_streak)
        stop = self.stopper.observe_empty(self.empty_streak)
        if stop and self.stop_reason is None:
            self.stop_reason = stop
            metrics[stop] = 1.0
        metrics["timing_s/step"] = time.perf_counter() - t_step
        self._maybe_validate(step, metrics)
        return metrics

    def _grad_analysis(self, step: int, prepared: PreparedBatch | None, unfiltered: Any, metrics: dict[str, float], timer: Any) -> bool:
        """Spec 11: probe per-bucket gradient norms when due; True when the run must exit now.

        ``prepared`` is None on an empty-after-filter step (only a separate analysis rollout runs);
        ``unfiltered`` is the rollout batch before selection (``grad_analysis.log_prefilter``).
        """
        from ragen_core.trainer import grad_analysis as gan

        ga = self.config.grad_analysis
        if ga.only:
            metrics["trainer/gradient_analysis_only"] = 1.0
            metrics["actor/skipped_for_gradient_analysis_only"] = 1.0
            if self.critic is not None:
                metrics["critic/skipped_for_gradient_analysis_only"] = 1.0
        if not gan.is_due(ga, step) or (prepared is None and self.analysis_rollout is None):
            return False
        with timer("grad_analysis"):
            probe = prepared.batch if prepared is not None else None
            if prepared is not None and prepared.old_from_update_rows:
                # no step was taken: the current policy is every row's old one (the first mini-batch has no old log-probs yet)
                probe = dataclasses.replace(prepared.batch, old_log_probs=None)
            metrics.update(gan.run_for_trainer(self, probe, step, unfiltered))
        if ga.exit_after:
            metrics["trainer/exited_after_gradient_analysis"] = 1.0
            self.stop_reason = "trainer/exited_after_gradient_analysis"
            return True
        return False

    def _agree_on_interrupts(self) -> None:
        """With several ranks: a Ctrl-C seen by any rank counts on every rank (same validation, same last step)."""
        if self.world.parallel and self.world.any(self._interrupts > 0):
            self._interrupts = max(self._interrupts, 1)

    def _maybe_validate(self, step: int, metrics: dict[str, float]) -> None:
        cfg = self.config
        self._agree_on_interrupts()  # every rank must take the same branch below (rank 0 sends validation metrics)
        if self.val_runner is None or cfg.test_freq <= 0 or self._abort_pending:  # aborted during the update: save and stop
            return
        if step % cfg.test_freq == 0 or step == cfg.steps or self.stop_reason is not None or self._interrupts > 0:
            t0 = time.perf_counter()
            if self.overlap is not None:  # the engine and pool are free again, and sample the newest weights
                self.overlap.sync(self.model, self.policy_version, self.engine)
            if self.world.main:  # the update is done: a validation that fails keeps it (_save_unvalidated)
                self._validating = (step, self._with_plugin_metrics(dict(metrics)), self.resume_point())
            val = self.validate(step)
            self._validating = None
            metrics.update(val)
            metrics["timing_s/testing"] = time.perf_counter() - t0
            stop = self.stopper.observe_validation(val)
            if stop and self.stop_reason is None:
                self.stop_reason = stop
                metrics[stop] = 1.0

    def validate(self, step: int) -> dict[str, float]:
        """One validation rollout (fixed seeds, val sampling); metrics under ``val-env/``.

        With several ranks rank 0 validates and sends its metrics, so early stops agree.
        """
        self._check_open()
        if not self.world.main:
            out: dict[str, float] = self.world.broadcast(None)
            return out
        trajs = self.val_runner.run(mode="val", sampling=self.val_sampling)
        report_pool_failures(step, trajs, "val")
        return dict(self.world.broadcast(episode_metrics(trajs, "val-env")))

    def _save_rollouts(self, trajs: list[Any], step: int) -> None:
        from ragen_core.trainer.run_dir import write_rollouts

        if self.config.save_rollouts:
            write_rollouts(self.run_dir, step, (json.dumps(t.to_dict(), default=str) + "\n" for t in trajs))


def _quiet(*args: Any) -> None:
    """A ``log`` that prints nothing (ranks other than 0)."""


def _step_summary(metrics: dict[str, float]) -> str:
    """A finished step on the progress bar: its reward and success."""
    return f"reward={metrics.get('train/reward', float('nan')):.3f}, success={metrics.get('train/success', float('nan')):.2f}"


class _Timer:
    """``with timer("gen"):`` adds ``timing_s/gen`` to the metrics dict."""

    def __init__(self, metrics: dict[str, float]) -> None:
        self.metrics = metrics
        self.key = ""
        self.t0 = 0.0

    def __call__(self, key: str) -> _Timer:
        self.key = key
        return self

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        k = f"timing_s/{self.key}"
        self.metrics[k] = self.metrics.get(k, 0.0) + time.perf_counter() - self.t0


class _LogAboveBar(logging.Handler):
    """While the progress bar is up: logging's last-resort handler, printing above the bar.

    With no handler configured, logging prints a warning of a plugin (``ragen_workers_ray``'s
    "replaced actor" line, say) through ``logging.lastResort``: straight onto stderr, glued to the
    end of the bar's line. This one takes its place for the loop and prints the same records
    (warnings and worse, only those no configured handler took) through ``tqdm.write``.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            report(self.format(record))
        except Exception:  # noqa: BLE001 - logging's rule: a failing handler must not raise
            self.handleError(record)

    @classmethod
    @contextlib.contextmanager
    def installed(cls) -> Iterator[None]:
        """``logging.lastResort`` is one of these inside the block (put back after)."""
        previous = logging.lastResort
        logging.lastResort = cls(logging.WARNING)
        try:
            yield
        finally:
            logging.lastResort = previous
