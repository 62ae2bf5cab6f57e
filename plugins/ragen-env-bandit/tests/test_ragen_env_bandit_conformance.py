"""Conformance checks from the core kit, run through the real registry (proves the entry point)."""

from __future__ import annotations

from ragen_core.testing import parametrize_env_checks


@parametrize_env_checks(["bandit"], presets=[None, "Bandit", "BanditTest"])
def test_bandit_conformance(env_check):
    env_check()
