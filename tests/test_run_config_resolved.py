"""config.yaml holds the resolved config (every plugin's settings filled in), and a resume that picks
another filter / pool drops the settings the run saved for the one before."""

from __future__ import annotations

import json

import pytest
import yaml

from ragen_core.cli.main import main
from ragen_core.testing.run_helpers import TOY_RUN
from ragen_core.testing.toy_env import register_toy_env


def _run(run_dir, *argv: str) -> int:
    return main(["run", "--run-dir", str(run_dir), "--no-progress", *argv])


def test_config_yaml_spells_out_plugin_settings_and_a_resume_drops_the_old_filters(tmp_path, capsys):
    env = register_toy_env()
    run_dir = tmp_path / "run"
    assert _run(run_dir, "--env", env, "--steps", "1", "filter=snr-topp", *TOY_RUN) == 0
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    # defaults nobody passed are written (the env's, the filter's, the pool's), so the run reads without the plugins
    assert saved["filter_config"]["value"] == 0.9 and saved["filter_config"]["prob_mode"] == "linear"
    assert saved["env_config"]["length"] == 3 and "max_turns" in saved["env_config"] and len(saved["env_config"]) > 3
    assert "step_timeout_s" in saved["rollout"]["pool_config"]
    capsys.readouterr()

    assert main(["run", "--resume", str(run_dir), "--steps", "2", "filter=snr-topk"]) == 0
    err = capsys.readouterr().err
    assert "resume: filter changed from 'snr-topp' to 'snr-topk', so the run's saved filter_config is dropped" in err
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["filter"] == "snr-topk" and "prob_mode" not in saved["filter_config"] and saved["filter_config"]["value"] == 0.25
    (change,) = [json.loads(line) for line in (run_dir / "config_changes.jsonl").read_text().splitlines()]
    # resolved on both sides: only what really changed, no "setting -> None" for the defaults
    assert change["changed"]["filter"] == ["snr-topp", "snr-topk"]
    assert change["changed"]["filter_config.value"] == [0.9, 0.25]
    assert "filter_config.metric" not in change["changed"] and "filter_config" not in change["changed"]
    # a setting only the old filter has is "removed", not a change to null (which an explicit null would be)
    assert change["removed"]["filter_config.prob_mode"] == "linear" and "filter_config.prob_mode" not in change["changed"]
    assert None not in [v for pair in change["changed"].values() for v in pair]

    # another pool: the local pool's saved settings are not handed to the process pool
    # (--print-config: the toy env is registered in this process only, which the process pool refuses at start)
    assert main(["run", "--resume", str(run_dir), "--print-config", "rollout.pool=process", "rollout.pool_config.workers=1"]) == 0
    printed = capsys.readouterr()
    assert "rollout.pool changed from 'local' to 'process', so the run's saved rollout.pool_config is dropped" in printed.err
    from ragen_core import registry
    from ragen_core.trainer.config import DEFAULT_RESET_TIMEOUT_S, DEFAULT_STEP_TIMEOUT_S

    defaults = {"step_timeout_s": DEFAULT_STEP_TIMEOUT_S, "reset_timeout_s": DEFAULT_RESET_TIMEOUT_S}
    expected = registry.make_config("pool", "process", {"workers": 1, **defaults}).model_dump(mode="json")
    assert yaml.safe_load(printed.out)["rollout"]["pool_config"] == expected

def test_resume_of_a_run_whose_config_yaml_holds_only_overrides_reports_no_changes(tmp_path, capsys):
    env = register_toy_env()
    run_dir = tmp_path / "run"
    assert _run(run_dir, "--env", env, "--steps", "1", "filter=snr-topp", "filter_config.value=0.5", *TOY_RUN) == 0
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    saved["filter_config"] = {"value": 0.5}  # as older versions wrote it
    saved["env_config"] = {"length": 3, "max_turns": 2, "max_actions_per_turn": 1}
    saved["rollout"]["pool_config"] = {}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir), "--steps", "2"]) == 0
    assert "settings changed" not in capsys.readouterr().out
    assert not (run_dir / "config_changes.jsonl").exists()
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["filter_config"]["prob_mode"] == "linear"


