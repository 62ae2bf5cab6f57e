"""Gradient analysis (spec 11): bucketing, per-component grad norms, trainer hook, plot."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragen_core.interfaces.rollout_filter import RolloutFilter
from ragen_core.trainer.grad_analysis import bucket_groups, group_reward_stds, is_due

# ------------------------------------------------------------------ bucketing (no torch)


def test_quantile_buckets_sort_by_std_and_last_bucket_takes_the_remainder():
    stds = {10: 0.5, 11: 0.1, 12: 2.0, 13: 0.0, 14: 1.0, 15: 3.0, 16: 0.2}
    assert bucket_groups(stds, "quantile", 3) == [
        ("bucket_1", [13, 11]),
        ("bucket_2", [16, 10]),
        ("bucket_3", [14, 12, 15]),
    ]


def test_quantile_uses_at_most_one_bucket_per_group_and_breaks_ties_by_group_id():
    assert bucket_groups({7: 1.0, 3: 1.0}, "quantile", 6) == [("bucket_1", [3]), ("bucket_2", [7])]
    assert bucket_groups({}, "quantile", 6) == []


def test_fixed_rv_edges_are_half_open_and_empty_buckets_are_skipped():
    stds = {1: 0.0, 2: 0.999, 3: 1.0, 4: 4.99, 5: 5.0, 6: 17.0}
    assert bucket_groups(stds, "fixed_rv", 6) == [
        ("bucket_1", [1, 2]),
        ("bucket_2", [3]),
        ("bucket_5", [4]),
        ("bucket_6", [5, 6]),
    ]
    # fewer buckets: the last one is open-ended from B-1
    assert bucket_groups(stds, "fixed_rv", 2) == [("bucket_1", [1, 2]), ("bucket_2", [3, 4, 5, 6])]


def test_unknown_bucketing_is_an_error():
    with pytest.raises(ValueError, match="unknown bucketing"):
        bucket_groups({1: 0.0}, "equal", 6)


def test_group_std_is_unbiased_and_counts_each_episode_once():
    # group 0: scores [1, 0, 0, 0] -> mean 0.25, unbiased var (0.5625 + 3 * 0.0625) / 3 = 0.25 -> std 0.5
    # group 1: one episode spread over two turn-level rows -> single episode -> 0
    stds = group_reward_stds([1, 0, 0, 0, 2, 2], [0, 0, 0, 0, 1, 1], [0, 1, 2, 3, 4, 4])
    assert stds == {0: pytest.approx(0.5), 1: 0.0}


def test_due_steps_are_one_plus_multiples_of_every():
    from ragen_core.trainer.config import GradAnalysisSection

    ga = GradAnalysisSection(every=50)
    assert [s for s in range(1, 120) if is_due(ga, s)] == [1, 51, 101]
    assert not any(is_due(GradAnalysisSection(), s) for s in range(1, 10))


def test_only_without_every_is_a_config_error():
    from ragen_core.errors import ConfigError
    from ragen_core.trainer.config import RunConfig

    with pytest.raises(ConfigError, match=r"^RunConfig: invalid config: .*grad_analysis.every > 0"):
        RunConfig(grad_analysis={"only": True})


# ------------------------------------------------------------------ component norms (tiny model)


@pytest.fixture(scope="module")
def tiny():
    import torch

    from ragen_core.models import load_model_and_tokenizer

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    model = load_model_and_tokenizer("tiny")[0]
    model.eval()
    yield model
    torch.set_num_threads(before)


def _batch(seed: int = 0):
    import torch

    from ragen_core.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(seed)
    n, length = 4, 12
    ids = torch.randint(0, 250, (n, length), generator=g)
    am = torch.ones(n, length, dtype=torch.long)
    am[3, 9:] = 0  # a padded row
    rm = torch.zeros(n, length - 1)
    rm[:, 4:8] = 1
    rm[1, 8:] = 1
    scores = torch.tensor([1.0, 0.0, 3.0, 3.0])
    batch = TrainBatch(
        input_ids=ids, attention_mask=am, response_mask=rm, token_rewards=torch.zeros(n, length - 1),
        group_ids=torch.tensor([0, 0, 1, 1]), episode_ids=torch.arange(n), scores=scores, turn_ends=[[7]] * n,
    )
    batch.advantages = torch.randn(n, length - 1, generator=g) * rm
    batch.ref_log_probs = -torch.rand(n, length - 1, generator=g) * 5
    return batch


def _manual_norms(model, batch, acfg):
    """One forward over the whole batch, each component's backward alone (token-mean or seq-mean)."""
    import torch

    from ragen_core.trainer.losses import agg_loss, kl_penalty, policy_loss
    from ragen_core.trainer.modeling import token_logprobs

    params = [p for p in model.parameters() if p.requires_grad]
    out = {}
    for comp in ("task", "entropy", "kl"):
        model.zero_grad(set_to_none=True)
        logp, ent = token_logprobs(model, batch.input_ids, batch.attention_mask, with_entropy=True)
        m = batch.response_mask
        if comp == "task":
            loss = policy_loss(logp, logp.detach(), batch.advantages, m, agg_mode=acfg.loss_agg_mode)[0]
        elif comp == "entropy":
            loss = -acfg.entropy_coeff * agg_loss(ent, m, acfg.loss_agg_mode)
        else:
            loss = acfg.kl_loss_coef * agg_loss(kl_penalty(logp, batch.ref_log_probs, acfg.kl_loss_type), m, acfg.loss_agg_mode)
        loss.backward()
        out[comp] = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("mode,global_norm", [("token-mean", True), ("seq-mean-token-mean", False)])
