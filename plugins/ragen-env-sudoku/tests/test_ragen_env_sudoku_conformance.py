"""Conformance checks from the core kit, run through the real registry (proves the entry point)."""

from __future__ import annotations

from ragen_core.testing import parametrize_env_checks


@parametrize_env_checks(["sudoku"], presets=[None, "SimpleSudoku", "MediumSudoku", "TinySudoku"])
def test_sudoku_conformance(env_check):
    env_check()
