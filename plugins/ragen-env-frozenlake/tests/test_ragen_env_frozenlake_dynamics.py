"""FrozenLake map generation, group seeding, slip statistics, oracle and fuzzing."""

from __future__ import annotations

import math
import re

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ragen_env_frozenlake.env import FrozenLakeEnv
from ragen_env_frozenlake.lake import MOVES, generate_map, reachable, shortest_path

from ragen_core import registry
from ragen_core.seeding import make_rng


def _cells(desc, kind):
    return [(r, c) for r, row in enumerate(desc) for c, ch in enumerate(row) if ch == kind]


def test_generated_maps_are_solvable_with_random_start_and_goal():
    starts, goals = set(), set()
    for seed in range(300):
        desc = generate_map(make_rng(seed, "t"), 5, 0.8)
        assert len(desc) == 5 and all(len(row) == 5 and set(row) <= set("SFHG") for row in desc)
        (start,), (goal,) = _cells(desc, "S"), _cells(desc, "G")
        assert start != goal and reachable(desc, start, goal)
        path = shortest_path(desc, start)
        assert path is not None and len(path) >= 1
        starts.add(start)
        goals.add(goal)
    assert len(starts) > 15 and len(goals) > 15  # anywhere on the board, not fixed corners


def test_frozen_probability_controls_holes():
    holes = sum(len(_cells(generate_map(make_rng(s), 8, 0.9), "H")) for s in range(200))
    # 62 free cells per map, each a hole w.p. 0.1 before the reachability filter
    assert 0.05 < holes / (200 * 62) < 0.12
    assert all(not _cells(generate_map(make_rng(s), 6, 1.0), "H") for s in range(50))


def test_same_seed_same_map_for_every_member_and_maps_vary_with_seed():
    env = FrozenLakeEnv(size=5)
    first = env.reset(42)
    assert all(env.reset(42, member=m) == first for m in range(8))
    assert len({env.reset(s) for s in range(50)}) > 40
    fixed = FrozenLakeEnv(size=5, map_seed=9)
    assert len({fixed.reset(s) for s in range(10)}) == 1


def test_members_share_the_map_but_slip_independently():
    def trajectory(seed, member):
        env = FrozenLakeEnv(size=8, p=1.0, success_rate=0.5)
        env.reset(seed, member=member)
        return [env.step(a).observation for a in ["Up", "Left", "Down", "Right"] * 3]

    assert trajectory(3, 1) == trajectory(3, 1)
    assert len({tuple(trajectory(3, m)) for m in range(8)}) > 1


def test_slip_frequencies_match_success_rate():
    """success_rate 0.8: intended move ~0.8, each sideways move ~0.1, never backwards."""
    counts = {"intended": 0, "side": 0, "back": 0, "stay": 0}
    env = FrozenLakeEnv(size=11, p=1.0, success_rate=0.8)
    rng = make_rng(2024, "test-actions")
    away_from_edge = {"top": 1, "bottom": 3, "left": 2, "right": 0}  # Down, Up, Right, Left
    for seed in range(250):
        env.reset(seed)
        for _ in range(20):
            row, col = env.player
            action = int(rng.integers(4))
            for edge, near in (("top", row <= 1), ("bottom", row >= 9), ("left", col <= 1), ("right", col >= 9)):
                if near:
                    action = away_from_edge[edge]
            # count only moves whose sideways slips stay on the board (unambiguous displacement)
            counted = 1 <= row <= 9 and 1 <= col <= 9
            result = env.step(env.action_names[action])
            dr, dc = env.player[0] - row, env.player[1] - col
            if not counted:
                pass
            elif (dr, dc) == MOVES[action]:
                counts["intended"] += 1
            elif (dr, dc) == (0, 0):
                counts["stay"] += 1
            elif (dr, dc) == (-MOVES[action][0], -MOVES[action][1]):
                counts["back"] += 1
            else:
                counts["side"] += 1
            if result.done:
                break
    total = sum(counts.values())
    assert total > 3000
    assert counts["back"] == 0 and counts["stay"] == 0
    assert abs(counts["intended"] / total - 0.8) < 0.03
    assert abs(counts["side"] / total - 0.2) < 0.03


def test_deterministic_ice_never_slips():
    env = FrozenLakeEnv(size=7, p=1.0, success_rate=0.2, is_slippery=False)
    env.reset(1)
    for action in ["Up", "Left", "Down", "Right"] * 5:
        before = env.player
        result = env.step(action)
        dr, dc = MOVES[env.action_names.index(action)]
        expected = (min(max(before[0] + dr, 0), 6), min(max(before[1] + dc, 0), 6))
        assert env.player == expected
        if result.done:
            break


def _play_through_text(env, seed, max_turns, per_turn):
    """Drive one episode the way the rollout layer does: replies -> <answer> -> action strings."""
    env.reset(seed)
    plan = env.oracle_actions()
    assert plan is not None
    used, info = 0, {}
    for turn in range(max_turns):
        chunk = plan[turn * per_turn : (turn + 1) * per_turn]
        reply = f"<think>follow the path</think><answer>{' || '.join(chunk)}</answer>"
        answer = re.search(r"<answer>(.*?)</answer>", reply, re.DOTALL).group(1)
        for action in [a.strip() for a in answer.split(env.action_sep)][:per_turn]:
            _, reward, done, info = env.step(action)
            used += 1
            if done:
                return info.get("success") is True and reward == 1.0 and used <= env.config.max_actions_per_episode
    return False


def test_oracle_solves_200_instances_per_deterministic_variant():
    variants = [
        registry.make("env", "frozenlake", preset="CoordFrozenLake"),
        registry.make("env", "frozenlake", is_slippery=False),
        registry.make("env", "frozenlake", preset="FrozenLake", success_rate=1.0, observation_format="coord"),
    ]
    for env in variants:
        cfg = env.config
        solved = sum(_play_through_text(env, s, cfg.max_turns, cfg.max_actions_per_turn) for s in range(200))
        assert solved == 200, f"{cfg}: {solved}/200"


def test_no_oracle_on_slippery_ice_but_a_plan_exists():
    env = registry.make("env", "frozenlake", preset="FrozenLake")
    env.reset(0)
    assert env.oracle_actions() is None
    plan = env.shortest_plan()
    assert plan and all(a in env.action_names for a in plan)


_REPLIES = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["Left", "DOWN", " right ", "Up\n", "<answer>Up", "</answer><answer>", "Up || Down"]),
    st.builds(lambda s, n: s * n, st.sampled_from(["<answer>", "Up", "é", "\x00"]), st.integers(0, 5000)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**40), member=st.integers(0, 64), replies=st.lists(_REPLIES, max_size=12))
@example(seed=0, member=0, replies=["x" * 1_000_000, "", "<answer><answer>Up</answer>", "((((" * 50_000])
def test_any_reply_is_safe(seed, member, replies):
    env = FrozenLakeEnv(size=4)
    env.reset(seed, member=member)
    for reply in replies:
        obs, reward, done, info = env.step(reply)
        assert isinstance(obs, str) and isinstance(done, bool) and math.isfinite(reward)
        assert reward in (0.0, 1.0) and set(info) == {"success", "action_is_valid", "action_is_effective"}
        assert np.isscalar(info["success"])
