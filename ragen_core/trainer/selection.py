"""Which rollout rows train this step: the filter's choice plus the algorithm's keep mask (spec 9).

:func:`select` turns a built :class:`~ragen_core.trainer.batch.TrainBatch` into a
:class:`Selection`, a plain value the rest of the step reads: the kept groups, the rows to keep,
the filter's per-group loss weights, the kept ratio (for ``optim.filter_loss_scaling``), the
in-group reward std (for the variance-collapse early stop) and the ``rollout/...`` metrics.

1. One entry per *episode* goes to the filter (turn rows of one episode are merged, spec 9.2):
   its reward signal (``signal``, the run's ``filter_signal``: the episode score the update
   trains on, or the env reward alone; :data:`FILTER_SIGNALS`), its generated-token count and, only for filters that declare
   :attr:`~ragen_core.interfaces.rollout_filter.RolloutFilter.needs_entropies`, its mean policy
   entropy (:func:`mean_entropies`, an extra no-grad forward the caller runs).
2. The filter returns kept groups and weights (:meth:`RolloutFilter.select`).
3. The algorithm's :meth:`~ragen_core.interfaces.algorithm.Algorithm.keep_mask` (DAPO's dynamic
   sampling) may drop more groups; with nothing left the selection is empty.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragen_core.errors import PluginError
from ragen_core.interfaces.rollout_filter import FilterResult, GroupedRollouts
from ragen_core.registry import plugin_call, plugin_label
from ragen_core.trainer.batch import TrainBatch
from ragen_core.trainer.metrics import group_reward_std, is_number

#: What :attr:`GroupedRollouts.rewards` holds, by the run's ``filter_signal``: ``score`` (default,
#: the reference's: env reward plus format penalty, after ``reward.normalization``, as the update
#: trains on it) or ``env_reward`` (the task reward alone, before penalty and normalisation: format
#: penalties then give a group no spread of its own, spec 17 L19).
FILTER_SIGNALS = ("score", "env_reward")


@dataclass(frozen=True)
class Selection:
    """What one step trains on, as computed by :func:`select`."""

    grouped: GroupedRollouts
    """The per-episode view the filter saw."""
    result: FilterResult
    """The filter's answer, as returned."""
    kept_groups: frozenset[int]
    """Groups that train (the filter's choice minus groups the keep mask dropped)."""
    rows: list[int]
    """Batch rows that train, in batch order."""
    group_weights: dict[int, float]
    """Loss weight per group from the filter (groups not listed weigh 1)."""
    kept_ratio: float
    """Kept groups / groups in the batch."""
    reward_std: float
    """``rollout/in_group_reward_std`` when the filter reports it, else the mean in-group std of
    the filter's rewards (the episode scores, or the env rewards with ``filter_signal=env_reward``;
    fed to the variance-collapse early stop)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """``rollout/...`` metrics: the filter's, drop reasons, kept count/ratio, dynamic sampling."""

    @property
    def empty(self) -> bool:
        """Nothing trains this step (empty-after-filter, spec 12 rule 1)."""
        return not self.kept_groups


def episode_view(batch: TrainBatch, entropies: Sequence[float] | None = None, signal: str = "score") -> GroupedRollouts:
    """One entry per episode of ``batch`` (its first row's group and reward signal, its summed token count).

    ``entropies`` are per row; an episode takes the mean of its rows' values (spec 9.2: in the
    windowed context modes an episode has a row per turn). ``signal`` (:data:`FILTER_SIGNALS`)
    picks the rewards: ``batch.scores`` or ``batch.env_rewards``.
    """
    values = signal_rewards(batch, signal)
    first: dict[int, int] = {}
    lengths: dict[int, float] = {}
    rows_of: dict[int, list[int]] = {}
    for row, (e, n_tok) in enumerate(zip(batch.episode_ids.tolist(), batch.response_mask.sum(1).tolist())):
        first.setdefault(e, row)
        lengths[e] = lengths.get(e, 0.0) + n_tok
        rows_of.setdefault(e, []).append(row)
    order = list(first)
    gids, scores = batch.group_ids.tolist(), values.tolist()
    return GroupedRollouts(
        group_ids=[gids[first[e]] for e in order],
        rewards=[scores[first[e]] for e in order],
        entropies=[sum(entropies[r] for r in rows_of[e]) / len(rows_of[e]) for e in order] if entropies is not None else None,
        lengths=[lengths[e] for e in order],
    )


