"""An env's own info metrics (spec 17 L31): declared per env class with how an episode aggregates
them, carried per action by the pools as plain data, logged as ``<prefix>/<tag>/info/<key>``."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ragen_core.engines.scripted import ScriptedEngine
from ragen_core.errors import EnvError
from ragen_core.interfaces.env import INFO_AGGREGATIONS, Env, EnvConfig, StepResult
from ragen_core.interfaces.env_pool import EnvRef, ResetRequest, StepRequest
from ragen_core.models.tiny import build_byte_tokenizer
from ragen_core.rollout.env_pool import LocalEnvPool
from ragen_core.rollout.process_pool import ProcessEnvPool
from ragen_core.rollout.runner import RolloutConfig, RolloutRunner
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.trainer.metrics import episode_metrics


class ValuesConfig(EnvConfig):
    values: list[Any] = [3.0, None, True, 1.5]
    """What the n-th action's info gives for every declared key; None: the keys are left out."""


class ValuesEnv(Env):
    """``Go`` plays the next of ``values``; the last one ends the episode. One declared key per mode."""

    config_class = ValuesConfig
    config: ValuesConfig
    info_metrics = {f"{mode}_v": mode for mode in INFO_AGGREGATIONS}

    @property
    def action_names(self) -> list[str]:
        return ["Go"]

    def instruction(self) -> str:
        return "Say Go."

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        self.played, self.seed = 0, seed
        return self.render()

    def render(self) -> str:
        return f"played {self.played}"

    def step(self, action: str) -> StepResult:
        value = self.config.values[self.played]
        self.played += 1
        done = self.played >= len(self.config.values)
        info: dict[str, Any] = {"success": done, "action_is_valid": True, "action_is_effective": True}
        if value is not None:
            info.update({key: value for key in self.info_metrics})
        return StepResult(self.render(), 0.0, done, info)


VALUES = f"{__name__}:ValuesEnv"


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer()


def _run(tok, env: EnvRef, pool, script) -> list[Trajectory]:
    config = RolloutConfig(env_groups=1, group_size=1, max_turns=2, max_actions_per_turn=2)
    runner = RolloutRunner(env, ScriptedEngine(script, tok), tok, config, pool=pool)
    try:
        return runner.run()
    finally:
        runner.close()


@pytest.mark.parametrize("where", ["local", "process"])
def test_each_mode_aggregates_the_actions_that_reported_the_key(tok, where):
    """Four actions over two turns; the second reports nothing: it does not count as a 0."""
    env = EnvRef(name="values", factory=VALUES, config={"max_actions_per_turn": 2})
    pool = LocalEnvPool(env) if where == "local" else ProcessEnvPool(env, workers=1)  # across a process: plain data
    (traj,) = _run(tok, env, pool, ["a</think><answer>Go || Go</answer>"])
    keys = [f"{mode}_v" for mode in INFO_AGGREGATIONS]
    assert [turn.info_records for turn in traj.turns] == [[dict.fromkeys(keys, 3.0), {}], [dict.fromkeys(keys, 1.0), dict.fromkeys(keys, 1.5)]]
    reported = [3.0, 1.0, 1.5]  # True is 1.0; the missing value is not 0
    want = {"mean_v": sum(reported) / 3, "sum_v": sum(reported), "last_v": 1.5, "max_v": 3.0, "min_v": 1.0}
    assert traj.info_metrics == pytest.approx(want)
    metrics = episode_metrics([traj], "val-env")
    assert {k: v for k, v in metrics.items() if "/info/" in k} == pytest.approx({f"val-env/values/info/{k}": v for k, v in want.items()})
    assert "last_v" not in traj.turns[0].info and traj.turns[1].info["last_v"] == 1.5  # a turn's info is still its last action's


