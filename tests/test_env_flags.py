"""``done`` and ``info["success"]`` are booleans: a run refuses others in one line (the string
"no" used to count as a success), and the env conformance kit checks them on the oracle's
winning step too (a NaN reward or a missing success there passed every check)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragen_core.errors import EnvError
from ragen_core.interfaces.env import StepResult
from ragen_core.rollout.env_pool import run_actions
from ragen_core.testing import env_checks
from ragen_core.testing.toy_env import CorridorConfig, CorridorEnv, register_toy_env


def _env() -> CorridorEnv:
    env = CorridorEnv(CorridorConfig(length=3))
    env.reset(0)
    return env


def _patched_step(monkeypatch, change):
    """CorridorEnv.step with ``change(result) -> result`` applied to what it returns."""
    real = CorridorEnv.step
    monkeypatch.setattr(CorridorEnv, "step", lambda self, action: change(real(self, action)))


@pytest.mark.parametrize(("field", "value"), [("success", "no"), ("success", 1), ("done", "False")])
def test_a_flag_that_is_not_a_bool_is_refused_in_one_line(monkeypatch, field, value):
    def change(r):
        return StepResult(r[0], r[1], value, r[3]) if field == "done" else StepResult(r[0], r[1], r[2], {**r[3], "success": value})

    _patched_step(monkeypatch, change)
    with pytest.raises(EnvError) as info:
        run_actions(_env(), 0, ["Right"], label="env 'corridor' (seed 0, member 0)")
    name = "done" if field == "done" else "info['success']"
    assert str(info.value).splitlines()[0].startswith(f"env 'corridor' (seed 0, member 0) returned {name} {value!r} of type {type(value).__name__}")


def test_numpy_bools_are_read_as_bools(monkeypatch):
    _patched_step(monkeypatch, lambda r: StepResult(r[0], r[1], np.bool_(r[2]), {**r[3], "success": np.bool_(r[3]["success"])}))
    env = _env()
    outcome = run_actions(env, 0, env.oracle_actions(), label="corridor")
    assert outcome.done is True and outcome.info["success"] is True  # plain bools from here on


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: StepResult(r[0], math.nan if r[2] else r[1], r[2], r[3]), "non-finite reward nan"),
    (lambda r: StepResult(r[0], r[1], r[2], {k: v for k, v in r[3].items() if k != "success"}), "has no info['success']"),
    (lambda r: StepResult(r[0], r[1], r[2], {**r[3], "success": "yes" if r[3]["success"] else "no"}), "info['success'] must be bool, got str"),
])
def test_the_oracle_check_checks_the_winning_step(monkeypatch, change, message):
    name = register_toy_env()
    env_checks.check_oracle(name)  # the corridor as it is passes
    _patched_step(monkeypatch, change)
    with pytest.raises(AssertionError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        env_checks.check_oracle(name)


def test_the_kit_takes_numpy_bools_as_a_run_does_and_refuses_strings():
    """It refused numpy's bool, which a run accepts, saying "done must be bool, got bool"."""
    assert env_checks._assert_step("corridor", ("obs", 0.0, np.bool_(True), {"success": np.bool_(True)}), "Right").done is True
    with pytest.raises(AssertionError, match="info\\['success'\\] must be bool, got str 'no'"):
        env_checks._assert_step("corridor", ("obs", 0.0, True, {"success": "no"}), "Right")


def test_an_exemption_for_a_check_that_does_not_exist_is_refused():
    with pytest.raises(ValueError, match="expected_failures names no env check: determinism"):
        env_checks.parametrize_env_checks([register_toy_env()], expected_failures={"determinism": "flaky"})
    env_checks.parametrize_env_checks([register_toy_env()], expected_failures={"step-determinism": "reviewed"})


def test_one_env_name_given_as_a_string_is_one_env_not_one_per_letter():
    name = register_toy_env()
    mark = env_checks.parametrize_env_checks(name)
    ids = [p.id for p in mark.args[1]]
    assert ids == [f"{name}-{check}" for check in env_checks.ENV_CHECKS], ids[:3]
    assert [p.id for p in env_checks.parametrize_env_checks([name], presets="Long").args[1]][0] == f"{name}[Long]-spec"


