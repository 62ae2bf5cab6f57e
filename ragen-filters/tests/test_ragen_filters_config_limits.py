"""Filter settings that can never keep a group are refused (or warned about, where the spec defines the result)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ragen_core import registry
from ragen_core.errors import ConfigError, PluginConfigError
from ragen_core.interfaces.rollout_filter import GroupedRollouts
from ragen_core.testing.run_helpers import CHILD_MAIN, TOY_RUN, one_line_error, register_toy_env


@pytest.mark.parametrize(("name", "settings", "key"), [
    ("snr-minp", {"value": 1.5}, "filter.snr-minp.value"),
    ("min-p", {"value": 2, "order": "smallest"}, "filter.snr-minp.value"),
    ("reference", {"strategy": "min-p", "value": 1.01}, "filter.reference.value"),
    ("snr-topp", {"selection_eps": -0.01}, "filter.snr-topp.selection_eps"),
    ("snr-topp-softmax", {"selection_eps": -1}, "filter.snr-topp-softmax.selection_eps"),
    ("reference", {"selection_eps": -0.5}, "filter.reference.selection_eps"),
])
def test_settings_that_keep_nothing_are_refused_naming_the_key(name, settings, key):
    with pytest.raises(PluginConfigError) as info:
        registry.make_config("filter", name, settings)
    assert key in str(info.value).splitlines()[0]


def test_a_topk_fraction_above_one_is_refused_pointing_at_the_count_filter():
    """snr-topk value=4 (a count typed into the fraction filter) used to keep every group silently."""
    with pytest.raises(PluginConfigError) as info:
        registry.make_config("filter", "snr-topk", {"value": 4})
    line = str(info.value).splitlines()[0]
    assert "filter.snr-topk.value: is a fraction of the groups in [0, 1]" in line and "use the filter snr-topk-abs" in line
    assert "Value error" not in line


@pytest.mark.parametrize(("name", "settings"), [
    ("snr-topk", {"value": 1.0}), ("snr-topk", {"value": 0.0}),
    ("snr-minp", {"value": 1.0}), ("snr-minp", {"value": 0.0}), ("snr-topp", {"selection_eps": 0.0}),
    ("reference", {"strategy": "top_k", "value": 1.0}), ("reference", {"strategy": "top_k_abs", "value": 2.0}),
    ("reference", {"strategy": "min_p", "value": 0.5}),
])
def test_the_edges_of_the_valid_ranges_are_accepted(name, settings):
    registry.make_config("filter", name, settings)


def test_ddof_at_least_the_group_size_is_refused_on_the_first_batch():
    batch = GroupedRollouts(group_ids=[0, 0, 1, 1], rewards=[0.0, 1.0, 1.0, 0.5])
    for name in ("snr-topp", "snr-topk", "snr-soft", "none"):
        with pytest.raises(ConfigError) as info:
            registry.make("filter", name, {"ddof": 2}).select(batch)
        message = str(info.value)
        assert "\n" not in message and "filter_config.ddof=2" in message and "group size 2" in message
    assert registry.make("filter", "snr-topp", {"ddof": 1}).select(batch).kept_groups == [0, 1]
    # a spread metric is needed for ddof to matter
    registry.make("filter", "snr-topp", {"ddof": 5, "metric": "reward"}).select(batch)


def test_groups_of_one_episode_are_refused_by_a_filter_that_drops_zero_spread():
    """rollout.group_size=1 with snr-topp trained nothing: every step said "nothing left to train
    after the filter" and the run exited 0 as if it had finished."""
    for name in ("snr-topp", "snr-minp", "snr-soft", "snr-topp-softmax"):
        with pytest.raises(ConfigError) as info:
            registry.make_config("filter", name, {}).check_group_size(1)
        assert "rollout.group_size=1 gives groups of one episode" in str(info.value).splitlines()[0]
        registry.make_config("filter", name, {}).check_group_size(2)
    # filters that keep zero-spread groups, or score something other than a spread, train on them
    for name, settings in (("none", {}), ("snr-topk", {}), ("snr-topp", {"include_zero": True}), ("snr-topp", {"metric": "reward"})):
        registry.make_config("filter", name, settings).check_group_size(1)
    singles = GroupedRollouts(group_ids=[0, 1], rewards=[0.0, 1.0])
    assert registry.make("filter", "none").select(singles).kept_groups == [0, 1]
    assert registry.make("filter", "snr-topk").select(singles).kept_groups == [0]