def test_component_norms_equal_a_manual_backward_of_each_component(tiny, mode, global_norm):
    from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig
    from ragen_core.trainer.grad_analysis import component_grad_norms

    acfg = AlgorithmConfig(loss_agg_mode=mode, global_token_norm=global_norm, entropy_coeff=0.01, use_kl_loss=True,
                           kl_loss_coef=0.1, kl_loss_type="k2")
    batch = _batch()
    # two micro-batches of 2 accumulate into one mini-batch of 4 = one forward over the whole batch
    norms, losses, _ = component_grad_norms(tiny, batch, Algorithm(acfg), mini_batch_size=4, micro_batch_size=2)
    want = _manual_norms(tiny, batch, acfg)
    assert set(norms) == {"task", "entropy", "kl"}
    for comp in want:
        assert want[comp] > 0
        # micro-batches of 2 vs one forward of 4 reorder the gradient sums: measured <= 1e-7 relative (~1 eps)
        assert norms[comp] == pytest.approx(want[comp], rel=1e-4), comp
    assert set(losses) == {"policy", "entropy", "kl", "total"}
    assert losses["total"] == pytest.approx(losses["policy"] + losses["entropy"] + losses["kl"])
    assert losses["entropy"] < 0  # -coeff * entropy
    assert all(p.grad is None for p in tiny.parameters())


def test_components_without_entropy_or_kl_are_left_out(tiny):
    from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig
    from ragen_core.trainer.grad_analysis import component_grad_norms

    acfg = AlgorithmConfig(entropy_coeff=0.0, use_kl_loss=False)
    norms, losses, _ = component_grad_norms(tiny, _batch(), Algorithm(acfg), mini_batch_size=2, micro_batch_size=1)
    assert set(norms) == {"task"} and set(losses) == {"policy", "total"}


