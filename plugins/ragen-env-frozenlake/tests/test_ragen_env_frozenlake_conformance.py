"""FrozenLake through the core conformance kit (default slippery config and CoordFrozenLake)."""

from __future__ import annotations

from ragen_core.testing import parametrize_env_checks


@parametrize_env_checks(["frozenlake"], presets=[None, "CoordFrozenLake"])
def test_frozenlake_conformance(env_check):
    env_check()