def test_the_episode_mean_is_over_the_episodes_that_reported_the_key():
    def traj(env_id: int, info_metrics: dict[str, float]) -> Trajectory:
        return Trajectory(env="e", tag="E", group_id=env_id, member=0, seed=env_id, env_id=env_id,
                          turns=[Turn([1], [2], "x")], info_metrics=info_metrics)

    metrics = episode_metrics([traj(0, {"score": 0.5, "hits": 2.0}), traj(1, {"score": 1.0}), traj(2, {})], "train")
    assert metrics["train/E/info/score"] == 0.75 and metrics["train/E/info/hits"] == 2.0  # not 0.5 and 2/3
    quiet = episode_metrics([traj(0, {}), traj(1, {})], "train")
    assert not [k for k in quiet if "/info/" in k]  # nothing logged for a key no episode reported


def test_an_episode_whose_actions_never_report_a_key_has_none(tok):
    env = EnvRef(name="values", factory=VALUES, config={"values": [None, None], "max_actions_per_turn": 2})
    (traj,) = _run(tok, env, LocalEnvPool(env), ["a</think><answer>Go || Go</answer>"])
    assert traj.success and traj.turns[0].info_records == [{}, {}] and traj.info_metrics == {}
    assert not [k for k in episode_metrics([traj], "train") if "/info/" in k]


@pytest.mark.parametrize("declared, said", [
    ({"score": "median"}, r"ragen_core.*BadEnv.info_metrics\['score'\] is 'median', not one of mean, sum, last, max, min"),
    ({1: "mean"}, r"BadEnv.info_metrics has key 1 of type int"),
    (["score"], r"BadEnv.info_metrics must be a dict of info key -> aggregation, not list"),
    ({"": "sum"}, r"BadEnv.info_metrics has key '' of type str"),
])
def test_a_bad_declaration_is_refused_where_the_class_is_defined(declared, said):
    with pytest.raises(EnvError, match=said):
        type("BadEnv", (ValuesEnv,), {"info_metrics": declared, "__module__": "ragen_core_test"})


