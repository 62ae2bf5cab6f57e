"""The env through its text interface: observations, action validity, paging, info, the oracle."""

from __future__ import annotations

import pickle

import pytest
from ragen_env_webshop.engine import SEP
from ragen_env_webshop.env import GUIDANCE, WebShopEnv


@pytest.fixture(scope="module")
def env():
    e = WebShopEnv()
    yield e
    e.close()


def first_line(obs: str) -> str:
    return obs.split("\n")[0]


def test_reset_shows_the_goal_guidance_and_the_search_action(env):
    obs = env.reset(3)
    lines = obs.split("\n")
    assert lines[0] == env.goal.instruction + "."
    assert lines[1:10] == [g.format(budget=9) for g in GUIDANCE] and len(GUIDANCE) == 9
    assert lines[1] == "Buy a product within 9 actions."  # the default cap: 9 turns and 9 actions
    assert lines[10] == "Available actions: search[<content>]"
    assert env.reset(3, member=5) == obs and env.reset(4) != obs


def test_oracle_buys_the_goal_for_100_of_100_seeded_goals():
    env = WebShopEnv()
    wins = 0
    for seed in range(100):
        env.reset(seed, mode="train" if seed % 2 else "val")
        actions = env.oracle_actions()
        assert actions is not None and len(actions) <= env.config.max_actions_per_episode
        for i, action in enumerate(actions):
            obs, reward, done, info = env.step(action)
            assert info["action_is_valid"] and info["action_is_effective"], (seed, action)
            assert done == (i == len(actions) - 1)
        wins += info["success"] and reward == 1.0 and info["raw_reward"] == 1.0 and info["success_purchase"]
    assert wins == 100


def test_a_step_shows_the_page_text_and_its_clickables(env):
    env.reset(0)
    obs, reward, done, info = env.step("search[blackout curtains]")
    page = first_line(obs)
    parts = page[:-1].split(SEP)
    assert parts[:4] == ["Instruction:", env.goal.instruction, "Back to Search", parts[3]]
    assert parts[3].startswith("Page 1 (Total results: ") and parts[4] == "Next >"
    asins = parts[5::3]
    assert len(asins) == 10 and all(a.startswith("B0") for a in asins)
    actions = obs.split("\n")[-1]
    assert actions == "Available actions: " + ", ".join(["click[back to search]", "click[next >]", *(f"click[{a.lower()}]" for a in asins)])
    assert (reward, done) == (0.0, False)
    assert info == {"reward": 0.0, "raw_reward": 0.0, "action_is_valid": True, "action_is_effective": True, "action_is_well_formed": True,
                    "success": False, "success_purchase": False, "success_find": False, "end_of_page": False}
    obs, *_ = env.step(f"click[{asins[0].lower()}]")
    item = first_line(obs)[:-1].split(SEP)
    assert item[2:4] == ["Back to Search", "< Prev"]
    assert item[-4:] == ["Description", "Features", "Reviews", "Buy Now"]
    obs, *_ = env.step("click[features]")
    assert first_line(obs)[:-1].split(SEP)[2:4] == ["Back to Search", "< Prev"]
    obs, *_ = env.step("click[< prev]")
    assert first_line(obs)[:-1].split(SEP) == item


INVALID = ["click[buy now]", "click[search]", "click[b0nonexist1]", "search[]", "search[   ]", "look[around]", "buy now",
           "", "click[next >", "search" + "[" + "x" * 600 + "]", "CLICK[unknown thing]"]
#: Which of INVALID still have an action's shape (a click on something this page does not offer)
WELL_FORMED = {"click[buy now]", "click[search]", "click[b0nonexist1]", "CLICK[unknown thing]"}


@pytest.mark.parametrize("action", INVALID, ids=range(len(INVALID)))
def test_invalid_actions_change_nothing(env, action):
    before = env.reset(8)
    obs, reward, done, info = env.step(action)
    assert (obs, reward, done, info["action_is_valid"], info["action_is_effective"]) == (before, 0.0, False, False, False)
    assert info["action_is_well_formed"] == (action in WELL_FORMED)


def test_search_only_from_the_search_page_and_case_is_ignored(env):
    env.reset(1)
    obs, _, _, info = env.step("Search[Blackout CURTAINS]")
    assert info["action_is_valid"]
    again = env.step("search[lamp]")
    assert not again.info["action_is_valid"] and again.observation == obs
    assert again.info["action_is_well_formed"]  # a search, only not offered on a results page
    back = env.step("click[Back to Search]")
    assert back.info["action_is_valid"] and first_line(back.observation).startswith("WebShop [SEP] Instruction:")
    assert back.observation.split("\n")[-1] == "Available actions: search[<content>]"