def test_ragen_run_with_groups_of_one_under_snr_topp_stops_in_one_line(tmp_path):
    out = _ragen_run(tmp_path, "filter=snr-topp", "rollout.group_size=1")
    assert out.returncode == 2, out.stderr
    assert "rollout.group_size=1 gives groups of one episode" in one_line_error(out.stderr)
    assert "hint: use rollout.group_size=2 or more, or --filter none" in out.stderr
    assert not (tmp_path / "run").exists()  # refused with the config checks, before a model loads


def test_linear_top_p_value_zero_warns_once_and_keeps_nothing(capsys):
    filt = registry.make("filter", "snr-topp", {"value": 0})
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: filter_config.value=0") and "keeps no group" in lines[0]
    assert filt.select(GroupedRollouts(group_ids=[0, 0, 1, 1], rewards=[0.0, 1.0, 1.0, 0.5])).kept_groups == []
    registry.make("filter", "reference", {"value": 0, "include_zero": False})
    assert "keeps no group" in capsys.readouterr().err
    # softmax top-p at 0 keeps the most probable group (spec 9.3): no warning
    soft = registry.make("filter", "snr-topp-softmax", {"value": 0})
    registry.make("filter", "snr-topp", {"value": 0.5})
    assert capsys.readouterr().err == ""
    assert soft.select(GroupedRollouts(group_ids=[0, 0, 1, 1], rewards=[0.0, 1.0, 1.0, 3.0])).kept_groups == [1]


def _ragen_run(tmp_path, *overrides):
    args = ["--env", register_toy_env(), "--run-dir", str(tmp_path / "run"), "--steps", "1", *TOY_RUN, *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-c", CHILD_MAIN, "run", *args], capture_output=True, text=True, env=env, timeout=300)


def test_ragen_run_refuses_min_p_above_one_before_loading_a_model(tmp_path):
    out = _ragen_run(tmp_path, "filter=snr-minp", "filter_config.value=2")
    assert out.returncode == 2, out.stderr
    assert "filter_config.value" in one_line_error(out.stderr)  # the key as typed, not filter.snr-minp.value


def test_ragen_run_refuses_ddof_at_the_group_size_in_one_line(tmp_path):
    out = _ragen_run(tmp_path, "filter=snr-topp", "filter_config.ddof=2")  # TOY_RUN: rollout.group_size=2
    assert out.returncode == 2, out.stderr
    line = one_line_error(out.stderr)
    assert "filter_config.ddof=2" in line and "group size 2" in line


def test_a_topk_count_that_keeps_every_group_is_warned_about():
    """snr-topk-abs with value=4 (its default) and rollout.env_groups=4 (the run default) kept every
    group without a word: the filter then selected nothing out."""
    from ragen_core.testing.run_helpers import toy_run_config
    from ragen_core.trainer.config import run_warnings

    said = [w for w in run_warnings(toy_run_config(None, "filter=snr-topk-abs", "rollout.env_groups=4")) if "snr-topk-abs" in w]
    assert said == ["filter_config.value=4 keeps every one of rollout.env_groups=4 groups, so snr-topk-abs selects nothing out; "
                    "set filter_config.value below 4, or raise rollout.env_groups"]
    dropping = run_warnings(toy_run_config(None, "filter=snr-topk-abs", "filter_config.value=9", "filter_config.include_zero=false",
                                           "rollout.env_groups=4"))
    assert any("groups (but those of zero spread), so snr-topk-abs" in w for w in dropping)
    assert not [w for w in run_warnings(toy_run_config(None, "filter=snr-topk-abs", "rollout.env_groups=8")) if "snr-topk-abs" in w]
    assert registry.make_config("filter", "snr-topp").rollout_warnings(4, 2) == []  # the base class says nothing


@pytest.mark.parametrize("value", [0, -2])
def test_a_topk_abs_count_below_one_is_refused_naming_the_key(value):
    """snr-topk-abs value=0 was accepted and then kept 1 group a step (top-k keeps at least one)."""
    with pytest.raises(PluginConfigError) as info:
        registry.make_config("filter", "snr-topk-abs", {"value": value})
    line = str(info.value).splitlines()[0]
    assert "filter.snr-topk-abs.value: is the number of groups to keep, at least 1" in line
    assert registry.make_config("filter", "top-k-abs", {"value": 1}).value == 1
