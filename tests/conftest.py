"""Shared fixtures for the core tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for the module: the tiny model's ops are too small to gain from threads,
    and on a busy 2-core machine thread oversubscription makes them up to 10x slower."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
