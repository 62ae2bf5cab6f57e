"""Learning-rate warm-up (``optim.lr_warmup_steps``) and the double loss-scaling guard."""

from __future__ import annotations

import pytest

from ragen_core.config import load_config
from ragen_core.errors import ConfigError
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(tmp_path, *overrides: str) -> RunConfig:
    env = register_toy_env()
    base = [
        f"env={env}", "env_config.length=3", "env_config.max_turns=1", "rollout.env_groups=2", "rollout.group_size=2",
        "rollout.max_model_len=512", "sampling.train.max_new_tokens=6", "optim.mini_batch_size=4", "optim.micro_batch_size=4",
        "optim.lr=1e-3", "test_freq=0", "save_freq=0", "warm_start.enabled=false", "progress=false", f"run_dir={tmp_path / 'run'}",
    ]
    return load_config(RunConfig, [], base + list(overrides))


def test_warmup_scales_the_actor_and_critic_lr_linearly(tmp_path):
    trainer = Trainer(_config(tmp_path, "algo=ppo", "optim.critic_lr=2e-3", "optim.lr_warmup_steps=4", "steps=3"))
    trainer.train()
    rows = read_metrics(trainer.run_dir / "metrics.jsonl")
    assert [r["actor/lr_factor"] for r in rows] == pytest.approx([0.25, 0.5, 0.75])
    assert [r["actor/lr"] for r in rows] == pytest.approx([2.5e-4, 5e-4, 7.5e-4])
    assert trainer.critic_optimizer.param_groups[0]["lr"] == pytest.approx(1.5e-3)


def test_no_warmup_keeps_the_configured_lr(tmp_path):
    trainer = Trainer(_config(tmp_path, "steps=1"))
    trainer.train()
    (row,) = read_metrics(trainer.run_dir / "metrics.jsonl")
    assert row["actor/lr_factor"] == 1.0
    assert row["actor/lr"] == pytest.approx(1e-3)


def test_loss_scaling_in_two_places_is_refused_before_rollout(tmp_path):
    cfg = _config(tmp_path, "filter=snr-topp", "filter_config.loss_scaling=linear", "optim.filter_loss_scaling=sqrt")
    with pytest.raises(ConfigError, match="scaled twice"):
        Trainer(cfg).setup()


@pytest.mark.parametrize("scaling", ["linear", "sqrt"])
def test_optim_loss_scaling_is_the_logged_filter_loss_scale(tmp_path, scaling):
    # top-k-abs keeps 1 of the 2 groups whatever their rewards; the advantages are scaled by
    # optim.filter_loss_scaling, and the metric must say by how much (it read only the filter's own setting).
    trainer = Trainer(_config(tmp_path, "steps=1", "filter=snr-topk-abs", "filter_config.value=1", f"optim.filter_loss_scaling={scaling}"))
    trainer.train()
    (row,) = read_metrics(trainer.run_dir / "metrics.jsonl")
    assert row["rollout/filter_kept_ratio"] == 0.5
    assert row["rollout/filter_loss_scale"] == pytest.approx(0.5 if scaling == "linear" else 0.5**0.5, rel=1e-12)