def test_paging_to_the_end_removes_next(env):
    env.reset(2)
    obs, *_ = env.step("search[blackout curtains]")
    total = int(first_line(obs).split("Total results: ")[1].split(")")[0])
    assert 10 < total <= 50
    pages = -(-total // 10)
    for page in range(2, pages + 2):
        obs, _, _, info = env.step("click[next >]")
        assert info["action_is_valid"] and f"Page {page} (Total results: {total})" in obs
    assert info["end_of_page"] and "click[next >]" not in obs.split("\n")[-1]
    assert obs.split("\n")[-1] == "Available actions: click[back to search], click[< prev]"
    stuck = env.step("click[next >]")
    assert not stuck.info["action_is_valid"] and stuck.info["end_of_page"]
    obs, _, _, info = env.step("click[< prev]")
    assert info["action_is_valid"] and not info["end_of_page"] and f"Page {pages} (Total" in obs


def test_wrong_purchase_ends_with_zero_reward_and_partial_raw_score(env):
    env.reset(6)
    goal = env.goal
    env.step(f"search[{goal.instruction}]")
    other = next(a for a in env.available_actions() if a.startswith("click[b0") and a != f"click[{goal.asin.lower()}]")
    env.step(other)
    obs, reward, done, info = env.step("click[buy now]")
    assert done and reward == 0.0 and 0.0 <= info["raw_reward"] < 1.0
    assert info["success_purchase"] and not info["success"] and not info["success_find"]
    assert first_line(obs).startswith("Thank you for shopping with us!")
    after = env.step("click[back to search]")
    assert after.done and not after.info["action_is_valid"] and after.reward == 0.0


def test_score_reward_pays_1_and_succeeds_for_the_goal_product():
    env = WebShopEnv(purchase_reward="score")
    env.reset(3)
    results = [env.step(action) for action in env.oracle_actions()]
    rewards, result = [r.reward for r in results], results[-1]
    assert rewards[-1] == 1.0 and set(rewards[:-1]) == {0.0}  # only the purchase is paid
    assert result.done and result.info["raw_reward"] == 1.0 and result.info["success"]


def test_an_unknown_purchase_reward_is_refused_naming_the_choices():
    from ragen_core.errors import PluginConfigError

    with pytest.raises(PluginConfigError, match="purchase_reward: Input should be 'binary' or 'score'"):
        WebShopEnv(purchase_reward="f1")


def test_selected_options_are_shown_and_the_last_pick_wins(env):
    env.reset(4)
    goal = env.goal
    for action in env.oracle_actions()[:-1 - len(goal.options)]:
        env.step(action)
    name, value = next(iter(goal.options.items()))
    obs, *_ = env.step(f"click[{value}]")
    assert f"Selected: {name}: {value}" in obs


def test_pickled_env_continues_the_episode(env):
    env.reset(9)
    env.step("search[green tea]")
    clone = pickle.loads(pickle.dumps(env))
    assert clone.render() == env.render()
    action = env.available_actions()[-1]
    assert clone.step(action) == env.step(action)


def test_a_person_can_shop_in_the_terminal():
    """``ragen env play webshop``: typed replies (bare or in <answer> tags) reach the shop."""
    import io

    from ragen_core.cli.env import play
    from ragen_core.seeding import make_rng

    env = WebShopEnv()
    env.reset(21)
    typed = [f"<answer>{a}</answer>" if i % 2 else a for i, a in enumerate(env.oracle_actions())]
    out = io.StringIO()
    result = play(env, seed=21, agent="human", out=out, inp=io.StringIO("\n".join(typed) + "\n"), rng=make_rng(0))
    # the perfect purchase's score is its declared info metric
    assert result == {"reward": 1.0, "success": True, "actions": len(typed), "info_metrics": {"raw_reward": 1.0}}
    assert "Thank you for shopping with us!" in out.getvalue()
    random_run = play(env, seed=21, agent="random", out=io.StringIO(), inp=io.StringIO(), rng=make_rng(1))
    assert 1 <= random_run["actions"] <= env.config.max_actions_per_episode


def test_the_guidance_states_the_budget_of_the_preset():
    from ragen_core import registry

    full = registry.make_env("webshop", preset="WebShopFull")
    try:
        assert "Buy a product within 15 actions." in full.reset(0).split("\n")
    finally:
        full.close()
