"""The update half of a StarPO step: log-probs, values, advantages, critic and actor updates.

Mixed into :class:`ragen_core.trainer.trainer.Trainer`; expects ``self.model``,
``self.optimizer``, ``self.critic``, ``self.critic_optimizer``, ``self.ref_model``,
``self.algorithm``, ``self.estimator``, ``self.config`` and ``self.train_sampling``.

Mini-batches are contiguous slices of ``optim.mini_batch_size`` episodes (the last may be
smaller; nothing is duplicated, L8), split into micro-batches of ``optim.micro_batch_size``
for gradient accumulation. With the algorithm's ``global_token_norm`` (default) every
micro-batch loss is normalised by the *mini-batch's* masked-token (or sequence) count, so the
accumulated gradient equals the mini-batch loss exactly, independent of the micro-batch size
(fixes L9); otherwise each micro-batch mean is divided by the number of micro-batches as in the
reference.
"""

from __future__ import annotations

import math
from typing import Any

from ragen_core.trainer.batch import TrainBatch, micro_batches


def _masked_mean(x: Any, m: Any) -> float:
    total = float(m.sum())
    return float((x * m).sum()) / total if total > 0 else 0.0


def episode_row_weights(episode_ids: Any) -> Any:
    """``[B]`` weight ``1/n`` of each row whose episode has ``n`` rows in the batch (``optim.seq_mean_unit=episode``)."""
    import torch

    _, inverse, counts = torch.unique(episode_ids, return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse].double()


