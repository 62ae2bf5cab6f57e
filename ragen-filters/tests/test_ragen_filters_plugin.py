"""Entry points, registry integration, conformance kit, properties and the empty-step streak."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_filters import EmptyStreak, plugin

from ragen_core.interfaces.rollout_filter import FilterResult, GroupedRollouts

NAMES = ["none", "snr-topp", "snr-topp-softmax", "snr-topk", "snr-topk-abs", "snr-minp", "snr-soft", "reference"]
ALIASES = {"top-p": "snr-topp", "top-k": "snr-topk", "top-k-abs": "snr-topk-abs", "min-p": "snr-minp"}


def test_every_name_and_alias_is_installed():
    from ragen_core import registry

    installed = set(registry.names("filter"))
    assert set(NAMES) | set(ALIASES) <= installed
    for alias, name in ALIASES.items():
        assert registry.get_spec("filter", alias).name == name
    # the registry normalises the reference's spelling
    assert registry.get_spec("filter", "top_p").name == "snr-topp"
    assert registry.get_spec("filter", "TOP_K_ABS").name == "snr-topk-abs"


@pytest.mark.parametrize("name", NAMES + list(ALIASES))
def test_conformance_kit(name):
    from ragen_core import registry
    from ragen_core.testing import check_filter

    check_filter(registry.make("filter", name))


@pytest.mark.parametrize("spec", plugin.SPECS, ids=lambda s: s.name)
def test_specs_round_trip(spec):
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert json.loads(spec.model_dump_json())["factory"].startswith("ragen_filters.filters:")
    config = spec.make_config({})
    assert type(config).model_validate_json(config.model_dump_json()) == config
    assert pickle.loads(pickle.dumps(config)) == config


def test_defaults_of_the_named_presets():
    from ragen_core import registry

    topp = registry.make("filter", "snr-topp").config
    assert (topp.value, topp.prob_mode, topp.include_zero, topp.selection_eps) == (0.9, "linear", False, 0.01)
    soft = registry.make("filter", "snr-topp-softmax").config
    assert (soft.value, soft.prob_mode, soft.include_zero) == (0.9, "softmax", False)
    topk = registry.make("filter", "snr-topk").config
    assert (topk.value, topk.include_zero, topk.order) == (0.25, True, "largest")
    ref = registry.make("filter", "reference").config
    assert (ref.strategy, ref.value, ref.include_zero, ref.prob_mode, ref.metric) == (
        "top_p", 1.0, True, "linear", "reward_variance")
    assert ref.empty_stop_steps == 5


def test_loading_specs_imports_nothing_heavy():
    code = (
        "import sys, ragen_filters.plugin\n"
        "bad = [m for m in ('torch', 'transformers', 'vllm', 'ray') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# --- properties over random batches ----------------------------------------------------------

batch_st = st.integers(min_value=0, max_value=24).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(min_value=0, max_value=5), min_size=n, max_size=n),
        st.lists(
            st.one_of(st.sampled_from([0.0, 1.0, 0.1 + 0.2, 0.3]), st.floats(min_value=-10, max_value=11)),
            min_size=n,
            max_size=n,
        ),
    )
)


@settings(max_examples=60, deadline=None)
@given(data=batch_st, name=st.sampled_from(NAMES), value=st.floats(min_value=0.0, max_value=1.2))
def test_property_filters_are_pure_subsets_in_first_appearance_order(data, name, value):
    from ragen_core import registry

    ids, rewards = data
    batch = GroupedRollouts(group_ids=list(ids), rewards=list(rewards), entropies=[1.0] * len(ids))
    before = copy.deepcopy(batch)
    if name in ("snr-minp", "snr-topk"):
        value = min(value, 1.0)  # a min-p cut above 1 is refused (keeps nothing); a top-k fraction above 1 too
    overrides = {} if name in ("none", "snr-soft") else {"value": value if name != "snr-topk-abs" else max(int(value * 4), 1)}
    filt = registry.make("filter", name, overrides)
    first, second = filt.select(batch), filt.select(batch)
    assert batch == before
    assert first == second
    order = list(dict.fromkeys(ids))
    assert first.kept_groups == [g for g in order if g in set(first.kept_groups)]
    assert set(first.kept_groups) | set(first.dropped) == set(order)
    assert not set(first.kept_groups) & set(first.dropped)
    assert set(first.group_weights) == set(first.kept_groups)
    assert all(0.0 <= w <= 1.0 for w in first.group_weights.values())
    assert first.metrics["rollout/filter_kept_count"] == len(first.kept_groups)


# --- EmptyStreak -----------------------------------------------------------------------------


def _result(kept, zero=0.0, groups=2.0):
    return FilterResult(
        kept_groups=kept, metrics={"rollout/filter_zero_count": zero, "rollout/filter_num_groups": groups}
    )


def test_empty_streak_stops_after_n_consecutive_empty_steps():
    streak = EmptyStreak(3)
    assert [streak.update(_result([])) for _ in range(2)] == [False, False]
    assert streak.update(_result([1])) is False and streak.count == 0  # a non-empty step resets
    assert [streak.update(_result([])) for _ in range(3)] == [False, False, True]
    assert streak.metrics() == {
        "rollout/empty_after_filter": 1.0,
        "rollout/consecutive_empty_after_filter_steps": 3.0,
    }
    streak.reset()
    assert streak.count == 0 and not streak.should_stop


def test_empty_streak_zero_disables_and_from_config():
    from ragen_filters.config import TopPConfig

    never = EmptyStreak(0)
    assert not any(never.update(_result([])) for _ in range(50))
    assert EmptyStreak.from_config(TopPConfig(empty_stop_steps=2)).stop_after == 2
    with pytest.raises(ValueError):
        EmptyStreak(-1)


def test_empty_streak_can_ignore_signal_free_batches():
    streak = EmptyStreak(2, count_all_zero=False)
    assert not streak.update(_result([], zero=2.0, groups=2.0))
    assert streak.count == 0
    streak.update(_result([], zero=1.0))
    assert streak.count == 1
    assert not streak.update(_result([], zero=2.0))  # neither counts nor resets
    assert streak.update(_result([], zero=0.0))


def test_empty_streak_with_real_filter_on_flat_batches():
    from ragen_filters.filters import TopPFilter

    filt = TopPFilter(empty_stop_steps=2)
    streak = EmptyStreak.from_config(filt.config)
    flat = GroupedRollouts(group_ids=[0, 0, 1, 1], rewards=[1.0, 1.0, 0.0, 0.0])
    assert not streak.update(filt.select(flat))
    assert streak.update(filt.select(flat))
