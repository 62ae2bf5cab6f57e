"""DeepCoder through the core conformance kit (the oracle check runs the built-in solutions)."""

from __future__ import annotations

from ragen_core.testing import parametrize_env_checks


@parametrize_env_checks(["deepcoder"], presets=[None, "DeepCoder"])
def test_deepcoder_conformance(env_check):
    env_check()
