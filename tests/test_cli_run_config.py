"""`ragen run/eval/plot` pieces that need no rollout: config errors, export records, plots, state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.config import load_config
from ragen_core.errors import ConfigError
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig, check_plugin_configs


def test_defaults_are_cpu_sized():
    cfg = RunConfig()
    assert (cfg.rollout.env_groups, cfg.rollout.group_size) == (4, 8)
    assert cfg.sampling.train.temperature == 1.0 and cfg.sampling.val.temperature == 0.5
    assert cfg.sampling.val.do_sample and cfg.sampling.train.max_new_tokens == 48
    assert cfg.algo == "grpo" and cfg.filter == "none" and cfg.model == "tiny"
    assert cfg.episodes_per_step == 32


def test_bad_value_names_field_path():
    with pytest.raises(ConfigError, match=r"rollout\.group_size"):
        load_config(RunConfig, [], ["rollout.group_size=0"])
    with pytest.raises(ConfigError, match=r"optim\.lrr: unknown key \(did you mean 'optim\.lr'\?\)\n"):
        load_config(RunConfig, [], ["optim.lrr=1"])
    with pytest.raises(ConfigError, match=r"invalid config: zzz: unknown key\n"):  # nothing close: no guess
        load_config(RunConfig, [], ["zzz=1"])
    # a field one level down: named from where the key was given
    with pytest.raises(ConfigError, match=r"invalid config: lr: unknown key \(did you mean 'optim.lr'\?\)\n"):
        load_config(RunConfig, [], ["lr=1"])


def test_an_unknown_plugin_config_key_suggests_the_field(capsys):
    assert main(["run", "--env", "bandit", "env_config.max_turnz=3", "--print-config"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[0]
    assert line == "PluginConfigError: invalid config: env_config.max_turnz: unknown key (did you mean 'env_config.max_turns'?)"
    if "deepcoder" in registry.names("env"):  # a nested setting given without its parent
        assert main(["run", "--env", "deepcoder", "env_config.memory_mb=256", "--print-config"]) == 2
        line = capsys.readouterr().err.strip().splitlines()[0]
        assert line == ("PluginConfigError: invalid config: env_config.memory_mb: unknown key "
                        "(did you mean 'env_config.sandbox.memory_mb'?)")


def test_plugin_setting_errors_name_the_key_as_typed_and_the_plugin_to_look_up(capsys):
    assert main(["run", "--env", "bandit", "algo_config.estimator_config.norm_adv_by_sdt=false", "--print-config"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == ("PluginConfigError: invalid config: algo_config.estimator_config.norm_adv_by_sdt: unknown key "
                        "(did you mean 'algo_config.estimator_config.norm_adv_by_std'?)")  # as typed: it pastes back
    assert any(line.startswith("hint: check the spelling against 'ragen plugins show estimator grpo'") for line in lines[1:])
    assert main(["run", "--env", "bandit", "rollout.pool_config.num_workerz=2", "--print-config"]) == 2
    assert capsys.readouterr().err.startswith("PluginConfigError: invalid config: rollout.pool_config.num_workerz: unknown key")
    assert main(["run", "--env", "bandit", "env_config.max_turns=x", "--print-config"]) == 2
    assert capsys.readouterr().err.startswith("PluginConfigError: invalid config: env_config.max_turns: ")
    assert main(["env", "play", "bandit", "--set", "max_turnz=2"]) == 2  # env play's --set: the same spelling
    err = capsys.readouterr().err
    assert err.startswith("PluginConfigError: invalid config: env_config.max_turnz: unknown key")
    assert "hint: check the spelling against 'ragen plugins show env bandit'" in err.splitlines()


@pytest.mark.parametrize("argv,needle", [
    (["run", "--env", "bandit", "rollout.group_size=-1"], "rollout.group_size"),
    (["run", "--env", "bandit", "optim.micro_batch_size=64"], "micro_batch_size"),
    # spec 17 L32: a turn window in full mode was silently ignored
    (["run", "--env", "bandit", "rollout.extra.max_context_turns=2", "--print-config"], "max_context_turns=2 has no effect"),
    (["run"], "--env"),
    (["run", "--resume", "/nonexistent/run"], "config.yaml"),
    (["plot", "/nonexistent/run"], "run directory /nonexistent/run does not exist"),
])
def test_cli_config_errors_are_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("ConfigError:") and needle in err[0]


def _traj() -> Trajectory:
    t = Trajectory(env="toy", tag="Toy", group_id=3, member=1, seed=126, env_id=7, system_prompt="sys")
    t.turns = [
        Turn(prompt_ids=[1, 2], response_ids=[3], response_text="<think>x</think><answer>Up</answer>", actions=["Up"], reward=0.0,
             penalty=0.0, valid=True, observation="obs1"),
        Turn(prompt_ids=[1, 2, 3, 4], response_ids=[5], response_text="garbage", actions=[], reward=0.0, penalty=-0.1, observation="obs2"),
        Turn(prompt_ids=[1, 2, 3, 4, 5, 6], response_ids=[7], response_text="<think>y</think><answer>Down</answer>", actions=["Down"],
             reward=1.0, valid=True, observation="obs3"),
    ]
    t.success = t.terminated = True
    return t


def test_eval_record_aligns_rewards_with_the_reply_that_earned_them():
    from ragen_core.cli.evaluate import summarize, trajectory_record

    rec = trajectory_record(0, _traj())
    roles = [m["role"] for m in rec["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assistant = [m for m in rec["messages"] if m["role"] == "assistant"]
    assert [m["reward"] for m in assistant] == [0.0, 0.0, 1.0]
    assert [m["penalty"] for m in assistant] == [0.0, -0.1, 0.0]
    assert assistant[2]["actions"] == ["Down"] and rec["messages"][5]["content"] == "obs3"
    assert rec["return"] == pytest.approx(0.9) and rec["success"] is True and rec["num_turns"] == 3
    json.dumps(rec)
    other = _traj()
    other.success = False
    s = summarize([_traj(), other])
    assert s["success"] == 0.5 and s["pass@2"] == 1.0 and s["mean_reward"] == pytest.approx(0.9)


def test_eval_reports_the_envs_info_metrics_as_validation_logs_them():
    """``ragen eval`` printed success, reward and pass@k only: WebShop's partial-credit score
    (info raw_reward) or SearchQA's F1 were in no summary and no record of an evaluation."""
    from ragen_core.cli.evaluate import summarize, trajectory_record
    from ragen_core.trainer.metrics import episode_metrics

    a, b, c = _traj(), _traj(), _traj()
    a.info_metrics, b.info_metrics = {"raw_reward": 0.5, "f1": 1.0}, {"raw_reward": 0.25}  # c reported neither key
    s = summarize([a, b, c])
    assert s["info/raw_reward"] == pytest.approx(0.375) and s["info/f1"] == 1.0  # over the episodes that reported it
    logged = episode_metrics([a, b, c], "val-env")
    assert {k.removeprefix("val-env/Toy/"): v for k, v in logged.items() if "/info/" in k} == {k: s[k] for k in s if k.startswith("info/")}
    assert trajectory_record(0, a)["info_metrics"] == {"raw_reward": 0.5, "f1": 1.0} and trajectory_record(2, c)["info_metrics"] == {}
    assert not [k for k in summarize([c]) if k.startswith("info/")]