def signal_rewards(batch: TrainBatch, signal: str) -> Any:
    """The per-row rewards ``signal`` (:data:`FILTER_SIGNALS`) names: ``batch.scores`` or ``batch.env_rewards``."""
    if signal not in FILTER_SIGNALS:
        raise ValueError(f"filter_signal={signal!r} is not one of {', '.join(FILTER_SIGNALS)}")
    values = batch.scores if signal == "score" else batch.env_rewards
    if values is None:
        raise ValueError("filter_signal=env_reward needs a batch with env_rewards (build it with build_batch)")
    return values


def dropped_metric(reason: str) -> str:
    """``rollout/dropped/<reason>``: the metric that counts groups dropped for ``reason`` (lower-case
    letters, ``_`` for the rest). Digits are left out: reasons that carry a number (``"std 0.4"``,
    against the contract) would make a new metric per group and per step; they share one."""
    return "rollout/dropped/" + (re.sub(r"[^a-z]+", "_", str(reason).lower()).strip("_") or "unnamed")


def check_filter_result(result: Any, group_ids: Sequence[int], rollout_filter: Any) -> None:
    """Refuse a filter answer the step cannot train on, naming the filter (one line).

    A :class:`FilterResult` whose kept groups are groups of this batch, each once, with finite,
    non-negative weights. Keeping no group is allowed (an empty step, spec 12 rule 1).
    """
    label = plugin_label(rollout_filter)
    hint = ["select returns a FilterResult (ragen_core.interfaces.rollout_filter) over the group ids of its input"]
    if not isinstance(result, FilterResult):
        raise PluginError(f"{label}: select returned a {type(result).__name__}, not a FilterResult", hint)
    known = set(group_ids)
    unknown = [g for g in result.kept_groups if g not in known]
    if unknown:
        shown = ", ".join(map(str, sorted(known)[:8])) + (", ..." if len(known) > 8 else "")
        raise PluginError(f"{label}: select kept group ids {unknown[:5]} that are not in the batch (its groups: {shown})", hint)
    if len(set(result.kept_groups)) != len(result.kept_groups):
        twice = sorted({g for g in result.kept_groups if result.kept_groups.count(g) > 1})
        raise PluginError(f"{label}: select kept group ids {twice[:5]} more than once", hint)
    bad = {g: w for g, w in result.group_weights.items() if not (isinstance(w, (int, float)) and math.isfinite(w) and w >= 0)}
    if bad:
        g, w = next(iter(bad.items()))
        raise PluginError(f"{label}: select gave group {g} the loss weight {w!r} (weights are finite and >= 0)", hint)


def mean_entropies(model: Any, batch: TrainBatch, micro_batch_size: int, temperature: float, world: Any = None) -> list[float]:
    """Per row, the mean policy entropy over its generated tokens (no-grad forward).

    ``world`` (:class:`~ragen_core.trainer.distributed.World`): each rank runs its share of the
    rows and the parts are summed, so every rank gets every row's value.
    """
    from ragen_core.trainer.distributed import ONE, rows_summed
    from ragen_core.trainer.modeling import batched_logprobs

    _, ent = rows_summed(world or ONE, batch, lambda rows: batched_logprobs(model, batch, rows, micro_batch_size, temperature, True), pair=True)
    m = batch.response_mask
    means: list[float] = ((ent * m).sum(1) / m.sum(1).clamp(min=1)).tolist()
    return means


