"""Scripted FrozenLake episodes on hand-made maps with hand-computed rewards and renders."""

from __future__ import annotations

import pickle

import pytest
from ragen_env_frozenlake.config import FrozenLakeConfig
from ragen_env_frozenlake.env import FrozenLakeEnv

from ragen_core import registry
from ragen_core.errors import EnvError

# S F H       start (0, 0), goal (2, 2), holes (0, 2) and (2, 0)
# F F F
# H F G
MAP = ["SFH", "FFF", "HFG"]


def make(**overrides) -> FrozenLakeEnv:
    env = FrozenLakeEnv(FrozenLakeConfig(is_slippery=False, **overrides))
    env.load_map(MAP)
    return env


def test_initial_renders_match_spec_formats():
    env = make()
    assert env.render() == "P_O\n___\nO_G"
    env = make(observation_format="coord")
    assert env.render() == (
        "Board size: 3 rows x 3 cols (zero-indexed).\n"
        "Start: (0, 0)\nGoal: (2, 2)\nPlayer: (0, 0)\nHoles: (0, 2), (2, 0)"
    )
    env = make(observation_format="grid_coord")
    assert env.render() == (
        "Coordinates: \nBoard size: 3 rows x 3 cols (zero-indexed).\n"
        "Start: (0, 0)\nGoal: (2, 2)\nPlayer: (0, 0)\nHoles: (0, 2), (2, 0)\n"
        "Grid Map: \nP_O\n___\nO_G"
    )


def test_start_cell_renders_as_ice_once_left():
    env = make()
    obs, reward, done, info = env.step("Down")
    assert obs == "__O\nP__\nO_G"
    assert (reward, done) == (0.0, False)
    assert info == {"success": False, "action_is_valid": True, "action_is_effective": True}


def test_falling_into_a_hole_ends_the_episode_without_reward():
    env = make(observation_format="coord")
    assert env.step("Right")[:3] == (env.render(), 0.0, False)
    obs, reward, done, info = env.step("Right")
    assert reward == 0.0 and done is True
    assert info == {"success": False, "action_is_valid": True, "action_is_effective": True}
    assert "Player in hole: (0, 2)" in obs and "\nPlayer:" not in obs
    grid = make()
    grid.step("Right")
    assert grid.step("Right").observation == "__X\n___\nO_G"


def test_reaching_the_goal_pays_one():
    env = make()
    rewards = [env.step(a).reward for a in ["Down", "Right", "Down"]]
    assert rewards == [0.0, 0.0, 0.0]
    obs, reward, done, info = env.step("right")  # names are case-insensitive
    assert (reward, done, info["success"]) == (1.0, True, True)
    assert obs == "__O\n___\nO_√"
    coord = make(observation_format="coord")
    for a in ["Down", "Right", "Down", "Right"]:
        last = coord.step(a)
    assert "Player on goal: (2, 2)" in last.observation


def test_bumping_the_edge_is_valid_but_ineffective():
    env = make()
    obs, reward, done, info = env.step("Up")
    assert obs == "P_O\n___\nO_G" and reward == 0.0 and not done
    assert info == {"success": False, "action_is_valid": True, "action_is_effective": False}


@pytest.mark.parametrize("bad", ["", "Jump", "up up", "<answer>Up</answer>", "1", "Up" * 100])
def test_unknown_actions_are_invalid_no_ops(bad):
    env = make()
    obs, reward, done, info = env.step(bad)
    assert obs == "P_O\n___\nO_G" and reward == 0.0 and done is False
    assert info == {"success": False, "action_is_valid": False, "action_is_effective": False}


def test_steps_after_the_end_change_nothing():
    env = make()
    for a in ["Down", "Right", "Down", "Right"]:
        env.step(a)
    obs, reward, done, info = env.step("Left")
    assert (obs, reward, done) == ("__O\n___\nO_√", 0.0, True)
    assert info["success"] is True and info["action_is_valid"] is False


