"""RAGEN's pytest plugin (entry point ``pytest11``): fixtures every package's tests may use.

Installed with ``ragen-core``, so a third-party env package's tests get them without a conftest:

* ``one_torch_thread`` (module scope): torch runs on one thread while the module's tests run.
  The tiny model's ops are too small to gain from threads, and on a busy 2-core machine thread
  oversubscription makes them up to 10x slower.

Importing this module imports neither torch nor anything of the trainer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