def select(batch: TrainBatch, rollout_filter: Any, algorithm: Any, *, entropies: Sequence[float] | None = None,
           lost_groups: Collection[int] = (), signal: str = "score") -> Selection:
    """Run the filter and the algorithm's keep mask on ``batch`` (see the module docstring).

    Args:
        batch: The whole rollout batch.
        rollout_filter: A :class:`~ragen_core.interfaces.rollout_filter.RolloutFilter`.
        algorithm: An :class:`~ragen_core.interfaces.algorithm.Algorithm`.
        entropies: Per-row mean entropies (:func:`mean_entropies`) when the filter needs them.
        lost_groups: Groups with an episode the env pool ended (its env timed out or its worker
            failed): left out before the filter sees the batch, and never trained. A cut-off
            episode's score is not the policy's (it stops collecting format penalties: such
            episodes scored above healthy ones and got positive advantages). Counted in
            ``rollout/env_lost_groups``; a step with no other group is an empty step.
        signal: The rewards the filter sees (:data:`FILTER_SIGNALS`, the run's ``filter_signal``);
            the filter's ``rollout/in_group_reward_*`` metrics and :attr:`Selection.reward_std`
            (the variance-collapse early stop) follow it. The algorithm's keep mask and the
            update always read the scores.
    """
    grouped = episode_view(batch, entropies, signal)
    lost = set(lost_groups) & set(grouped.group_ids)
    n_all = len(set(grouped.group_ids))
    if lost:
        keep = [i for i, g in enumerate(grouped.group_ids) if g not in lost]
        grouped = GroupedRollouts(group_ids=[grouped.group_ids[i] for i in keep], rewards=[grouped.rewards[i] for i in keep],
                                  entropies=None if grouped.entropies is None else [grouped.entropies[i] for i in keep],
                                  lengths=None if grouped.lengths is None else [grouped.lengths[i] for i in keep])
    with plugin_call(rollout_filter, "select"):
        result = rollout_filter.select(grouped)
    check_filter_result(result, grouped.group_ids, rollout_filter)
    metrics = {k: float(v) for k, v in result.metrics.items() if is_number(v)}
    for reason in result.dropped.values():  # why groups were dropped, one count per reason
        key = dropped_metric(reason)
        metrics[key] = metrics.get(key, 0.0) + 1.0
    n_groups = len(set(grouped.group_ids))
    metrics.setdefault("rollout/filter_kept_count", float(len(result.kept_groups)))
    metrics.setdefault("rollout/filter_kept_ratio", len(result.kept_groups) / max(n_groups, 1))
    gids = batch.group_ids.tolist()
    kept = set(result.kept_groups)
    row_ok = [True] * len(batch)
    with plugin_call(algorithm, "keep_mask"):
        mask = algorithm.keep_mask(batch.token_rewards, batch.group_ids, batch.episode_ids)
    if mask is not None and len(mask) != len(batch):
        raise PluginError(f"{plugin_label(algorithm)}: keep_mask returned {len(mask)} values for {len(batch)} rows",
                          ["keep_mask returns one bool per row of the batch, or None"])
    if mask is not None:
        row_ok = [bool(x) for x in mask.tolist()]
        flat = {g for g, ok in zip(gids, row_ok) if not ok and g in kept}
        metrics["rollout/dynamic_sampling_dropped"] = float(len(flat))
        kept -= flat
    # what trains: the filter's groups less those the algorithm's keep mask dropped (DAPO's flat groups);
    # filter_kept_ratio stays the filter's own choice
    metrics["rollout/trained_group_ratio"] = len(kept) / max(n_all, 1)
    metrics["rollout/env_lost_groups"] = float(len(lost))
    reward_std = metrics.get("rollout/in_group_reward_std", group_reward_std(grouped.rewards, grouped.group_ids))
    return Selection(
        grouped=grouped,
        result=result,
        kept_groups=frozenset(kept),
        rows=[i for i, g in enumerate(gids) if g in kept and row_ok[i]],
        group_weights=dict(result.group_weights),
        kept_ratio=len(kept) / max(n_groups, 1),
        reward_std=reward_std,
        metrics=metrics,
    )