def test_episode_metrics_and_pass_at_k():
    from ragen_core.trainer.metrics import episode_metrics

    a, b = _traj(), _traj()
    b.success = False
    c = _traj()
    c.group_id, c.success = 4, False
    m = episode_metrics([a, b, c], "train")
    assert m["train/Toy/success"] == pytest.approx(1 / 3)
    assert m["train/Toy/pass@2"] == pytest.approx(0.5)
    assert m["train/Toy/action_is_valid"] == pytest.approx(2 / 3)
    assert m["train/reward"] == pytest.approx(0.9)


def test_early_stopper_rules():
    from ragen_core.trainer.metrics import EarlyStopper

    s = EarlyStopper(patience=2, window=2)
    assert s.observe_reward_std(1.0) is None and s.observe_reward_std(1.0) is None
    assert s.observe_reward_std(0.05) is None
    assert s.observe_reward_std(0.05) == "early_stopped/reward_variance_collapse"
    assert "early_stop.reward_variance_collapse=false" in s.explain("early_stopped/reward_variance_collapse")
    assert s.observe_validation({"val-env/Toy/success": 0.0}) is None
    assert s.observe_validation({"val-env/Toy/success": 0.0}) == "early_stopped/low_validation_success"
    s2 = EarlyStopper(patience=2)
    s2.load_state_dict(s.state_dict())
    assert s2.val_counters == {"val-env/Toy/success": 2}

    empty = EarlyStopper(empty_stop_steps=3)  # rule 1 (it lived in the trainer loop, its line in Trainer.train)
    assert [empty.observe_empty(n) for n in (1, 2, 3)] == [None, None, "early_stopped/empty_filtered_steps"]
    assert empty.explain("early_stopped/empty_filtered_steps") == ("no group was left to train in 3 steps in a row "
                                                                  "(filter_config.empty_stop_steps=3); filter_config.empty_stop_steps=0 "
                                                                  "turns this stop off")
    assert EarlyStopper().observe_empty(100) is None  # 0 (the default here): off


