"""Behaviour of the two-armed bandit (spec 13.3, 4.2 and the group-invariant fix of 17 L29)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_env_bandit import TEST_PAIRS, TRAIN_PAIRS, BanditConfig, BanditEnv

SPEC_TRAIN = [
    ("Teacher", "Trader"), ("Nurse", "StartupFounder"), ("Librarian", "Investor"),
    ("Accountant", "StockBroker"), ("Engineer", "RealEstateAgent"), ("Pharmacist", "Musician"),
    ("Clerk", "Freelancer"), ("Technician", "Youtuber"), ("Planner", "Artist"),
    ("Postman", "Pilot"), ("Banker", "VentureCapitalist"), ("Gardener", "Cryptominer"),
]
SPEC_TEST = [
    ("Receptionist", "Explorer"), ("Archivist", "Filmmaker"), ("Bookkeeper", "Consultant"),
    ("SocialWorker", "Photographer"), ("Mechanic", "GameDesigner"), ("Secretary", "Entrepreneur"),
    ("Cashier", "DataScientist"), ("CivilServant", "StartupAccelerator"),
]


def test_pair_lists_match_the_spec_exactly():
    assert list(TRAIN_PAIRS) == SPEC_TRAIN
    assert list(TEST_PAIRS) == SPEC_TEST


def test_config_defaults_match_the_spec():
    cfg = BanditConfig()
    assert (cfg.lo_arm_score, cfg.hi_arm_loscore, cfg.hi_arm_hiscore, cfg.hi_arm_hiscore_prob) == (
        0.1, 0.0, 1.0, 0.25,
    )
    assert cfg.split == "train"
    assert (cfg.max_actions_per_episode, cfg.max_actions_per_turn, cfg.max_turns, cfg.max_tokens) == (
        1, 1, 1, 100,
    )
    with pytest.raises(ValueError):
        BanditConfig(hi_arm_hiscore_prob=1.5)
    with pytest.raises(ValueError):
        BanditConfig(splt="test")


@pytest.mark.parametrize("seed", range(60))
def test_every_member_of_a_group_sees_the_same_prompt(seed):
    """The headline fix: the reference added a per-instance counter to the seed (17 L29)."""
    envs = [BanditEnv() for _ in range(8)]
    prompts = {env.reset(seed, member=m) for m, env in enumerate(envs)}
    names = {tuple(env.action_names) for env in envs}
    assert len(prompts) == 1 and len(names) == 1


def test_prompt_names_both_arms_in_action_order_and_the_answer_format():
    env = BanditEnv()
    obs = env.reset(3)
    first, second = env.action_names
    assert {first, second} == {env.low_arm, env.high_arm}
    assert (env.low_arm, env.high_arm) in SPEC_TRAIN
    assert obs.index(first) < obs.index(second)
    assert f"<answer> {first} </answer>" in obs and f"<answer> {second} </answer>" in obs
    assert env.render() == obs


def test_seeds_cover_every_pair_and_both_orders():
    env = BanditEnv()
    seen_pairs, orders = set(), set()
    for seed in range(400):
        env.reset(seed)
        seen_pairs.add((env.low_arm, env.high_arm))
        orders.add(env.action_names[0] == env.low_arm)
    assert seen_pairs == set(SPEC_TRAIN)
    assert orders == {True, False}


def test_action_names_change_between_resets():
    env = BanditEnv()
    assert env.action_names is None
    seen = set()
    for seed in range(20):
        env.reset(seed)
        seen.add(tuple(env.action_names))
    assert len(seen) > 5


def test_test_split_and_by_mode_split():
    test_env = BanditEnv(BanditConfig(split="test"))
    for seed in range(50):
        test_env.reset(seed)
        assert (test_env.low_arm, test_env.high_arm) in SPEC_TEST
    env = BanditEnv(BanditConfig(split="by-mode"))
    env.reset(5, mode="train")
    assert (env.low_arm, env.high_arm) in SPEC_TRAIN
    env.reset(5, mode="val")
    assert (env.low_arm, env.high_arm) in SPEC_TEST


def test_low_arm_pays_exactly_lo_arm_score():
    env = BanditEnv()
    for seed in range(30):
        env.reset(seed, member=seed % 4)
        obs, reward, done, info = env.step(env.low_arm)
        assert reward == pytest.approx(0.1)
        assert done is True
        assert obs == f"{env.low_arm}: 0.1 points"
        assert info["success"] is False and info["chose_high_arm"] is False
        assert info["action_is_valid"] is True and info["action_is_effective"] is True
        assert info["expected_reward"] == pytest.approx(0.1)


def test_high_arm_payout_frequency_is_about_one_quarter():
    """4,000 seeded pulls; the hit rate is a fixed number for these seeds, checked against 0.25."""
    env = BanditEnv()
    rewards = []
    for seed in range(1000):
        for member in range(4):
            env.reset(seed, member=member)
            obs, reward, done, info = env.step(env.high_arm)
            assert reward in (0.0, 1.0) and done is True
            assert obs == f"{env.high_arm}: {reward} points"
            assert info["success"] is True and info["chose_high_arm"] is True
            rewards.append(reward)
    rate = sum(rewards) / len(rewards)
    # binomial sd = sqrt(.25*.75/4000) ~ 0.0068; 0.03 is > 4 sd
    assert abs(rate - 0.25) < 0.03


def test_members_of_one_group_can_be_paid_differently_but_each_is_reproducible():
    seed = 11
    payouts = []
    for member in range(32):
        env = BanditEnv()
        env.reset(seed, member=member)
        payouts.append(env.step(env.high_arm).reward)
        again = BanditEnv()
        again.reset(seed, member=member)
        assert again.step(again.high_arm).reward == payouts[-1]
    assert set(payouts) == {0.0, 1.0}


def test_custom_scores_are_used():
    env = BanditEnv(BanditConfig(lo_arm_score=0.15, hi_arm_hiscore=2.0, hi_arm_loscore=-1.0, hi_arm_hiscore_prob=1.0))
    env.reset(0)
    assert env.step(env.high_arm).reward == 2.0
    env.reset(0)
    assert env.step(env.low_arm).reward == pytest.approx(0.15)
    assert env.expected_rewards == {env.low_arm: 0.15, env.high_arm: 2.0}


def test_expected_values_and_best_arm():
    env = BanditEnv()
    env.reset(1)
    ev = env.expected_rewards
    assert ev[env.low_arm] == pytest.approx(0.1) and ev[env.high_arm] == pytest.approx(0.25)
    assert env.best_arm == env.high_arm
    flipped = BanditEnv(BanditConfig(lo_arm_score=0.5))
    flipped.reset(1)
    assert flipped.best_arm == flipped.low_arm
    info = flipped.step(flipped.low_arm).info
    assert info["chose_best_arm"] is True and info["success"] is False


@pytest.mark.parametrize("spelling", ["{}", "{upper}", "  {lower}  ", "{spaced}"])
def test_arm_names_match_case_and_space_insensitively(spelling):
    env = BanditEnv()
    env.reset(2)  # any seed; normalise the high arm name several ways
    name = env.high_arm
    spaced = "".join(" " + ch if ch.isupper() else ch for ch in name).strip()
    action = spelling.format(name, upper=name.upper(), lower=name.lower(), spaced=spaced)
    info = env.step(action).info
    assert info["action_is_valid"] is True and info["chose_high_arm"] is True


@pytest.mark.parametrize("action", ["", "A", "1", "both", "Teacher or Trader", "\x00", "x" * 10_000])
def test_unknown_action_is_invalid_and_ends_the_episode(action):
    env = BanditEnv()
    env.reset(0)
    obs, reward, done, info = env.step(action)
    assert (reward, done) == (0.0, True)
    assert info["action_is_valid"] is False and info["success"] is False
    assert len(obs) < 200
    # the episode is over: further steps pay nothing
    _, reward2, done2, info2 = env.step(env.high_arm)
    assert (reward2, done2, info2["action_is_valid"]) == (0.0, True, False)


def test_step_before_reset_is_an_env_error_as_in_every_other_env():
    """It answered done=True with a "Call reset" observation (Sokoban, FrozenLake, Countdown, ... raise)."""
    from ragen_core.errors import EnvError

    env = BanditEnv()
    with pytest.raises(EnvError, match=r"BanditEnv.step/render called before reset\(seed\)"):
        env.step("Trader")
    with pytest.raises(EnvError, match="before reset"):
        env.render()


def test_oracle_pulls_the_high_arm_and_env_pickles():
    env = BanditEnv()
    assert env.oracle_actions() is None
    env.reset(9, member=2)
    assert env.oracle_actions() == [env.high_arm]
    clone = pickle.loads(pickle.dumps(env))
    result = clone.step(clone.oracle_actions()[0])
    assert result.info["success"] is True
    # the pickled payout generator continues exactly where the original one was
    assert env.step(env.oracle_actions()[0]) == result
    env.close()
    env.close()


def test_spec_presets_select_the_split():
    from ragen_env_bandit.plugin import SPEC

    assert SPEC.name == "bandit"
    assert SPEC.make_config(preset="BanditTest").split == "test"
    assert SPEC.make_config(preset="Bandit").split == "train"
    assert SPEC.load_factory() is BanditEnv


def test_registry_builds_the_presets():
    import ragen_core.registry as registry
    env = registry.make_env("bandit", preset="BanditTest")
    env.reset(0)
    assert (env.low_arm, env.high_arm) in SPEC_TEST


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**40), member=st.integers(0, 64), action=st.text())
def test_any_reply_is_handled(seed, member, action):
    env = BanditEnv()
    env.reset(seed, member=member)
    obs, reward, done, info = env.step(action)
    assert isinstance(obs, str) and done is True
    assert reward in (0.0, 0.1, 1.0)
    def key(text):
        return "".join(ch for ch in text.lower() if ch.isascii() and ch.isalnum())

    assert info["action_is_valid"] is (key(action) in {key(n) for n in env.action_names})
