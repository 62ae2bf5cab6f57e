"""The update half of a StarPO step, as plain functions over values (spec 7, 8)::

    prepared = prepare(batch, model=..., ...)        # old/ref log-probs, values, advantages
    metrics |= update_critic(prepared, critic, ...)  # value regression (algorithms with a critic)
    metrics |= update_actor(prepared, model, ...)    # clipped policy gradient

:func:`prepare` takes the kept rows of a step (:class:`~ragen_core.trainer.batch.TrainBatch`)
and returns a :class:`PreparedBatch`: a new batch with the old-policy log-probs (no-grad
forward), the reference log-probs (only with a KL term, L7), the critic's values, and the
advantages from the algorithm's estimator on the algorithm's shaped rewards, multiplied by the
filter's group weights and ``optim.filter_loss_scaling``. Until the update's first optimiser
step the old policy *is* the current one, so with one epoch and no KL in the reward the old
log-probs of the first mini-batch are taken from the actor update's own forward
(``old_from_update_rows``); only the later mini-batches' rows get the separate no-grad pass (none
at all when the batch is one mini-batch). That saves a forward over ``optim.mini_batch_size``
rows per step (half the pass with the default 32 rows in mini-batches of 16) without changing
the loss or gradient beyond float rounding. A batch that already carries
``old_log_probs`` keeps them: with async rollout they are the behaviour policy's, computed on the
weights that sampled the episodes (:mod:`ragen_core.trainer.async_rollout`).

:func:`update_actor` and :func:`update_critic` are the PPO loops: for each epoch, for each
mini-batch (contiguous slices of ``optim.mini_batch_size`` rows; the last may be smaller and
nothing is duplicated, L8, unless ``compat.batch_adjust`` copied rows before :func:`prepare`),
for each micro-batch of ``optim.micro_batch_size`` rows: forward, loss, backward; then clip the
global grad norm and step (a non-finite norm skips the step).
With the algorithm's ``global_token_norm`` (default) every micro-batch loss is normalised by the
*mini-batch's* token (or sequence) count, so the accumulated gradient equals the mini-batch
loss exactly, whatever the micro-batch size (fixes L9); otherwise each micro-batch mean is
divided by the number of micro-batches as in the reference.

Prompts shared by rows of a mini-batch run once per mini-batch (:func:`shared_prefix`, exact;
see :mod:`ragen_core.trainer.prefix_session`); the loops only pass its session to the forward.

Data-parallel (``world``, :mod:`ragen_core.trainer.distributed`): every function takes the
*global* batch on every rank. :func:`prepare` runs its no-grad forwards on this rank's share of
the rows and sums the parts; the update loops cut each mini-batch into the one-process
micro-batches, run this rank's share of them with the global mini-batch's normalisers, and sum
the gradients over ranks before clipping, so each optimiser step is the one-process step. With
FSDP (``world.sharded``) every rank runs as many micro-batches as the others (a zero-weight padding
one where its share is shorter) and FSDP sums the gradients during ``backward``.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ragen_core.errors import PluginError
from ragen_core.registry import plugin_call, plugin_label
from ragen_core.trainer.batch import TrainBatch, micro_batches
from ragen_core.trainer.distributed import ONE, World, rows_summed

if TYPE_CHECKING:
    import torch

    from ragen_core.interfaces.algorithm import PolicyLossInputs

Timer = Callable[[str], Any]
"""``timer("gen")`` returns a context manager that times its block (or does nothing)."""

ACTOR_KEYS = ("actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl", "actor/entropy_loss", "actor/kl_loss",
              "actor/grad_norm")
_SEQ_MEAN_MODES = ("seq-mean-token-mean", "seq-mean-token-sum")


@dataclass(frozen=True)
class PreparedBatch:
    """The kept rows of a step, ready for the update (returned by :func:`prepare`)."""

    batch: TrainBatch
    """``advantages`` and ``returns`` set; ``old_log_probs`` (0 on the first
    :attr:`old_from_update_rows` rows, None when that is every row); ``ref_log_probs`` with a KL
    term; ``values`` with a critic."""
    old_from_update_rows: int = 0
    """The first mini-batch's rows (0, or ``min(len(batch), optim.mini_batch_size)``): the actor
    update's own (detached) forward supplies their old log-probs, before its first optimiser step;
    ``actor/entropy`` and the engine comparison then come from the update too."""
    metrics: dict[str, float] = field(default_factory=dict)
    """``actor/entropy``, ``rollout/...`` log-prob comparisons, ``critic/...`` advantage stats."""
    rest_entropy: Any = None
    """With :attr:`old_from_update_rows`: the separate pass's entropies (``[B, L-1]``, 0 on the
    first mini-batch's rows) that ``actor/entropy`` adds to the update's."""
    rest_engine_diff: float = 0.0
    """Likewise, the summed ``|old - engine|`` log-prob difference over the other rows."""


# ---------------------------------------------------------------------- preparation
def prepare(
    batch: TrainBatch,
    *,
    model: Any,
    ref_model: Any,
    critic: Any,
    algorithm: Any,
    estimator: Any,
    optim: Any,
    sampling: Any,
    group_weights: Mapping[int, float] | None = None,
    kept_ratio: float = 1.0,
    timer: Timer | None = None,
    world: World = ONE,
) -> PreparedBatch:
    """Old/ref log-probs, values and advantages of ``batch`` (see the module docstring).

    Args:
        batch: The rows that train (not modified).
        model: The policy.
        ref_model: Frozen KL reference, or None (no KL term, or LoRA: the reference is the
            policy with its adapters disabled).
        critic: The value model, or None.
        algorithm: The :class:`~ragen_core.interfaces.algorithm.Algorithm` (config, reward shaping).
        estimator: The advantage estimator.
        optim: The run's ``optim`` section (epochs, batch sizes, ``filter_loss_scaling``).
        sampling: Training :class:`~ragen_core.interfaces.engine.SamplingParams` (temperature,
            ``max_new_tokens`` for reward shaping).
        group_weights: The filter's loss weight per group (missing groups weigh 1).
        kept_ratio: Kept groups / all groups, for ``optim.filter_loss_scaling``.
        timer: Times the ``old_log_prob``, ``ref``, ``values`` and ``adv`` phases.
        world: The ranks of a data-parallel run; each runs the forwards of its share of the rows.
    """
    import torch

    from ragen_core.interfaces.advantage import AdvantageInputs
    from ragen_core.trainer.losses import agg_loss, kl_in_reward
    from ragen_core.trainer.modeling import batched_logprobs, batched_values

    timer = timer or _no_timer
    acfg = algorithm.config
    micro, temp = optim.micro_batch_size, sampling.temperature
    m = batch.response_mask
    metrics: dict[str, float] = {}
    supplied = batch.old_log_probs is not None  # the behaviour policy's (async rollout)
    # one epoch, no KL in the reward: the first mini-batch's old log-probs come from the update itself
    lead = min(len(batch), optim.mini_batch_size) if not supplied and optim.ppo_epochs == 1 and not acfg.use_kl_in_reward else 0
    old, ref, values = batch.old_log_probs, None, None
    rest_entropy, rest_diff = None, 0.0
    if supplied:
        assert old is not None
        if batch.engine_logprobs is not None:
            metrics["rollout/engine_logprob_abs_diff"] = _masked_mean((old - batch.engine_logprobs).abs(), m)
    elif lead < len(batch):
        rest = list(range(lead, len(batch)))
        with timer("old_log_prob"):
            old, entropy = rows_summed(world, batch, lambda rows: batched_logprobs(model, batch, rows, micro, temp, with_entropy=True), pair=True,
                                       rows=rest)
        if lead == 0:
            metrics["actor/entropy"] = float(agg_loss(entropy, m, acfg.loss_agg_mode))
            if batch.engine_logprobs is not None:
                metrics["rollout/engine_logprob_abs_diff"] = _masked_mean((old - batch.engine_logprobs).abs(), m)
        else:  # completed by the update's record of the first mini-batch
            rest_entropy = entropy
            if batch.engine_logprobs is not None:
                rest_diff = float(((old - batch.engine_logprobs).abs() * m)[rest].sum())
    if ref_model is not None or acfg.use_kl_loss or acfg.use_kl_in_reward:
        with timer("ref"):
            ref = rows_summed(world, batch, lambda rows: (reference_logprobs(model, ref_model, batch, rows, micro, temp), None))[0]
        metrics["rollout/ref_log_prob"] = _masked_mean(ref, m)
    if critic is not None:
        with timer("values"):
            values = rows_summed(world, batch, lambda rows: (batched_values(critic, batch, rows, micro), None))[0]
    with plugin_call(algorithm, "shape_rewards"):
        rewards = algorithm.shape_rewards(batch.token_rewards, m, max_length=sampling.max_new_tokens)
    _check_shape(rewards, batch.token_rewards, algorithm, "the tensor shape_rewards returned", "shape_rewards")
    if not bool(torch.isfinite(rewards.float()[m > 0]).all()):  # (else the estimator would be blamed for its NaN advantages)
        raise PluginError(f"{plugin_label(algorithm)}: the rewards shape_rewards returned are NaN or infinite on trained tokens",
                          ["shape_rewards reshapes the env's (finite) rewards: keep every value finite"])
    if acfg.use_kl_in_reward:
        assert old is not None and ref is not None  # both computed above when the KL is in the reward
        rewards, kl_metrics = kl_in_reward(rewards, old, ref, m, acfg.kl_in_reward_coef, acfg.kl_in_reward_type)
        metrics.update({f"actor/{k}": v for k, v in kl_metrics.items()})
    with timer("adv"), plugin_call(estimator, "__call__ (advantages)"):
        out = estimator(AdvantageInputs(token_rewards=rewards, response_mask=m, group_ids=batch.group_ids, values=values,
                                        turn_ends=batch.turn_ends, episode_ids=batch.episode_ids))
    _check_advantages(out, rewards, m, estimator)
    weights = torch.tensor([float((group_weights or {}).get(int(g), 1.0)) for g in batch.group_ids.tolist()])
    scaling = optim.filter_loss_scaling
    factor = 1.0 if scaling == "none" else (kept_ratio if scaling == "linear" else math.sqrt(kept_ratio))
    if scaling != "none":  # the filter logs its own scale; here the trainer scales instead (never both: refused)
        metrics["rollout/filter_loss_scale"] = factor
    advantages = (out.advantages.float() * m) * (weights * factor).unsqueeze(1)
    prepared = replace(batch, old_log_probs=old, ref_log_probs=ref, values=values, advantages=advantages, returns=out.returns.float())
    for k, v in (out.metrics or {}).items():
        metrics[f"critic/{k}" if "/" not in k else k] = float(v)
    trained = m > 0
    metrics["critic/score/mean"] = float(batch.scores.mean())
    metrics["critic/advantages/mean"] = _masked_mean(advantages, m)
    metrics["critic/advantages/max"] = float(advantages[trained].max()) if bool(trained.any()) else 0.0
    metrics["critic/advantages/min"] = float(advantages[trained].min()) if bool(trained.any()) else 0.0
    metrics["response_length/mean"] = float(m.sum(1).mean())
    return PreparedBatch(prepared, lead, metrics, rest_entropy, rest_diff)


def reference_logprobs(model: Any, ref_model: Any, batch: TrainBatch, rows: list[int], micro: int, temperature: float) -> Any:
    """No-grad log-probs of the KL reference: ``ref_model``, or (LoRA) ``model`` with its adapters disabled."""
    from ragen_core.trainer.modeling import batched_logprobs

    if ref_model is not None:
        return batched_logprobs(ref_model, batch, rows, micro, temperature)[0]
    with model.disable_adapter():
        return batched_logprobs(model, batch, rows, micro, temperature)[0]


# ---------------------------------------------------------------------- critic
def update_critic(prepared: PreparedBatch, *, critic: Any, optimizer: Any, algorithm_config: Any, optim: Any,
                  world: World = ONE) -> dict[str, float]:
    """Clipped value regression on the returns, with the actor's epochs and mini/micro-batches
    (``world``: this rank runs its share of each mini-batch's micro-batches; see the module docstring)."""
    from ragen_core.trainer.losses import value_loss

    batch, acfg = prepared.batch, algorithm_config
    device = next(critic.parameters()).device
    stats: dict[str, list[float]] = {"critic/vf_loss": [], "critic/vf_clipfrac": [], "critic/grad_norm": []}
    for _epoch in range(optim.ppo_epochs):
        for mini in micro_batches(range(len(batch)), optim.mini_batch_size):
            tokens = max(float(batch.response_mask[mini].sum()), 1.0)
            micros = micro_batches(mini, optim.micro_batch_size)
            loss_w = 1.0 if acfg.global_token_norm else 1.0 / len(micros)
            mine = _my_micros(world, micros)
            vf_loss = clipfrac = 0.0
            optimizer.zero_grad(set_to_none=True)
            with shared_prefix(critic.lm, batch, [i for idx, _ in mine for i in idx]) as session:
                for idx, trains in mine:
                    sub = batch.select(idx)
                    mask = sub.response_mask.to(device)
                    values = critic(sub.input_ids.to(device), sub.attention_mask.to(device), response_mask=mask, session=session)
                    loss, vm = value_loss(values, _filled(sub.values, device), _filled(sub.returns, device), mask, acfg.cliprange_value,
                                          global_token_count=tokens if acfg.global_token_norm else None)
                    w = loss_w if trains else 0.0  # a padding micro-batch (FSDP) counts nothing
                    (loss * w).backward()
                    vf_loss += vm["vf_loss"] * w
                    clipfrac += vm["vf_clipfrac"] * float(mask.sum()) / tokens * (w > 0)
            vf_loss, clipfrac = world.sum_floats([vf_loss, clipfrac])
            world.sum_grads(p for p in critic.parameters() if p.requires_grad)
            stats["critic/vf_loss"].append(vf_loss)
            stats["critic/vf_clipfrac"].append(clipfrac)
            stats["critic/grad_norm"].append(clip_and_step(critic.parameters(), optimizer, optim.grad_clip))
    out = {k: _mean(v) for k, v in stats.items()}
    out["critic/skipped_steps"] = float(sum(not math.isfinite(n) for n in stats["critic/grad_norm"]))
    if batch.values is not None:
        out["critic/values/mean"] = _masked_mean(batch.values, batch.response_mask)
    return out


# ---------------------------------------------------------------------- actor
def update_actor(prepared: PreparedBatch, *, model: Any, optimizer: Any, algorithm: Any, optim: Any, temperature: float,
                 world: World = ONE) -> dict[str, float]:
    """The PPO actor update: the algorithm's token loss (the clipped surrogate by default), minus
    ``entropy_coeff`` x entropy, plus ``kl_loss_coef`` x KL to the reference; returns the ``actor/...`` metrics (means over mini-batches),
    with the algorithm's own metrics as ``actor/algo/<name>`` (weighted by their micro-batch's tokens, as the clip fractions are).

    Args:
        prepared: From :func:`prepare`.
        model: The policy (trained in place).
        optimizer: Its optimiser.
        algorithm: Loss settings (``algorithm.config``) and ``algorithm.agg_kwargs``.
        optim: The run's ``optim`` section (epochs, batch sizes, ``grad_clip``, ``seq_mean_unit``).
        temperature: Sampling temperature the log-probs are computed at (spec 7.4).
        world: The ranks of a data-parallel run: this rank runs its share of each mini-batch's
            micro-batches, normalised by the global mini-batch, and gradients are summed over ranks.
    """
    from ragen_core.trainer.losses import agg_loss, kl_penalty, minibatch_normalisers
    from ragen_core.trainer.modeling import token_logprobs

    batch, acfg = prepared.batch, algorithm.config
    mode = acfg.loss_agg_mode
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    norm_constant = algorithm.agg_kwargs.get("norm_constant")
    # optim.seq_mean_unit=episode: the turn rows of an episode share one sequence's weight
    row_w = episode_row_weights(batch.episode_ids) if optim.seq_mean_unit == "episode" and mode in _SEQ_MEAN_MODES else None
    lead = prepared.old_from_update_rows
    with_entropy = acfg.entropy_coeff != 0 or lead > 0
    old_policy = _OldPolicyRecord(batch, prepared.rest_entropy, prepared.rest_engine_diff) if lead else None
    algo_keys = algorithm_metric_keys(algorithm)
    summed = (*ACTOR_KEYS[:-1], *algo_keys)  # every key but grad_norm: summed over ranks, the same keys in the same order on each
    stats: dict[str, list[float]] = {k: [] for k in (*ACTOR_KEYS, *algo_keys)}
    skipped = 0
    for epoch in range(optim.ppo_epochs):
        for mini_no, mini in enumerate(micro_batches(range(len(batch)), optim.mini_batch_size)):
            # before the first optimiser step the current policy is the old one (prepare left these rows out)
            from_update = lead > 0 and epoch == 0 and mini_no == 0
            if from_update and mini != list(range(lead)):
                raise AssertionError(f"the first mini-batch is rows {mini[0]}..{mini[-1]}, prepare left out rows 0..{lead - 1}")
            m_mini = batch.response_mask[mini]
            agg_kw = minibatch_normalisers(mode, m_mini, global_norm=acfg.global_token_norm, norm_constant=norm_constant,
                                           row_weights=None if row_w is None else row_w[mini])
            micros = micro_batches(mini, optim.micro_batch_size)
            # normalised by the mini-batch: micro-batch losses add up; else average the micro-batch means
            loss_w = 1.0 if agg_kw else 1.0 / len(micros)
            mini_tokens = max(float(m_mini.sum()), 1.0)
            acc = dict.fromkeys(stats, 0.0)
            mine = _my_micros(world, micros)
            optimizer.zero_grad(set_to_none=True)
            with shared_prefix(model, batch, [i for idx, _ in mine for i in idx]) as session:
                for idx, trains in mine:
                    w = loss_w if trains else 0.0  # a padding micro-batch (FSDP) counts nothing
                    sub = batch.select(idx)
                    mask = sub.response_mask.to(device)
                    kw = agg_kw if row_w is None else {**agg_kw, "row_weights": row_w[idx].to(device)}
                    logp, entropy = token_logprobs(model, sub.input_ids.to(device), sub.attention_mask.to(device), temperature=temperature,
                                                   with_entropy=with_entropy, response_mask=mask, session=session)
                    if from_update and trains:
                        assert old_policy is not None
                        old_policy.record(idx, sub, logp, entropy)
                    old = logp.detach() if from_update else _filled(sub.old_log_probs, device)
                    loss, pm = algorithm_policy_loss(algorithm, policy_loss_inputs(sub, logp, old, mask), mode, **kw)
                    acc["actor/pg_loss"] += pm["pg_loss"] * w
                    share = float(mask.sum()) / mini_tokens * trains  # token-weighted means of the per-token metrics
                    for k in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", *(k.removeprefix("actor/") for k in algo_keys)):
                        acc[f"actor/{k}"] += pm[k] * share
                    if with_entropy:
                        assert entropy is not None  # asked for with with_entropy
                        ent_loss = agg_loss(entropy, mask, mode, **kw)
                        loss = loss - acfg.entropy_coeff * ent_loss
                        acc["actor/entropy_loss"] += float(ent_loss.detach()) * w
                    if acfg.use_kl_loss:
                        kl = agg_loss(kl_penalty(logp, _filled(sub.ref_log_probs, device), acfg.kl_loss_type), mask, mode, **kw)
                        loss = loss + acfg.kl_loss_coef * kl
                        acc["actor/kl_loss"] += float(kl.detach()) * w
                    (loss * w).backward()
            acc.update(zip(summed, world.sum_floats([acc[k] for k in summed])))
            world.sum_grads(params)
            acc["actor/grad_norm"] = clip_and_step(params, optimizer, optim.grad_clip)
            skipped += int(not math.isfinite(acc["actor/grad_norm"]))
            for k in stats:
                stats[k].append(acc[k])
    out = {k: _mean(v) for k, v in stats.items()}
    out["actor/kl_coef"] = float(acfg.kl_loss_coef if acfg.use_kl_loss else 0.0)
    out["actor/skipped_steps"] = float(skipped)
    out["actor/lr"] = float(optimizer.param_groups[0]["lr"])
    if old_policy is not None:
        out.update(old_policy.metrics(mode, world))
    return out


class _OldPolicyRecord:
    """With ``old_from_update_rows``: what :func:`prepare` would have measured on its old-policy
    pass (``actor/entropy``, ``rollout/engine_logprob_abs_diff``), gathered from the update's
    forward of the first mini-batch and added to the separate pass's values for the other rows."""

    def __init__(self, batch: TrainBatch, rest_entropy: Any = None, rest_diff: float = 0.0) -> None:
        self.batch = batch
        self.entropy = batch.response_mask.new_zeros(batch.response_mask.shape)
        self.diff_sum = 0.0
        self.rest_entropy, self.rest_diff = rest_entropy, rest_diff

    def record(self, idx: list[int], sub: TrainBatch, logp: Any, entropy: Any) -> None:
        self.entropy[idx, : entropy.shape[1]] = entropy.detach().float().cpu()
        if sub.engine_logprobs is not None:
            self.diff_sum += float(((logp.detach().cpu() - sub.engine_logprobs).abs() * sub.response_mask).sum())

    def metrics(self, agg_mode: str, world: World = ONE) -> dict[str, float]:
        """The metrics over the whole batch (``world``: each rank recorded its own rows; the rest are 0)."""
        from ragen_core.trainer.losses import agg_loss

        m = self.batch.response_mask
        entropy = world.all_sum(self.entropy)  # (the separate pass's rows are already summed over ranks)
        if self.rest_entropy is not None:
            entropy = entropy + self.rest_entropy.to(entropy.dtype)
        out = {"actor/entropy": float(agg_loss(entropy, m, agg_mode))}
        if self.batch.engine_logprobs is not None:
            out["rollout/engine_logprob_abs_diff"] = (world.sum_floats([self.diff_sum])[0] + self.rest_diff) / max(float(m.sum()), 1.0)
        return out


# ---------------------------------------------------------------------- shared pieces
@contextlib.contextmanager
def shared_prefix(model: Any, batch: TrainBatch, rows: list[int]) -> Iterator[Any]:
    """A :class:`~ragen_core.trainer.prefix_session.PrefixSession` for one optimiser step's rows
    (or None when sharing does not pay off); its deferred prompt backward runs when the block
    ends, i.e. after the last micro-batch's ``backward`` and before clipping."""
    from ragen_core.trainer.prefix_session import PrefixSession

    session = PrefixSession.create(model, batch.input_ids[rows], batch.attention_mask[rows], batch.response_mask[rows])
    yield session
    if session is not None:
        session.finish()


def clip_and_step(params: Any, optimizer: Any, max_norm: float) -> float:
    """Clip the global grad norm and step; a non-finite norm skips the step. Grads are zeroed after."""
    import torch

    params = [p for p in params if p.grad is not None]
    if not params:
        return 0.0
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    norm = float(total.full_tensor() if hasattr(total, "full_tensor") else total)  # FSDP: a DTensor
    if math.isfinite(norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def _my_micros(world: World, micros: list[list[int]]) -> list[tuple[list[int], bool]]:
    """This rank's contiguous share of a mini-batch's micro-batches (all of them in one process),
    each with True. Sharded (FSDP), every rank must run as many forward/backward passes as the
    others (their collectives pair up): a shorter share ends with a padding micro-batch (a copy
    of the first, False) whose loss is multiplied by 0."""
    mine = [(micros[i], True) for i in world.share(len(micros))]
    if world.sharded:
        mine += [(micros[0], False)] * (-(-len(micros) // world.size) - len(mine))
    return mine


def episode_row_weights(episode_ids: Any) -> Any:
    """``[B]`` weight ``1/n`` of each row whose episode has ``n`` rows in the batch (``optim.seq_mean_unit=episode``)."""
    import torch

    _, inverse, counts = torch.unique(episode_ids, return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse].double()


def algorithm_metric_keys(algorithm: Any) -> tuple[str, ...]:
    """``actor/algo/<name>`` for each of the algorithm's :attr:`~ragen_core.interfaces.algorithm.Algorithm.metric_names`."""
    return tuple(f"actor/algo/{name}" for name in getattr(algorithm, "metric_names", ()))


def algorithm_policy_loss(algorithm: Any, inputs: PolicyLossInputs, agg_mode: str, **agg: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """``algorithm.token_loss(inputs)`` (:meth:`~ragen_core.interfaces.algorithm.Algorithm.token_loss`),
    checked, then aggregated with ``agg_mode`` and the mini-batch's normalisers ``agg``
    (:func:`~ragen_core.trainer.losses.aggregate_policy_loss`): ``(loss, policy metrics)``, the
    algorithm's own metrics among them as ``algo/<name>`` (floats)."""
    import torch

    from ragen_core.interfaces.algorithm import PolicyLossOutputs
    from ragen_core.trainer.losses import POLICY_LOSS_FLAGS, aggregate_policy_loss

    with plugin_call(algorithm, "token_loss"):
        out = algorithm.token_loss(inputs)
    log_probs, mask = inputs.log_probs, inputs.response_mask
    hint = ("token_loss returns PolicyLossOutputs(loss=..., flags=..., metrics=...): a per-token loss tensor, per-token bool tensors "
            "and the scalars named in metric_names (none by default)")
    if not isinstance(out, PolicyLossOutputs) or not isinstance(out.flags, dict) or not isinstance(out.metrics, dict):
        raise PluginError(f"{plugin_label(algorithm)}: token_loss returned a {type(out).__name__}, not PolicyLossOutputs", [hint])
    per_token, flags = out.loss, out.flags
    _check_shape(per_token, log_probs, algorithm, "the loss tensor token_loss returned", "token_loss")
    if log_probs.requires_grad and per_token.grad_fn is None:
        raise PluginError(f"{plugin_label(algorithm)}: the loss token_loss returned does not depend on log_probs, so it trains nothing",
                          ["compute the loss from inputs.log_probs (not a detached copy)"])
    unknown = sorted(set(flags) - set(POLICY_LOSS_FLAGS))
    if unknown:
        raise PluginError(f"{plugin_label(algorithm)}: token_loss returned flags {unknown}; known flags: {', '.join(POLICY_LOSS_FLAGS)}", [hint])
    for name, flag in flags.items():
        _check_shape(flag, log_probs, algorithm, f"the {name!r} flags token_loss returned", "token_loss")
        if flag.dtype != torch.bool:  # a float 'flag' (a ratio, a 0/1 float mask) was logged as a fraction it is not
            raise PluginError(f"{plugin_label(algorithm)}: the {name!r} flags token_loss returned are {flag.dtype}, not bool",
                              ["flags mark tokens (e.g. ratio > 1 + clip_high): return a bool tensor; a scalar of the algorithm's own "
                               "goes in metrics (metric_names)"])
    own = _own_metrics(algorithm, out.metrics)
    loss, metrics = aggregate_policy_loss(per_token, flags, log_probs, inputs.old_log_probs, mask, agg_mode, **agg)
    metrics.update({f"algo/{name}": value for name, value in own.items()})
    given = (log_probs, inputs.old_log_probs, inputs.advantages)
    if not math.isfinite(metrics["pg_loss"]):
        _refuse_non_finite_loss(algorithm, per_token, given, mask)
    bad = [name for name, value in own.items() if not math.isfinite(value)]
    if bad and all(bool(torch.isfinite(t.detach()).all()) for t in given):  # from non-finite inputs: the divergence guard's
        raise PluginError(f"{plugin_label(algorithm)}: the metric {bad[0]!r} token_loss returned is {own[bad[0]]}, from finite inputs",
                          ["a metric is logged as actor/algo/<name> and must be finite; a masked mean over a micro-batch without "
                           "trained tokens divides by 0: clamp the count to at least 1"])
    return loss, metrics


def _own_metrics(algorithm: Any, metrics: dict[Any, Any]) -> dict[str, float]:
    """The metrics ``token_loss`` returned as floats, in :attr:`metric_names` order; refused (one
    line naming the algorithm) unless they are exactly the declared names, each one number."""
    import torch

    names = tuple(getattr(algorithm, "metric_names", ()))
    missing = [n for n in names if n not in metrics]
    extra = [k for k in metrics if k not in names]
    if missing or extra:
        said = ([f"lack {', '.join(map(repr, missing))}, declared in its metric_names"] if missing else []) + \
               ([f"hold {', '.join(map(repr, extra))}, not in its metric_names ({', '.join(names) or 'none declared'})"] if extra else [])
        raise PluginError(f"{plugin_label(algorithm)}: the metrics token_loss returned {' and '.join(said)}",
                          ["declare every metric token_loss returns in the algorithm's metric_names and return each on every call "
                           "(data-parallel ranks reduce the same keys)"])
    out = {}
    for name in names:
        value = metrics[name]
        if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool:
            out[name] = float(value.detach())
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):  # numpy's floats too (np.float32 was refused)
            out[name] = float(value)
        else:  # a bool (a tensor's too) is a flag, not a metric
            got = (("a bool tensor" if value.dtype == torch.bool else f"a tensor of shape {tuple(value.shape)}")
                   if isinstance(value, torch.Tensor) else f"a {type(value).__name__}")
            raise PluginError(f"{plugin_label(algorithm)}: the metric {name!r} token_loss returned is {got}, not one number",
                              ["return each metric as a float or a one-element tensor (e.g. a masked mean over the micro-batch)"])
    return out


def policy_loss_inputs(sub: TrainBatch, log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor) -> PolicyLossInputs:
    """:class:`~ragen_core.interfaces.algorithm.PolicyLossInputs` of the micro-batch ``sub`` (on ``log_probs``' device)."""
    from ragen_core.interfaces.algorithm import PolicyLossInputs

    device = log_probs.device
    return PolicyLossInputs(log_probs=log_probs, old_log_probs=old_log_probs, advantages=_filled(sub.advantages, device), response_mask=mask,
                            group_ids=sub.group_ids.to(device), episode_ids=sub.episode_ids.to(device), turn_ends=sub.turn_ends,
                            ref_log_probs=None if sub.ref_log_probs is None else sub.ref_log_probs.to(device))


def _refuse_non_finite_loss(algorithm: Any, per_token: torch.Tensor, inputs: tuple[torch.Tensor, ...], mask: torch.Tensor) -> None:
    """A NaN or infinite policy loss from finite inputs is the algorithm's own (one line naming
    it; a NaN or infinite metric of its own likewise, in :func:`algorithm_policy_loss`); from
    inputs non-finite anywhere, trained tokens or not (NaN x 0 is NaN whatever the algorithm
    does), it is the model's or the batch's, left to the divergence guard (a skipped
    optimiser step)."""
    import torch

    trained = mask > 0
    if not all(bool(torch.isfinite(t.detach()).all()) for t in inputs):
        return
    bad = ~torch.isfinite(per_token.detach())
    empty = int((bad.any(1) & ~trained.any(1)).sum())
    if empty:
        where = f"on {empty} row(s) whose response_mask is empty"
    elif bool(bad.any()):
        where = "on trained tokens" if bool(bad[trained].any()) else "outside the response_mask"
    else:
        where = "in its aggregate (finite per token, too large to add up)"
    raise PluginError(f"{plugin_label(algorithm)}: token_loss gave a NaN or infinite loss {where}, from finite inputs",
                      ["a row may have no trained tokens (an all-zero response_mask) and NaN x 0 is NaN: clamp per-row token "
                       "counts to at least 1 and keep every value finite, masked or not"])


def _filled(tensor: torch.Tensor | None, device: Any) -> torch.Tensor:
    """A batch field that :func:`prepare` fills whenever the update reads it, moved to ``device``."""
    assert tensor is not None, "prepare() fills every batch field the update reads"
    return tensor.to(device)


def _check_shape(value: Any, like: Any, plugin: Any, what: str, call: str) -> None:
    """Refuse a plugin's tensor (``what``, returned by ``call``) that is not shaped like ``like``
    (one line naming the plugin)."""
    shape = getattr(value, "shape", None)
    if shape is None or tuple(shape) != tuple(like.shape):
        got = f"has shape {tuple(shape)}" if shape is not None else f"is a {type(value).__name__}"
        raise PluginError(f"{plugin_label(plugin)}: {what} {got}, expected a tensor of shape {tuple(like.shape)}",
                          [f"{call} returns one value per token of each row, shaped like its input"])


def _check_advantages(out: Any, rewards: Any, mask: Any, estimator: Any) -> None:
    """The estimator's answer: :class:`AdvantageOutputs` shaped like the rewards, finite on trained tokens."""
    import torch

    from ragen_core.interfaces.advantage import AdvantageOutputs

    if not isinstance(out, AdvantageOutputs):
        raise PluginError(f"{plugin_label(estimator)}: returned a {type(out).__name__}, not AdvantageOutputs",
                          ["an estimator returns ragen_core.interfaces.advantage.AdvantageOutputs"])
    _check_shape(out.advantages, rewards, estimator, "the advantages tensor it returned", "the estimator")
    _check_shape(out.returns, rewards, estimator, "the returns tensor it returned", "the estimator")
    if not bool(torch.isfinite(out.advantages.float()[mask > 0]).all()):
        raise PluginError(f"{plugin_label(estimator)}: advantages are NaN or infinite on trained tokens",
                          ["check the estimator's normalisation (a zero std needs an epsilon)"])


def _masked_mean(x: Any, m: Any) -> float:
    total = float(m.sum())
    return float((x * m).sum()) / total if total > 0 else 0.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _no_timer(key: str) -> Any:
    return contextlib.nullcontext()
