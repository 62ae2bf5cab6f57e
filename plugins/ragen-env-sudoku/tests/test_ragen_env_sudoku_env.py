"""Sudoku env behaviour: hand-computed rewards, budgets, rendering, oracle through text, data."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from ragen_env_sudoku import SudokuConfig, SudokuEnv
from ragen_env_sudoku.plugin import SPEC
from ragen_env_sudoku.puzzle import count_solutions

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "sudoku-sample" / "sudoku_test_30.csv"

# TinySudoku, seed 1 (rows top to bottom, 0 = empty):
#   3 4 . .      solution  3 4 2 1
#   1 2 . 3                1 2 4 3
#   . 1 . 2                4 1 3 2
#   2 3 1 .                2 3 1 4
TINY_SEED1_GIVENS = (3, 4, 0, 0, 1, 2, 0, 3, 0, 1, 0, 2, 2, 3, 1, 0)
TINY_SEED1_SOLUTION = (3, 4, 2, 1, 1, 2, 4, 3, 4, 1, 3, 2, 2, 3, 1, 4)


def tiny(**overrides):
    return SudokuEnv(SPEC.make_config(overrides, preset="TinySudoku"))


def test_scripted_episode_rewards_are_the_hand_computed_ones():
    env = tiny()
    env.reset(1)
    assert env.puzzle.givens == TINY_SEED1_GIVENS
    assert env.puzzle.solution == TINY_SEED1_SOLUTION
    script = [
        # action,                    reward, valid, effective, why
        ("hello",                    -0.1, False, False),  # unparsable
        ("place 5 at row 1 col 3",   -0.1, False, False),  # 5 > 4: out of range
        ("1,1,3",                    -0.1, False, False),  # (1,1) is a given
        ("place 1 at row 1 col 3",   -0.1, False, False),  # 1 is already in column 3 (row 4)
        ("3,3,4",                    +0.5, True, True),    # legal, but the solution has 3 there
        ("place 3 at row 3 col 3",   0.0, True, True),     # overwrite: allowed, pays 0 by default
        ("place 3 at row 3 col 3",   0.0, True, False),    # same value again: nothing changes
        ("place 2 at row 1 col 3",   1.0, True, True),
        ("place 1 at (1,4)",         1.0, True, True),
        ("4 at 2,3",                 1.0, True, True),
        ("(3,1,4)",                  1.0, True, True),
        ("4,4,4",                    11.0, True, True),    # last blank: 1.0 + completion 10
    ]
    total = 0.0
    for k, (action, reward, valid, effective) in enumerate(script, start=1):
        obs, r, done, info = env.step(action)
        assert r == pytest.approx(reward), action
        assert (info["action_is_valid"], info["action_is_effective"]) == (valid, effective), action
        assert info["steps_remaining"] == 12 - k
        assert done is (k == len(script))
        total += r
    assert info["success"] is True and info["cells_remaining"] == 0 and info["cells_filled"] == 16
    assert total == pytest.approx(-0.4 + 0.5 + 4.0 + 11.0)  # 15.1
    assert env.grid == TINY_SEED1_SOLUTION
    assert "solved" in obs
    # after the end nothing pays
    assert env.step("4,4,4")[1:3] == (0.0, True)


def test_rule_violation_reports_clashes_and_valid_numbers():
    env = tiny()
    env.reset(1)
    obs, reward, done, info = env.step("place 1 at row 1 col 3")
    assert reward == pytest.approx(-0.1) and not done
    assert info["valid_numbers"] == [2]
    assert "column" in obs and "Numbers allowed there: 2" in obs
    obs, _, _, info = env.step("place 3 at row 1 col 3")  # 3 in row 1 and in the box
    assert "row and box" in obs


def test_well_formed_placements_are_told_apart_from_unreadable_replies():
    """``action_is_well_formed`` (read by the warm-start gate, which teaches the format): a parsed
    placement, legal or not; ``action_is_valid`` stays the reference's legal-move flag."""
    env = tiny()
    env.reset(1)
    cases = [("hello", False, False), ("place 5 at row 1 col 3", False, False), ("1,1,3", False, True),
             ("place 1 at row 1 col 3", False, True), ("3,3,4", True, True), ("3,3,4", True, True)]
    for action, valid, well_formed in cases:
        info = env.step(action).info
        assert (info["action_is_valid"], info["action_is_well_formed"]) == (valid, well_formed), action


