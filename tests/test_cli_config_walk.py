"""Findings of a walk through ``ragen run`` / ``ragen eval``'s settings (helper-79): each was
accepted, or refused only after a model loaded, or refused with a hint that was not true."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import Field

from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.config import load_config
from ragen_core.errors import ConfigError
from ragen_core.interfaces.advantage import AdvantageEstimator
from ragen_core.specs import EstimatorSpec, PluginConfig
from ragen_core.testing.run_helpers import one_line_error
from ragen_core.trainer.config import RunConfig


def _print_config(capsys, *overrides: str) -> tuple[int, str, str]:
    rc = main(["run", "--env", "bandit", "--print-config", *overrides])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(("override", "field"), [
    ("rollout.group_size=true", "rollout.group_size"),  # was taken as group_size 1
    ("steps=on", "steps"),  # YAML 1.1 reads 'on' as true
    ("optim.lr=true", "optim.lr"),  # a float field: was taken as 1.0
    ("sampling.train.max_new_tokens=false", "sampling.train.max_new_tokens"),
    ("optim.betas=[true, 0.9]", "optim.betas.0"),  # the item, not only the field
])
def test_a_boolean_for_a_number_is_refused_naming_the_field(override, field, capsys):
    rc, _, err = _print_config(capsys, override)
    assert rc == 2
    assert one_line_error(err).startswith(f"ConfigError: invalid config: {field}")
    assert "a number, not true/false" in err


def test_a_boolean_for_a_plugin_number_is_refused_and_numbers_still_pass(capsys):
    rc, _, err = _print_config(capsys, "env_config.action_space_start=true")
    assert rc == 2 and one_line_error(err).startswith("PluginConfigError: invalid config: env_config.action_space_start")
    with pytest.raises(ConfigError, match=r"RunConfig: .*steps.*not true/false"):
        RunConfig(steps=True)
    # numbers, quoted numbers and booleans for boolean fields are taken as before
    cfg = load_config(RunConfig, [], ["rollout.group_size=8", "steps='5'", "optim.lr=1", "progress=false", "warm_start.enabled=true"])
    assert (cfg.rollout.group_size, cfg.steps, cfg.optim.lr, cfg.progress, cfg.warm_start.enabled) == (8, 5, 1.0, False, True)


def test_weight_decay_is_bounded_as_adamw_uses_it(capsys):
    rc, _, err = _print_config(capsys, "optim.weight_decay=50")
    assert rc == 2 and one_line_error(err).startswith("ConfigError: invalid config: optim.weight_decay: ")
    assert load_config(RunConfig, [], ["optim.weight_decay=1"]).optim.weight_decay == 1.0  # grokking-style runs use 1
    assert load_config(RunConfig, [], ["optim.weight_decay=0"]).optim.weight_decay == 0.0


def test_an_override_given_twice_is_warned_about_once_naming_the_key(capsys):
    rc, out, err = _print_config(capsys, "optim.lr=1e-3", "--steps", "2", "optim.lr=2e-3", "optim.lr=3e-3")  # apart on the line too
    assert rc == 0 and "  lr: 0.003\n" in out  # the last one, as before
    warnings = [line for line in err.splitlines() if "optim.lr" in line]
    assert warnings == ["warning: optim.lr is given 3 times (optim.lr=1e-3, then optim.lr=2e-3, then optim.lr=3e-3): the last one is used"]
    assert main(["eval", "--env", "no-such-env", "steps=1", "steps=2"]) == 2  # (the unknown env is refused after the warning)
    assert "warning: steps is given 2 times (steps=1, then steps=2): the last one is used" in capsys.readouterr().err


def test_a_flag_and_an_override_of_the_same_setting_keep_their_precedence(capsys):
    rc, out, _ = _print_config(capsys, "--steps", "3", "steps=7")  # documented: overrides win over flags
    assert rc == 0 and "\nsteps: 7\n" in out


@pytest.mark.parametrize("greedy", ["sampling.train.temperature=0", "sampling.train.do_sample=false"])
def test_greedy_training_with_a_group_baseline_is_warned_about(greedy, capsys):
    rc, _, err = _print_config(capsys, greedy)
    assert rc == 0
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "greedy" in warnings[0] and "all zero" in warnings[0]
    assert f"sample instead: {greedy.replace('=0', '=1.0').replace('=false', '=true')}" in warnings[0]
    for fine in (["sampling.val.temperature=0"], [greedy, "--algo", "ppo"]):  # greedy validation; a critic's baseline (GAE)
        rc, _, err = _print_config(capsys, *fine)
        assert rc == 0 and "greedy" not in err


@pytest.mark.parametrize(("overrides", "line"), [
    (["sampling.train.max_new_tokens=5000"],
     "ConfigError: invalid config: rollout.max_model_len=3600 leaves no room for a prompt before sampling.train.max_new_tokens=5000: "
     "raise the one or lower the other"),
    (["rollout.max_model_len=64", "sampling.val.max_new_tokens=64"],
     "ConfigError: invalid config: rollout.max_model_len=64 leaves no room for a prompt before sampling.val.max_new_tokens=64: "
     "raise the one or lower the other"),
    (["rollout.max_model_len=40"],  # both at their default 48: lowering the train one alone was refused again
     "ConfigError: invalid config: rollout.max_model_len=40 leaves no room for a prompt before sampling.train.max_new_tokens=48 "
     "and sampling.val.max_new_tokens=48: raise the one or lower the others"),
    (["distributed.strategy=fsdp", "optim.peft.rank=8"],
     "ConfigError: invalid config: optim.peft.rank=8 (LoRA) is not supported with distributed.strategy=fsdp: set distributed.strategy=ddp "
     "(LoRA's adapters are small enough to replicate)"),
    (["distributed.strategy=fsdp", "rollout.async_rollout=true"],
     "ConfigError: invalid config: rollout.async_rollout is not supported with distributed.strategy=fsdp (several ranks): "
     "set rollout.async_rollout=false"),
])
def test_settings_that_no_model_can_run_are_refused_by_print_config(overrides, line, capsys):
    rc, _, err = _print_config(capsys, *overrides)
    assert rc == 2 and one_line_error(err) == line


@pytest.mark.parametrize("argv", [["model="], ["--model", ""], ["model=' '"]])
def test_an_empty_model_names_the_runs_default(argv, capsys):
    rc, _, err = _print_config(capsys, *argv)
    assert rc == 2 and one_line_error(err).startswith("ConfigError: invalid config: model: ")
    assert "tiny (the default)" in err and "warm" not in err  # warm is eval's default, and no model to train


def test_eval_of_an_empty_model_names_evals_default(capsys):
    assert main(["eval", "--env", "bandit", "--model", ""]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == "ConfigError: --model is empty"
    assert "warm (the default)" in err


def _fake_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "checkpoints" / "step_1").mkdir(parents=True)
    (run / "config.yaml").write_text("env: bandit\nenv_config:\n  lo_arm_score: 0.3\nsampling:\n  val:\n    temperature: 0.9\n")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return run


def _eval_config(monkeypatch, argv: list[str]) -> RunConfig:
    """The run config ``ragen eval argv`` would evaluate with (the evaluation itself is stopped)."""
    from ragen_core.cli import evaluate as ev

    seen = []

    class Stop(Exception):
        pass

    def capture(config, model_path, *, groups, group_size):
        seen.append(config)
        raise Stop

    monkeypatch.setattr(ev, "evaluate", capture)
    monkeypatch.setattr(ev, "check_model_name", lambda model: None)
    with pytest.raises(Stop):
        main(argv)
    return seen[0]


def test_eval_config_files_go_over_the_runs_settings_instead_of_hiding_them(tmp_path, monkeypatch, capsys):
    run = _fake_run(tmp_path)
    extra = tmp_path / "extra.yaml"
    extra.write_text("env_config:\n  hi_arm_hiscore: 2.0\n")
    # --config used to drop the run's settings: its env ('needs --env NAME'), env_config and sampling
    config = _eval_config(monkeypatch, ["eval", "--model", str(run), "--config", str(extra)])
    assert config.env == "bandit" and config.sampling.val.temperature == 0.9
    assert config.env_config == {"lo_arm_score": 0.3, "hi_arm_hiscore": 2.0}
    assert "--config files, flags and overrides win" in capsys.readouterr().err
    extra.write_text("env_config:\n  lo_arm_score: 0.5\n")  # the file wins over the run's own
    assert _eval_config(monkeypatch, ["eval", "--model", str(run), "--config", str(extra)]).env_config == {"lo_arm_score": 0.5}
    extra.write_text("env: bandit\n")  # no run: the env a --config file names is enough (it asked for --env)
    assert _eval_config(monkeypatch, ["eval", "--model", "tiny", "--config", str(extra)]).env == "bandit"


@pytest.mark.parametrize(("override", "hint"), [
    ("rollout.group_size=4", "hint: give --group-size 4"),
    ("rollout.group_size=0", "hint: give --group-size N (episodes per group, 1 or more)"),
    ("val_groups=true", "hint: give --groups N (groups of distinct seeds, 1 or more)"),
])
def test_eval_size_overrides_hint_a_flag_value_it_takes(override, hint, capsys):
    assert main(["eval", "--env", "bandit", override]) == 2
    err = capsys.readouterr().err
    one_line_error(err)
    assert hint in err.splitlines()


def test_eval_config_naming_another_preset_drops_the_runs_env_settings_as_preset_does(tmp_path, monkeypatch, capsys):
    """A --config file's preset over a run directory kept the run's env_config (made for its own preset) in silence,
    where --preset drops it with a note."""
    run = _fake_run(tmp_path)
    (run / "config.yaml").write_text("env: bandit\npreset: BanditTest\nenv_config:\n  lo_arm_score: 0.3\n")
    extra = tmp_path / "extra.yaml"
    extra.write_text("preset: Bandit\n")
    config = _eval_config(monkeypatch, ["eval", "--model", str(run), "--config", str(extra)])
    assert (config.preset, config.env_config) == ("Bandit", {})
    assert "config: preset changed from 'BanditTest' to 'Bandit', so the run's env_config is dropped" in capsys.readouterr().err
    extra.write_text("preset: Bandit\nenv_config:\n  hi_arm_hiscore: 2.0\n")  # the file's own settings for its preset stay
    assert _eval_config(monkeypatch, ["eval", "--model", str(run), "--config", str(extra)]).env_config == {"hi_arm_hiscore": 2.0}
    extra.write_text("preset: BanditTest\n")  # the run's own preset: its settings stay
    assert _eval_config(monkeypatch, ["eval", "--model", str(run), "--config", str(extra)]).env_config == {"lo_arm_score": 0.3}


def test_eval_config_files_read_their_data_paths_beside_the_file_as_run_does(tmp_path, monkeypatch):
    """ragen run made a --config file's relative data paths absolute (next to the file); ragen eval read them from
    the working folder, so one config file named different data in a run and in its evaluation (helper-83's review)."""
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "problems.jsonl").write_text('{"query": "1+1?", "response": "The answer is: 2"}\n')
    (folder / "eval.yaml").write_text("env: metamathqa\nenv_config:\n  dataset_path: problems.jsonl\n")
    monkeypatch.chdir(tmp_path)  # problems.jsonl is not here: only beside the file
    monkeypatch.setattr("ragen_core.trainer.config.check_run_available", lambda config: [])
    config = _eval_config(monkeypatch, ["eval", "--model", "tiny", "--config", str(folder / "eval.yaml")])
    assert config.env_config["dataset_path"] == str(folder / "problems.jsonl")


@pytest.fixture
def pipe_with():
    """``pipe_with(text)``: a ``/dev/fd`` path of a pipe holding ``text`` (what the shell's ``--config <(...)``
    passes), which can be read once; closed after the test."""
    import os

    opened: list[int] = []

    def make(text: str) -> str:
        read_end, write_end = os.pipe()
        os.write(write_end, text.encode())
        os.close(write_end)
        opened.append(read_end)
        return f"/dev/fd/{read_end}"

    yield make
    for fd in opened:
        os.close(fd)


def test_eval_reads_a_config_pipe_once(tmp_path, monkeypatch, pipe_with):
    """ragen eval read its --config files up to three times: a pipe's settings were gone after the first read."""
    run = _fake_run(tmp_path)
    (run / "config.yaml").write_text("env: bandit\npreset: BanditTest\nenv_config:\n  lo_arm_score: 0.3\n")
    config = _eval_config(monkeypatch, ["eval", "--model", str(run), "--config", pipe_with("env_config:\n  hi_arm_hiscore: 2.0\n")])
    assert config.env_config == {"lo_arm_score": 0.3, "hi_arm_hiscore": 2.0}


def test_run_with_a_recipe_reads_a_config_pipe_once(capsys, pipe_with):
    """ragen run --recipe read the files once for the recipe's env and again for the settings: a pipe was empty then."""
    assert main(["run", "--print-config", "--recipe", "learn", "--config", pipe_with("env: bandit\nrollout:\n  group_size: 3\n")]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["env"] == "bandit" and data["rollout"]["group_size"] == 3


class _Weighted(PluginConfig):
    weights: dict[str, float] = Field(default_factory=dict)
    """A number per tag, nested in a dict."""
    scales: list[dict[str, int]] = Field(default_factory=list)


class _WeightedEstimator(AdvantageEstimator):
    config_class = _Weighted

    def __call__(self, inputs):
        raise AssertionError("not called: --print-config only")


def test_a_boolean_for_a_number_nested_in_a_dict_is_refused_naming_the_field(capsys):
    """rollout.group_size=true was refused, a number of a dict[str, float] setting was not: an
    estimator_config entry 'weights.a=true' was taken as 1.0."""
    spec = EstimatorSpec(name="test-weighted", config_model=_Weighted, factory=f"{__name__}:_WeightedEstimator")
    registry.register(spec)
    try:
        for override, field, got in (("algo_config.estimator_config.weights.a=true", "weights.a", True),
                                     ("algo_config.estimator_config.scales=[{a: 1}, {b: false}]", "scales.1.b", False)):
            rc, _, err = _print_config(capsys, "algo_config.estimator=test-weighted", override)
            assert rc == 2  # the key inside the field, as typed (it named the field only)
            assert one_line_error(err) == (f"PluginConfigError: invalid config: algo_config.estimator_config.{field}: "
                                           f"takes a number, not true/false (got {got})")
        rc, out, _ = _print_config(capsys, "algo_config.estimator=test-weighted", "algo_config.estimator_config.weights.a=2")
        assert rc == 0 and "a: 2.0" in out  # numbers still pass
    finally:
        registry.unregister("estimator", "test-weighted")


@pytest.mark.parametrize(("theirs", "ours"), [("checkpoint_freq", "save_freq"), ("eval_freq", "test_freq"), ("max_steps", "steps"),
                                              ("num_generations", "rollout.group_size"), ("model_name_or_path", "model"),
                                              ("response_length", "sampling.train.max_new_tokens")])
def test_another_trainers_name_for_a_setting_is_answered_with_ours(theirs, ours, capsys):
    """'checkpoint_freq=1' (veRL's, and RAGEN's scripts') was an unknown key with no suggestion: its spelling is
    nowhere near save_freq."""
    assert main(["run", "--env", "bandit", f"{theirs}=1", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == f"ConfigError: invalid config: {theirs}: unknown key (did you mean {ours!r}?)"
