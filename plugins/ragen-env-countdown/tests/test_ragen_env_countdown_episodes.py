"""Scripted Countdown episodes with hand-computed rewards, data files, oracle and fuzzing."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ragen_env_countdown import problems as problems_mod
from ragen_env_countdown.arith import (
    evaluate,
    plus_minus_solvable,
    uses_numbers_exactly,
)
from ragen_env_countdown.env import CountdownEnv

from ragen_core import registry
from ragen_core.errors import ConfigError
from ragen_core.seeding import make_rng

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "countdown-sample"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared Countdown sample data not available")


@pytest.fixture()
def task_file(tmp_path):
    """Training rows; a validation file beside it (``file_env``) keeps all three for training."""
    rows = [{"target": 22, "nums": [3, 5, 7]}, {"target": 6, "nums": [3, 3, 6]}, {"target": 13, "nums": [2, 3, 5]}]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    (tmp_path / "val.jsonl").write_text(json.dumps({"target": 24, "nums": [4, 6, 1]}) + "\n", encoding="utf-8")
    return str(path)


def file_env(task_file, **config):
    """The env on ``task_file``'s rows, validating on its neighbour ``val.jsonl`` (without one it
    would hold a row out of training)."""
    return CountdownEnv(data_path=task_file, val_data_path=str(Path(task_file).with_name("val.jsonl")), **config)


def answer(task_file, seed, text, **config):
    env = file_env(task_file, **config)
    env.reset(seed)
    return env.step(text)


def test_reset_observation_uses_the_reference_wording(task_file):
    env = file_env(task_file)
    assert env.reset(0) == "Target: 22, nums: [3, 5, 7]"
    assert env.reset(4) == "Target: 6, nums: [3, 3, 6]"  # index = seed mod #rows


@pytest.mark.parametrize(
    ("seed", "text", "reward"),
    [
        (0, "3 * 5 + 7", 1.0),
        (0, " (7 + (3 * 5)) ", 1.0),
        (0, "5 * 3 + 7", 1.0),
        (0, "3 + 5 + 7", 0.1),  # right numbers, 15 != 22
        (0, "3 * 5 + 8", 0.0),  # wrong number
        (0, "3 * 5 + 7 + 7", 0.0),  # reused number
        (0, "3 * 5", 0.0),  # missing number
        (0, "3 * 5 + 7 = 22", 0.0),  # extra number
        (0, "", 0.0),
        (0, "🙂", 0.0),
        (0, "3 × 5 + 7", 0.1),  # Unicode operator: evaluation error
        (0, "３ * 5 + 7", 0.1),  # full-width digit counts as 3 but does not evaluate
        (0, "(" * 100_000 + "3 * 5 + 7" + ")" * 100_000, 0.1),  # too deep/long to evaluate
        (0, "(" * 20 + "3 * 5 + 7" + ")" * 20, 1.0),
        (0, "<answer>3 * 5 + 7</answer>", 0.1),  # tags are the rollout layer's job
        (1, "6 / (3 - 3)", 0.1),  # division by zero
        (1, "6 * 3 / 3", 1.0),
        (2, "2**999999", 0.0),  # numbers 2 and 999999 are not [2, 3, 5]
        (2, "2 ** 3 + 5", 0.1),  # exponent rejected even with the right numbers
        (2, "2 * 5 + 3", 1.0),
    ],
    ids=lambda v: (v if len(v) < 30 else f"{v[:12]}...{len(v)}chars") if isinstance(v, str) else None,
)
def test_scores(task_file, seed, text, reward):
    obs, got, done, info = answer(task_file, seed, text)
    assert got == reward and done is True
    assert obs == f"Your answer get {reward:g} points."
    assert info == {"success": reward == 1.0, "action_is_valid": True, "action_is_effective": reward > 0}


def test_observation_text_matches_reference_numbers(task_file):
    assert answer(task_file, 0, "3 * 5 + 7").observation == "Your answer get 1 points."
    assert answer(task_file, 0, "3 + 5 + 7").observation == "Your answer get 0.1 points."
    assert answer(task_file, 0, "nope").observation == "Your answer get 0 points."


def test_scores_are_configurable(task_file):
    assert answer(task_file, 0, "3 * 5 + 7", score=2.0, format_score=0.5)[1:3] == (2.0, True)
    assert answer(task_file, 0, "3 + 5 + 7", score=2.0, format_score=0.5)[1] == 0.5
    result = answer(task_file, 0, "3 * 5 + 7", score=0.1, format_score=0.1)
    assert result.info["success"] is True  # success means "correct", not "reward == 1"


def test_one_answer_per_episode(task_file):
    env = file_env(task_file)
    env.reset(0)
    env.step("3 * 5 + 7")
    obs, reward, done, info = env.step("3 * 5 + 7")
    assert (obs, reward, done) == ("Your answer get 1 points.", 0.0, True)
    assert info == {"success": True, "action_is_valid": False, "action_is_effective": False}
    assert env.oracle_actions() is None
    assert env.action_sep is None and env.config.max_actions_per_episode == 1
    assert env.config.max_turns == 1 and env.config.max_actions_per_turn == 1


def test_generated_instances_are_solvable_with_every_number():
    env = CountdownEnv()
    seen = set()
    for seed in range(300):
        obs = env.reset(seed)
        p = env.problem
        assert obs == f"Target: {p.target}, nums: {list(p.nums)}"
        assert 3 <= len(p.nums) <= 4 and all(1 <= n <= 99 for n in p.nums) and 1 <= p.target <= 100
        assert uses_numbers_exactly(p.solution, list(p.nums)) and evaluate(p.solution) == p.target
        seen.add(obs)
    assert len(seen) > 290
    assert CountdownEnv().reset(7) == CountdownEnv().reset(7, member=5)
    assert CountdownEnv().reset(7, mode="val") != CountdownEnv().reset(7)  # splits do not overlap by seed


def test_plus_minus_only_instances():
    env = CountdownEnv(plus_minus_only=True)
    for seed in range(100):
        env.reset(seed)
        p = env.problem
        assert plus_minus_solvable(list(p.nums), p.target)
        assert not set(p.solution) & set("*/")
    assert "+ and -" in env.instruction()


def test_generator_gives_up_on_impossible_ranges():
    with pytest.raises(ValueError):
        problems_mod.generate(make_rng(0), min_numbers=2, max_numbers=2, max_number=3, min_target=50, max_target=60)


def test_random_action_is_well_formed():
    env = CountdownEnv()
    rng = make_rng(1, "random-action")
    for seed in range(50):
        env.reset(seed)
        assert env.step(env.random_action(rng)).reward >= 0.1


def _solve_through_text(env, seed, mode="train"):
    env.reset(seed, mode=mode)
    (expr,) = env.oracle_actions()
    reply = f"<think>search</think><answer>{expr}</answer>"
    action = re.search(r"<answer>(.*?)</answer>", reply, re.DOTALL).group(1).strip()
    _, reward, done, info = env.step(action)
    return done and reward == 1.0 and info["success"]


@pytest.mark.parametrize(
    "config",
    [{}, {"plus_minus_only": True}, {"min_numbers": 4, "max_numbers": 4}, {"max_number": 9, "max_target": 50}],
)
def test_oracle_solves_200_instances(config):
    env = registry.make("env", "countdown", preset="Countdown", **config)
    assert sum(_solve_through_text(env, s) for s in range(200)) == 200
    assert sum(_solve_through_text(env, s, "val") for s in range(20)) == 20


# ------------------------------------------------------------------ public task files
@needs_data
def test_parquet_and_jsonl_layouts_load_the_same_rows():
    pytest.importorskip("pyarrow")
    parquet = problems_mod.load_problems(DATA / "countdown_tinyzero_train_200.parquet")
    tasks = problems_mod.load_problems(DATA / "countdown_tasks_3to4_200.jsonl")
    tinyzero = problems_mod.load_problems(DATA / "countdown_tinyzero_train_200.jsonl", max_instances=50)
    assert len(parquet) == len(tasks) == 200 and len(tinyzero) == 50
    assert parquet == tasks and tinyzero == tasks[:50]
    train = problems_mod.task_splits(str(DATA / "countdown_tinyzero_train_200.parquet"), None).train
    env = CountdownEnv(data_path=str(DATA / "countdown_tinyzero_train_200.parquet"))
    assert env.reset(0) == f"Target: {train[0].target}, nums: {list(train[0].nums)}"
    assert env.reset(len(train)) == env.reset(0)  # row = seed mod #training rows


@needs_data
def test_plus_minus_filter_on_real_rows():
    rows = [json.loads(line) for line in (DATA / "countdown_tasks_3to4_200.jsonl").read_text().splitlines()]
    expected = [r for r in rows if plus_minus_solvable(r["nums"], r["target"])]
    kept = problems_mod.load_problems(DATA / "countdown_tasks_3to4_200.jsonl", plus_minus_only=True)
    assert [(p.target, list(p.nums)) for p in kept] == [(r["target"], r["nums"]) for r in expected]
    assert 0 < len(kept) < 200


@needs_data
def test_oracle_solves_every_real_row():
    env = CountdownEnv(data_path=str(DATA / "countdown_tasks_3to4_200.jsonl"))
    assert sum(_solve_through_text(env, s) for s in range(200)) == 200
    pm = CountdownEnv(data_path=str(DATA / "countdown_tasks_3to4_200.jsonl"), plus_minus_only=True)
    pm.reset(3)
    assert not set(pm.oracle_actions()[0]) & set("*/")


@needs_data
def test_missing_pyarrow_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match="pip install pyarrow"):
        problems_mod._read_rows(DATA / "countdown_tinyzero_train_200.parquet", 10)


def test_one_task_file_holds_problems_out_for_validation(tmp_path):
    """Validation read the training file itself (spec 17 L28): it scored problems the run trained on."""
    path = str(tmp_path / "tasks.jsonl")
    generated = [problems_mod.generate(make_rng(i, "file")) for i in range(200)]
    Path(path).write_text("".join(json.dumps({"target": p.target, "nums": list(p.nums)}) + "\n" for p in generated), encoding="utf-8")
    rows = problems_mod.load_problems(path)
    splits = problems_mod.task_splits(path, None)
    train_keys = {problems_mod.problem_key(p) for p in splits.train}
    val_keys = {problems_mod.problem_key(p) for p in splits.val}
    assert not train_keys & val_keys and train_keys | val_keys == {problems_mod.problem_key(p) for p in rows}
    assert 0.01 < len(splits.val) / len(rows) < 0.15  # about val_fraction (5 %)
    env = CountdownEnv(data_path=path)
    seen = {"train": set(), "val": set()}
    for mode in seen:
        for seed in range(123, 123 + 64):
            env.reset(seed, mode=mode)
            seen[mode].add(problems_mod.problem_key(env.problem))
    assert seen["val"] == val_keys and seen["train"] <= train_keys
    wider = problems_mod.task_splits(path, None, val_fraction=0.5)
    assert len(rows) * 0.35 < len(wider.val) < len(rows) * 0.65


def test_a_validation_file_is_dropped_from_training(tmp_path, task_file):
    both = tmp_path / "both.jsonl"
    both.write_text(json.dumps({"target": 6, "nums": [6, 3, 3]}) + "\n", encoding="utf-8")  # row 2, numbers reordered
    env = CountdownEnv(data_path=task_file, val_data_path=str(both))
    assert {env.reset(seed) for seed in range(4)} == {"Target: 22, nums: [3, 5, 7]", "Target: 13, nums: [2, 3, 5]"}
    assert env.reset(123, mode="val") == "Target: 6, nums: [6, 3, 3]"
    with pytest.raises(ConfigError, match="every one is also in env_config.val_data_path"):
        CountdownEnv(data_path=task_file, val_data_path=task_file).reset(0)


def test_bad_task_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        problems_mod.load_problems(tmp_path / "nope.jsonl")
    csv = tmp_path / "tasks.csv"
    csv.write_text("target,nums\n1,2\n")
    with pytest.raises(ValueError, match="parquet or .jsonl"):
        problems_mod.load_problems(csv)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"target": 5, "nums": "12"}\n')
    with pytest.raises(ValueError, match="broken.jsonl:1"):
        problems_mod.load_problems(broken)


# ------------------------------------------------------------------ fuzzing
_REPLIES = st.one_of(
    st.text(max_size=300),
    st.text(alphabet="0123456789+-*/() ", max_size=80),
    st.builds(lambda s, n: s * n, st.sampled_from(["(", ")", "<answer>", "9", "2**", "é", "1/0"]), st.integers(0, 20_000)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**40), reply=_REPLIES)
@example(seed=0, reply="x" * 1_000_000)
@example(seed=0, reply="9" * 1_000_000)
@example(seed=0, reply="<answer>" * 100_000 + "</answer")
def test_any_reply_is_safe(seed, reply):
    env = CountdownEnv()
    env.reset(seed)
    obs, reward, done, info = env.step(reply)
    assert isinstance(obs, str) and done is True and math.isfinite(reward)
    assert reward in (0.0, 0.1, 1.0)
    assert info["success"] is (reward == 1.0)
