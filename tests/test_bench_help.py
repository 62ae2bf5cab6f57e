"""Every bench script answers ``--help`` with its usage, at once, without running its benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py")) if BENCH.is_dir() else []


@pytest.mark.skipif(not SCRIPTS, reason="bench/ is not here")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_help_prints_the_usage_and_runs_nothing(script: Path) -> None:
    # bench_filters.py ignored its arguments: --help timed every filter for a second and printed the table
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: "), done.stdout[:500]