def test_metrics_jsonl_truncation_and_plot(tmp_path: Path):
    from ragen_core.cli.plot import plot_run
    from ragen_core.trainer.loggers import JsonlLogger, read_metrics, truncate_metrics

    log = JsonlLogger(tmp_path)
    for step in range(1, 6):
        log.ragen_on_step_end(metrics={"train/success": step / 10, "actor/pg_loss": float("nan"), "rollout/filter_kept_ratio": 1.0}, step=step)
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 6, "train/succ')  # torn line of a killed writer
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and rows[0]["actor/pg_loss"] is None
    truncate_metrics(tmp_path / "metrics.jsonl", 3)
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    written = plot_run(tmp_path)
    names = {p.name for p in written}
    assert {"success.png", "filter.png", "summary.png"} <= names
    assert all(p.stat().st_size > 1000 for p in written)
    assert main(["plot", str(tmp_path / "missing")]) == 2


def test_plot_given_files_says_so_in_one_line(tmp_path: Path, capsys):
    from ragen_core.testing.run_helpers import one_line_error

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "train/success": 0.5}\n')
    assert main(["plot", str(tmp_path / "metrics.jsonl")]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == f"ConfigError: {tmp_path / 'metrics.jsonl'} is a file, not a run directory"
    assert f"hint: pass the folder that holds it: ragen plot {tmp_path}" in err  # a run's folder: named
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    assert main(["plot", str(tmp_path / "other" / "notes.txt")]) == 2
    err = capsys.readouterr().err  # the folder holding it is no run: not suggested
    assert "ragen plot" not in err and "pass the folder a 'ragen run' wrote" in err
    (tmp_path / "taken").write_text("x")
    for out in (tmp_path / "taken", tmp_path / "taken" / "plots"):
        assert main(["plot", str(tmp_path), "--out", str(out)]) == 2
        line = one_line_error(capsys.readouterr().err)
        assert line == f"ConfigError: --out {out}: {tmp_path / 'taken'} is a file; the plots go into a folder"


def test_checkpoint_roundtrip_restores_rng_and_keeps_latest(tmp_path: Path):
    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.checkpoint import (
        latest_checkpoint,
        list_checkpoints,
        load_state,
        save_checkpoint,
        set_rng_state,
    )

    model, tok = load_model_and_tokenizer("tiny")
    torch.manual_seed(5)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, tok, {"runner": {"counter": step}}, keep=2)
    expected = torch.rand(3)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]
    step, path = latest_checkpoint(tmp_path)
    state = load_state(path)
    assert step == 3 and state["step"] == 3 and state["runner"] == {"counter": 3}
    set_rng_state(state["rng"])
    assert torch.equal(torch.rand(3), expected)
    reloaded, _ = load_model_and_tokenizer(str(path))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))


