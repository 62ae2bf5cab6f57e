"""Behaviour of SokobanEnv on hand-built rooms: rewards, termination, renders, instruction."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from ragen_env_sokoban.config import SokobanConfig
from ragen_env_sokoban.env import SokobanEnv

from ragen_core import registry
from ragen_core.errors import ConfigError, EnvError

# The level of the spec's worked example (18.1 / 13.1).
EXAMPLE = ["######", "#O####", "#__###", "#X_###", "#_P_##", "######"]


def env_with(room: list[str], **config) -> SokobanEnv:
    env = SokobanEnv(SokobanConfig(**config))
    env.load_room(room)
    return env


def test_push_onto_target_solves_with_10_9():
    env = env_with(["#######", "#_PX_O#", "#######"])
    obs, reward, done, info = env.step("Right")
    assert reward == pytest.approx(-0.1)
    assert not done and info == {
        "success": False,
        "action_is_valid": True,
        "action_is_effective": True,
    }
    assert obs == "#######\n#__PXO#\n#######"
    obs, reward, done, info = env.step("Right")
    assert reward == pytest.approx(10.9)
    assert done and info["success"] is True
    assert obs == "#######\n#___P√#\n#######"


def test_push_off_target_costs_one_and_back_on_earns_one():
    # Two boxes: one on a target, one elsewhere, so pushing onto a target does not solve the room.
    env = env_with(["########", "#P√__XO#", "########"])
    _, reward, done, info = env.step("Right")  # box leaves the target
    assert reward == pytest.approx(-1.1)
    assert not done and not info["success"]
    assert env.render() == "########\n#_SX_XO#\n########"
    _, reward, _, _ = env.step("Left")  # walk back, nothing pushed
    assert reward == pytest.approx(-0.1)


def test_box_onto_target_without_solving_earns_0_9():
    env = env_with(["########", "#PX_O_O#", "#_____X#", "########"])
    env.step("Right")
    _, reward, done, info = env.step("Right")
    assert reward == pytest.approx(0.9)
    assert not done and not info["success"]


def test_wall_bump_and_blocked_push_are_ineffective():
    env = env_with(["######", "#PXX_#", "#___O#", "#___O#", "######"])
    before = env.render()
    _, reward, done, info = env.step("Left")  # wall
    assert reward == pytest.approx(-0.1) and not done
    assert info == {
        "success": False,
        "action_is_valid": True,
        "action_is_effective": False,
    }
    _, reward, _, info = env.step("Right")  # box against box
    assert reward == pytest.approx(-0.1) and not info["action_is_effective"]
    _, reward, _, info = env.step("Up")  # wall again
    assert env.render() == before


def test_worked_example_coord_sokoban():
    env = env_with(EXAMPLE, observation_format="grid_coord")
    assert env.render() == (
        "Coordinates: \n"
        "Board size: 6 rows x 6 cols (zero-indexed).\n"
        "Targets: (1, 1)\n"
        "Boxes: (3, 1)\n"
        "Player: (4, 2)\n"
        "Grid Map: \n"
        "######\n#O####\n#__###\n#X_###\n#_P_##\n######"
    )
    assert env.oracle_actions() == ["Left", "Up", "Up"]
    assert env.optimal_moves() == 3
    turn = [env.step(a) for a in ["Left", "Up"]]
    assert sum(r.reward for r in turn) == pytest.approx(-0.2)
    obs, reward, done, info = env.step("Up")
    assert reward == pytest.approx(10.9) and done and info["success"]
    assert obs.splitlines()[2:5] == [
        "Boxes on target: (1, 1)",
        "Player: (2, 1)",
        "Grid Map: ",
    ]


def test_coord_format_categories_and_walls_option():
    room = ["#####", "#S√X#", "#_O_#", "#####"]
    env = env_with(room, observation_format="coord")
    assert env.render() == (
        "Board size: 4 rows x 5 cols (zero-indexed).\n"
        "Targets: (2, 2)\n"
        "Boxes: (1, 3)\n"
        "Boxes on target: (1, 2)\n"
        "Player on target: (1, 1)"
    )
    walls = (
        env_with(room, observation_format="coord", include_walls=True)
        .render()
        .splitlines()[1]
    )
    assert walls.startswith(
        "Walls: (0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 4), (2, 0)"
    )


def test_grid_uses_instance_lookup():
    lookup = {0: "W", 1: ".", 2: "G", 3: "C", 4: "B", 5: "A", 6: "@"}
    vocab = dict(
        zip(
            "W.GCBA@",
            [
                "wall",
                "empty",
                "target",
                "box on target",
                "box",
                "player",
                "player on target",
            ],
        )
    )
    env = SokobanEnv(SokobanConfig(grid_lookup=lookup, grid_vocab=vocab))
    env.load_room(["WWWWW", "W@CBW", "W.G.W", "WWWWW"])
    assert env.render() == "WWWWW\nW@CBW\nW.G.W\nWWWWW"
    assert (
        "W: wall, .: empty, G: target, C: box on target, B: box, A: player, @: player on target"
        in env.instruction()
    )


def test_unknown_actions_change_nothing():
    env = env_with(EXAMPLE)
    before = env.render()
    for action in ["jump", "", "up!", "Up || Left", 0, 5, True, None, 2.0]:
        obs, reward, done, info = env.step(action)  # type: ignore[arg-type]
        assert (obs, reward, done) == (before, 0.0, False)
        assert info == {
            "success": False,
            "action_is_valid": False,
            "action_is_effective": False,
        }
    # case-insensitive names and the reference's integer ids are accepted
    assert env.step("  lEfT ").info["action_is_effective"]
    assert env.step(4).info["action_is_valid"]  # 4 = Right


def test_max_steps_ends_episode_and_later_steps_are_noops():
    env = env_with(EXAMPLE, max_steps=3)
    dones = [env.step("Down").done for _ in range(3)]  # bumps into the wall below
    assert dones == [False, False, True]
    obs, reward, done, info = env.step("Left")
    assert (reward, done, info["success"], info["action_is_effective"]) == (
        0.0,
        True,
        False,
        False,
    )
    assert obs == env_with(EXAMPLE).render()


def test_instruction_follows_instance_config():
    text = SokobanEnv(
        SokobanConfig(dim_room=(8, 7), observation_format="grid_coord")
    ).instruction()
    assert "(0, 0)" in text and "(7, 6)" in text and "(5, 5)" not in text
    assert "<answer>Right || Right || Up</answer>" in text
    assert "Up, Down, Left, Right" in text and "up to 10 actions" not in text  # the cap sentence is the core's (spec 5.1)
    assert "#: wall, _: empty, O: target" in text
    grid_only = SokobanEnv(SokobanConfig()).instruction()
    assert "(0, 0)" not in grid_only
    coord_only = SokobanEnv(SokobanConfig(observation_format="coord")).instruction()
    assert "#: wall" not in coord_only and "(5, 5)" in coord_only


def test_render_image_tiles():
    env = env_with(EXAMPLE, render_mode="rgb_array")
    img = env.render_image()
    assert img.shape == (96, 96, 3) and img.dtype == np.uint8
    player_tile, box_tile, wall_tile = (
        img[64:80, 32:48],
        img[48:64, 16:32],
        img[0:16, 0:16],
    )
    assert not np.array_equal(player_tile, box_tile) and not np.array_equal(
        box_tile, wall_tile
    )
    assert isinstance(env.render(), str)  # text observation stays available


def test_load_room_rejects_bad_rooms():
    env = SokobanEnv()
    for bad in (["###", "##"], ["#P?#"], ["#PP_XO#"], ["#P_O#"], ["#P_XX_O#"]):
        with pytest.raises(ValueError):
            env.load_room(bad)
    with pytest.raises(EnvError):
        env.render()


def test_config_validation():
    with pytest.raises(ConfigError, match="^SokobanConfig: invalid config: "):
        SokobanConfig(observation_format="image")
    with pytest.raises(ConfigError, match="^SokobanConfig: invalid config: "):
        SokobanConfig(
            grid_lookup={0: "W", 1: ".", 2: "G", 3: "C", 4: "B", 5: "A", 6: "@"}
        )  # vocab mismatch
    with pytest.raises(ConfigError, match="^SokobanConfig: invalid config: "):
        SokobanConfig(dim_room=(4, 4), num_boxes=3)
    with pytest.raises(ConfigError, match="^SokobanConfig: invalid config: "):
        SokobanConfig(max_step=3)  # typo


@pytest.mark.parametrize(
    "preset",
    [
        "SimpleSokoban",
        "LargerSokoban",
        "SokobanDifferentGridVocab",
        "CoordSokoban",
        "VisualSimpleSokoban",
    ],
)
def test_presets_build_and_roundtrip(preset):
    env = registry.make("env", "sokoban", preset=preset)
    cfg = env.config
    assert SokobanConfig.model_validate_json(cfg.model_dump_json()) == cfg
    env.reset(3)
    clone = pickle.loads(pickle.dumps(env))
    assert clone.render() == env.render()
    expected = {"LargerSokoban": (8, 8)}.get(preset, (6, 6))
    assert cfg.dim_room == expected
    assert (cfg.max_tokens == 120) == (preset == "CoordSokoban")


DEFAULT_LEGEND = "#: wall, _: empty, O: target, √: box on target, X: box, P: player, S: player on target"  # spec 5.1


@pytest.mark.parametrize("preset", ["SimpleSokoban", "LargerSokoban", "CoordSokoban"])
def test_merge_quirk_changes_nothing_for_presets_with_the_default_symbols(preset):
    env = registry.make_env("sokoban", preset=preset)
    assert env.merge_quirk_instruction() == env.instruction()


def test_merge_quirk_shows_the_default_legend_for_another_vocabulary():
    """compat.prompt_merge_quirk (spec 3.2, 5.1, 17 L30): the reference's prompt lists the default
    symbols while the grid shows the preset's own."""
    variant = registry.make_env("sokoban", preset="SokobanDifferentGridVocab")
    defaults = SokobanConfig()
    same_room = SokobanEnv(variant.config.model_copy(update={"grid_lookup": defaults.grid_lookup, "grid_vocab": defaults.grid_vocab}))
    text = variant.merge_quirk_instruction()
    assert text == same_room.instruction() != variant.instruction()
    assert DEFAULT_LEGEND in text and "W: wall" not in text and "W: wall" in variant.instruction()


