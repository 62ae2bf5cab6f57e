"""The conformance kit a plugin author runs (``ragen_core.testing``) says what is wrong in the
run's words, and blames nothing that is fine (helper-57's walk as a third-party author)."""

from __future__ import annotations

import importlib
import math
import os
import re
import sys

import pytest

from ragen_core import registry
from ragen_core.interfaces.rollout_filter import FilterResult, GroupedRollouts, RolloutFilter
from ragen_core.testing import check_filter, check_spec_is_light, fake_entry_points
from ragen_core.testing.env_checks import check_picklable
from ragen_core.testing.toy_env import CorridorEnv
from ragen_core.trainer.selection import dropped_metric

CHATTY = '''
print("hello from the plugin: not a module name")
from ragen_core import EnvSpec
SPEC = EnvSpec(name="chatty", summary="prints when imported", factory="ragen_core.testing.toy_env:CorridorEnv")
'''


def test_the_light_import_check_ignores_what_a_spec_module_prints(tmp_path, monkeypatch):
    """A spec module that printed a line failed with "loading the spec imported hello from the plugin"."""
    fake_entry_points(tmp_path, "fake-chatty", {"ragen_core.envs": {"chatty": "fakeplug_chatty:SPEC"}},
                      modules={"fakeplug_chatty.py": CHATTY}, add_to_path=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    # the check's fresh interpreter finds the dist too (and keeps any PYTHONPATH this one was given)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setattr(registry, "_default", None)  # a registry that sees it
    importlib.invalidate_caches()
    try:
        check_spec_is_light("env", "chatty")
    finally:
        sys.modules.pop("fakeplug_chatty", None)


class _Scripted(RolloutFilter):
    def __init__(self, answer):
        self.answer = answer

    def select(self, groups: GroupedRollouts):
        return self.answer(sorted(set(groups.group_ids)))


@pytest.mark.parametrize("answer,message", [
    (lambda ids: list(ids), r"select returned a list, not a FilterResult"),  # was a bare AssertionError
    (lambda ids: FilterResult(kept_groups=[*ids, 999] if ids else []), r"select kept group ids \[999\] that are not in the batch"),
    (lambda ids: FilterResult(kept_groups=ids[:1] * 2), r"select kept group ids \[\d+\] more than once"),
    (lambda ids: FilterResult(kept_groups=ids, group_weights={g: math.nan for g in ids}), r"the loss weight nan"),
    (lambda ids: FilterResult(kept_groups=[], dropped={g: f"std {g}" for g in ids}), r"drop reasons carry numbers \(\['std \d+'"),
])
def test_check_filter_refuses_what_a_run_refuses_in_its_words(answer, message):
    with pytest.raises(AssertionError, match=message):
        check_filter(_Scripted(answer))


def test_a_reason_with_numbers_counts_under_one_metric():
    """Reasons "std 0", "std 1" made one metric per group (rollout/dropped/std_0, ...)."""
    assert dropped_metric("std 0.41") == dropped_metric("std 3") == "rollout/dropped/std"
    assert dropped_metric("below top-p mass") == "rollout/dropped/below_top_p_mass"


class _NanReward(CorridorEnv):
    def step(self, action):
        obs, _, done, info = super().step(action)
        return obs, math.nan, done, info


def test_the_pickle_check_names_a_nan_reward_not_a_difference(monkeypatch):
    """A NaN reward was also reported as "unpickled env steps differently" (NaN != NaN)."""
    from ragen_core.testing import env_checks

    monkeypatch.setattr(env_checks, "_make", lambda name, preset: _NanReward(length=4))
    with pytest.raises(AssertionError, match=r"non-finite reward nan"):
        check_picklable("nan-corridor")


def test_an_env_spec_without_a_config_model_takes_the_env_settings():
    """EnvSpec(name, factory) took the bare PluginConfig: no max_turns, and 'ragen plugins show'
    printed an empty table; a config model that is not an EnvConfig was accepted too."""
    from ragen_core import EnvConfig, EnvSpec, PluginConfig
    from ragen_core.errors import ConfigError

    spec = EnvSpec(name="plain", factory="ragen_core.testing.toy_env:CorridorEnv")
    assert spec.config_model is EnvConfig and spec.make_config({"max_turns": 2}).max_turns == 2

    class NotAnEnvConfig(PluginConfig):
        size: int = 3

    with pytest.raises(ConfigError, match=r"^EnvSpec: invalid config: config_model: an env's config_model must subclass "
                                          r"ragen_core\.interfaces\.env\.EnvConfig"):
        EnvSpec(name="plain", factory="x:y", config_model=NotAnEnvConfig)


SLOW = '''
import time
time.sleep(0.3)
from ragen_core import EnvSpec
SPEC = EnvSpec(name="sleepy", summary="slow to import", factory="ragen_core.testing.toy_env:CorridorEnv")
'''


def test_plugins_check_remarks_on_a_spec_module_slow_to_import(tmp_path, monkeypatch, capsys):
    """A spec module that slept 8 s when imported was reported plain 'ok'."""
    from ragen_core.cli import plugins as plugins_cli
    from ragen_core.cli.main import main

    fake_entry_points(tmp_path, "fake-sleepy", {"ragen_core.envs": {"sleepy": "fakeplug_sleepy:SPEC"}},
                      modules={"fakeplug_sleepy.py": SLOW}, add_to_path=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_default", None)
    monkeypatch.setattr(plugins_cli, "SLOW_SPEC_S", 0.2)  # the check's threshold, scaled to this test's 0.3 s import
    importlib.invalidate_caches()
    try:
        main(["plugins", "check", "--kind", "env"])
    finally:
        sys.modules.pop("fakeplug_sleepy", None)
    row = next(line for line in capsys.readouterr().out.splitlines() if "sleepy" in line)
    assert " ok " in row and re.search(r"its spec module took \d+\.\d s to import", row), row  # >= 0.3 s: how much more varies
