"""Conformance checks for specs, advantage estimators, rollout filters and diagnostics."""

from __future__ import annotations

import copy
import json
import math
import pickle
import re
import subprocess
import sys
from typing import Any

from ragen_core.specs import PluginConfig, PluginSpec

HEAVY_MODULES = ("torch", "transformers", "vllm", "ray")


def check_spec_roundtrip(spec: PluginSpec, config: PluginConfig | None = None) -> None:
    """Spec and config survive JSON and pickle (needed to rebuild plugins in other processes)."""
    data = json.loads(spec.model_dump_json())
    again = type(spec).model_validate(data)
    assert again == spec, f"{spec.kind} {spec.name!r}: spec does not round-trip through JSON"
    assert pickle.loads(pickle.dumps(spec)) == spec, f"{spec.kind} {spec.name!r}: spec does not round-trip through pickle"  # noqa: S301 - pickled just above
    config = config if config is not None else spec.config_model()
    assert isinstance(config, spec.config_model)
    cfg_json = config.model_dump_json()
    assert spec.config_model.model_validate_json(cfg_json) == config, f"{spec.kind} {spec.name!r}: config does not round-trip through JSON"
    assert pickle.loads(pickle.dumps(config)) == config, f"{spec.kind} {spec.name!r}: config does not round-trip through pickle"  # noqa: S301 - pickled just above