def test_the_registry_and_plugins_check_strict_name_a_bad_declaration(tmp_path, monkeypatch):
    from ragen_core import registry
    from ragen_core.cli.plugins import _check_factory
    from ragen_core.errors import PluginLoadError
    from ragen_core.specs import EnvSpec

    (tmp_path / "ragen_bad_info_env.py").write_text(
        "from ragen_core import Env\n\n\nclass MedianEnv(Env):\n    info_metrics = {'score': 'median'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = EnvSpec(name="bad-info", summary="bad info_metrics", config_model=EnvConfig, factory="ragen_bad_info_env:MedianEnv")
    said = r"ragen_bad_info_env.MedianEnv.info_metrics\['score'\] is 'median', not one of mean, sum, last, max, min"
    with pytest.raises(PluginLoadError, match=said):
        _check_factory(spec, load=True)  # 'ragen plugins check --strict'
    registry.register(spec)
    try:
        with pytest.raises(PluginLoadError, match=said):
            registry.make_env("bad-info")
    finally:
        registry.unregister("env", "bad-info")


def test_a_declaration_made_bad_after_the_class_is_refused_at_reset(monkeypatch):
    monkeypatch.setattr(ValuesEnv, "info_metrics", {"score": "avg"})
    env = EnvRef(name="values", factory=VALUES)
    with LocalEnvPool(env) as pool, pytest.raises(EnvError, match=r"ValuesEnv.info_metrics\['score'\] is 'avg'"):
        pool.reset([ResetRequest(0, 1)])


@pytest.mark.parametrize("value, shown", [("high", "'high' of type str"), (math.nan, "nan of type float"), (None, None),
                                          (10**400, "of type int")])
def test_a_declared_key_whose_value_is_no_number_is_refused(value, shown):
    class OddEnv(ValuesEnv):
        def step(self, action: str) -> StepResult:
            result = super().step(action)
            result.info["max_v"] = value  # a key present with None is no number either
            return result

    env = EnvRef(name="odd")
    with LocalEnvPool(env, env_factory=OddEnv) as pool:
        pool.reset([ResetRequest(0, 4)])
        with pytest.raises(EnvError) as caught:
            pool.step([StepRequest(0, ("Go",))])
    message = caught.value.message
    assert message.startswith("env 'odd' (seed 4, member 0) returned info['max_v'] = ")
    assert (shown or "None of type NoneType") in message and "for action 'Go'" in message and "info_metrics" in message


def test_a_shipped_env_logs_its_declared_metrics(tok):
    """Bandit: the chosen arm's expected payout and whether it was the best arm reach the metrics."""
    pytest.importorskip("ragen_env_bandit")
    env = EnvRef(name="bandit")
    pool = LocalEnvPool(env)

    def pull_best(call: int, row: int, prompt: list[int]) -> str:  # one turn: row r is episode r
        return f"a</think><answer>{pool.instance(row).best_arm}</answer>"

    runner = RolloutRunner(env, ScriptedEngine(pull_best, tok), tok, RolloutConfig(env_groups=3, group_size=1), pool=pool)
    try:
        trajs = runner.run()
        expected = [pool.instance(t.env_id).expected_rewards[t.turns[0].actions[0]] for t in trajs]
    finally:
        runner.close()
    metrics = episode_metrics(trajs, "train")
    assert metrics["train/bandit/info/chose_best_arm"] == 1.0
    assert metrics["train/bandit/info/expected_reward"] == pytest.approx(sum(expected) / 3)


def test_facts_take_a_pools_dict_of_declarations_and_refuse_a_bad_mode_in_one_line():
    """A pool that builds its facts from an env's own ``info_metrics`` dict: {'f1': 'last'} was read
    as the pair ('f', '1') (no metric ever logged, without a word) and {'score': 'last'} as a bare
    unpacking error."""
    from ragen_core.interfaces.env_pool import EnvFacts

    base = dict(action_names=None, action_sep="||", max_actions_per_episode=3, max_actions_per_turn=2, max_turns=2, max_tokens=10)
    assert EnvFacts(**base, info_metrics={"f1": "last", "score": "mean"}).info_metrics == (("f1", "last"), ("score", "mean"))
    assert EnvFacts(**base, info_metrics=[["f1", "max"]]).info_metrics == (("f1", "max"),)  # as JSON brings it back
    assert EnvFacts(**base, info_metrics=iter([("f1", "min")])).info_metrics == (("f1", "min"),)
    for bad in ({"f1": "median"}, "f1", [("f1",)], [(1, "mean")]):
        with pytest.raises(ValueError) as caught:
            EnvFacts(**base, info_metrics=bad)
        said = str(caught.value)
        assert "\n" not in said and said.startswith("EnvFacts.info_metrics takes (key, mode) pairs or a dict of info key -> mode"), said
        assert "mean, sum, last, max, min" in said


class MisspeltEnv(ValuesEnv):
    """Declares 'hit' but its info says 'hits': the key was never logged, and nothing said so."""

    info_metrics = {"mean_v": "mean", "hit": "sum"}

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        result.info["hits"] = result.info.pop("hit", 0)
        return result


def test_the_env_kit_refuses_a_declared_info_metric_no_step_reports():
    from ragen_core import registry
    from ragen_core.specs import EnvSpec
    from ragen_core.testing.env_checks import ENV_CHECKS, check_info_metrics

    assert ENV_CHECKS["info-metrics"] is check_info_metrics  # run by check_env and parametrize_env_checks
    for name, factory in (("misspelt-info", f"{__name__}:MisspeltEnv"), ("values-info", VALUES)):
        registry.register(EnvSpec(name=name, summary="declared info metrics", config_model=ValuesConfig, factory=factory))
    try:
        with pytest.raises(AssertionError, match=r"^env 'misspelt-info': info_metrics declares 'hit', in the info of no step of "
                                                 r"the oracle, sample actions or an invalid reply .*'hits'"):
            check_info_metrics("misspelt-info")
        check_info_metrics("values-info")  # its keys are in some steps' info, not every step's
    finally:
        registry.unregister("env", "misspelt-info")
        registry.unregister("env", "values-info")