class UpdateMixin:
    """Methods of the trainer that compute and apply gradients."""

    config: Any
    algorithm: Any

    # ------------------------------------------------------------------ preparation
    def _prepare(self, batch: TrainBatch, metrics: dict[str, float], timer: Any, result: Any) -> None:
        """Fill old/ref log-probs, values and advantages of ``batch`` in place."""
        import torch

        from ragen_core.interfaces.advantage import AdvantageInputs
        from ragen_core.trainer.losses import agg_loss, kl_in_reward
        from ragen_core.trainer.modeling import batched_logprobs, batched_values

        acfg = self.algorithm.config
        micro = self.config.optim.micro_batch_size
        rows = list(range(len(batch)))
        temp = self.train_sampling.temperature
        m = batch.response_mask
        # One optimiser step per rollout (one epoch, one mini-batch) and no KL-in-reward: the old
        # policy *is* the current one, so the update's own forward (detached) supplies the old
        # log-probs and a whole no-grad forward pass is saved. Loss and gradient are unchanged.
        self._single_pass = (self.config.optim.ppo_epochs == 1 and len(batch) <= self.config.optim.mini_batch_size
                             and not acfg.use_kl_in_reward)
        if not self._single_pass:
            with timer("old_log_prob"):
                batch.old_log_probs, entropy = batched_logprobs(self.model, batch, rows, micro, temp, with_entropy=True)
            metrics["actor/entropy"] = float(agg_loss(entropy, m, acfg.loss_agg_mode))
            if batch.engine_logprobs is not None:
                diff = (batch.old_log_probs - batch.engine_logprobs).abs()
                metrics["rollout/engine_logprob_abs_diff"] = _masked_mean(diff, m)
        if self.ref_model is not None or (acfg.use_kl_loss or acfg.use_kl_in_reward):
            with timer("ref"):
                batch.ref_log_probs = self._ref_logprobs(batch, rows, micro, temp)
            metrics["rollout/ref_log_prob"] = _masked_mean(batch.ref_log_probs, m)
        if self.critic is not None:
            with timer("values"):
                batch.values = batched_values(self.critic, batch, rows, micro)
        rewards = batch.token_rewards
        shape = getattr(self.algorithm, "shape_rewards", None)  # e.g. DAPO overlong punishment
        if shape is not None:
            rewards = shape(rewards, m, max_length=self.train_sampling.max_new_tokens)
        if acfg.use_kl_in_reward:
            rewards, kl_metrics = kl_in_reward(rewards, batch.old_log_probs, batch.ref_log_probs, m, acfg.kl_in_reward_coef, acfg.kl_in_reward_type)
            metrics.update({f"actor/{k}": v for k, v in kl_metrics.items()})
        with timer("adv"):
            out = self.estimator(
                AdvantageInputs(
                    token_rewards=rewards,
                    response_mask=m,
                    group_ids=batch.group_ids,
                    values=batch.values,
                    turn_ends=batch.turn_ends,
                    episode_ids=batch.episode_ids,
                )
            )
        adv = out.advantages.float() * m
        weights = torch.tensor([float(self._group_weights.get(int(g), 1.0)) for g in batch.group_ids.tolist()])
        scaling = self.config.optim.filter_loss_scaling
        ratio = getattr(self, "_kept_ratio", 1.0)
        factor = 1.0 if scaling == "none" else (ratio if scaling == "linear" else math.sqrt(ratio))
        batch.advantages = adv * (weights * factor).unsqueeze(1)
        batch.returns = out.returns.float()
        for k, v in (out.metrics or {}).items():
            metrics[f"critic/{k}" if "/" not in k else k] = float(v)
        metrics["critic/score/mean"] = float(batch.scores.mean())
        metrics["critic/advantages/mean"] = _masked_mean(batch.advantages, m)
        metrics["critic/advantages/max"] = float(batch.advantages[m > 0].max()) if bool((m > 0).any()) else 0.0
        metrics["critic/advantages/min"] = float(batch.advantages[m > 0].min()) if bool((m > 0).any()) else 0.0
        metrics["response_length/mean"] = float(m.sum(1).mean())

    def _ref_logprobs(self, batch: TrainBatch, rows: list[int], micro: int, temp: float) -> Any:
        from ragen_core.trainer.modeling import batched_logprobs

        if self.ref_model is not None:
            return batched_logprobs(self.ref_model, batch, rows, micro, temp)[0]
        with self.model.disable_adapter():  # LoRA: the reference is the base model
            return batched_logprobs(self.model, batch, rows, micro, temp)[0]

    # ------------------------------------------------------------------ critic
    def update_critic(self, batch: TrainBatch) -> dict[str, float]:
        """Clipped value regression on the returns, same mini/micro-batching as the actor."""
        from ragen_core.trainer.losses import value_loss
        from ragen_core.trainer.prefix_session import PrefixSession

        o = self.config.optim
        acfg = self.algorithm.config
        device = next(self.critic.parameters()).device
        stats: dict[str, list[float]] = {"critic/vf_loss": [], "critic/vf_clipfrac": [], "critic/grad_norm": []}
        rows = list(range(len(batch)))
        for _ in range(o.ppo_epochs):
            for mini in micro_batches(rows, o.mini_batch_size):
                tokens = max(float(batch.response_mask[mini].sum()), 1.0)
                micros = micro_batches(mini, o.micro_batch_size)
                global_norm = acfg.global_token_norm
                loss_w = 1.0 if global_norm else 1.0 / len(micros)
                vf_loss = clipfrac = 0.0
                self.critic_optimizer.zero_grad(set_to_none=True)
                # shared prompts run once per mini-batch (exact; see ragen_core.trainer.prefix_session)
                session = PrefixSession.create(self.critic.lm, batch.input_ids[mini], batch.attention_mask[mini], batch.response_mask[mini])
                for idx in micros:
                    sub = batch.select(idx)
                    mask = sub.response_mask.to(device)
                    values = self.critic(sub.input_ids.to(device), sub.attention_mask.to(device), response_mask=mask, session=session)
                    loss, vm = value_loss(values, sub.values.to(device), sub.returns.to(device), mask, acfg.cliprange_value,
                                          global_token_count=tokens if global_norm else None)
                    (loss * loss_w).backward()
                    vf_loss += vm["vf_loss"] * loss_w
                    clipfrac += vm["vf_clipfrac"] * float(mask.sum()) / tokens
                if session is not None:
                    session.finish()
                stats["critic/vf_loss"].append(vf_loss)
                stats["critic/vf_clipfrac"].append(clipfrac)
                stats["critic/grad_norm"].append(self._clip_and_step(self.critic.parameters(), self.critic_optimizer, o.grad_clip))
        out = {k: (sum(v) / len(v) if v else 0.0) for k, v in stats.items()}
        if batch.values is not None:
            out["critic/values/mean"] = _masked_mean(batch.values, batch.response_mask)
        return out

    # ------------------------------------------------------------------ actor
    def update_actor(self, batch: TrainBatch) -> dict[str, float]:
        from ragen_core.trainer.losses import (
            agg_loss,
            kl_penalty,
            minibatch_normalisers,
            policy_loss,
        )
        from ragen_core.trainer.modeling import token_logprobs
        from ragen_core.trainer.prefix_session import PrefixSession

        o = self.config.optim
        acfg = self.algorithm.config
        mode = acfg.loss_agg_mode
        temp = self.train_sampling.temperature
        device = next(self.model.parameters()).device
        keys = ("actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl", "actor/entropy_loss", "actor/kl_loss", "actor/grad_norm")
        single = getattr(self, "_single_pass", False)
        ent_full = batch.response_mask.new_zeros(batch.response_mask.shape) if single else None
        diff_sum = 0.0
        have_engine = batch.engine_logprobs is not None
        stats: dict[str, list[float]] = {k: [] for k in keys}
        skipped = 0
        rows = list(range(len(batch)))
        params = [p for p in self.model.parameters() if p.requires_grad]
        weights = None  # optim.seq_mean_unit=episode: the turn rows of an episode share one sequence's weight
        if o.seq_mean_unit == "episode" and mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
            weights = episode_row_weights(batch.episode_ids)
        for _ in range(o.ppo_epochs):
            for mini in micro_batches(rows, o.mini_batch_size):
                m_mini = batch.response_mask[mini]
                mini_tokens = max(float(m_mini.sum()), 1.0)
                extra = getattr(self.algorithm, "agg_kwargs", None) or {}
                agg_kw = minibatch_normalisers(mode, m_mini, global_norm=acfg.global_token_norm, norm_constant=extra.get("norm_constant"),
                                               row_weights=None if weights is None else weights[mini])
                micros = micro_batches(mini, o.micro_batch_size)
                loss_w = 1.0 if agg_kw else 1.0 / len(micros)
                # losses: summed over micro-batches (they are already mini-batch normalised) or averaged;
                # masked-mean metrics: weighted by each micro-batch's token share
                acc = {k: 0.0 for k in keys}
                self.optimizer.zero_grad(set_to_none=True)
                # shared prompts run once per mini-batch (exact; see ragen_core.trainer.prefix_session)
                session = PrefixSession.create(self.model, batch.input_ids[mini], batch.attention_mask[mini], batch.response_mask[mini])
                for idx in micros:
                    sub = batch.select(idx)
                    mask = sub.response_mask.to(device)
                    kw = agg_kw if weights is None else {**agg_kw, "row_weights": weights[idx].to(device)}
                    share = float(mask.sum()) / mini_tokens
                    need_entropy = acfg.entropy_coeff != 0 or single
                    logp, entropy = token_logprobs(self.model, sub.input_ids.to(device), sub.attention_mask.to(device), temperature=temp,
                                                   with_entropy=need_entropy, response_mask=mask, session=session)
                    if single:
                        sub.old_log_probs = logp.detach().cpu()
                        ent_full[idx, : entropy.shape[1]] = entropy.detach().float().cpu()
                        if have_engine:
                            diff_sum += float(((logp.detach().cpu() - sub.engine_logprobs).abs() * sub.response_mask).sum())
                    pg, pm = policy_loss(logp, sub.old_log_probs.to(device), sub.advantages.to(device), mask,
                                         clip_low=acfg.clip_ratio_low, clip_high=acfg.clip_ratio_high, clip_c=acfg.clip_ratio_c,
                                         agg_mode=mode, **kw)
                    loss = pg
                    acc["actor/pg_loss"] += pm["pg_loss"] * loss_w
                    for k in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
                        acc[f"actor/{k}"] += pm[k] * share
                    if need_entropy:
                        ent_loss = agg_loss(entropy, mask, mode, **kw)
                        loss = loss - acfg.entropy_coeff * ent_loss
                        acc["actor/entropy_loss"] += float(ent_loss.detach()) * loss_w
                    if acfg.use_kl_loss:
                        kl = agg_loss(kl_penalty(logp, sub.ref_log_probs.to(device), acfg.kl_loss_type), mask, mode, **kw)
                        loss = loss + acfg.kl_loss_coef * kl
                        acc["actor/kl_loss"] += float(kl.detach()) * loss_w
                    (loss * loss_w).backward()
                if session is not None:
                    session.finish()
                norm = self._clip_and_step(params, self.optimizer, o.grad_clip)
                acc["actor/grad_norm"] = norm
                for k in keys:
                    stats[k].append(acc[k])
                skipped += int(not math.isfinite(norm))
        out = {k: (sum(v) / len(v) if v else 0.0) for k, v in stats.items()}
        out["actor/kl_coef"] = float(acfg.kl_loss_coef if acfg.use_kl_loss else 0.0)
        out["actor/skipped_steps"] = float(skipped)
        out["actor/lr"] = float(self.optimizer.param_groups[0]["lr"])
        if single:
            tokens = max(float(batch.response_mask.sum()), 1.0)
            out["actor/entropy"] = float(agg_loss(ent_full, batch.response_mask, mode))
            if have_engine:
                out["rollout/engine_logprob_abs_diff"] = diff_sum / tokens
        return out

    @staticmethod
    def _clip_and_step(params: Any, optimizer: Any, max_norm: float) -> float:
        """Clip the global grad norm; skip (and zero) the step when it is not finite."""
        import torch

        params = [p for p in params if p.grad is not None]
        if not params:
            return 0.0
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if math.isfinite(norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm
