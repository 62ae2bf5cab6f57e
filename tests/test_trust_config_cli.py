"""Issue 13 items 10 and 11: bounded error lines, safe YAML, overrides anywhere, early plugin checks.

Each test drives ``ragen run`` through the CLI's ``main`` (one line on stderr, exit 2) or the
trainer, and each failed before its fix: YAML aliases expanded into a 58 MB error line, duplicate
keys silently kept the last value, an override after a flag was "unrecognized", ``--print-config``
printed a config for an env that does not exist, a bad env config was found only after the
model had loaded, and ``ragen plugins check --strict`` passed with two distributions offering
one name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ragen_core.cli.main import main
from ragen_core.config import load_config, parse_override, read_yaml
from ragen_core.errors import ConfigError, PluginConfigError, RagenError
from ragen_core.testing import fake_entry_points
from ragen_core.testing.toy_env import TOY_ENV_NAME, register_toy_env
from ragen_core.trainer.config import RunConfig

#: The longest error line these tests accept: RagenError's cap (errors.MAX_LINE_CHARS) plus its
#: "... (N more characters)" note. Real messages are far shorter; the point is that a value of any
#: size is echoed in a bounded form (the YAML bomb below made a 58 MB line).
MAX_LINE = 1100


def _one_line_error(capsys, kind: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines, "nothing on stderr"
    assert lines[0].startswith(f"{kind}:"), err[:2000]
    assert all(line.startswith("hint: ") for line in lines[1:]), err[:2000]
    assert "Traceback" not in err
    assert max(len(line) for line in lines) <= MAX_LINE, [len(line) for line in lines]
    return lines[0]


# ---------------------------------------------------------------------- item 10: YAML and long values
BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
"""


def test_yaml_alias_bomb_is_refused_at_once_in_one_short_line(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB, encoding="utf-8")
    t0 = time.monotonic()
    assert main(["run", "--config", str(path), "--print-config"]) == 2
    line = _one_line_error(capsys, "ConfigError")
    assert str(path) in line and "alias" in line and "line 2" in line
    # generous bound for a loaded 2-core machine; expanding the bomb takes minutes and gigabytes
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize(("content", "says"), [
    (b"env: bandit\nmodel: caf\xe9\n", "is not UTF-8 text (byte 22: invalid continuation byte)"),
    (b"env: bandit\nx: " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "is nested too deeply to read"),
    (None, "is a folder"),
    (b"env: bandit\n" + b"#" * 2**20, "holds 1.0 MiB; a config file is a few KiB (at most 1 MiB is read)"),
])
def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path, capsys, content, says):
    """A Latin-1 file or a deeply nested one ended in a traceback (exit 1); a folder was 'not found'; a 28 MB
    file was parsed for 88 s before its error (helper-76's walk)."""
    path = tmp_path / "bad.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert main(["run", "--config", str(path), "--print-config"]) == 2
    assert _one_line_error(capsys, "ConfigError").startswith(f"ConfigError: config file {path} {says}")
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_override("env_config.x=" + "[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize("thought", ["{a:>99999999999}", "{a!r}", "{b}"])
def test_a_thought_placeholder_with_a_format_is_refused_without_filling_it(thought):
    """'{a:>99999999999}' (30 bytes) allocated 100 GB while the config was validated (helper-76's walk)."""
    with pytest.raises(ConfigError, match="the only placeholder is \\{a\\} \\(the action\\), with no format"):
        load_config(RunConfig, [], [f"env={register_toy_env()}", f"warm_start.thoughts=['I pick {thought}.']"])
    load_config(RunConfig, [], [f"env={register_toy_env()}", "warm_start.thoughts=['', '{a}', 'I pick {a} {{not a field}}.']"])


@pytest.mark.parametrize("override", ["algo_config.kl_loss_coef=.nan", "algo_config.entropy_coeff=.inf",
                                      "rollout.pool_config.step_timeout_s=.inf", "filter_config.value=.nan"])
def test_plugin_settings_refuse_inf_and_nan_as_the_run_sections_do(capsys, override):
    """A NaN KL coefficient trained with a NaN loss; the run's own sections already refused them (helper-76's walk)."""
    assert main(["run", "--env", register_toy_env(), "--filter", "snr-topp", "--print-config", override]) == 2
    assert "Input should be a finite number" in _one_line_error(capsys, "PluginConfigError")


def test_a_section_given_as_an_override_is_merged_as_a_file_would_be():
    """'optim={lr: 2e-3}' dropped optim.weight_decay=0.5 given before it (and a recipe's algo_config settings) (helper-76's walk)."""
    from ragen_core.config import apply_overrides

    merged = apply_overrides({"optim": {"weight_decay": 0.5, "lr": 1e-4}}, ["optim={lr: 0.002}", "steps=3"])
    assert merged == {"optim": {"weight_decay": 0.5, "lr": 0.002}, "steps": 3}
    assert apply_overrides({"optim": {"lr": 1e-4}}, ["optim=5"]) == {"optim": 5}  # not a section: replaced (and refused later)


def test_a_diagnostic_listed_twice_and_an_empty_recipe_are_refused(capsys):
    """Both were accepted: two collapse diagnostics, and '--recipe ""' ran as if no recipe were given (helper-76's walk)."""
    assert main(["run", "--env", "bandit", "--print-config", "diagnostics=[collapse,Collapse]"]) == 2
    assert "diagnostics lists 'collapse' twice: a diagnostic runs once" in _one_line_error(capsys, "ConfigError")
    assert main(["run", "--env", "bandit", "--print-config", "--recipe", ""]) == 2
    assert _one_line_error(capsys, "ConfigError") == "ConfigError: --recipe is empty"


def test_an_alias_in_an_override_value_is_refused():
    with pytest.raises(ConfigError, match="alias"):
        parse_override("env_config.x=[&a [1, 2], *a]")


def test_duplicate_yaml_keys_are_an_error(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("optim:\n  lr: 0.1\n  weight_decay: 0\n  lr: 0.2\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    assert "duplicate key 'lr'" in str(err.value) and "line 4" in str(err.value) and "line 2" in str(err.value)
    top = tmp_path / "top.yaml"
    top.write_text("steps: 3\nenv: bandit\nsteps: 4\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="duplicate key 'steps'"):
        read_yaml(top)
    with pytest.raises(ConfigError, match="duplicate key 'a'"):
        parse_override("env_config={a: 1, a: 2}")


def test_anchors_without_aliases_and_plain_yaml_still_load(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("env: bandit\noptim: &o\n  lr: 0.5\nsteps: 3\n", encoding="utf-8")
    assert read_yaml(path) == {"env": "bandit", "optim": {"lr": 0.5}, "steps": 3}


def test_a_huge_bad_value_is_echoed_in_bounded_form(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"optim": {"lr": list(range(100_000))}, "env": "bandit"}), encoding="utf-8")
    assert main(["run", "--config", str(path), "--print-config"]) == 2
    line = _one_line_error(capsys, "ConfigError")
    assert "optim.lr" in line and "[0, 1, 2" in line


def test_a_huge_bad_plugin_config_value_is_echoed_in_bounded_form(capsys):
    register_toy_env()
    long_text = "x" * 1_000_000
    assert main(["run", "--env", TOY_ENV_NAME, "--print-config", f"env_config.length={long_text}"]) == 2
    line = _one_line_error(capsys, "PluginConfigError")
    assert "env_config" in line or f"env.{TOY_ENV_NAME}.length" in line


def test_ragen_error_caps_what_it_repeats():
    exc = RagenError("bad value: " + "y" * 1_000_000, ["set it to " + "z" * 100_000])
    lines = str(exc).splitlines()
    assert len(lines) == 2 and lines[1].startswith("hint: set it to zzz")
    assert all(len(line) <= MAX_LINE for line in lines)
    assert "more characters" in lines[0]


# ---------------------------------------------------------------------- item 11: the command line
def test_overrides_are_accepted_after_flags(capsys):
    register_toy_env()
    argv = ["run", "--env", TOY_ENV_NAME, "rollout.group_size=3", "--steps", "7", "optim.lr=0.5", "--print-config", "seed=5"]
    assert main(argv) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert (data["rollout"]["group_size"], data["steps"], data["optim"]["lr"], data["seed"]) == (3, 7, 0.5, 5)


def test_unknown_options_are_still_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--env", "bandit", "--bogus", "rollout.group_size=3"])
    assert exit_.value.code == 2
    assert "--bogus" in capsys.readouterr().err


def test_print_config_with_an_unknown_env_exits_2(capsys):
    assert main(["run", "--env", "no-such-env-xyz", "--print-config"]) == 2
    line = _one_line_error(capsys, "PluginNotFoundError")
    assert "no-such-env-xyz" in line


def test_print_config_with_a_bad_env_field_exits_2(capsys):
    register_toy_env()
    assert main(["run", "--env", TOY_ENV_NAME, "--print-config", "env_config.lenght=3"]) == 2
    assert "lenght" in _one_line_error(capsys, "PluginConfigError")


@pytest.mark.parametrize("override,where", [
    ("env_config.length=many", "length"),
    ("rollout.pool_config.step_timeout_s=-1", "step_timeout_s"),
    ("engine_config.no_such_field=1", "no_such_field"),
    ("algo_config.clip_ratio_low=fast", "clip_ratio_low"),
])
def test_plugin_configs_are_validated_before_the_model_loads(tmp_path, monkeypatch, override, where):
    import ragen_core.models as models
    from ragen_core.trainer.trainer import Trainer

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the plugin configs were checked")

    monkeypatch.setattr(models, "load_model_and_tokenizer", no_model)
    register_toy_env()
    config = load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", f"run_dir={tmp_path / 'run'}", "progress=false", override])
    with pytest.raises(PluginConfigError, match=where):
        Trainer(config).setup()


@pytest.mark.parametrize("override, error", [("algo_config.clip_ratio_low=fast", "clip_ratio_low"),
                                             ("distributed.strategy=fsdp", "fsdp needs several ranks")])
def test_a_refused_run_leaves_no_default_run_folder_behind(tmp_path, monkeypatch, override, error):
    from ragen_core.errors import RagenError
    from ragen_core.trainer.trainer import Trainer

    monkeypatch.chdir(tmp_path)
    register_toy_env()
    config = load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", "progress=false", override])
    with pytest.raises(RagenError, match=error):
        Trainer(config).setup()
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_eval_validates_plugin_configs_before_the_model_loads(monkeypatch, capsys):
    import ragen_core.models as models

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the plugin configs were checked")

    monkeypatch.setattr(models, "load_model_and_tokenizer", no_model)
    register_toy_env()
    assert main(["eval", "--env", TOY_ENV_NAME, "--groups", "1", "rollout.pool_config.step_timeout_s=-1"]) == 2
    assert "step_timeout_s" in _one_line_error(capsys, "PluginConfigError")


def _ragen(*args: str, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(pythonpath) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", "import sys; from ragen_core.cli.main import main; sys.exit(main())", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_plugins_check_strict_fails_when_two_distributions_provide_one_name(tmp_path):
    spec = ("from ragen_core import EnvSpec, EnvConfig\n"
            "SPEC = EnvSpec(name='twinenv', factory='x:y', config_model=EnvConfig)\n")
    fake_entry_points(tmp_path, "fake-twin-one", {"ragen_core.envs": {"twinenv": "fakeplug_twin_one:SPEC"}},
                      modules={"fakeplug_twin_one.py": spec}, add_to_path=False)
    fake_entry_points(tmp_path, "fake-twin-two", {"ragen_core.envs": {"twinenv": "fakeplug_twin_two:SPEC"}},
                      modules={"fakeplug_twin_two.py": spec}, add_to_path=False)
    strict = _ragen("plugins", "check", "--strict", "--kind", "env", pythonpath=tmp_path)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    rows = [line for line in strict.stdout.splitlines() if "twinenv" in line]
    assert len(rows) == 2 and all("DUPLICATE" in row for row in rows), strict.stdout
    assert "fake-twin-one:twinenv" in strict.stdout  # the row says how to pick one
    relaxed = _ragen("plugins", "check", "--kind", "env", pythonpath=tmp_path)
    assert relaxed.returncode == 1  # a failure exits 1 without --strict too


@pytest.mark.parametrize("algo,needle", [("grpo", "raw episode score S"), ("drgrpo", "raw episode score S"), ("ppo", None)])
def test_group_size_one_with_a_group_baseline_warns_what_the_advantage_becomes(algo, needle):
    from ragen_core.trainer.config import run_warnings

    register_toy_env()
    config = load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", f"algo={algo}", "rollout.group_size=1"])
    warnings = run_warnings(config)
    if needle is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and "rollout.group_size=1" in warnings[0] and needle in warnings[0], warnings
    grouped = load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", f"algo={algo}", "rollout.group_size=2"])
    assert run_warnings(grouped) == []


def test_lora_settings_without_a_rank_are_warned_about():
    from ragen_core.trainer.config import run_warnings

    register_toy_env()
    config = load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", "optim.peft.alpha=32"])
    assert run_warnings(config) == ["optim.peft.alpha is set but optim.peft.rank is 0, so LoRA is off and it is unused; "
                                    "to train adapters: optim.peft.rank=8 (or another rank)"]
    both = load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", "optim.peft.alpha=32", "optim.peft.target_modules=[q_proj]"])
    assert run_warnings(both)[0].startswith("optim.peft.alpha and optim.peft.target_modules are set but optim.peft.rank is 0")
    on = load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", "optim.peft.alpha=32", "optim.peft.rank=4"])
    assert run_warnings(on) == []


def test_the_hf_engine_model_is_not_the_runs_model_and_another_one_is_warned_about():
    """A run of another model wrote engine_config.model: tiny in its config.yaml (the hf engine's default, never
    read in a run: the trainer attaches its policy), and engine_config.model=X was silently not trained."""
    from ragen_core.trainer.config import resolved_config, run_warnings

    register_toy_env()
    assert resolved_config(load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", "model=tiny-qwen-tok"]))["engine_config"]["model"] == ""
    config = load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", "engine_config.model=tiny-qwen-tok"])
    assert run_warnings(config) == ["engine_config.model=tiny-qwen-tok is not read in a run: the hf engine samples the run's policy "
                                    "(model=tiny); to train tiny-qwen-tok, set model=tiny-qwen-tok"]
    assert run_warnings(load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", "engine_config.model=tiny"])) == []


def test_a_resumed_run_of_another_model_is_not_told_to_train_tiny():
    """Every run's config.yaml recorded engine_config.model: tiny (the hf engine's old default); resumed, a run of another
    model was warned that engine_config.model=tiny is not read and told to set model=tiny to train it."""
    from ragen_core.trainer.config import run_warnings

    register_toy_env()
    old_yaml = load_config(RunConfig, [], [f"env={TOY_ENV_NAME}", "model=tiny-qwen-tok", "engine_config.model=tiny"])
    assert run_warnings(old_yaml) == []