def _printed(capsys, *argv: str) -> tuple[dict, str]:
    assert main(["run", *argv, "--print-config"]) == 0
    out = capsys.readouterr()
    return yaml.safe_load(out.out), out.err


def test_a_run_config_reused_with_another_plugin_drops_that_plugins_settings(tmp_path, capsys):
    env = register_toy_env()
    run_dir = tmp_path / "run"
    assert _run(run_dir, "--env", env, "--steps", "1", *TOY_RUN) == 0
    capsys.readouterr()
    saved = run_dir / "config.yaml"
    # --algo ppo on a grpo run's config: ppo's own estimator and critic, not grpo's spelled-out settings
    fresh, _ = _printed(capsys, "--env", env, "--algo", "ppo")
    reused, err = _printed(capsys, "--config", str(saved), "--algo", "ppo")
    assert "config: algo changed from 'grpo' to 'ppo', so the config's algo_config is dropped" in err
    assert reused["algo_config"] == fresh["algo_config"]
    # another estimator preset on a resume: the preset's values, not the saved defaults of the old one
    preset = _printed(capsys, "--env", env, "algo_config.estimator_preset=drgrpo")[0]["algo_config"]["estimator_config"]
    resumed, err = _printed(capsys, "--resume", str(run_dir), "algo_config.estimator_preset=drgrpo")
    assert "resume: algo_config.estimator_preset changed from None to 'drgrpo'" in err
    assert resumed["algo_config"]["estimator_config"] == preset
    # '=null' clears one plugin's settings
    cleared, _ = _printed(capsys, "--resume", str(run_dir), "filter_config=null", "filter_config.value=0.5", "filter=snr-topp")
    assert cleared["filter_config"]["value"] == 0.5


def test_a_config_file_that_sets_only_a_plugins_settings_keeps_them_for_the_chosen_plugin(tmp_path, capsys):
    env = register_toy_env()
    (tmp_path / "my.yaml").write_text("filter_config:\n  value: 0.5\n")
    config, err = _printed(capsys, "--env", env, "--config", str(tmp_path / "my.yaml"), "--filter", "snr-topp")
    assert config["filter_config"]["value"] == 0.5 and "dropped" not in err


def test_resume_changes_list_typed_settings_first_and_no_empty_section_as_removed(tmp_path):
    from ragen_core import registry
    from ragen_core.testing.run_helpers import toy_run_config
    from ragen_core.trainer.config import resolved_config
    from ragen_core.trainer.run_dir import NOT_SET, record_resume_changes, resume_changes

    if "collapse" not in registry.names("diagnostic"):
        pytest.skip("ragen-diagnostics is not installed")
    before = toy_run_config(tmp_path / "run", "diagnostics=[]")
    previous = resolved_config(before)
    after = toy_run_config(tmp_path / "run", "diagnostics=[collapse]", "optim.lr=5e-5")
    changes = resume_changes(previous, after)
    assert "diagnostics_config" not in changes  # {} -> its fields is not a removal
    assert changes["optim.lr"] == [before.optim.lr, 5e-5]
    assert any(k.startswith("diagnostics_config.collapse.") and v[0] is NOT_SET for k, v in changes.items())
    line = record_resume_changes(tmp_path, changes, 3)
    shown = line.split(" from step 3 on: ")[1]
    assert shown.startswith("diagnostics [] -> ['collapse'], optim.lr ")  # both sides set: listed before the added fields


def test_naming_a_preset_that_changes_nothing_keeps_the_saved_env_settings():
    """--resume RUN --preset Bandit (the defaults' name) was no change for the resume check, yet the
    run's saved env_config was dropped: the env's task went back to its defaults mid-run."""
    from ragen_core.config import load_config
    from ragen_core.testing.installed import require_distribution
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.run_dir import stale_plugin_settings

    require_distribution("ragen-env-bandit")
    saved = {"env": "bandit", "preset": None, "env_config": {"hi_arm_hiscore_prob": 0.5}}
    same = load_config(RunConfig, [], ["preset=Bandit"], base=saved)
    assert stale_plugin_settings(saved, same) == []
    other = load_config(RunConfig, [], ["preset=BanditTest"], base=saved)
    assert stale_plugin_settings(saved, other) == [("env_config", "preset changed from None to 'BanditTest'")]
