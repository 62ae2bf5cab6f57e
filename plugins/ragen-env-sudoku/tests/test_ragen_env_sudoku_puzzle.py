"""Generator and solver: unique solutions, difficulty = blank count, seeded, no global RNG."""

from __future__ import annotations

import random

import numpy as np
import pytest
from ragen_env_sudoku.puzzle import (
    count_solutions,
    generate_puzzle,
    is_complete_solution,
    solve,
    target_blanks,
)


def _check(puzzle, n):
    assert len(puzzle.givens) == len(puzzle.solution) == n * n
    assert is_complete_solution(puzzle.solution, n)
    assert all(g in (0, s) for g, s in zip(puzzle.givens, puzzle.solution))
    assert count_solutions(puzzle.givens, n, limit=2) == 1
    assert solve(puzzle.givens, n) == puzzle.solution


def test_blank_targets_follow_the_spec_fractions():
    assert [target_blanks(9, d) for d in ("easy", "medium", "hard")] == [32, 40, 48]
    assert [target_blanks(4, d) for d in ("easy", "medium", "hard")] == [6, 8, 9]


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_every_4x4_puzzle_of_200_seeds_has_exactly_one_solution(difficulty):
    for seed in range(200):
        puzzle = generate_puzzle(seed, 4, difficulty)
        _check(puzzle, 4)
        assert puzzle.blanks <= target_blanks(4, difficulty)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_9x9_puzzles_have_exactly_one_solution_and_the_target_blank_count(difficulty):
    for seed in range(30):
        puzzle = generate_puzzle(seed, 9, difficulty)
        _check(puzzle, 9)
        # the unique-removal loop reaches the spec's blank counts on 9x9 for these seeds
        assert puzzle.blanks == target_blanks(9, difficulty)


def test_16x16_easy_puzzle_is_valid():
    puzzle = generate_puzzle(0, 16, "easy")
    assert is_complete_solution(puzzle.solution, 16)
    assert puzzle.blanks == target_blanks(16, "easy") == 102
    assert count_solutions(puzzle.givens, 16, limit=2) == 1


def test_solver_counts_all_288_grids_of_an_empty_4x4_board():
    assert count_solutions([0] * 16, 4, limit=1000) == 288


def test_solver_sees_multiple_and_zero_solutions():
    solution = generate_puzzle(3, 9, "easy").solution
    assert count_solutions(solution, 9) == 1
    assert count_solutions([0] * 81, 9, limit=2) == 2  # an empty board: stops counting at 2
    clash = list(solution)
    clash[1] = clash[0]  # the same digit twice in row 1
    assert count_solutions(clash, 9) == 0
    assert solve(clash, 9) is None


def test_generation_is_seeded_and_touches_no_global_rng():
    random.seed(1234)
    np.random.seed(1234)
    py_state, np_state = random.getstate(), np.random.get_state()[1].copy()
    generate_puzzle.cache_clear()
    first = generate_puzzle(987_654, 9, "medium")
    generate_puzzle.cache_clear()
    assert generate_puzzle(987_654, 9, "medium") == first
    assert random.getstate() == py_state
    assert (np.random.get_state()[1] == np_state).all()
    others = {generate_puzzle(s, 9, "medium").givens for s in range(10)}
    assert len(others) == 10


def test_unknown_difficulty_is_rejected():
    with pytest.raises(ValueError):
        generate_puzzle(0, 9, "impossible")