def test_merge_quirk_gives_a_coordinate_format_the_grid_legend_and_no_coordinate_hint():
    coord = SokobanEnv(SokobanConfig(dim_room=(7, 8), observation_format="coord"))
    text = coord.merge_quirk_instruction()
    assert text == SokobanEnv(SokobanConfig(dim_room=(7, 8))).instruction()  # as if the format were the default grid
    assert DEFAULT_LEGEND in text and "(6, 7)" not in text and "(6, 7)" in coord.instruction()


@pytest.mark.parametrize("quirk", [False, True])
def test_a_rollout_with_the_merge_quirk_prompts_the_default_legend_over_the_variant_grid(quirk):
    from ragen_core.engines.scripted import ScriptedEngine
    from ragen_core.interfaces.env_pool import EnvRef
    from ragen_core.models.tiny import build_byte_tokenizer
    from ragen_core.rollout.runner import RolloutConfig, RolloutRunner

    tok = build_byte_tokenizer()
    config = RolloutConfig(env_groups=1, group_size=1, max_turns=1, prompt_merge_quirk=quirk)
    runner = RolloutRunner(EnvRef(name="sokoban", preset="SokobanDifferentGridVocab"), ScriptedEngine(["go</think><answer>Up</answer>"], tok),
                           tok, config)
    try:
        (traj,) = runner.run()
    finally:
        runner.close()
    assert "A" in traj.turns[0].observation and "P" not in traj.turns[0].observation  # the grid keeps the preset's symbols
    variant = registry.make_env("sokoban", preset="SokobanDifferentGridVocab")
    expected = variant.merge_quirk_instruction() if quirk else variant.instruction()
    assert traj.system_prompt.startswith("You are a helpful assistant. " + expected)
    assert (DEFAULT_LEGEND in traj.system_prompt) is quirk
