"""A few training steps with the tiny model, for an env package's end-to-end test.

::

    from ragen_core.testing.train_checks import TINY_RUN, requires_algorithm, train

    pytestmark = [requires_algorithm("grpo"), pytest.mark.usefixtures("one_torch_thread")]

    def test_two_steps(tmp_path):
        trainer, rows = train([*TINY_RUN, "env=mygrid", "steps=2", f"run_dir={tmp_path}"])
        assert [r["step"] for r in rows] == [1, 2]

``one_torch_thread`` is a fixture of RAGEN's pytest plugin (:mod:`ragen_core.testing.pytest_plugin`).
"""

from __future__ import annotations

from typing import Any

#: Overrides of a small GRPO run: 2 groups of 2 episodes, one mini-batch of two micro-batches, no
#: warm start (the test checks the pipeline, not learning), no progress bar, no checkpoints, no
#: validation (add ``test_freq=N`` and ``val_groups=N`` after it to validate).
TINY_RUN: list[str] = [
    "rollout.env_groups=2", "rollout.group_size=2", "optim.mini_batch_size=4", "optim.micro_batch_size=2",
    "optim.lr=1e-3", "algo=grpo", "warm_start.enabled=false", "progress=false", "save_freq=0", "test_freq=0",
]


def requires_algorithm(name: str) -> Any:
    """A skip mark for tests that train with algorithm ``name`` when its distribution is absent
    (an env installed alone next to ragen-core has the default, ``grpo``, but not ``ppo``)."""
    import pytest

    from ragen_core import registry
    from ragen_core.distributions import install_hint

    return pytest.mark.skipif(name not in registry.names("algorithm"), reason=f"needs the {name} algorithm ({install_hint('algorithm', name)})")


def train(overrides: list[str]) -> tuple[Any, list[dict[str, Any]]]:
    """Build a run from ``overrides`` (``key=value`` strings), train it, and return the trainer
    (shut down: its model, history and run folder stay readable) and the rows of its ``metrics.jsonl``."""
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.loggers import read_metrics
    from ragen_core.trainer.trainer import Trainer

    with Trainer(load_config(RunConfig, [], overrides)) as trainer:
        trainer.train()
    return trainer, read_metrics(trainer.run_dir / "metrics.jsonl")
