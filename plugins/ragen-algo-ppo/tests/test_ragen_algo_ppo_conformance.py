"""Conformance of the PPO plugin's specs, estimators and algorithm through the real registry."""

from __future__ import annotations

import json

import pytest

from ragen_core import registry
from ragen_core.testing import (
    check_estimator,
    check_spec_is_light,
    check_spec_roundtrip,
)

ESTIMATORS = ["gae", "bilevel-gae"]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimator_conformance(name):
    est = registry.make("estimator", name)
    assert est.needs_critic is True
    assert registry.get_spec("estimator", name).needs_critic is True
    check_estimator(est)
    check_estimator(est, needs_values=False)


@pytest.mark.parametrize(
    ("kind", "name"),
    [("estimator", "gae"), ("estimator", "bilevel-gae"), ("algorithm", "ppo")],
)
def test_spec_roundtrip(kind, name):
    spec = registry.get_spec(kind, name)
    check_spec_roundtrip(spec)
    for preset in spec.presets:
        check_spec_roundtrip(spec, spec.make_config(preset=preset))


def test_specs_are_light():
    check_spec_is_light("algorithm", "ppo")


def test_ppo_defaults_and_json_roundtrip():
    algo = registry.make("algorithm", "ppo")
    cfg = algo.config
    assert (cfg.estimator, cfg.use_critic, cfg.loss_agg_mode) == (
        "gae",
        True,
        "token-mean",
    )
    assert (cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.clip_ratio_c) == (
        0.2,
        0.28,
        3.0,
    )
    assert cfg.use_kl_loss is False and algo.needs_critic is True
    again = type(cfg).model_validate(json.loads(cfg.model_dump_json()))
    assert again == cfg
    # the estimator it names is installed and builds with its config
    est = registry.make("estimator", cfg.estimator, cfg.estimator_config)
    assert est.needs_critic


def test_unknown_field_is_rejected():
    from ragen_core.errors import ConfigError

    with pytest.raises(ConfigError):
        registry.make("estimator", "gae", {"gama": 0.9})
