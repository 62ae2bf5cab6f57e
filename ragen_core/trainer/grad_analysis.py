"""Gradient analysis (spec 11): per reward-std bucket, the gradient norm of each loss component.

At steps where ``(step - 1) % grad_analysis.every == 0`` -- after the critic update and before
the actor update -- the prepared training batch (post-filter, advantages computed) is split into
buckets of prompt groups by their in-group reward std (of the rewards the filter ranks by, the
run's ``filter_signal``: the episode scores, or the env rewards alone), and for every bucket (plus ``all``, the
whole batch) the actor update is *probed* without an optimiser step: for each mini-batch and each
loss component -- ``task`` (the clipped policy-gradient loss), ``entropy`` (``-entropy_coeff *
entropy``, only when ``entropy_coeff != 0``) and ``kl`` (``kl_loss_coef * KL``, only with the KL
loss on) -- gradients are zeroed, that component alone is back-propagated over all
micro-batches with the training update's accumulation scaling, and the pre-clip global L2 norm
is recorded. Gradients are cleared afterwards; parameters and optimiser state never change.

Metrics (prefix ``grad_norm/<bucket>/``, buckets ``bucket_1`` .. ``bucket_B`` and ``all``):
``sample_count``, ``sample_pct`` (percent of the batch's rows), ``reward_std_mean|min|max``,
``group_rv_count``, ``task|entropy|kl`` (norms, averaged over mini-batches),
``per_sample/<c>`` (norm / rows), ``per_token/<c>`` (norm / response tokens) and
``loss/policy|entropy|kl|total`` (the component values; ``total`` is their sum) and
``algo/<name>``, each of the algorithm's own metrics (:attr:`~ragen_core.interfaces.algorithm.Algorithm.metric_names`)
from the ``task`` probe, averaged as the update averages its ``actor/algo/<name>``. The ``all``
bucket is mirrored as ``actor/grad_norm/<c>`` and ``actor/loss/<name>``. The per-group table
(bucket, group id, reward std) goes to ``RUN_DIR/grad_analysis/step_<N>.csv``.

Which batch (spec 11.2): the training batch, unless ``grad_analysis.env_groups`` /
``group_size`` differ from the training rollout's. Then a **separate** rollout of that shape is
played (its own runner, base seed ``derive_seed(seed, "grad_analysis", step)``, no diagnostics
hooks), filtered by its own filter instance and prepared exactly like a training batch (old and
reference log-probs, values, advantages, filter weights and loss scaling) by the step's own
``select`` and ``prepare`` functions; those return values and touch no trainer state, so the
training update is unaffected.
It logs ``grad_analysis/source_env_groups|source_group_size|source_batch_size``,
``grad_analysis/empty_after_filter``, the filter metrics re-prefixed ``grad_analysis/`` and
``grad_analysis/adjusted_batch_size``; ``grad_analysis/uses_training_batch`` says which batch was
used. With ``only`` such a rollout is analysed on empty-after-filter training steps too.

With ``grad_analysis.log_prefilter`` the unfiltered batch (training or analysis rollout) is also
prepared (all group weights 1) and analysed, under the prefix ``grad_norm_prefilter/``.

Not implemented: the per-tag group scaling of multi-env runs and the data-parallel trailing-row trim (training runs in one process); the
separate analysis filter's own state is not checkpointed. The probe runs one epoch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

COMPONENTS = ("task", "entropy", "kl")
_LOSS_NAMES = {"task": "policy", "entropy": "entropy", "kl": "kl"}


def group_reward_stds(scores: Sequence[float], group_ids: Sequence[int], episode_ids: Sequence[int] | None = None) -> dict[int, float]:
    """Unbiased std of the episode scores of every group (0 for a single episode).

    Rows of the same episode (turn-level rows) count once.
    """
    seen: set[int] = set()
    per_group: dict[int, list[float]] = {}
    for i, (s, g) in enumerate(zip(scores, group_ids)):
        if episode_ids is not None:
            e = int(episode_ids[i])
            if e in seen:
                continue
            seen.add(e)
        per_group.setdefault(int(g), []).append(float(s))
    return {g: (statistics.stdev(v) if len(v) > 1 else 0.0) for g, v in per_group.items()}


def bucket_groups(stds: dict[int, float], mode: str = "quantile", n_buckets: int = 6) -> list[tuple[str, list[int]]]:
    """Split group ids into named reward-std buckets (spec 11.3); empty buckets are left out.

    ``quantile``: ``B = min(n_buckets, #groups)`` buckets of ``#groups // B`` groups each in
    ascending std order (ties by group id), the last one also taking the remainder.
    ``fixed_rv``: ``bucket_k`` holds stds in ``[k-1, k)``, the last bucket ``[B-1, inf)``.
    The ``all`` bucket is not included here.
    """
    if n_buckets < 1:
        raise ValueError("n_buckets must be at least 1")
    order = sorted(stds, key=lambda g: (stds[g], g))
    out: list[tuple[str, list[int]]] = []
    if mode == "quantile":
        if not order:
            return out
        b = min(n_buckets, len(order))
        size = len(order) // b
        for k in range(b):
            chunk = order[k * size : (k + 1) * size] if k < b - 1 else order[k * size :]
            out.append((f"bucket_{k + 1}", chunk))
        return out
    if mode == "fixed_rv":
        for k in range(n_buckets):
            lo, hi = float(k), (float(k + 1) if k < n_buckets - 1 else math.inf)
            chunk = [g for g in order if lo <= stds[g] < hi]
            if chunk:
                out.append((f"bucket_{k + 1}", chunk))
        return out
    raise ValueError(f"unknown bucketing {mode!r}: use 'quantile' or 'fixed_rv'")


def _global_norm(params: list[Any]) -> float:
    import torch

    grads = [p.grad.detach().float().norm(2) for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack(grads), 2))


def component_grad_norms(
    model: Any,
    batch: Any,
    algorithm: Any,
    *,
    mini_batch_size: int,
    micro_batch_size: int,
    temperature: float = 1.0,
    norm_constant: float | None = None,
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Probe the actor update on ``batch``: ``({component: grad norm}, {loss name: value}, {metric: value})``,
    the last the algorithm's own metrics of the ``task`` probe (``algo/<name>``; weighted by each
    micro-batch's trained tokens within a mini-batch, then averaged over mini-batches, as in the update).

    ``algorithm``: the run's :class:`~ragen_core.interfaces.algorithm.Algorithm` (its
    ``token_loss`` and ``config``). Norms and losses are means over mini-batches. No optimiser
    step; every trainable parameter's ``.grad`` is ``None`` afterwards. ``batch`` needs
    ``advantages`` (and ``ref_log_probs`` when ``algorithm.config.use_kl_loss``); missing ``old_log_probs`` mean the
    current policy is the old one (ratio 1), as in the trainer's single-pass update.
    """
    from ragen_core.trainer.batch import micro_batches
    from ragen_core.trainer.losses import agg_loss, kl_penalty, minibatch_normalisers
    from ragen_core.trainer.modeling import token_logprobs
    from ragen_core.trainer.update import algorithm_metric_keys, algorithm_policy_loss, policy_loss_inputs

    acfg = algorithm.config
    mode = acfg.loss_agg_mode
    comps = ["task"] + (["entropy"] if acfg.entropy_coeff != 0 else []) + (["kl"] if acfg.use_kl_loss else [])
    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device if params else "cpu"
    rows = list(range(len(batch)))
    norms: dict[str, list[float]] = {c: [] for c in comps}
    losses: dict[str, list[float]] = {_LOSS_NAMES[c]: [] for c in comps}
    own_keys = [k.removeprefix("actor/") for k in algorithm_metric_keys(algorithm)]  # algo/<name>
    own: dict[str, list[float]] = {k: [] for k in own_keys}
    for p in params:
        p.grad = None
    for mini in micro_batches(rows, mini_batch_size):
        micros = micro_batches(mini, micro_batch_size)
        agg_kw = minibatch_normalisers(mode, batch.response_mask[mini], global_norm=acfg.global_token_norm, norm_constant=norm_constant)
        loss_w = 1.0 if agg_kw else 1.0 / len(micros)
        mini_tokens = max(float(batch.response_mask[mini].sum()), 1.0)
        for comp in comps:
            value = 0.0
            mine = dict.fromkeys(own_keys, 0.0)
            for idx in micros:
                sub = batch.select(idx)
                mask = sub.response_mask.to(device)
                logp, entropy = token_logprobs(model, sub.input_ids.to(device), sub.attention_mask.to(device),
                                               temperature=temperature, with_entropy=comp == "entropy", response_mask=mask)
                if comp == "task":
                    old = sub.old_log_probs.to(device) if sub.old_log_probs is not None else logp.detach()
                    loss, pm = algorithm_policy_loss(algorithm, policy_loss_inputs(sub, logp, old, mask), mode, **agg_kw)
                    share = float(mask.sum()) / mini_tokens  # token-weighted, as the update's
                    for k in own_keys:
                        mine[k] += pm[k] * share
                elif comp == "entropy":
                    assert entropy is not None  # asked for with with_entropy=True
                    loss = -acfg.entropy_coeff * agg_loss(entropy, mask, mode, **agg_kw)
                else:
                    kl = kl_penalty(logp, sub.ref_log_probs.to(device), acfg.kl_loss_type)
                    loss = acfg.kl_loss_coef * agg_loss(kl, mask, mode, **agg_kw)
                (loss * loss_w).backward()
                value += float(loss.detach()) * loss_w
            norms[comp].append(_global_norm(params))
            losses[_LOSS_NAMES[comp]].append(value)
            if comp == "task":
                for k in own_keys:
                    own[k].append(mine[k])
            for p in params:
                p.grad = None
    mean_norms = {c: sum(v) / len(v) for c, v in norms.items() if v}
    mean_losses = {k: sum(v) / len(v) for k, v in losses.items() if v}
    mean_losses["total"] = sum(mean_losses.values())
    return mean_norms, mean_losses, {k: sum(v) / len(v) for k, v in own.items() if v}


def analyse(
    model: Any,
    batch: Any,
    algorithm: Any,
    *,
    mini_batch_size: int,
    micro_batch_size: int,
    temperature: float = 1.0,
    bucketing: str = "quantile",
    n_buckets: int = 6,
    norm_constant: float | None = None,
    prefix: str = "grad_norm",
    signal: str = "score",
) -> tuple[dict[str, float], list[tuple[str, int, float]]]:
    """All bucket probes of one batch: ``(metrics, group table rows (bucket, group id, std))``.

    Metric names start with ``prefix`` (``grad_norm_prefilter`` for the unfiltered batch; only
    the ``grad_norm`` ``all`` bucket is mirrored to ``actor/``). ``signal`` (the run's
    ``filter_signal``) picks the rewards whose in-group std buckets the groups: ``batch.scores``
    or ``batch.env_rewards``, the ones the filter ranked the groups by.
    """
    from ragen_core.trainer.selection import signal_rewards

    stds = group_reward_stds(signal_rewards(batch, signal).tolist(), batch.group_ids.tolist(), batch.episode_ids.tolist())
    buckets = bucket_groups(stds, bucketing, n_buckets)
    buckets.append(("all", sorted(stds, key=lambda g: (stds[g], g))))
    gids = batch.group_ids.tolist()
    total_rows = max(len(batch), 1)
    metrics: dict[str, float] = {}
    table: list[tuple[str, int, float]] = []
    for name, groups in buckets:
        members = set(groups)
        rows = [i for i, g in enumerate(gids) if int(g) in members]
        if not rows:
            continue
        sub = batch.select(rows)
        pre = f"{prefix}/{name}/"
        bucket_stds = [stds[g] for g in groups]
        tokens = max(float(sub.response_mask.sum()), 1.0)
        metrics[pre + "sample_count"] = float(len(rows))
        metrics[pre + "sample_pct"] = 100.0 * len(rows) / total_rows
        metrics[pre + "reward_std_mean"] = sum(bucket_stds) / len(bucket_stds)
        metrics[pre + "reward_std_min"] = min(bucket_stds)
        metrics[pre + "reward_std_max"] = max(bucket_stds)
        metrics[pre + "group_rv_count"] = float(len(groups))
        table += [(name, int(g), float(stds[g])) for g in groups]
        norms, losses, own = component_grad_norms(model, sub, algorithm, mini_batch_size=mini_batch_size, micro_batch_size=micro_batch_size,
                                             temperature=temperature, norm_constant=norm_constant)
        for comp, norm in norms.items():
            metrics[pre + comp] = norm
            metrics[pre + f"per_sample/{comp}"] = norm / len(rows)
            metrics[pre + f"per_token/{comp}"] = norm / tokens
        for key, value in losses.items():
            metrics[pre + f"loss/{key}"] = value
        for key, value in own.items():
            metrics[pre + key] = value
        if name == "all" and prefix == "grad_norm":
            metrics.update({f"actor/grad_norm/{c}": v for c, v in norms.items()})
            metrics.update({f"actor/loss/{k}": v for k, v in losses.items()})
    return metrics, table


def is_due(section: Any, step: int) -> bool:
    """Whether step ``step`` (1-based) analyses: ``every > 0`` and ``(step - 1) % every == 0``."""
    return bool(section.every > 0 and (step - 1) % section.every == 0)


def uses_separate_rollout(config: Any) -> bool:
    """True when ``grad_analysis.env_groups`` / ``group_size`` ask for a batch of another shape."""
    ga, r = config.grad_analysis, config.rollout
    return (ga.env_groups or r.env_groups, ga.group_size or r.group_size) != (r.env_groups, r.group_size)


class AnalysisRollout:
    """The separate analysis rollout of spec 11.2: a runner of the requested shape and a filter
    instance of its own (the trainer builds one when ``uses_separate_rollout``)."""

    def __init__(self, config: Any, engine: Any, tokenizer: Any, pool: Any = None) -> None:
        from ragen_core import registry
        from ragen_core.trainer.setup import make_runner

        self.config = config
        self.env_groups = config.grad_analysis.env_groups or config.rollout.env_groups
        self.group_size = config.grad_analysis.group_size or config.rollout.group_size
        self.runner = make_runner(config, engine, tokenizer, "train", pool=pool, groups=self.env_groups, group_size=self.group_size)
        self.filter = registry.make("filter", config.filter, config.filter_config, preset=config.filter_preset)


def prepare_for_probe(trainer: Any, batch: Any, group_weights: dict[int, float] | None = None, kept_ratio: float = 1.0) -> Any:
    """``batch`` with old/ref log-probs, values and advantages, made by the training step's own
    :func:`~ragen_core.trainer.update.prepare` from the trainer's networks (read, never changed).

    Without weights (the unfiltered batch) every group weighs 1 and nothing is scaled.
    """
    from ragen_core.trainer.update import prepare

    return prepare(batch, model=trainer.model, ref_model=trainer.ref_model, critic=trainer.critic, algorithm=trainer.algorithm,
                   estimator=trainer.estimator, optim=trainer.config.optim, sampling=trainer.train_sampling,
                   group_weights=group_weights, kept_ratio=kept_ratio).batch


def separate_batch(trainer: Any, source: AnalysisRollout, step: int) -> tuple[Any, dict[str, float], Any]:
    """Play, select and prepare the analysis rollout with :func:`~ragen_core.trainer.selection.select`
    and :func:`prepare_for_probe`, like a training step but with ``source``'s own filter.

    Returns ``(batch or None when filtered empty, metrics, unfiltered batch (unprepared))``.
    """
    from ragen_core.seeding import derive_seed, make_rng
    from ragen_core.trainer.batch import adjust_batch, batch_divisor, build_batch, per_turn_rows
    from ragen_core.trainer.selection import mean_entropies, select

    cfg = trainer.config
    trajs = source.runner.run(mode="train", sampling=trainer.train_sampling, seed=derive_seed(cfg.seed, "grad_analysis", step))
    metrics = {"grad_analysis/source_env_groups": float(source.env_groups), "grad_analysis/source_group_size": float(source.group_size),
               "grad_analysis/source_batch_size": float(len(trajs)), "grad_analysis/uses_training_batch": 0.0}
    per_turn = per_turn_rows(source.runner.config)
    batch = build_batch([t for t in trajs if t.turns], trainer.pad_id, turn_level=cfg.reward.turn_level, normalization=cfg.reward.normalization,
                        grouping=cfg.reward.grouping, per_turn=per_turn, turn_start_id=getattr(trainer, "turn_start", None),
                        chat=source.runner.chat if cfg.compat.retokenized_text else None)
    entropies = None
    if source.filter.needs_entropies:
        entropies = mean_entropies(trainer.model, batch, cfg.optim.micro_batch_size, trainer.train_sampling.temperature)
    selection = select(batch, source.filter, trainer.algorithm, entropies=entropies, signal=cfg.filter_signal)
    metrics.update({"grad_analysis/" + k.split("/", 1)[-1]: v for k, v in selection.metrics.items()})
    metrics["grad_analysis/empty_after_filter"] = float(selection.empty)
    if selection.empty:
        return None, metrics, batch
    kept = batch.select(selection.rows)
    if cfg.compat.batch_adjust != "none":  # as a training step pads or cuts its batch (spec 7.3)
        kept = adjust_batch(kept, batch_divisor(source.env_groups, cfg.optim.mini_batch_size, 1), cfg.compat.batch_adjust,
                            make_rng(cfg.seed, "compat.batch_adjust", "grad_analysis", step), per_turn=per_turn)
        if not len(kept):
            metrics["grad_analysis/empty_after_filter"] = 1.0
            return None, metrics, batch
    metrics["grad_analysis/adjusted_batch_size"] = float(len(kept))
    return prepare_for_probe(trainer, kept, selection.group_weights, selection.kept_ratio), metrics, batch


def run_for_trainer(trainer: Any, batch: Any, step: int, unfiltered: Any = None) -> dict[str, float]:
    """The trainer's hook: analyse the prepared training ``batch`` (or the separate analysis
    rollout when configured; ``batch`` may then be None) and write the group table.

    ``unfiltered`` is the training batch before selection, prepared here with every group
    weighing 1 and analysed under ``grad_norm_prefilter/`` when ``grad_analysis.log_prefilter``
    is on (the separate rollout brings its own). The trainer is only read.
    """
    cfg = trainer.config
    ga = cfg.grad_analysis
    source: dict[str, float] = {"grad_analysis/uses_training_batch": 1.0}
    if trainer.analysis_rollout is not None:
        batch, source, unfiltered = separate_batch(trainer, trainer.analysis_rollout, step)
    kwargs: dict[str, Any] = {"mini_batch_size": cfg.optim.mini_batch_size, "micro_batch_size": cfg.optim.micro_batch_size,
                              "temperature": trainer.train_sampling.temperature, "bucketing": ga.bucketing,
                              "n_buckets": ga.buckets, "norm_constant": trainer.algorithm.agg_kwargs.get("norm_constant"),
                              "signal": cfg.filter_signal}
    metrics = dict(source)
    if ga.log_prefilter and unfiltered is not None and len(unfiltered) > 0:
        pre_metrics, _ = analyse(trainer.model, prepare_for_probe(trainer, unfiltered), trainer.algorithm,
                                 prefix="grad_norm_prefilter", **kwargs)
        metrics.update(pre_metrics)
    if batch is None or len(batch) == 0:
        return metrics
    probe, table = analyse(trainer.model, batch, trainer.algorithm, **kwargs)
    metrics.update(probe)
    out_dir = trainer.run_dir / "grad_analysis"
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["bucket,group_id,reward_std"] + [f"{b},{g},{s:.6g}" for b, g, s in table]
    (out_dir / f"step_{step}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    metrics["grad_analysis/batch_size"] = float(len(batch))
    return metrics
