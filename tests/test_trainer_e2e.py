"""End-to-end trainer runs on the tiny model and the in-process corridor env (seconds each)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ragen_core import registry
from ragen_core.config import load_config
from ragen_core.errors import ResourceError
from ragen_core.interfaces.rollout_filter import (
    FilterConfig,
    FilterResult,
    RolloutFilter,
)
from ragen_core.specs import FilterSpec
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.trainer import Trainer


class DropAllFilter(RolloutFilter):
    """Keeps nothing: every step is empty after filtering."""

    def select(self, rollouts):
        dropped = {g: "test drop-all" for g in rollouts.group_ids}
        return FilterResult(kept_groups=[], dropped=dropped, metrics={"rollout/filter_kept_ratio": 0.0})


pytestmark = pytest.mark.usefixtures("one_torch_thread")


DROP_ALL = FilterSpec(name="trainer-test-drop-all", config_model=FilterConfig, factory=f"{__name__}:DropAllFilter")


def make_config(tmp_path: Path, *overrides: str, name: str = "run") -> RunConfig:
    env = register_toy_env()
    base = [
        f"env={env}", "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
        "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=512",
        "sampling.train.max_new_tokens=10", "sampling.val.max_new_tokens=10",
        "optim.mini_batch_size=4", "optim.micro_batch_size=2", "optim.lr=1e-3",
        "val_groups=2", "test_freq=2", "save_freq=2", "steps=2",
        "warm_start.enabled=false", "progress=false", f"run_dir={tmp_path / name}",
    ]
    return load_config(RunConfig, [], base + list(overrides))


def _rows(run_dir: Path) -> list[dict]:
    return read_metrics(run_dir / "metrics.jsonl")


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_two_step_run_logs_metrics_and_saves_loadable_checkpoint(tmp_path, algo):
    # grpo: one mini-batch per step (old log-probs from the update's own forward);
    # ppo: two mini-batches per step (a separate old-log-prob pass)
    cfg = make_config(tmp_path, f"algo={algo}", *(["optim.mini_batch_size=2"] if algo == "ppo" else []))
    trainer = Trainer(cfg)
    history = trainer.train()
    assert len(history) == 2
    rows = _rows(trainer.run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["step"] for r in history] == [1, 2], "train()'s rows carry their step, as metrics.jsonl's do"
    assert history[1]["train/reward"] == rows[1]["train/reward"]
    for key in ("train/success", "train/reward", "actor/pg_loss", "actor/entropy", "rollout/filter_kept_ratio", "timing_s/gen", "actor/grad_norm"):
        assert key in rows[0] and math.isfinite(rows[0][key]), key
    assert "val-env/success" in rows[1]
    assert rows[0]["rollout/engine_logprob_abs_diff"] < 1e-4  # recomputed log-probs match the sampler's
    if algo == "ppo":
        assert "critic/vf_loss" in rows[0] and trainer.critic is not None
        assert "timing_s/old_log_prob" in rows[0] and rows[0]["train/num_mini_batches"] == 2
        assert "timing_s/update_critic" in rows[0]
    else:
        assert trainer.critic is None
        assert "timing_s/update_critic" not in rows[0]  # was logged as ~0 s in every run without a critic
    assert (trainer.run_dir / "config.yaml").is_file() and (trainer.run_dir / "plugins.json").is_file()
    from transformers import AutoModelForCausalLM

    ckpt = trainer.run_dir / "checkpoints" / "step_2"
    loaded = AutoModelForCausalLM.from_pretrained(str(ckpt))
    sd = trainer.model.state_dict()
    for name, value in loaded.state_dict().items():
        assert (value == sd[name].to(value.device)).all(), name  # the trainer ran on device=auto: cuda where there is one


def test_training_batch_ids_equal_sampled_ids(tmp_path):
    from ragen_core.trainer.batch import build_batch

    trainer = Trainer(make_config(tmp_path))
    trainer.setup()
    trajs = trainer.runner.run(mode="train", sampling=trainer.train_sampling)
    batch = build_batch(trajs, trainer.pad_id)
    targets = batch.input_ids[:, 1:]
    for i, traj in enumerate(trajs):
        sampled = [tok for turn in traj.turns for tok in turn.response_ids]
        assert targets[i][batch.response_mask[i] > 0].tolist() == sampled
        first = traj.turns[0]
        assert batch.input_ids[i, : len(first.prompt_ids)].tolist() == list(first.prompt_ids)


def test_resume_gives_identical_metrics(tmp_path, assert_same_metrics):
    full = Trainer(make_config(tmp_path, "steps=4", "save_freq=2", name="full"))
    full.train()
    part_cfg = make_config(tmp_path, "steps=2", "save_freq=2", name="part")
    Trainer(part_cfg).train()
    resumed = Trainer(part_cfg.model_copy(update={"steps": 4}), resume=True)
    resumed.train()
    a, b = _rows(full.run_dir), _rows(resumed.run_dir)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    assert_same_metrics(a, b)


def test_rollouts_carry_the_policy_version_and_resume_continues_it(tmp_path):
    def versions(run_dir: Path, step: int) -> set[int]:
        lines = (run_dir / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()
        return {turn["policy_version"] for line in lines for turn in json.loads(line)["turns"]}

    cfg = make_config(tmp_path, "steps=2", "save_freq=2", "save_rollouts=true", "test_freq=0", name="versions")
    trainer = Trainer(cfg)
    trainer.train()
    # step N samples with the policy after N - 1 actor updates; the engine is synced after each
    assert [versions(trainer.run_dir, s) for s in (1, 2)] == [{0}, {1}]
    assert trainer.policy_version == trainer.engine.policy_version == 2
    resumed = Trainer(cfg.model_copy(update={"steps": 3}), resume=True)
    resumed.train()
    assert versions(resumed.run_dir, 3) == {2} and resumed.engine.policy_version == 3


def test_resume_truncates_metrics_after_last_checkpoint(tmp_path):
    cfg = make_config(tmp_path, "steps=2", "save_freq=1", name="trunc")
    Trainer(cfg).train()
    ckpts = sorted((cfg_dir := Path(cfg.run_dir) / "checkpoints").iterdir())
    # simulate a run killed after step 2 logged but before its checkpoint was written
    import shutil

    shutil.rmtree(cfg_dir / "step_2")
    assert [p.name for p in ckpts][-1] == "step_2"
    resumed = Trainer(cfg, resume=True)
    resumed.setup()
    assert resumed.start_step == 2
    assert [r["step"] for r in _rows(resumed.run_dir)] == [1]


@pytest.fixture
def drop_all_filter():
    registry.register(DROP_ALL)
    yield DROP_ALL.name
    registry.unregister("filter", DROP_ALL.name)


def test_empty_after_filter_skips_update_and_stops(tmp_path, drop_all_filter, capsys):
    cfg = make_config(tmp_path, f"filter={drop_all_filter}", "filter_config.empty_stop_steps=2", "steps=5", "test_freq=0")
    trainer = Trainer(cfg)
    history = trainer.train()
    assert "training stopped early at step 2: early_stopped/empty_filtered_steps: no group was left to train in 2 steps in a row " \
        "(filter_config.empty_stop_steps=2); filter_config.empty_stop_steps=0 turns this stop off\n" in capsys.readouterr().out
    assert len(history) == 2
    assert all(h["rollout/empty_after_filter"] == 1.0 for h in history)
    assert [h["rollout/consecutive_empty_after_filter_steps"] for h in history] == [1.0, 2.0]
    n_groups = cfg.rollout.env_groups
    assert all(h["rollout/dropped/test_drop_all"] == float(n_groups) for h in history)  # why groups were dropped
    assert all("actor/pg_loss" not in h for h in history)
    assert history[-1]["early_stopped/empty_filtered_steps"] == 1.0
    assert trainer.stop_reason == "early_stopped/empty_filtered_steps"
    assert trainer.policy_version == trainer.engine.policy_version == 0  # no update, no new policy version


def test_a_cli_run_that_stopped_without_one_update_fails_naming_the_filter(tmp_path, drop_all_filter, capsys):
    """It exited 0 ("training stopped early"): 'ragen run ... && ragen eval' went on with a model
    that was never trained."""
    from ragen_core.cli.main import main
    from ragen_core.testing.run_helpers import TOY_RUN, one_line_error

    run_dir = tmp_path / "cli"
    code = main(["run", "--env", register_toy_env(), "--run-dir", str(run_dir), "--no-progress", *TOY_RUN, "--steps", "5",
                 f"--filter={drop_all_filter}", "filter_config.empty_stop_steps=2", "test_freq=0"])
    err = capsys.readouterr().err
    assert code == 2
    assert one_line_error(err) == (f"TrainingError: the run stopped at step 2 without a single update: the filter {drop_all_filter!r} "
                                   "kept no group in 2 steps in a row (filter_config.empty_stop_steps)")
    assert "hint: metrics.jsonl's rollout/dropped/* say why it dropped each group" in err and "hint: a variance filter drops groups" in err
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]  # its metrics are kept


def test_a_cli_run_emptied_by_batch_adjust_says_so_not_that_the_filter_kept_nothing(tmp_path, capsys):
    """compat.batch_adjust=delete deleting every row stopped the run with "the filter 'none' kept no
    group", though the filter kept every group."""
    from ragen_core.cli.main import main
    from ragen_core.testing.run_helpers import TOY_RUN, one_line_error

    code = main(["run", "--env", register_toy_env(), "--run-dir", str(tmp_path / "cli"), "--no-progress", *TOY_RUN, "--steps", "5",
                 "compat.batch_adjust=delete", "optim.mini_batch_size=8", "filter_config.empty_stop_steps=2"])
    err = capsys.readouterr().err
    assert code == 2
    assert one_line_error(err) == ("TrainingError: the run stopped at step 2 without a single update: compat.batch_adjust=delete "
                                   "removed every kept row in 2 steps in a row (filter_config.empty_stop_steps)")
    assert "hint: compat.batch_adjust=copy pads the kept rows" in err and "rollout/dropped" not in err


