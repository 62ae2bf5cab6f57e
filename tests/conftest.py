"""Shared fixtures for the core tests (``one_torch_thread`` comes from RAGEN's pytest plugin,
:mod:`ragen_core.testing.pytest_plugin`)."""

from __future__ import annotations

import os

import pytest

# A run draws its plots when it ends (a few seconds each); the suite runs a hundred short runs.
# Tests of the plots set RAGEN_PLOTS=1 themselves.
os.environ.setdefault("RAGEN_PLOTS", "0")


def _assert_same_metrics(a: list[dict], b: list[dict]) -> None:
    """Two runs' metrics.jsonl rows agree: same steps, same keys, values within 1e-6 (timings aside)."""
    assert [r["step"] for r in b] == [r["step"] for r in a]
    for ra, rb in zip(a, b):
        keys = {k for k in ra if not k.startswith("timing_s/")}
        assert keys == {k for k in rb if not k.startswith("timing_s/")}
        for k in keys:
            if ra[k] is None:
                assert rb[k] is None, k
            else:
                # the same float32 ops on the same bits: identical in every run measured (1/2 threads,
                # scalar/AVX2/AVX-512 kernels); 1e-6 (~8 eps of an O(1) metric) only absorbs a BLAS
                # that takes an alignment-dependent code path in one of the two runs
                assert rb[k] == pytest.approx(ra[k], abs=1e-6), (ra["step"], k)


@pytest.fixture
def assert_same_metrics():
    """The comparison of an uninterrupted run's metrics with a resumed run's (resume-equality tests)."""
    return _assert_same_metrics
