"""The trainer on a non-default env pool: one pool shared by the training, validation and
analysis runners, closed when training ends."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ragen_core.config import load_config
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(tmp_path: Path, *extra: str) -> RunConfig:
    # bandit is installed, so spawned pool workers can build it by name
    return load_config(RunConfig, [], [
        "env=bandit", "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=2048",
        "sampling.train.max_new_tokens=8", "sampling.val.max_new_tokens=8",
        "optim.mini_batch_size=4", "optim.micro_batch_size=2",
        "val_groups=2", "test_freq=1", "save_freq=0", "steps=2",
        "warm_start.enabled=false", "progress=false", f"run_dir={tmp_path / 'run'}",
        *extra,
    ])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_process_pool_trains_with_one_shared_set_of_workers_and_stops_them(tmp_path):
    cfg = _config(tmp_path, "rollout.pool=process", "rollout.pool_config.workers=2",
                  "grad_analysis.every=1", "grad_analysis.env_groups=1", "grad_analysis.group_size=2")
    trainer = Trainer(cfg)
    trainer.setup()
    pool = trainer.runner.pool
    assert type(pool).__name__ == "ProcessEnvPool"
    assert trainer.val_runner.pool is pool
    assert trainer.analysis_rollout.runner.pool is pool
    trainer.train_step(1)
    pids = list(pool.worker_pids().values())
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    trainer.start_step = 2
    trainer.train()
    rows = read_metrics(Path(cfg.run_dir) / "metrics.jsonl")
    assert [r["step"] for r in rows if "train/success" in r][-1] == 2
    assert any("val-env/success" in r for r in rows)
    # the same two workers served every rollout, and train() stopped them at the end
    assert pool.worker_pids() == {} or not any(_alive(p) for p in pool.worker_pids().values())
    for pid in pids:
        for _ in range(50):
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid)
