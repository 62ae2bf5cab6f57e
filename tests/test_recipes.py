"""Env recipes: named run settings an env ships (``ragen run --env E --recipe NAME``)."""

from __future__ import annotations

import argparse

import pytest

from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.errors import ConfigError
from ragen_core.specs import EnvSpec, Recipe
from ragen_core.testing.installed import require_distribution
from ragen_core.testing.toy_env import TOY_ENV_SPEC

NAME = "recipe-corridor"


@pytest.fixture
def recipe_env():
    """The toy corridor under its own name with a good recipe, a PPO one and two broken ones."""
    spec = EnvSpec(
        name=NAME, summary="corridor with recipes", config_model=TOY_ENV_SPEC.config_model, factory=TOY_ENV_SPEC.factory,
        presets={"Long": {"length": 9}},
        recipes={
            "fast": Recipe(summary="small and quick", config={
                "preset": "Long", "steps": 3, "rollout": {"env_groups": 2, "group_size": 4},
                "sampling": {"train": {"temperature": 0.7}}, "algo": "grpo",
                "algo_config": {"estimator_config": {"norm_adv_by_std": False}}}),
            "critic": Recipe(summary="ppo", config={"algo": "ppo", "optim": {"critic_lr": 3e-4}}),
            "typo": Recipe(summary="bad field", config={"optim": {"lrr": 1.0}}),
            "bad-estimator": Recipe(summary="bad nested field", config={"algo": "grpo", "algo_config": {"estimator_config": {"nrm": 1}}}),
        },
    )
    registry.register(spec)
    yield spec
    registry.unregister("env", NAME)


def _args(*argv: str) -> argparse.Namespace:
    from ragen_core.cli.run import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_recipe_may_not_choose_the_env_or_the_output_folder():
    for key in ("env", "run_dir"):
        with pytest.raises(ConfigError, match=rf"^Recipe: invalid config: config: a recipe may not set {key} "):
            Recipe(summary="x", config={key: "y"})
    with pytest.raises(ConfigError, match="^Recipe: invalid config: unknown: unknown key"):
        Recipe(summary="x", config={}, unknown=1)


def test_spec_recipe_is_a_fresh_copy_with_the_env_set(recipe_env):
    base = recipe_env.recipe("fast")
    assert base["env"] == NAME and base["rollout"] == {"env_groups": 2, "group_size": 4}
    base["rollout"]["env_groups"] = 99
    assert recipe_env.recipe("fast")["rollout"]["env_groups"] == 2
    with pytest.raises(ConfigError, match="known: fast, critic, typo, bad-estimator"):
        recipe_env.recipe("nope")


def test_recipe_is_the_lowest_layer(recipe_env, tmp_path):
    from ragen_core.cli.run import build_config

    cfg = build_config(_args("--env", NAME, "--recipe", "fast"))
    assert (cfg.env, cfg.preset, cfg.steps) == (NAME, "Long", 3)
    assert cfg.rollout.env_groups == 2 and cfg.sampling.train.temperature == 0.7
    assert cfg.algo_config == {"estimator_config": {"norm_adv_by_std": False}}
    assert cfg.optim.lr == 1e-4  # untouched settings keep the run defaults
    yaml_file = tmp_path / "exp.yaml"
    yaml_file.write_text("steps: 5\nrollout:\n  group_size: 6\n", encoding="utf-8")
    cfg = build_config(_args("--env", NAME, "--recipe", "fast", "--config", str(yaml_file), "--steps", "7",
                             "sampling.train.temperature=0.9"))
    assert (cfg.steps, cfg.rollout.group_size, cfg.rollout.env_groups) == (7, 6, 2)  # flag > file > recipe
    assert cfg.sampling.train.temperature == 0.9  # override > recipe
    env_file = tmp_path / "env.yaml"
    env_file.write_text(f"env: {NAME}\n", encoding="utf-8")
    assert build_config(_args("--config", str(env_file), "--recipe", "fast")).steps == 3  # env named by the file


def test_recipe_refuses_another_algorithm_and_bad_fields(recipe_env):
    from ragen_core.cli.run import build_config

    with pytest.raises(ConfigError, match="tuned for algo 'grpo', not 'ppo'"):
        build_config(_args("--env", NAME, "--recipe", "fast", "--algo", "ppo"))
    assert build_config(_args("--env", NAME, "--recipe", "critic")).optim.critic_lr == 3e-4
    with pytest.raises(ConfigError, match=r"optim\.lrr"):
        build_config(_args("--env", NAME, "--recipe", "typo"))
    with pytest.raises(ConfigError, match="nrm"):
        build_config(_args("--env", NAME, "--recipe", "bad-estimator"))