def test_analyse_changes_no_parameter_and_reports_each_bucket(tiny):
    import torch

    from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig
    from ragen_core.trainer.grad_analysis import analyse

    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    batch = _batch(1)
    # group 0 scores [1, 0] -> std 0.7071; group 1 scores [3, 3] -> std 0
    metrics, table = analyse(tiny, batch, Algorithm(AlgorithmConfig(entropy_coeff=0.0)), mini_batch_size=4, micro_batch_size=2, n_buckets=6)
    for k, v in tiny.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert table == [("bucket_1", 1, 0.0), ("bucket_2", 0, pytest.approx(math.sqrt(0.5))), ("all", 1, 0.0),
                     ("all", 0, pytest.approx(math.sqrt(0.5)))]
    assert metrics["grad_norm/bucket_1/sample_count"] == 2 and metrics["grad_norm/bucket_1/sample_pct"] == 50.0
    assert metrics["grad_norm/all/sample_count"] == 4 and metrics["grad_norm/all/group_rv_count"] == 2
    assert metrics["grad_norm/all/reward_std_max"] == pytest.approx(math.sqrt(0.5))
    assert metrics["grad_norm/all/reward_std_min"] == 0.0
    tokens_b2 = float(batch.response_mask[[0, 1]].sum())
    assert metrics["grad_norm/bucket_2/per_token/task"] == pytest.approx(metrics["grad_norm/bucket_2/task"] / tokens_b2)
    assert metrics["grad_norm/bucket_2/per_sample/task"] == pytest.approx(metrics["grad_norm/bucket_2/task"] / 2)
    assert metrics["actor/grad_norm/task"] == metrics["grad_norm/all/task"]
    assert "grad_norm/bucket_3/task" not in metrics


# ------------------------------------------------------------------ trainer integration


def _config(tmp_path: Path, *overrides: str, name: str = "run"):
    from ragen_core.config import load_config
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer.config import RunConfig

    env = register_toy_env()
    base = [
        f"env={env}", "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
        "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=512",
        "sampling.train.max_new_tokens=10", "sampling.val.max_new_tokens=10",
        "optim.mini_batch_size=4", "optim.micro_batch_size=2", "optim.lr=1e-3", "algo_config.entropy_coeff=0",
        "val_groups=2", "test_freq=2", "save_freq=2", "steps=2", "filter=none",
        "warm_start.enabled=false", "progress=false", f"run_dir={tmp_path / name}", "device=cpu",  # exact comparisons: the CPU
    ]
    return load_config(RunConfig, [], base + list(overrides))


def _rows(trainer):
    from ragen_core.trainer.loggers import read_metrics

    return read_metrics(trainer.run_dir / "metrics.jsonl")


def test_trainer_analysis_logs_metrics_and_leaves_training_unchanged(tmp_path, tiny):
    from ragen_core.trainer.trainer import Trainer

    plain = Trainer(_config(tmp_path, name="plain"))
    plain.train()
    probed = Trainer(_config(tmp_path, "grad_analysis.every=1", name="probed"))
    probed.train()
    a, b = _rows(plain), _rows(probed)
    assert [r["step"] for r in b] == [1, 2]
    for ra, rb in zip(a, b):
        for k, v in ra.items():
            if not k.startswith("timing_s/"):
                # the probe must not change training: measured identical; 1e-6 (~8 eps of O(1) metrics) is slack
                assert rb[k] == pytest.approx(v, abs=1e-6), k
        # one mini-batch, no entropy/KL term: the probe's task norm is the update's pre-clip norm (its own
        # backward may order the sums differently: rel 1e-4 is ~800 eps; measured identical)
        assert rb["grad_norm/all/task"] == pytest.approx(rb["actor/grad_norm"], rel=1e-4)
        assert rb["grad_norm/all/sample_count"] == rb["train/batch_size"]
        assert rb["grad_analysis/uses_training_batch"] == 1.0
    assert (probed.run_dir / "grad_analysis" / "step_1.csv").read_text().startswith("bucket,group_id,reward_std\n")

    # a separate analysis rollout of another shape (spec 11.2) leaves the training update unchanged too
    sep = Trainer(_config(tmp_path, "grad_analysis.every=2", "grad_analysis.env_groups=3", "grad_analysis.group_size=3", "steps=1", name="sep"))
    sep.train()
    c = _rows(sep)
    for ra, rc in zip(a, c):
        for k, v in ra.items():
            if not k.startswith("timing_s/"):
                assert rc[k] == pytest.approx(v, abs=1e-6), k  # as above: measured identical, 1e-6 is slack
    assert c[0]["grad_analysis/uses_training_batch"] == 0.0
    assert c[0]["grad_analysis/source_batch_size"] == 9 and c[0]["grad_analysis/source_group_size"] == 3
    assert c[0]["grad_norm/all/sample_count"] == c[0]["grad_analysis/adjusted_batch_size"] == 9
    assert c[0]["grad_norm/all/group_rv_count"] == 3 and c[0]["grad_analysis/empty_after_filter"] == 0.0
    assert "grad_analysis/filter_kept_ratio" in c[0] and len(c) == 1

    from ragen_core.cli.plot import grad_norm_table, plot_run

    written = plot_run(probed.run_dir)
    assert probed.run_dir / "plots" / "grad_norms.png" in written
    assert sorted(grad_norm_table(b)) == [1, 2]
    assert not any(p.name == "grad_norms.png" for p in plot_run(plain.run_dir))


