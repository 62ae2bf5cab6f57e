"""Scripted MetaMathQA episodes: observations, rewards per attempt, checkers, oracle, fuzzing."""

from __future__ import annotations

import math
import pickle

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ragen_env_metamathqa.env import CORRECT, INCORRECT, MetaMathQAEnv
from ragen_env_metamathqa.problems import splits_for

from ragen_core import registry
from ragen_core.errors import EnvError
from ragen_core.seeding import make_rng


def _env_with_label(label_kind: str, **config) -> MetaMathQAEnv:
    """An env reset on a built-in problem whose label is a fraction / radical / integer."""
    env = MetaMathQAEnv(**config)
    for seed in range(500):
        env.reset(seed)
        answer = env.problem.answer
        kinds = {"frac": answer.startswith("\\frac"), "sqrt": "\\sqrt" in answer, "int": answer.lstrip("-").isdigit()}
        if kinds[label_kind]:
            return env
    raise AssertionError(f"no built-in problem with a {label_kind} label")


def test_reset_shows_the_question_and_is_the_same_for_every_member():
    env = MetaMathQAEnv()
    obs = env.reset(3)
    assert obs == env.problem.question == env.render()
    assert obs.endswith("?") or obs.endswith(".")
    assert MetaMathQAEnv().reset(3, member=7) == obs
    seen = {env.reset(s) for s in range(200)}
    assert len(seen) > 100  # uniform over ~227 training questions: 200 draws hit ~137 on average


def test_correct_answer_scores_one_and_ends_the_episode():
    env = MetaMathQAEnv()
    env.reset(0)
    obs, reward, done, info = env.step(env.problem.answer)
    assert (obs, reward, done) == (CORRECT, 1.0, True)
    assert info == {"success": True, "action_is_valid": True, "action_is_effective": True}
    # later steps score nothing and say so
    assert env.step(env.problem.answer)[1:3] == (0.0, True)
    assert env.oracle_actions() is None


def test_wrong_answer_scores_zero_and_leaves_the_episode_open():
    env = _env_with_label("int")
    wrong = str(int(env.problem.answer) + 1)
    obs, reward, done, info = env.step(wrong)
    assert (obs, reward, done) == (INCORRECT, 0.0, False)
    assert info == {"success": False, "action_is_valid": True, "action_is_effective": False}


def test_reward_halves_with_every_attempt():
    env = _env_with_label("int", max_actions_per_episode=4)
    wrong = str(int(env.problem.answer) + 1)
    rewards = [env.step(wrong).reward for _ in range(3)] + [env.step(env.problem.answer).reward]
    assert rewards == [0.0, 0.0, 0.0, 0.125]  # correct on attempt k = 3 earns 1 / 2**3


@pytest.mark.parametrize("empty", ["", "   ", "\n\t"])
def test_empty_answer_is_invalid_and_counts_as_an_attempt(empty):
    env = _env_with_label("int")
    obs, reward, done, info = env.step(empty)
    assert (obs, reward, done, info["action_is_valid"], info["success"]) == (INCORRECT, 0.0, False, False, False)
    assert env.step(env.problem.answer).reward == 0.5


def test_math_checker_is_the_default_and_exact_match_a_preset():
    for kind, rewrite in (("frac", lambda a: a.replace("\\frac", "\\dfrac")), ("sqrt", lambda a: f"\\boxed{{{a}}}")):
        env = _env_with_label(kind)
        exact = registry.make("env", "metamathqa", preset="ExactMatch")
        exact.reset(env.seed)
        assert exact.problem == env.problem
        answer = rewrite(env.problem.answer)
        assert env.step(answer).reward == 1.0
        assert exact.step(answer).reward == 0.0
    assert "exactly" in exact.instruction() and "\\frac{3}{4}" in env.instruction()
    assert registry.make("env", "metamathqa", preset="MetamathQA").config.checker == "math"


def test_preset_follows_the_reference_tag():
    cfg = registry.make_config("env", "metamathqa", preset="MetamathQA")
    assert (cfg.max_actions_per_episode, cfg.max_actions_per_turn, cfg.max_turns, cfg.max_tokens) == (1, 1, 5, 100)
    assert MetaMathQAEnv.action_sep is None


def test_oracle_solves_every_builtin_problem_in_both_modes():
    env, exact = MetaMathQAEnv(), MetaMathQAEnv(checker="exact")
    splits = splits_for(env.config)
    for mode, count in (("train", len(splits.train)), ("val", len(splits.val))):
        for seed in range(3 * count):
            for e in (env, exact):
                e.reset(seed, mode=mode)
                (answer,) = e.oracle_actions()
                assert e.step(answer).info["success"] is True


def test_random_action_is_a_short_guess_and_rarely_right():
    env = MetaMathQAEnv()
    rng = make_rng(0, "random-action")
    right = 0
    for seed in range(200):
        env.reset(seed)
        guess = env.random_action(rng)
        assert isinstance(guess, str) and guess.strip() and len(guess) < 12
        right += env.step(guess).info["success"]
    assert right < 40  # guesses are numbers of the question or 0..100: some land, most do not


def test_pickled_env_continues_the_same_episode():
    env = _env_with_label("int", max_actions_per_episode=2)
    env.step("-999")
    clone = pickle.loads(pickle.dumps(env))
    assert len(pickle.dumps(env)) < 4_000  # the dataset stays in the process cache, not in the env
    assert clone.render() == env.render() == INCORRECT
    assert clone.step(env.problem.answer).reward == env.step(env.problem.answer).reward == 0.5


def test_step_before_reset_names_the_fix():
    with pytest.raises(EnvError, match="before reset"):
        MetaMathQAEnv().step("1")


# ------------------------------------------------------------------ fuzzing
_REPLIES = st.one_of(
    st.text(max_size=300),
    st.text(alphabet="0123456789+-*/^(){}\\fracsqrtboxed.,%$ =", max_size=120),
    st.builds(lambda s, n: s * n, st.sampled_from(["(", "{", "\\boxed{", "9", "^9", "\\frac{", "٣", "The answer is "]),
              st.integers(0, 20_000)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**40), reply=_REPLIES, checker=st.sampled_from(["math", "exact"]))
@example(seed=0, reply="x" * 1_000_000, checker="math")
@example(seed=0, reply="\\boxed{" * 200_000, checker="math")
def test_any_reply_is_scored_never_raised(seed, reply, checker):
    env = MetaMathQAEnv(checker=checker)
    env.reset(seed)
    obs, reward, done, info = env.step(reply)
    assert obs in (CORRECT, INCORRECT) and math.isfinite(reward) and reward in (0.0, 1.0)
    assert done is info["success"] is (reward == 1.0)
    assert info["action_is_valid"] is bool(reply.strip())