def test_reward_overwrites_restores_the_reference_payout():
    env = tiny(reward_overwrites=True)
    env.reset(1)
    assert env.step("3,3,4").reward == pytest.approx(0.5)
    assert env.step("3,3,3").reward == pytest.approx(1.0)


def test_episode_ends_at_the_step_limit_without_success():
    env = tiny()
    env.reset(1)
    for k in range(12):
        _, reward, done, info = env.step("nonsense")
        assert reward == pytest.approx(-0.1)
        assert done is (k == 11)
    assert info["success"] is False and info["steps_remaining"] == 0
    env2 = SudokuEnv(SudokuConfig(grid_size=4, max_steps=3, enforce_reachable_budget=False))
    env2.reset(0)
    assert [env2.step("x").done for _ in range(3)] == [False, False, True]


def test_config_budgets_are_computed_and_checked():
    default = SudokuConfig()
    assert (default.max_actions_per_episode, default.max_actions_per_turn, default.max_turns) == (64, 4, 16)
    hard4 = SudokuConfig(grid_size=4, difficulty="hard", max_actions_per_turn=2)
    assert (hard4.max_actions_per_episode, hard4.max_turns) == (18, 9)
    with pytest.raises(ValueError, match="never be solved"):
        SudokuConfig(max_actions_per_episode=20)  # the reference SimpleSudoku budget
    with pytest.raises(ValueError, match="max_turns"):
        SudokuConfig(max_turns=5, max_actions_per_turn=2)  # the reference 10 placements
    assert SudokuConfig(max_actions_per_episode=20, enforce_reachable_budget=False).max_actions_per_episode == 20
    with pytest.raises(ValueError):
        SudokuConfig(grid_size=5)
    with pytest.raises(ValueError):
        SudokuConfig(grid_size=4, data_path="x.csv")
    for preset in SPEC.presets:
        cfg = SPEC.make_config(preset=preset)
        assert SudokuConfig.model_validate_json(cfg.model_dump_json()) == cfg


def test_reset_ignores_member_and_is_deterministic():
    a, b = SudokuEnv(), SudokuEnv()
    assert a.reset(42, member=0) == b.reset(42, member=5)
    assert a.reset(43) != b.reset(42)


def test_render_formats():
    env = tiny(render_format="simple")
    env.reset(1)
    assert env.render() == "3 4 . .\n1 2 . 3\n. 1 . 2\n2 3 1 ."
    env = tiny(render_format="detailed")
    text = env.reset(1)
    assert text.splitlines()[:3] == ["=" * 50, "SUDOKU PUZZLE", "=" * 50]
    assert "1 [3][4]| .  ." in text and "Legend:" in text and "Feedback:" in text
    assert "Progress:" not in text
    env = tiny()  # with_feedback
    text = env.reset(1)
    assert "Progress: 10/16 cells filled (given 10, placed 0)" in text
    assert "Steps: 0/12" in text
    assert "(3,3): 3,4" in text  # 6 empties <= 10: hints shown
    text = env.step("3,3,4").observation
    assert "Progress: 11/16 cells filled (given 10, placed 1)" in text and "Steps: 1/12" in text
    big = SudokuEnv(render_format="with_feedback")
    assert "Allowed numbers" not in big.reset(0)  # 32 empties: no hints


def test_conflicts_are_marked_and_listed():
    env = tiny()
    env.reset(1)
    env._grid[2] = 3  # force a clash with the given 3 in row 1 (not reachable by step)
    text = env.render()
    assert "*3*" in text and "Conflicts at (row,col): (1,1), (1,3)" in text
    env = tiny(show_conflicts=False)
    env.reset(1)
    env._grid[2] = 3
    assert "*3*" not in env.render()


def test_instruction_is_built_from_the_instance_config():
    text = tiny().instruction()
    assert "4x4" in text and "2x2" in text and "up to 2 numbers" in text and "||" in text
    assert "place 4 at row 2 col 3" in text  # example stays inside 1..4
    single = SudokuEnv(max_actions_per_turn=1, max_turns=64).instruction()
    assert "9x9" in single and "||" not in single