def test_only_skips_updates_and_exit_after_stops_before_the_actor_update(tmp_path, tiny):
    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.trainer import Trainer

    only = Trainer(_config(tmp_path, "grad_analysis.every=2", "grad_analysis.only=true", "steps=3", name="only"))
    only.train()
    rows = _rows(only)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["trainer/gradient_analysis_only"] == 1.0 and r["actor/skipped_for_gradient_analysis_only"] == 1.0 for r in rows)
    assert not any("actor/pg_loss" in r for r in rows)
    assert ["grad_norm/all/task" in r for r in rows] == [True, False, True]
    base = load_model_and_tokenizer("tiny")[0].state_dict()
    assert all(torch.equal(v, base[k]) for k, v in only.model.state_dict().items())

    ex = Trainer(_config(tmp_path, "grad_analysis.every=1", "grad_analysis.exit_after=true", "steps=3", "test_freq=1", name="exit"))
    ex.train()
    rows = _rows(ex)
    assert [r["step"] for r in rows] == [1]
    assert rows[0]["trainer/exited_after_gradient_analysis"] == 1.0 and "grad_norm/all/task" in rows[0]
    assert "actor/pg_loss" not in rows[0] and "val-env/success" not in rows[0]
    assert not (ex.run_dir / "checkpoints").exists()


class DropAllFilter(RolloutFilter):
    """Keeps no group: every training step is empty after filtering."""

    def select(self, rollouts):
        from ragen_core.interfaces.rollout_filter import FilterResult

        return FilterResult(kept_groups=[], dropped={g: "test drop-all" for g in rollouts.group_ids}, metrics={})


def test_only_on_an_empty_after_filter_step_still_runs_the_separate_rollout(tmp_path, tiny):
    from ragen_core import registry
    from ragen_core.interfaces.rollout_filter import FilterConfig
    from ragen_core.specs import FilterSpec
    from ragen_core.trainer.trainer import Trainer

    registry.register(FilterSpec(name="ga-test-drop-all", config_model=FilterConfig, factory=f"{__name__}:DropAllFilter"))
    try:
        cfg = _config(tmp_path, "filter=ga-test-drop-all", "grad_analysis.every=1", "grad_analysis.only=true",
                      "grad_analysis.env_groups=3", "steps=1", "test_freq=0", name="empty")
        trainer = Trainer(cfg)
        trainer.train()
    finally:
        registry.unregister("filter", "ga-test-drop-all")
    (row,) = _rows(trainer)
    assert row["rollout/empty_after_filter"] == 1.0 and row["trainer/gradient_analysis_only"] == 1.0
    # the analysis rollout ran (3 groups x 2) and was filtered by its own (drop-all) filter instance
    assert row["grad_analysis/source_batch_size"] == 6 and row["grad_analysis/empty_after_filter"] == 1.0
    assert not any(k.startswith("grad_norm/") for k in row)


class KeepFirstGroupFilter(DropAllFilter):
    """Keeps only the lowest group id."""

    def select(self, rollouts):
        from ragen_core.interfaces.rollout_filter import FilterResult

        first = min(rollouts.group_ids)
        dropped = {g: "test keep-first" for g in rollouts.group_ids if g != first}
        return FilterResult(kept_groups=[first], dropped=dropped, metrics={})


