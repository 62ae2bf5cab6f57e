"""Conformance checks from the core kit, run through the real registry (proves the entry point)."""

from __future__ import annotations

import pytest

testing = pytest.importorskip("ragen_core.testing", reason="conformance kit not available yet")
if not hasattr(testing, "parametrize_env_checks"):  # pragma: no cover - kit still being written
    pytest.skip("ragen_core.testing.parametrize_env_checks not available yet", allow_module_level=True)


@testing.parametrize_env_checks(["sudoku"], presets=[None, "SimpleSudoku", "MediumSudoku", "TinySudoku"])
def test_sudoku_conformance(env_check):
    env_check()
