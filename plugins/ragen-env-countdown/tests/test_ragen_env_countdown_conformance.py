"""Countdown through the core conformance kit."""

from __future__ import annotations

from ragen_core.testing import parametrize_env_checks


@parametrize_env_checks(["countdown"], presets=[None, "Countdown"])
def test_countdown_conformance(env_check):
    env_check()