def check_spec_is_light(kind: str, name: str) -> None:
    """In a fresh interpreter, loading the spec imports none of torch/transformers/vllm/ray. A spec
    registered in this process only (``registry.register``) has no entry point a fresh interpreter
    could find: that is said (how to install it, or skip the check) instead of a not-found error."""
    from ragen_core import registry
    from ragen_core.registry import IN_PROCESS

    if registry.find(kind, name).origin == IN_PROCESS:
        raise AssertionError(f"{kind} {name!r} is registered in this process only (registry.register): the light-import check loads "
                             "the spec in a fresh interpreter through its installed entry point; pip install -e the package, or skip "
                             "this check (check_env(..., skip=('light-import',)), or expected_failures)")
    code = (
        "import sys\n"
        "from ragen_core import registry\n"
        f"spec = registry.get_spec({kind!r}, {name!r})\n"
        "spec.config_model()\n"
        f"print('heavy:' + ','.join(m for m in {HEAVY_MODULES!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:  # the error's own line (a traceback's last "...Error: ..." line), not the tail of its hints
        lines = out.stderr.strip().splitlines()
        said = next((line for line in reversed(lines) if re.match(r"[A-Za-z_.]*(Error|Exception)\b", line)), lines[-1] if lines else "")
        raise AssertionError(f"{kind} {name!r}: loading the spec failed in a subprocess: {said[:500]}")
    # the last line is ours: a plugin's module may print lines of its own when imported
    heavy = next((line for line in reversed(out.stdout.splitlines()) if line.startswith("heavy:")), "heavy:").removeprefix("heavy:")
    assert not heavy, f"{kind} {name!r}: loading the spec imported {heavy}; move heavy imports into the factory module"


def check_filter(filter_obj: Any, *, seed: int = 0) -> None:
    """A filter returns a subset of the groups, handles an empty batch, never mutates input, is
    deterministic, and names its drop reasons without numbers. What a run refuses is refused here
    in the run's words (:func:`ragen_core.trainer.selection.check_filter_result`)."""
    import random

    from ragen_core.errors import PluginError
    from ragen_core.interfaces.rollout_filter import FilterResult, GroupedRollouts
    from ragen_core.trainer.selection import check_filter_result

    def run_check(result: Any, gids: list[int]) -> None:
        try:
            check_filter_result(result, gids, filter_obj)
        except PluginError as exc:
            raise AssertionError(exc.message) from None
        numbered = sorted({r for r in result.dropped.values() if re.search(r"\d", str(r))})
        assert not numbered, (f"drop reasons carry numbers ({numbered[:3]}): each distinct reason is a metric, so a reason is a fixed "
                              "phrase; report numbers in FilterResult.metrics")

    rng = random.Random(seed)
    empty = filter_obj.select(GroupedRollouts(group_ids=[], rewards=[], entropies=[], lengths=[]))
    run_check(empty, [])
    assert empty.kept_groups == [], "filter must return an empty FilterResult for an empty batch"
    for trial in range(20):
        n_groups, size = rng.randint(1, 8), rng.randint(1, 6)
        gids = [g * 10 + 3 for g in range(n_groups) for _ in range(size)]
        rewards = [rng.choice([0.0, 1.0, rng.uniform(-2, 11)]) if trial % 3 else 1.0 for _ in gids]
        ents = [rng.uniform(0, 3) for _ in gids]
        lens = [float(rng.randint(1, 50)) for _ in gids]
        batch = GroupedRollouts(group_ids=list(gids), rewards=list(rewards), entropies=list(ents), lengths=list(lens))
        before = copy.deepcopy(batch)
        r1 = filter_obj.select(batch)
        r2 = filter_obj.select(batch)
        assert batch == before, "filter mutated its input"
        run_check(r1, gids)
        assert isinstance(r1, FilterResult) and isinstance(r2, FilterResult)
        assert r1.kept_groups == r2.kept_groups and r1.group_weights == r2.group_weights, "filter is not deterministic"
        for g in r1.group_weights:
            assert g in r1.kept_groups, f"group weights are for kept groups: group {g} has one but was not kept"
        for k, v in r1.metrics.items():
            assert isinstance(v, (int, float)) and math.isfinite(v), f"filter metric {k} is not a finite number"


def check_algorithm(algorithm: Any) -> None:
    """An algorithm's hooks, as the trainer calls them, on a small batch: ``token_loss`` gives a
    per-token loss the trainer accepts (checked as in a run: bool flags, exactly the metrics
    ``metric_names`` declares), finite, with finite gradients through ``log_probs``,
    deterministic, and without changing its inputs; ``shape_rewards`` keeps the shape and its
    input; ``keep_mask`` gives one bool per row, or None. The last row has no trained token, as
    rows of real batches may (a turn that generated nothing, which has its turn end all the same)."""
    import torch

    from ragen_core.interfaces.algorithm import PolicyLossInputs, check_metric_names
    from ragen_core.trainer.update import algorithm_policy_loss

    check_metric_names(algorithm)
    g = torch.Generator().manual_seed(0)
    B, T = 5, 7
    mask = torch.zeros(B, T)
    for i in range(B - 1):
        mask[i, 1 : 3 + i] = 1.0
    old = -torch.rand(B, T, generator=g) * 3
    advantages = torch.randn(B, T, generator=g) * mask
    rewards = torch.zeros(B, T)
    rewards[torch.arange(B), mask.cumsum(1).argmax(1)] = torch.tensor([1.0, 0.0, 0.5, 0.0, 0.0])
    groups, episodes = torch.tensor([0, 0, 1, 1, 1]), torch.arange(B)
    ref = old - 0.1 * torch.rand(B, T, generator=g)
    # one turn a row, its reply after a two-token prompt; the empty row's turn generated nothing and
    # ends, as build_batch gives it, at the position before its reply would start
    turn_ends = [[int(mask[i].nonzero().max())] if mask[i].any() else [1] for i in range(B)]
    snapshot = (old.clone(), advantages.clone(), mask.clone(), rewards.clone(), ref.clone())
    losses, grads = [], []
    for _ in range(2):
        log_probs = (old + 0.3 * torch.randn(B, T, generator=torch.Generator().manual_seed(1))).requires_grad_(True)
        inputs = PolicyLossInputs(log_probs=log_probs, old_log_probs=old, advantages=advantages, response_mask=mask, group_ids=groups,
                                  episode_ids=episodes, turn_ends=turn_ends, ref_log_probs=ref)
        loss, metrics = algorithm_policy_loss(algorithm, inputs, algorithm.config.loss_agg_mode)
        assert torch.isfinite(loss).all(), f"token_loss gave a non-finite loss ({float(loss.detach())})"
        assert all(math.isfinite(v) for v in metrics.values()), f"token_loss gave non-finite metrics: {metrics}"
        loss.backward()
        assert log_probs.grad is not None and torch.isfinite(log_probs.grad).all(), "token_loss gave a non-finite gradient"
        losses.append(float(loss.detach()))
        grads.append(log_probs.grad.clone())
    assert losses[0] == losses[1] and torch.equal(grads[0], grads[1]), "token_loss is not deterministic"
    shaped = algorithm.shape_rewards(rewards, mask, max_length=T)
    assert shaped.shape == rewards.shape and torch.isfinite(shaped).all(), "shape_rewards must return finite rewards shaped like its input"
    keep = algorithm.keep_mask(rewards, groups, episodes)
    assert keep is None or len(keep) == B, "keep_mask returns one bool per row, or None"
    assert all(torch.equal(a, b) for a, b in zip((old, advantages, mask, rewards, ref), snapshot)), "the algorithm changed its inputs"


def check_estimator(estimator: Any, *, needs_values: bool | None = None) -> None:
    """Estimators keep shape/dtype, zero outside the mask, no NaN on flat groups, are pure and deterministic."""
    import torch

    from ragen_core.interfaces.advantage import AdvantageInputs, AdvantageOutputs

    if needs_values is None:
        needs_values = bool(getattr(estimator, "needs_critic", False))
    g = torch.Generator().manual_seed(0)
    B, T = 6, 9
    mask = torch.zeros(B, T)
    for i in range(B):
        mask[i, 2 : 3 + i] = 1.0
    rewards = torch.zeros(B, T)
    last = mask.cumsum(1).argmax(1)
    for i in range(B):
        rewards[i, last[i]] = float(i % 2)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    values = torch.randn(B, T, generator=g) if needs_values else None
    for flat in (False, True):
        r = torch.zeros_like(rewards) if flat else rewards
        inputs = AdvantageInputs(token_rewards=r, response_mask=mask, group_ids=groups, values=values)
        snapshot = (r.clone(), mask.clone(), groups.clone(), None if values is None else values.clone())
        out = estimator(inputs)
        out2 = estimator(inputs)
        assert isinstance(out, AdvantageOutputs)
        assert out.advantages.shape == r.shape and out.returns.shape == r.shape, "advantages/returns must have the rewards' shape"
        assert out.advantages.dtype == r.dtype, "advantages must keep the rewards' dtype"
        assert torch.isfinite(out.advantages).all() and torch.isfinite(out.returns).all(), "estimator produced NaN/inf"
        assert torch.equal(out.advantages, out2.advantages), "estimator is not deterministic"
        assert (out.advantages[mask == 0] == 0).all(), "advantages must be zero outside the response mask"
        assert torch.equal(r, snapshot[0]) and torch.equal(mask, snapshot[1]) and torch.equal(groups, snapshot[2]), "estimator mutated its inputs"
        if values is not None and snapshot[3] is not None:
            assert torch.equal(values, snapshot[3]), "estimator mutated the values"


def check_diagnostic(diagnostic: Any, trajectories: list[Any], context: Any, *, step: int = 1) -> dict[str, float]:
    """A diagnostic is a pure observer returning ``dict[str, float]`` (or None): numbers (NaN and
    inf too: a run logs them as null) under keys named ``family/metric`` outside the run's own
    families and timings (:data:`~ragen_core.hookspecs.CORE_FAMILIES`, ``CORE_TIMINGS``): the keys a run logs."""
    from ragen_core.hookspecs import METRIC_KEY_RULE, is_core_metric, is_metric_key

    before = copy.deepcopy(trajectories)
    hook = getattr(diagnostic, "ragen_on_rollout_end", None)
    assert callable(hook), "a diagnostic must implement ragen_on_rollout_end"
    metrics = hook(trajectories=trajectories, step=step, context=context)
    assert trajectories == before, "diagnostic mutated the trajectories"
    metrics = metrics or {}
    assert isinstance(metrics, dict)
    for k, v in metrics.items():
        assert is_metric_key(k), f"diagnostic metric key {k!r}: {METRIC_KEY_RULE}, as a run logs only those"
        assert not is_core_metric(k), (f"diagnostic metric key {k!r} is one the run logs itself (its family or timing), so a run "
                                       "does not log it: name it in a family of the diagnostic's own, e.g. 'mine/...'")
        # a number, as a run takes it (NaN or inf too: logged as null, "undefined this step")
        assert isinstance(v, (int, float)), f"diagnostic metric {k} = {v!r} is not a number"
    return metrics