def _play_oracle_through_text(env, seed):
    """Play the oracle as a model would: <answer>a || b</answer> replies within the budgets."""
    cfg = env.config
    env.reset(seed)
    actions = env.oracle_actions()
    turns = executed = 0
    total = 0.0
    done = False
    while actions and not done:
        chunk, actions = actions[: cfg.max_actions_per_turn], actions[cfg.max_actions_per_turn :]
        reply = "<think>easy</think><answer> " + " || ".join(chunk) + " </answer>"
        answer = reply.split("<answer>")[1].split("</answer>")[0]
        turns += 1
        for action in answer.split(env.action_sep):
            executed += 1
            _, reward, done, info = env.step(action)
            total += reward
            if done:
                break
    assert turns <= cfg.max_turns and executed <= cfg.max_actions_per_episode
    return info["success"], total, executed


@pytest.mark.parametrize("preset", [None, "SimpleSudoku", "MediumSudoku", "TinySudoku"])
def test_oracle_solves_200_seeded_instances_within_limits(preset):
    env = SudokuEnv(SPEC.make_config(preset=preset))
    for seed in range(200):
        success, total, executed = _play_oracle_through_text(env, seed)
        assert success, (preset, seed)
        # every blank pays 1.0 and the last one the completion bonus too
        assert total == pytest.approx(executed * 1.0 + 10.0)


def test_oracle_repairs_a_wrong_placement():
    env = tiny()
    env.reset(1)
    env.step("3,3,4")
    actions = env.oracle_actions()
    assert "place 3 at row 3 col 3" in actions and len(actions) == 6
    for action in actions:
        result = env.step(action)
    assert result.info["success"] is True


def test_env_pickles_mid_episode_and_close_is_idempotent():
    env = tiny()
    env.reset(1)
    env.step("3,3,4")
    clone = pickle.loads(pickle.dumps(env))
    assert clone.render() == env.render() and clone.oracle_actions() == env.oracle_actions()
    env.close()
    env.close()


def test_step_before_reset_is_an_env_error_as_in_every_other_env():
    """It answered done=True with a "Call reset" observation (Sokoban, FrozenLake, Countdown, ... raise)."""
    from ragen_core.errors import EnvError

    with pytest.raises(EnvError, match=r"SudokuEnv.step/render called before reset\(seed\)"):
        SudokuEnv().step("2,3,5")
    with pytest.raises(EnvError, match="before reset"):
        SudokuEnv().render()


@pytest.mark.skipif(not DATA.exists(), reason="shared sudoku sample not available")
def test_csv_loader_reads_the_public_format_with_bom():
    from ragen_env_sudoku.data import load_puzzles

    puzzles = load_puzzles(str(DATA))
    assert len(puzzles) == 30
    first = puzzles[0]
    assert first.givens[:4] == (0, 8, 0, 0) and first.solution[1] == 8
    for puzzle in puzzles:
        assert count_solutions(puzzle.givens, 9, limit=2) == 1
    env = SudokuEnv(data_path=str(DATA))
    for seed in range(10):
        success, _, _ = _play_oracle_through_text(env, seed)
        assert success
        assert env.puzzle in puzzles


def test_csv_loader_rejects_bad_rows(tmp_path):
    from ragen_env_sudoku.data import load_puzzles

    generate = SudokuEnv()
    generate.reset(0)
    quiz = "".join(map(str, generate.puzzle.givens))
    sol = "".join(map(str, generate.puzzle.solution))
    ok = tmp_path / "ok.csv"
    ok.write_text("\ufeffquizzes,solutions\n" + f"{quiz},{sol}\n", encoding="utf-8")
    assert load_puzzles(str(ok))[0].solution == generate.puzzle.solution
    short = tmp_path / "short.csv"
    short.write_text(f"quizzes,solutions\n{quiz[:80]},{sol}\n")
    with pytest.raises(ValueError, match="line 2"):
        load_puzzles(str(short))
    wrong = tmp_path / "wrong.csv"
    bad_sol = sol[:-1] + ("1" if sol[-1] != "1" else "2")
    wrong.write_text(f"quizzes,solutions\n{quiz},{bad_sol}\n")
    with pytest.raises(ValueError):
        load_puzzles(str(wrong))
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="no column"):
        load_puzzles(str(nocol))
