"""Hypothesis fuzz: no action string can make the Sudoku env raise or pay an unexpected reward."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ragen_env_sudoku import SudokuEnv
from ragen_env_sudoku.plugin import SPEC

# Every reward a single step can produce with the default scores.
ALLOWED_REWARDS = {-0.1, 0.0, 0.5, 1.0, 10.5, 11.0}

FORMS = [
    "place {} at row {} col {}",
    "place {} at ({},{})",
    "place {} at {},{}",
    "{} at {},{}",
    "({},{},{})",
    "{},{},{}",
]
WORDS = ["five", "row", "one", "", "NaN", "-1", "1e3", "0x3", "²", "\u0663", "None", "∞", "3.5"]

numbers = st.integers(min_value=-(10**12), max_value=10**12).map(str)
token = st.one_of(numbers, st.sampled_from(WORDS), st.text(max_size=5))
formatted = st.builds(lambda form, a, b, c: form.format(a, b, c), st.sampled_from(FORMS), token, token, token)
huge = st.builds(lambda ch, k: ch * k, st.characters(), st.integers(min_value=1_000, max_value=200_000))
actions = st.one_of(st.text(), st.just(""), formatted, huge, st.text(alphabet="0123456789,() atplcerow", max_size=40))

ENVS = {preset: SudokuEnv(SPEC.make_config(preset=preset)) for preset in ("TinySudoku", "SimpleSudoku")}


def _check(result):
    obs, reward, done, info = result
    assert isinstance(obs, str) and isinstance(done, bool)
    assert math.isfinite(reward)
    assert any(math.isclose(reward, allowed, abs_tol=1e-9) for allowed in ALLOWED_REWARDS), reward
    for key in ("success", "action_is_valid", "action_is_effective", "correct_placement",
                "steps_remaining", "cells_filled", "cells_remaining"):
        assert key in info


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(preset=st.sampled_from(sorted(ENVS)), seed=st.integers(0, 50), script=st.lists(actions, min_size=1, max_size=6))
def test_random_actions_never_raise(preset, seed, script):
    env = ENVS[preset]
    env.reset(seed)
    for action in script:
        _check(env.step(action))


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 50), row=st.integers(-3, 12), col=st.integers(-3, 12), num=st.integers(-3, 12))
def test_any_cell_number_triple_is_handled(seed, row, col, num):
    env = ENVS["TinySudoku"]
    env.reset(seed)
    obs, reward, done, info = env.step(f"{row},{col},{num}")
    _check((obs, reward, done, info))
    in_range = all(1 <= v <= 4 for v in (row, col, num))
    if not in_range:
        assert info["action_is_valid"] is False and reward == -0.1
