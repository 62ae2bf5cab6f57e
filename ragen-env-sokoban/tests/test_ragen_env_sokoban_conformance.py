"""Conformance kit on the installed ``sokoban`` entry point, default config and reference tags."""

from __future__ import annotations

from ragen_core.testing import parametrize_env_checks


@parametrize_env_checks(
    ["sokoban"],
    presets=[None, "CoordSokoban", "LargerSokoban", "SokobanDifferentGridVocab"],
)
def test_sokoban_conformance(env_check):
    env_check()