def test_what_emptied_a_step_is_named_by_the_trainer_and_the_cli_summary():
    """The env pool losing every group, or the algorithm's keep mask dropping every kept group, was said
    as "the filter kept no group"; a streak of mixed causes (or resumed) is said cause by cause."""
    from types import SimpleNamespace

    from ragen_core.cli.run import _emptied_by, _empty_hints

    trainer = SimpleNamespace(config=SimpleNamespace(filter="std", algo="dapo"))

    def cause(grouped, kept_by_filter, lost=()):
        selection = SimpleNamespace(grouped=SimpleNamespace(group_ids=grouped), result=SimpleNamespace(kept_groups=kept_by_filter))
        return Trainer._emptied_by(trainer, selection, set(lost))

    pool, filt, mask = cause([], [], lost=[0, 1]), cause([0, 0], []), cause([0, 0], [0])
    assert pool == "the env pool lost every group (an episode in each timed out or failed)"
    assert filt == "the filter 'std' kept no group"
    assert mask == "the algorithm 'dapo''s keep mask dropped every group the filter kept"
    assert cause([], []) == "the rollout had no episode to train on"
    assert _emptied_by([pool, pool], 2) == f"{pool} in 2 steps in a row"
    assert _emptied_by([filt, pool, filt], 3) == f"nothing trained in 3 steps in a row ({filt} in 2 steps, {pool} in 1 step)"
    assert _emptied_by([mask], 3) == f"nothing trained in 3 steps in a row ({mask} in 1 step, 2 steps before the resume)"
    assert [h.split(" ")[1] for h in _empty_hints([pool, mask])] == ["log", "algorithm's"]