def test_log_prefilter_analyses_the_unfiltered_batch_without_disturbing_the_update(tmp_path, tiny):
    from ragen_core import registry
    from ragen_core.interfaces.rollout_filter import FilterConfig
    from ragen_core.specs import FilterSpec
    from ragen_core.trainer.trainer import Trainer

    registry.register(FilterSpec(name="ga-test-keep-first", config_model=FilterConfig, factory=f"{__name__}:KeepFirstGroupFilter"))
    try:
        # 2 kept rows fit one mini-batch of 2 (single-pass update); the 4 unfiltered rows do not, so
        # state leaking from preparing the unfiltered batch would break the actor update
        cfg = _config(tmp_path, "filter=ga-test-keep-first", "grad_analysis.every=1", "grad_analysis.log_prefilter=true",
                      "optim.mini_batch_size=2", "steps=1", "test_freq=0", name="prefilter")
        trainer = Trainer(cfg)
        trainer.train()
    finally:
        registry.unregister("filter", "ga-test-keep-first")
    (row,) = _rows(trainer)
    assert row["grad_norm_prefilter/all/sample_count"] == 4 and row["grad_norm_prefilter/all/group_rv_count"] == 2
    assert row["grad_norm/all/sample_count"] == 2 and row["train/batch_size"] == 2
    assert row["grad_norm/all/task"] == pytest.approx(row["actor/grad_norm"], rel=1e-4)  # as above: ~800 eps
    assert row["actor/grad_norm/task"] == row["grad_norm/all/task"]


def test_groups_are_bucketed_by_the_rewards_filter_signal_picks(tiny):
    """The filter ranked groups by filter_signal's rewards while the analysis bucketed them by the
    scores: with env_reward, group 0's spread of format penalties alone made it the high-std bucket."""
    import torch

    from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig
    from ragen_core.trainer.grad_analysis import analyse

    batch = _batch(1)  # scores: group 0 [1, 0] (std 0.71), group 1 [3, 3] (std 0)
    batch.env_rewards = torch.tensor([1.0, 1.0, 2.0, 0.0], dtype=torch.float64)  # group 0's spread was the penalty; group 1's task spread
    tables = {signal: analyse(tiny, batch, Algorithm(AlgorithmConfig(entropy_coeff=0.0)), mini_batch_size=4, micro_batch_size=2,
                              n_buckets=2, signal=signal)[1] for signal in ("score", "env_reward")}
    assert [(b, g) for b, g, _ in tables["score"]] == [("bucket_1", 1), ("bucket_2", 0), ("all", 1), ("all", 0)]
    assert tables["env_reward"] == [("bucket_1", 0, 0.0), ("bucket_2", 1, pytest.approx(math.sqrt(2))), ("all", 0, 0.0),
                                    ("all", 1, pytest.approx(math.sqrt(2)))]


def test_the_trainers_analysis_buckets_by_the_runs_filter_signal(tmp_path, tiny):
    """run_for_trainer hands the run's filter_signal to the bucketing: its group table holds the env rewards' stds."""
    import types

    import torch

    from ragen_core.config import load_config
    from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.grad_analysis import run_for_trainer

    batch = _batch(1)
    batch.env_rewards = torch.tensor([1.0, 1.0, 2.0, 0.0], dtype=torch.float64)
    for signal, want in (("score", "all,0,0.707107"), ("env_reward", "all,1,1.41421")):
        config = load_config(RunConfig, [], ["grad_analysis.every=1", "optim.mini_batch_size=4", "optim.micro_batch_size=2",
                                             f"filter_signal={signal}"])
        trainer = types.SimpleNamespace(config=config, analysis_rollout=None, model=tiny, train_sampling=config.sampling.train,
                                        algorithm=Algorithm(AlgorithmConfig(entropy_coeff=0.0)), run_dir=tmp_path / signal)
        run_for_trainer(trainer, batch, 1)
        assert (tmp_path / signal / "grad_analysis" / "step_1.csv").read_text().splitlines()[-1] == want
