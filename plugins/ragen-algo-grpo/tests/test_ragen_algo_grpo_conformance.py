"""Conformance of the GRPO plugin's specs, estimators and algorithms through the real registry."""

from __future__ import annotations

import json

import pytest

from ragen_core import registry
from ragen_core.testing import (
    check_estimator,
    check_spec_is_light,
    check_spec_roundtrip,
)

ESTIMATORS = [
    "grpo",
    "drgrpo",
    "rloo",
    "reinforce-plus-plus",
    "reinforce-plus-plus-baseline",
]
ALGORITHMS = ["grpo", "drgrpo", "dapo"]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimator_conformance(name):
    est = registry.make("estimator", name)
    assert est.needs_critic is False
    assert registry.get_spec("estimator", name).needs_critic is False
    check_estimator(est)


@pytest.mark.parametrize(
    ("kind", "name"),
    [("estimator", n) for n in ESTIMATORS] + [("algorithm", n) for n in ALGORITHMS],
)
def test_spec_roundtrip(kind, name):
    spec = registry.get_spec(kind, name)
    check_spec_roundtrip(spec)
    for preset in spec.presets:
        check_spec_roundtrip(spec, spec.make_config(preset=preset))


def test_specs_are_light():
    check_spec_is_light("algorithm", "dapo")


@pytest.mark.parametrize(
    ("name", "estimator", "agg"),
    [
        ("grpo", "grpo", "seq-mean-token-mean"),
        ("drgrpo", "drgrpo", "seq-mean-token-sum"),
        ("dapo", "grpo", "token-mean"),
    ],
)
def test_algorithm_presets(name, estimator, agg):
    algo = registry.make("algorithm", name)
    cfg = algo.config
    assert (cfg.estimator, cfg.loss_agg_mode, cfg.use_critic, algo.needs_critic) == (
        estimator,
        agg,
        False,
        False,
    )
    assert type(cfg).model_validate(json.loads(cfg.model_dump_json())) == cfg
    # the named estimator is installed and builds
    assert (
        registry.make("estimator", cfg.estimator, cfg.estimator_config).needs_critic
        is False
    )


def test_dapo_is_not_ppo():
    cfg = registry.make("algorithm", "dapo").config
    assert (
        cfg.clip_ratio_low,
        cfg.clip_ratio_high,
        cfg.dynamic_sampling,
        cfg.use_kl_loss,
    ) == (0.2, 0.28, True, False)
    ref = registry.make("algorithm", "dapo", preset="ragen-reference")
    assert (
        ref.config.estimator == "gae"
        and ref.needs_critic is True
        and ref.config.dynamic_sampling is False
    )


def test_drgrpo_constant_norm_preset():
    algo = registry.make(
        "algorithm", "drgrpo", {"loss_norm_constant": 4096}, preset="constant-norm"
    )
    assert algo.config.loss_agg_mode == "seq-mean-token-sum-norm"
    assert algo.agg_kwargs == {"norm_constant": 4096}