def test_an_episode_ended_without_success_is_said_once_per_env_class(monkeypatch, caplog):
    """A missing info['success'] at done turned into train/success 0 without a word."""
    from ragen_core.rollout import env_pool

    monkeypatch.setattr(env_pool, "_SAID_NO_SUCCESS", set())
    _patched_step(monkeypatch, lambda r: StepResult(r[0], r[1], r[2], {k: v for k, v in r[3].items() if k != "success"}))
    with caplog.at_level("WARNING", logger="ragen_core.rollout.env_pool"):
        for seed in (0, 1):
            env = CorridorEnv(CorridorConfig(length=3))
            env.reset(seed)
            assert run_actions(env, 0, env.oracle_actions(), label=f"env 'corridor' (seed {seed}, member 0)").done
    (line,) = [r.getMessage() for r in caplog.records if r.name == "ragen_core.rollout.env_pool"]
    assert line.startswith("env 'corridor' (seed 0, member 0) ended an episode (done=True) with no info['success']")


def test_an_env_error_raised_by_reset_is_not_called_an_env_error_twice(monkeypatch):
    """"failed to reset: EnvError: no answer from ..." (the step path already dropped the repeat)."""
    from ragen_core.interfaces.env_pool import ResetRequest
    from ragen_core.rollout.env_pool import reset_env

    def failing_reset(self, *args, **kwargs):
        raise EnvError("no answer from the shop", ["see the server's log"])

    monkeypatch.setattr(CorridorEnv, "reset", failing_reset)
    with pytest.raises(EnvError) as info:
        reset_env(CorridorEnv(CorridorConfig(length=3)), ResetRequest(0, 5, 0), label="env 'corridor' (seed 5, member 0)")
    assert str(info.value).splitlines()[0] == "env 'corridor' (seed 5, member 0) failed to reset: no answer from the shop"


def test_the_kit_takes_what_a_run_takes_from_step():
    """A list of four and a numpy int reward train fine; the kit failed them (helper-63's walk)."""
    from types import MappingProxyType

    kept = env_checks._assert_step("corridor", ["obs", np.int64(1), False, MappingProxyType({"success": False})], "Right")
    assert kept == StepResult("obs", 1.0, False, {"success": False})
    assert run_actions(_StepReturns(["obs", np.int64(1), False, MappingProxyType({})]), 0, ["Right"], label="e").reward == 1.0
    for wrong in (("obs", 0.0, False), "obs"):  # and what a run refuses, the kit refuses
        with pytest.raises(AssertionError, match="step must return"):
            env_checks._assert_step("corridor", wrong, "Right")
        with pytest.raises(EnvError, match="from step"):
            run_actions(_StepReturns(wrong), 0, ["Right"], label="e")


class _StepReturns:
    def __init__(self, result):
        self.result = result

    def step(self, action):
        return self.result


@pytest.mark.parametrize(("names", "ok"), [(("Left", "Right"), True), (["Left", "Right"], True), (None, True),
                                           ("LeftRight", False), (["Left", ""], False), (["Left", 3], False)])
def test_the_kit_and_a_run_share_one_rule_for_action_names(monkeypatch, names, ok):
    """The kit refused a tuple a run uses; a run read a str as its letters and took an empty name (helper-63's walk)."""
    from ragen_core.interfaces.env_pool import ResetRequest
    from ragen_core.rollout.env_pool import reset_env

    name = register_toy_env()
    monkeypatch.setattr(CorridorEnv, "action_names", property(lambda self: names))
    if ok:
        env_checks.check_instruction(name)
        facts = reset_env(CorridorEnv(CorridorConfig(length=3)), ResetRequest(0, 0), label="corridor").facts
        assert facts.action_names == (tuple(names) if names is not None else None)
        return
    with pytest.raises(AssertionError, match=f"env {name!r}: action_names must be None or a list of non-empty str, not"):
        env_checks.check_instruction(name)
    with pytest.raises(EnvError) as info:
        reset_env(CorridorEnv(CorridorConfig(length=3)), ResetRequest(0, 0), label="corridor")
    assert str(info.value).splitlines()[0].startswith("corridor failed to reset: action_names must be None or a list of non-empty str")