@pytest.mark.parametrize("argv,needle", [
    (["run", "--env", NAME, "--recipe", "nope"], "has no recipe 'nope' (known: fast"),
    (["run", "--recipe", "fast"], "needs --env NAME"),
    (["run", "--env", NAME, "--recipe", "fast", "--algo", "ppo"], "tuned for algo"),
])
def test_recipe_errors_are_one_line_exit_2(recipe_env, argv, needle, capsys):
    assert main(argv) == 2
    first = capsys.readouterr().err.strip().splitlines()[0]
    assert first.startswith("ConfigError:") and needle in first


def test_plugin_check_validates_recipes(recipe_env, capsys):
    assert main(["plugins", "check", "--kind", "env", "--strict"]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if NAME in line)
    assert "FAILED" in row and "recipe 'typo'" in row


def test_plugin_check_notes_a_recipe_whose_plugin_is_missing(capsys):
    spec = EnvSpec(name=NAME, summary="s", config_model=TOY_ENV_SPEC.config_model, factory=TOY_ENV_SPEC.factory,
                   recipes={"other": Recipe(summary="needs an uninstalled filter", config={"filter": "no-such-filter"})})
    registry.register(spec)
    try:
        assert main(["plugins", "check", "--kind", "env", "--strict"]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if NAME in line)
        assert " ok " in row and "recipe 'other' needs a plugin that is not installed" in row
    finally:
        registry.unregister("env", NAME)


def test_plugin_show_lists_recipes_with_their_command(recipe_env, capsys):
    assert main(["plugins", "show", "env", NAME]) == 0
    out = capsys.readouterr().out
    assert "recipe fast: small and quick" in out and f"ragen run --env {NAME} --recipe fast" in out


def test_bandit_learn_recipe_matches_the_measured_settings():
    """The recipe is what bench/learning_bandit.py measured (its defaults plus the documented flags)."""
    require_distribution("ragen-env-bandit")
    from ragen_core.cli.run import build_config

    cfg = build_config(_args("--env", "bandit", "--recipe", "learn"))
    assert (cfg.rollout.env_groups, cfg.rollout.group_size, cfg.steps) == (8, 16, 100)
    assert cfg.sampling.train.temperature == 0.6 and cfg.sampling.train.max_new_tokens == 32
    assert (cfg.optim.lr, cfg.optim.mini_batch_size, cfg.optim.micro_batch_size) == (1e-4, 128, 8)
    assert cfg.algo == "grpo" and cfg.algo_config["estimator_config"]["norm_adv_by_std"] is False
    ws = cfg.warm_start
    assert (ws.episodes, ws.epochs, ws.max_rounds, ws.target_valid_rate) == (256, 4, 5, 0.95) and ws.max_seconds >= 3600  # no time cut
    assert ws.thoughts == [""]  # empty reasoning: only with it did the fresh warm start reach its valid-reply gate


def test_frozenlake_one_lake_recipe_matches_the_measured_settings():
    """The recipe is what bench/learning_grid.py --recipe measured: one fixed deterministic lake,
    one-turn context, GRPO counting each episode once with a KL loss, first-turn warm start with
    empty reasoning."""
    require_distribution("ragen-env-frozenlake")
    from ragen_core.cli.run import build_config

    cfg = build_config(_args("--env", "frozenlake", "--recipe", "learn-one-lake"))
    assert cfg.preset == "CoordFrozenLake" and cfg.env_config == {"map_seed": 3} and cfg.algo == "grpo"
    assert cfg.algo_config == {"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_loss_type": "k3"}
    assert cfg.rollout.extra == {"context_window": "last-k", "max_context_turns": 1}
    assert (cfg.rollout.env_groups, cfg.rollout.group_size, cfg.sampling.train.max_new_tokens) == (1, 16, 32)
    assert cfg.optim.seq_mean_unit == "episode" and cfg.optim.lr_warmup_steps == 5 and cfg.optim.lr == 2e-4
    ws = cfg.warm_start
    assert (ws.max_turns, ws.thoughts, ws.target_valid_rate, ws.episodes) == (1, [""], 0.95, 256)