def test_preflight_rejects_context_too_small_before_rollout(tmp_path):
    cfg = make_config(tmp_path, "rollout.max_model_len=16", "sampling.train.max_new_tokens=10")
    trainer = Trainer(cfg)
    with pytest.raises(ResourceError, match="max_model_len"):
        trainer.setup()
    assert not (Path(cfg.run_dir) / "metrics.jsonl").exists()


def test_cli_run_eval_and_plot(tmp_path, capsys):
    from ragen_core.cli.main import main

    env = register_toy_env()
    run_dir = tmp_path / "cli"
    common = ["env_config.length=3", "env_config.max_turns=2", "rollout.env_groups=2", "rollout.group_size=2",
              "sampling.train.max_new_tokens=8", "sampling.val.max_new_tokens=8", "warm_start.enabled=false", "val_groups=2"]
    rc = main(["run", "--env", env, "--steps", "1", "--run-dir", str(run_dir), "--no-progress", "save_freq=1", *common])
    assert rc == 0
    out_file = tmp_path / "eval.jsonl"
    rc = main(["eval", "--env", env, "--model", str(run_dir), "--groups", "2", "--group-size", "2", "--out", str(out_file),
               "env_config.length=3", "env_config.max_turns=2", "sampling.val.max_new_tokens=8"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "success:" in printed and "pass@2:" in printed and "mean_reward:" in printed
    assert f"model: {run_dir / 'checkpoints' / 'step_1'} (the latest checkpoint of {run_dir})" in printed
    lines = [json.loads(x) for x in out_file.read_text().splitlines()]
    assert len(lines) == 4
    rec = lines[0]
    assistant = [m for m in rec["messages"] if m["role"] == "assistant"]
    assert len(assistant) == rec["num_turns"] >= 1
    assert rec["return"] == pytest.approx(sum(m["reward"] + m["penalty"] for m in assistant))
    assert isinstance(rec["success"], bool) and rec["context"]
    assert main(["plot", str(run_dir)]) == 0
    assert (run_dir / "plots" / "summary.png").is_file()


def test_preflight_rejects_model_that_does_not_fit_memory(tmp_path, monkeypatch):
    from ragen_core.trainer import setup as su

    monkeypatch.setattr(su, "available_memory_bytes", lambda device: 1024)
    trainer = Trainer(make_config(tmp_path, "algo=ppo"))
    with pytest.raises(ResourceError, match="GiB") as info:
        trainer.setup()
    assert "critic" in str(info.value) and "hint:" in str(info.value)


def test_dapo_dynamic_sampling_runs(tmp_path):
    trainer = Trainer(make_config(tmp_path, "algo=dapo", "steps=1", "test_freq=0"))
    (row,) = trainer.train()
    assert "rollout/dynamic_sampling_dropped" in row
    # the plots' "share of groups trained": the filter's groups less DAPO's flat ones (filter_kept_ratio said 1.0)
    groups = trainer.config.rollout.env_groups
    assert row["rollout/trained_group_ratio"] == (row["rollout/filter_kept_count"] - row["rollout/dynamic_sampling_dropped"]) / groups
    # groups whose episodes all scored the same are dropped, so either an update or an empty step happened
    assert ("actor/pg_loss" in row) != (row["rollout/empty_after_filter"] == 1.0)


def test_configured_diagnostic_sees_the_unfiltered_rollout(tmp_path):
    if "collapse" not in registry.names("diagnostic"):
        pytest.skip("ragen-diagnostics is not installed")
    trainer = Trainer(make_config(tmp_path, "steps=1", "test_freq=0", "diagnostics=[collapse]"))
    (row,) = trainer.train()
    assert any(k.startswith("collapse") for k in row)
    assert trainer.pm.get_plugin("diagnostic-collapse") is not None


def test_windowed_context_trains_one_row_per_turn(tmp_path):
    trainer = Trainer(make_config(tmp_path, "steps=1", "test_freq=0", "rollout.extra.context_window=last-k",
                                  "rollout.extra.max_context_turns=1"))
    (row,) = trainer.train()
    assert row["train/batch_size"] >= 4  # 4 episodes, >= 1 turn row each
    assert math.isfinite(row["actor/pg_loss"])


def test_reference_model_only_with_a_kl_term(tmp_path):
    plain = Trainer(make_config(tmp_path, "steps=1", "test_freq=0", name="plain"))
    (row,) = plain.train()
    assert plain.ref_model is None and "rollout/ref_log_prob" not in row
    kl = Trainer(make_config(tmp_path, "steps=1", "test_freq=0", "algo_config.use_kl_loss=true", "algo_config.kl_loss_coef=0.1",
                             "algo_config.kl_loss_type=k3", name="kl"))
    (row,) = kl.train()
    assert kl.ref_model is not None and math.isfinite(row["rollout/ref_log_prob"])
    # first update: policy == reference; their log-probs differ by rounding (~1e-6), k3 of that is ~1e-12
    assert row["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)


def test_ctrl_c_finishes_the_step_and_saves_a_checkpoint(tmp_path):
    import os
    import signal

    from ragen_core import hookimpl

    class CtrlC:
        @hookimpl
        def ragen_on_rollout_end(self, step):
            if step == 1:
                os.kill(os.getpid(), signal.SIGINT)  # arrives mid-step

    trainer = Trainer(make_config(tmp_path, "steps=5", "save_freq=0", "test_freq=0"))
    trainer.setup()
    trainer.pm.register(CtrlC())
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when the test process was started in the background
    history = trainer.train()
    assert len(history) == 1 and "actor/pg_loss" in history[0]  # the interrupted step completed
    assert [p.name for p in (trainer.run_dir / "checkpoints").iterdir()] == ["step_1"]
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is restored


def test_sigterm_finishes_the_step_and_saves_a_checkpoint_like_ctrl_c(tmp_path, capsys):
    """A scheduler's stop (SIGTERM) must not lose the steps since the last checkpoint."""
    import os
    import signal

    from ragen_core import hookimpl

    class Term:
        @hookimpl
        def ragen_on_rollout_end(self, step):
            if step == 2:
                os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-step

    trainer = Trainer(make_config(tmp_path, "steps=5", "save_freq=0", "test_freq=0"))
    trainer.setup()
    trainer.pm.register(Term())
    before = signal.getsignal(signal.SIGTERM)
    history = trainer.train()
    assert len(history) == 2 and "actor/pg_loss" in history[1]  # the interrupted step completed
    assert [p.name for p in (trainer.run_dir / "checkpoints").iterdir()] == ["step_2"]
    assert "interrupt (SIGTERM): finishing this step and saving a checkpoint (SIGTERM again to abort)" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) is before


def test_observer_with_a_misspelt_hook_is_refused(tmp_path, monkeypatch):
    from ragen_core import DiagnosticSpec, registry
    from ragen_core.errors import PluginLoadError

    (tmp_path / "typo_diag_mod.py").write_text(
        "from ragen_core import hookimpl\n"
        "class Typo:\n"
        "    def __init__(self, config):\n"
        "        self.config = config\n"
        "    @hookimpl\n"
        "    def ragen_on_rollout_ended(self, trajectories, step):  # real name: ragen_on_rollout_end\n"
        "        return {}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.register(DiagnosticSpec(name="typo-diag", factory="typo_diag_mod:Typo"))
    try:
        cfg = make_config(tmp_path, "diagnostics=[typo-diag]", "steps=1")
        with pytest.raises(PluginLoadError, match="implements a hook that RAGEN does not define"):
            Trainer(cfg).train()
    finally:
        registry.unregister("diagnostic", "typo-diag")


def test_lora_run_trains_adapters_and_saves_a_plain_checkpoint(tmp_path):
    pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    cfg = make_config(tmp_path, "optim.peft.rank=4", "optim.peft.alpha=8", "steps=2", "save_freq=2")
    trainer = Trainer(cfg)
    history = trainer.train()
    assert len(history) == 2
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)  # only adapters train
    ckpt = tmp_path / "run" / "checkpoints" / "step_2"
    model = AutoModelForCausalLM.from_pretrained(ckpt)  # merged: loads without peft
    assert not any("lora_" in n for n, _ in model.named_parameters())


def test_tensorboard_and_offline_wandb_loggers_write_their_files(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = make_config(tmp_path, "loggers=[jsonl,tensorboard,wandb]", "steps=1", "save_freq=0")
    Trainer(cfg).train()
    run = tmp_path / "run"
    assert list(run.glob("**/events.out.tfevents.*")), "no TensorBoard event file"
    offline = list((run / "wandb").glob("offline-run-*"))
    assert offline and list(offline[0].glob("*.wandb")), "no offline W&B run"


def test_unknown_or_missing_logger_is_a_config_error(tmp_path):
    from ragen_core.errors import ConfigError
    from ragen_core.trainer.loggers import make_loggers

    with pytest.raises(ConfigError, match="unknown logger 'tensorbord'"):
        make_loggers(["tensorbord"], tmp_path)


def test_first_step_logs_the_warm_start_valid_rate(tmp_path):
    cfg = make_config(
        tmp_path, "warm_start.enabled=true", "warm_start.episodes=4", "warm_start.epochs=1", "warm_start.target_valid_rate=0",
        "warm_start.check_episodes=2", "warm_start.start_from=scratch", f"warm_start.cache_dir={tmp_path / 'ws'}", "steps=1", "save_freq=0",
    )
    history = Trainer(cfg).train()
    rate = history[0]["warm_start/valid_rate"]
    assert 0.0 <= rate <= 1.0


def _corridor_script(tok):
    """Call 0: even rows walk straight to the goal (one turn, reward 1); every other reply walks
    away from it, so those episodes play both turns and fail."""
    import re

    from ragen_core.engines.scripted import ScriptedEngine

    def script(call, row, prompt):
        state = re.findall(r"[P_G]*P[P_G]*G[P_G]*|[P_G]*G[P_G]*P[P_G]*", tok.decode(prompt))[-1]
        move = "Right" if state.index("G") > state.index("P") else "Left"
        steps = abs(state.index("G") - state.index("P"))
        if call == 0 and row % 2 == 0:
            return f"go</think><answer>{' || '.join([move] * steps)}</answer>"  # the prompt ends with "<think>"
        return f"go</think><answer>{'Left' if move == 'Right' else 'Right'}</answer>"

    return ScriptedEngine(script, tok)


@pytest.mark.parametrize("unit", ["row", "episode"])
def test_seq_mean_unit_episode_weighs_each_episode_once_in_windowed_mode(tmp_path, monkeypatch, unit):
    """Group-normalised advantages sum to 0 over a group's episodes. Counting every turn row as a
    sequence, the two-turn failures outweigh the one-turn successes and the first (ratio 1) policy
    loss is positive; counting episodes, it is 0."""
    from ragen_core.trainer import setup

    monkeypatch.setattr(setup, "make_engine", lambda c, m, t: _corridor_script(t))
    trainer = Trainer(make_config(tmp_path, "steps=1", "test_freq=0", "env_config.max_actions_per_turn=2", "rollout.extra.context_window=last-k",
                                  "rollout.extra.max_context_turns=1", "optim.mini_batch_size=64", "optim.micro_batch_size=2",
                                  "sampling.train.max_new_tokens=40", f"optim.seq_mean_unit={unit}", "filter=none"))
    (row,) = trainer.train()
    assert row["train/success"] == pytest.approx(0.5) and row["train/batch_size"] == 6  # 2 x 1 + 2 x 2 turn rows
    if unit == "episode":
        assert row["actor/pg_loss"] == pytest.approx(0.0, abs=1e-6)  # 0 up to float32 rounding of O(1) terms (~8 eps)
    else:
        assert row["actor/pg_loss"] > 0.1


def test_a_sigterm_under_torchrun_says_it_may_be_torchrun_passing_on_a_lost_rank(tmp_path, capsys):
    """When one rank dies, torchrun sends the others SIGTERM: rank 0 printed "interrupt (SIGTERM)"
    as if a user had asked, before the lost-rank error that was the real cause."""
    import dataclasses
    import signal

    trainer = Trainer(make_config(tmp_path, "steps=1"))
    trainer.world = dataclasses.replace(trainer.world, size=2)  # only the handler's wording reads it here
    previous = trainer._install_sigint()
    try:
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    finally:
        for sig, handler in (previous or {}).items():
            signal.signal(sig, handler)
    assert ("interrupt (SIGTERM, from a user or from torchrun after another rank ended): finishing this step and saving a checkpoint "
            "(SIGTERM again to abort)") in capsys.readouterr().out.splitlines()


def test_the_memory_check_reads_the_run_s_gpu_and_counts_the_loaded_model_once(monkeypatch):
    """mem_get_info() without a device read cuda:0 for a cuda:1 run, and the model already on the GPU
    was counted against the free memory (helper-65's audit)."""
    import torch

    from ragen_core.trainer import setup as su

    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: asked.append(("free", device)) or (3 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: asked.append(("allocated", device)) or 2**30)
    assert su.available_memory_bytes("cuda:1") == 4 * 2**30
    assert asked == [("free", torch.device("cuda:1")), ("allocated", torch.device("cuda:1"))]


def test_the_memory_estimate_of_a_lora_run_trains_only_its_adapters():
    """The refusal's own advice, 'enable LoRA', got the same refusal: the estimate ignored LoRA (helper-65's audit)."""
    from ragen_core.trainer.setup import estimate_training_bytes

    n = 7_000_000_000
    full = estimate_training_bytes(n, 2, needs_critic=False, needs_ref=True)
    lora = estimate_training_bytes(n, 2, needs_critic=False, needs_ref=True, lora=True)
    assert full == int((n * 14 + n * 2) * 1.2)  # bf16 weights + fp32 grads and two moments, and a bf16 reference
    assert lora == int((n * 2 + int(n * 0.02) * 16) * 1.2)  # frozen weights, fp32 adapters with grads and moments, no reference copy
    assert lora < full / 4
    # a LoRA PPO run on float16 weights: a float32 critic, counted at 4 bytes a weight (helper-67's review)
    with_critic = estimate_training_bytes(n, 2, needs_critic=True, needs_ref=False, lora=True, critic_bytes_per_param=4)
    assert with_critic == int((n * 2 + int(n * 0.02) * 16 + n * 16) * 1.2)


def test_the_memory_refusal_of_a_lora_run_does_not_advise_lora(tmp_path, monkeypatch):
    from ragen_core.trainer import setup as su

    pytest.importorskip("peft")
    monkeypatch.setattr(su, "available_memory_bytes", lambda device: 1024)
    with pytest.raises(ResourceError) as info:
        Trainer(make_config(tmp_path, "optim.peft.rank=4", "optim.peft.alpha=8", "algo_config.use_kl_loss=true")).setup()
    text = str(info.value)
    assert "(frozen weights, LoRA adapters with grads and AdamW)" in text, text  # no reference copy: the base with adapters off
    assert "enable LoRA" not in text and "hint: use a smaller model" in text


def test_low_validation_success_stop_names_the_settings_that_turn_it_off(tmp_path, capsys):
    """The stop said only 'early_stopped/low_validation_success': a hard task that starts at 0
    success was stopped with no word on how to keep training it."""
    # slip=1: no move ever happens, so no episode succeeds
    cfg = make_config(tmp_path, "env_config.slip=1.0", "test_freq=1", "steps=4", "early_stop.low_val_success_patience=2")
    trainer = Trainer(cfg)
    history = trainer.train()
    assert trainer.stop_reason == "early_stopped/low_validation_success" and len(history) == 2
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("training stopped early")]
    assert lines == ["training stopped early at step 2: early_stopped/low_validation_success: val-env/toy-corridor/success stayed below 0.01 "
                     "in 2 validations in a row (early_stop.low_val_success_patience=2); set early_stop.low_val_success=false "
                     "to keep training a task that starts at 0 success"]
    off = Trainer(make_config(tmp_path, "env_config.slip=1.0", "test_freq=1", "steps=3", "early_stop.low_val_success_patience=2",
                              "early_stop.low_val_success=false", name="off"))
    assert len(off.train()) == 3 and off.stop_reason is None
