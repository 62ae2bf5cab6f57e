"""random_action gives legal placements (never a rule violation) until the board is stuck."""

from ragen_core import registry
from ragen_core.seeding import make_rng


def test_random_actions_are_rule_abiding_placements():
    env = registry.make_env("sudoku", preset="TinySudoku")
    rng = make_rng(0)
    for seed in range(20):
        env.reset(seed)
        for _ in range(env.config.max_actions_per_episode):
            action = env.random_action(rng)
            if action is None:
                break
            _, reward, done, info = env.step(action)
            assert info["action_is_valid"] and reward in (0.5, 1.0, 10.5, 11.0), (action, reward, info)
            if done:
                break


def test_random_action_before_reset_is_none():
    assert registry.make_env("sudoku").random_action(make_rng(1)) is None
