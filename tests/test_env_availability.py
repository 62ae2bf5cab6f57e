"""An env's availability check (``EnvSpec.availability``) refuses ``ragen run``, ``ragen env
play`` and a ``Trainer`` built in Python before anything is built: no env, no model, no run
folder; one error, exit status 2."""

from __future__ import annotations

import pytest

from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.errors import ConfigError
from ragen_core.specs import EnvSpec
from ragen_core.testing.toy_env import TOY_ENV_SPEC

NAME = "needs-a-tool"
CALLS: list[object] = []


def refuse(config: object) -> None:
    """The availability function under test: records its config, then refuses unless allowed."""
    CALLS.append(config)
    if not getattr(config, "length", 0) == 9:
        raise ConfigError("needs-a-tool cannot run here: the tool is missing", ["install the tool, or set length=9"])


@pytest.fixture
def guarded_env():
    """The corridor whose factory does not import: reaching it would fail with another error."""
    spec = EnvSpec(name=NAME, summary="s", config_model=TOY_ENV_SPEC.config_model, factory="no_such_module_xyz:Env",
                   availability=f"{__name__}:refuse")
    registry.register(spec)
    CALLS.clear()
    yield spec
    registry.unregister("env", NAME)


def test_play_refuses_before_building_the_env(guarded_env, capsys):
    assert main(["env", "play", NAME]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "ConfigError: needs-a-tool cannot run here: the tool is missing"
    assert "no_such_module_xyz" not in err  # the factory was never imported
    assert len(CALLS) == 1 and CALLS[0].length == TOY_ENV_SPEC.config_model().length  # the validated config


def test_run_refuses_before_the_run_folder_or_a_model(guarded_env, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["run", "--env", NAME, "--steps", "1", "--run-dir", str(run_dir)]) == 2
    assert capsys.readouterr().err.startswith("ConfigError: needs-a-tool cannot run here")
    assert not run_dir.exists()


def test_check_receives_overrides_and_passes(guarded_env):
    config = registry.make_config("env", NAME, {"length": 9})
    guarded_env.check_available(config)  # no error: the override made it available
    assert CALLS == [config]


def test_spec_without_check_is_always_available():
    assert TOY_ENV_SPEC.availability is None
    TOY_ENV_SPEC.check_available(TOY_ENV_SPEC.config_model())  # nothing to run, nothing raised


def test_a_broken_check_path_fails_loudly():
    spec = EnvSpec(name="x", factory="a:b", availability="ragen_core.errors:no_such_function")
    with pytest.raises(AttributeError):
        spec.check_available(TOY_ENV_SPEC.config_model())


def test_a_trainer_built_in_python_refuses_before_its_default_run_folder(guarded_env, tmp_path, monkeypatch):
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    monkeypatch.chdir(tmp_path)  # a default run folder would be made under ./runs
    with pytest.raises(ConfigError, match="the tool is missing"):
        Trainer(load_config(RunConfig, [], [f"env={NAME}"]))
    assert not (tmp_path / "runs").exists()
    Trainer(load_config(RunConfig, [], [f"env={NAME}", "env_config.length=9", f"run_dir={tmp_path / 'r'}"]))  # available: built
    assert len(CALLS) == 2


WARNED = "needs-a-look"


def warn_only(config: object) -> list[str]:
    """An availability function that passes with a warning (a setting that runs but looks wrong)."""
    return [f"length={getattr(config, 'length', None)} looks odd"]


@pytest.fixture
def warned_env():
    spec = EnvSpec(name=WARNED, summary="s", config_model=TOY_ENV_SPEC.config_model, factory=TOY_ENV_SPEC.factory,
                   availability=f"{__name__}:warn_only")
    registry.register(spec)
    yield spec
    registry.unregister("env", WARNED)


def test_warnings_returned_by_the_check_are_printed_by_run_and_play(warned_env, tmp_path, capsys, monkeypatch):
    import io

    from ragen_core.testing.run_helpers import TOY_RUN

    assert warned_env.check_available(registry.make_config("env", WARNED, {"length": 3})) == ["length=3 looks odd"]
    run_dir = tmp_path / "run"
    assert main(["run", "--env", WARNED, "--steps", "1", "--run-dir", str(run_dir), *TOY_RUN]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("warning: ")] == ["warning: length=3 looks odd"]
    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    main(["env", "play", WARNED, "--set", "length=4"])
    assert "warning: length=4 looks odd" in capsys.readouterr().err.splitlines()


def test_play_takes_env_config_prefixed_settings_as_errors_name_them(guarded_env, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    main(["env", "play", NAME, "--set", "env_config.length=9"])  # refused unless length=9 reached the check
    assert CALLS and CALLS[-1].length == 9


def test_play_shows_the_actions_the_remaining_turns_allow_and_the_last_observation():
    import io

    import numpy as np

    from ragen_core.cli.env import play
    from ragen_core.testing.toy_env import CorridorEnv

    env = CorridorEnv(length=40, max_turns=2, max_actions_per_turn=1, max_actions_per_episode=10)
    out = io.StringIO()
    # typed moves that never reach the goal of a 40-cell corridor in two steps: Left twice
    result = play(env, seed=3, agent="human", out=out, inp=io.StringIO("Left\nLeft\n"), rng=np.random.default_rng(0))
    text = out.getvalue()
    # the turns bind (1 per turn), not the episode's 10: "1 per turn" says why the count falls by more than was done
    assert "--- turn 1/2 (2 actions left, 1 per turn) ---" in text and "--- turn 2/2 (1 action left, 1 per turn) ---" in text
    assert result["actions"] == 2 and "(no turns left)\n" + env.render() in text