def test_no_holes_line_when_the_map_has_none():
    env = FrozenLakeEnv(is_slippery=False, observation_format="coord")
    env.load_map(["SG"])
    assert env.render() == "Board size: 1 rows x 2 cols (zero-indexed).\nStart: (0, 0)\nGoal: (0, 1)\nPlayer: (0, 0)"


@pytest.mark.parametrize("bad_map", [[], ["SF", "F"], ["SFF"], ["FFG"], ["SXG"], ["SGG"]])
def test_load_map_rejects_malformed_maps(bad_map):
    with pytest.raises(ValueError):
        FrozenLakeEnv().load_map(bad_map)


def test_step_before_reset_is_a_clear_error():
    with pytest.raises(EnvError):
        FrozenLakeEnv().step("Up")


def test_pickle_mid_episode_keeps_slip_stream():
    env = FrozenLakeEnv(size=6, p=1.0, success_rate=0.5)
    env.reset(4, member=2)
    env.step("Up")
    clone = pickle.loads(pickle.dumps(env))
    for a in ["Down", "Left", "Right", "Up", "Down", "Down"]:
        r1, r2 = env.step(a), clone.step(a)
        assert r1[:3] == r2[:3]


def test_instruction_follows_size_and_slipperiness():
    coord6 = FrozenLakeEnv(size=6, observation_format="coord", success_rate=0.8)
    text = coord6.instruction()
    assert "6x6" in text and "(5, 5)" in text and "80%" in text and "10% each" in text
    assert "Grid symbols" not in text  # coordinates only: no grid legend
    assert text.endswith("Available actions:\nLeft, Down, Right, Up")
    coord4 = registry.make("env", "frozenlake", preset="CoordFrozenLake")
    text = coord4.instruction()
    assert "4x4" in text and "(3, 3)" in text and "(5, 5)" not in text
    assert "not slippery" in text
    assert "P: player, _: empty, O: hole, G: goal, X: player in hole, √: player on goal" in text
    assert "<answer>Left || Up</answer>" in text


def test_presets_and_config_validation():
    coord = registry.make_config("env", "frozenlake", preset="CoordFrozenLake")
    assert coord.observation_format == "grid_coord" and coord.success_rate == 1.0 and coord.max_tokens == 120
    assert coord.deterministic
    plain = registry.make_config("env", "frozenlake", preset="FrozenLake")
    assert plain.success_rate == 0.8 and plain.is_slippery and not plain.deterministic
    assert FrozenLakeConfig(is_slippery=False, success_rate=0.3).deterministic
    with pytest.raises(ValueError):
        FrozenLakeConfig(sucess_rate=0.5)  # typo: extra keys are forbidden
    with pytest.raises(ValueError):
        FrozenLakeConfig(success_rate=1.5)
    assert FrozenLakeConfig.model_validate_json(coord.model_dump_json()) == coord


@pytest.mark.parametrize(("fmt", "as_if"), [("grid", "grid"), ("grid_coord", "grid_coord"), ("coord", "grid")])
def test_merge_quirk_builds_the_legend_and_the_coordinate_hint_from_the_default_format(fmt, as_if):
    """compat.prompt_merge_quirk (spec 3.2, 5.1, 17 L30): the reference's appendices read the default
    format (grid): a coord config gets the grid legend and no coordinate hint; grid_coord keeps
    its coordinate sentence (the reference's CoordFrozenLake instruction names them itself)."""
    env = FrozenLakeEnv(size=5, observation_format=fmt, success_rate=0.8)
    text = env.merge_quirk_instruction()
    assert text == FrozenLakeEnv(size=5, observation_format=as_if, success_rate=0.8).instruction()
    assert "P: player, _: empty, O: hole, G: goal, X: player in hole, √: player on goal" in text
    assert ("(4, 4)" in text) is (fmt == "grid_coord")
    assert (text == env.instruction()) is (fmt != "coord")