def test_print_config_shows_every_section(capsys):
    import yaml

    assert main(["run", "--print-config", "--env", "bandit", "--algo", "ppo", "rollout.group_size=3"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["env"] == "bandit" and data["algo"] == "ppo" and data["rollout"]["group_size"] == 3
    assert {"sampling", "optim", "warm_start", "reward", "early_stop"} <= set(data)
    assert RunConfig.model_validate(data).rollout.group_size == 3
    # plugin settings are filled in from the specs (the critic-based algorithm, the no-op filter's stop rule)
    assert data["algo_config"]["use_critic"] is True and data["algo_config"]["estimator"] == "gae"
    assert "gamma" in data["algo_config"]["estimator_config"]
    assert data["filter_config"]["empty_stop_steps"] == 5 and "max_turns" in data["env_config"]


def test_a_printed_config_runs_the_same_settings(tmp_path, capsys):
    """What --print-config prints is a config file that resolves to the same settings again."""
    assert main(["run", "--print-config", "--env", "bandit", "--recipe", "learn"]) == 0
    first = capsys.readouterr().out
    (tmp_path / "c.yaml").write_text(first)
    assert main(["run", "--print-config", "--config", str(tmp_path / "c.yaml")]) == 0
    assert capsys.readouterr().out == first


@pytest.mark.parametrize("argv", [["eval", "--env", "bandit", "--model", "/nonexistent/model"],
                                  ["run", "--env", "bandit", "--model", "./no/such/model"]])
def test_a_missing_model_folder_is_said_before_torch_loads(argv):
    import subprocess
    import sys

    code = f"import sys; from ragen_core.cli.main import main; rc = main({argv!r}); print('RESULT', rc, 'torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "RESULT 2 False", proc.stdout + proc.stderr
    first = proc.stderr.strip().splitlines()[0]
    assert first == f"RagenError: could not load model {argv[-1]!r}: the folder does not exist"


def test_algorithm_estimator_and_filter_presets_reach_the_run(tmp_path):
    """``algo_preset``, ``algo_config.estimator_preset`` and ``filter_preset`` pick a plugin's named
    presets (``ragen plugins show`` lists them); explicit settings still win over a preset."""
    from ragen_core.errors import PluginConfigError
    from ragen_core.testing.run_helpers import toy_run_config
    from ragen_core.trainer.trainer import Trainer

    cfg = toy_run_config(tmp_path / "a", "algo=drgrpo", "algo_preset=constant-norm", steps=1)
    with Trainer(cfg) as trainer:
        trainer.setup()
        assert trainer.algorithm.config.loss_agg_mode == "seq-mean-token-sum-norm"
    cfg = toy_run_config(tmp_path / "b", "algo=ppo", "algo_config.estimator_preset=no-whiten", "algo_config.clip_ratio_low=0.1", steps=1)
    with Trainer(cfg) as trainer:
        trainer.setup()
        assert trainer.estimator.config.whiten is False and trainer.algorithm.config.clip_ratio_low == 0.1
    with pytest.raises(PluginConfigError, match="filter 'snr-topp' has no preset 'nope'"):
        check_plugin_configs(toy_run_config(tmp_path / "c", "filter=snr-topp", "filter_preset=nope"))


def test_filter_plot_shows_the_kept_groups_reward_std_beside_all_groups():
    from ragen_core.cli.plot import plan

    rows = [{"step": s, "rollout/filter_kept_ratio": 0.5, "rollout/in_group_reward_std": 0.2 + 0.01 * s,
             "rollout/chosen_in_group_reward_std": 0.4 + 0.02 * s} for s in (1, 2, 3)]
    (chosen,) = [keys for panel, keys in plan(rows) if panel.name == "filter"]
    assert {"rollout/in_group_reward_std", "rollout/chosen_in_group_reward_std"} <= set(chosen)


def test_a_list_given_one_bare_word_and_settings_for_the_default_filter_get_their_hints(capsys):
    assert main(["run", "--env", "bandit", "--print-config", "diagnostics=collapse"]) == 2
    err = capsys.readouterr().err
    assert "hint: diagnostics takes a list: write diagnostics=[collapse] (several: [a,b])" in err.splitlines()
    assert main(["run", "--env", "bandit", "--print-config", "filter_config.value=0.5"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "PluginConfigError: invalid config: filter_config.value: unknown key"
    assert lines[1].startswith("hint: the filter is 'none' (the default, it keeps every group): choose one with --filter NAME")


def test_a_rule_across_settings_is_its_own_sentence_without_a_dump_of_the_config(capsys):
    """A model-level validator's message used to come as '(root): Value error, ... (got {the whole config})'."""
    assert main(["run", "--env", "bandit", "rollout.async_rollout=true", "grad_analysis.every=1", "--print-config"]) == 2
    line = capsys.readouterr().err.splitlines()[0]
    assert line == ("ConfigError: invalid config: rollout.async_rollout cannot be combined with grad_analysis.every > 0 "
                    "(analyse without async rollout)")


@pytest.mark.parametrize("args", [["--algo", "ppo", "algo_config.use_critic=false"], ["--algo", "grpo", "algo_config.estimator=gae"]])
def test_an_estimator_that_needs_a_critic_under_use_critic_false_is_refused(capsys, args):
    """The trainer built a critic whenever the estimator asked, so use_critic=false was ignored in silence."""
    assert main(["run", "--env", "bandit", *args, "--print-config"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("PluginConfigError: algo_config.estimator=gae computes advantages from a critic's values, but algorithm ")
    assert lines[0].endswith("has algo_config.use_critic=false")
    assert "grpo" in lines[1] and "rloo" in lines[1]  # the critic-free ones to pick instead
    assert main(["run", "--env", "bandit", *args, "algo_config.use_critic=true", "--print-config"]) == 0


def test_relative_data_paths_are_recorded_absolute(tmp_path, monkeypatch):
    """config.yaml kept env_config.dataset_path=mm.jsonl as typed: --resume or ragen eval from another
    folder failed ("does not exist"), or read another mm.jsonl found there."""
    from ragen_core.cli.run import absolute_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mm.jsonl").write_text("{}\n", encoding="utf-8")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "tiny").mkdir()  # a folder named like the built-in model does not take its name
    given = ["env_config.dataset_path=mm.jsonl", "env_config.retriever.corpus=./corpus", "env_config.val_dataset=owner/name",
             "env_config.data_path=missing.jsonl", "env_config.difficulty=mm.jsonl", "model=tiny", "model=corpus", "steps=3",
             f"env_config.dataset={tmp_path / 'mm.jsonl'}", "run_dir=corpus"]
    assert absolute_paths(given) == [
        f"env_config.dataset_path={tmp_path / 'mm.jsonl'}", f"env_config.retriever.corpus={tmp_path / 'corpus'}",
        "env_config.val_dataset=owner/name",  # a hub id
        "env_config.data_path=missing.jsonl",  # missing: named as typed by the env's own check
        "env_config.difficulty=mm.jsonl",  # not a data setting
        "model=tiny", f"model={tmp_path / 'corpus'}", "steps=3", f"env_config.dataset={tmp_path / 'mm.jsonl'}",
        "run_dir=corpus",  # the run folder is kept as given
    ]


def test_ragen_run_records_a_relative_data_file_as_absolute(tmp_path, monkeypatch, capsys):
    if "countdown" not in registry.names("env"):
        pytest.skip("ragen-env-countdown is not installed")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text("{}\n", encoding="utf-8")
    assert main(["run", "--env", "countdown", "env_config.data_path=d.jsonl", "--print-config"]) == 0
    assert f"  data_path: {tmp_path / 'd.jsonl'}" in capsys.readouterr().out.splitlines()


def test_print_config_says_what_a_run_would_warn_about(capsys):
    """diagnostics_config.collapse without diagnostics=[collapse] printed "diagnostics_config: {}"
    and nothing else: the settings looked accepted."""
    if "collapse" not in registry.names("diagnostic"):
        pytest.skip("ragen-diagnostics is not installed")
    assert main(["run", "--env", register_toy_env(), "diagnostics_config.collapse.compute_freq=2", "--print-config"]) == 0
    captured = capsys.readouterr()
    assert "diagnostics_config: {}" in captured.out.splitlines()
    assert ("warning: diagnostics_config.collapse is set but diagnostics does not list 'collapse', so these settings are unused; "
            "to run it: diagnostics=[collapse]") in captured.err.splitlines()


def test_plugin_names_are_recorded_as_the_registry_spells_them():
    """``--algo GRPO`` and ``--filter snr_topp`` resolve, but config.yaml kept them as typed (a later
    comparison, a default run-folder name or a script reading the file saw another spelling)."""
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig

    config = load_config(RunConfig, [], ["env=Bandit", "algo=GRPO", "filter=Ragen_Filters:SNR_TopP", "engine=HF",
                                         "rollout.pool=Process", "diagnostics=[Collapse]"])
    assert (config.env, config.algo, config.filter, config.engine) == ("bandit", "grpo", "ragen-filters:snr-topp", "hf")
    assert (config.rollout.pool, config.diagnostics) == ("process", ["collapse"])


def test_relative_data_paths_in_a_config_file_are_recorded_absolute(tmp_path, monkeypatch, capsys):
    """Only command-line overrides were made absolute: a --config file's env_config.data_path=d.jsonl
    went into config.yaml as typed. A path may be relative to where ragen runs or to the file."""
    if "countdown" not in registry.names("env"):
        pytest.skip("ragen-env-countdown is not installed")
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "beside.jsonl").write_text("{}\n", encoding="utf-8")
    (tmp_path / "here.jsonl").write_text("{}\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for given, recorded in (("here.jsonl", tmp_path / "here.jsonl"), ("beside.jsonl", configs / "beside.jsonl"),
                            ("missing.jsonl", "missing.jsonl")):
        (configs / "run.yaml").write_text(f"env: countdown\nenv_config:\n  data_path: {given}\nrun_dir: out\n", encoding="utf-8")
        assert main(["run", "--config", str(configs / "run.yaml"), "--print-config"]) == 0
        lines = capsys.readouterr().out.splitlines()  # a missing one is left as typed: the env's own check names it at the run
        assert f"  data_path: {recorded}" in lines and "run_dir: out" in lines


def test_a_misspelt_option_is_named_by_its_command_with_the_option_meant(capsys):
    """'ragen run --stpes 2' said "usage: ragen [-h] [-v] COMMAND ..." and "ragen: error: unrecognized
    arguments: --stpes": the top-level usage, and no suggestion (a misspelt config key gets one)."""
    with pytest.raises(SystemExit) as ended:
        main(["run", "--env", "bandit", "--stpes", "2"])
    assert ended.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: ragen run ") and err[-1] == "ragen run: error: unrecognized arguments: --stpes (did you mean --steps?)"
    with pytest.raises(SystemExit):
        main(["run", "--env", "bandit", "--zzz"])
    assert capsys.readouterr().err.splitlines()[-1] == "ragen run: error: unrecognized arguments: --zzz"
    with pytest.raises(SystemExit):  # a nested subcommand's own parser says it
        main(["warm-policy", "show", "nosuch"])
    assert capsys.readouterr().err.splitlines()[-1] == "ragen warm-policy show: error: unrecognized arguments: nosuch"
