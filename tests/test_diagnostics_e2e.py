"""End to end: a tiny-model run with the collapse diagnostic logs ``collapse_*`` metrics and
``ragen diagnose RUN_DIR`` turns them into the regime plot and the HTML report."""

from __future__ import annotations

import json
import subprocess
import sys

from ragen_core.config import load_config
from ragen_core.testing.installed import require_distribution
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig

require_distribution("ragen-diagnostics", module_level=True)  # installed but broken fails below; only absence skips


def test_tiny_run_with_collapse_diagnostic_then_diagnose_draws_regime_plot(tmp_path):
    import torch

    from ragen_core.trainer.trainer import Trainer

    env = register_toy_env()
    run_dir = tmp_path / "run"
    cfg = load_config(RunConfig, [], [
        f"env={env}", "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
        "rollout.env_groups=2", "rollout.group_size=2", "optim.mini_batch_size=4", "optim.micro_batch_size=4",
        "sampling.train.max_new_tokens=24", "sampling.val.max_new_tokens=24", "steps=2", "test_freq=0", "save_freq=1",
        "keep_checkpoints=2", "save_rollouts=true",
        "progress=false", "warm_start.episodes=8", "warm_start.epochs=2", "warm_start.target_valid_rate=0",
        "warm_start.check_episodes=2", f"warm_start.cache_dir={tmp_path / 'ws'}", f"run_dir={run_dir}",
    ])
    cfg = cfg.model_copy(update={"diagnostics": ["collapse"],
                                 "diagnostics_config": {"collapse": {"compute_freq": 1, "num_samples": 8, "z_source": "auto"}}})
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        Trainer(cfg).train()
    finally:
        torch.set_num_threads(before)

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:  # compute_freq 1: measured at both steps, both families
        for fam in ("collapse_first_turn_sample", "collapse_trajectory_sample"):
            for key in ("mi_estimate", "conditional_entropy_est"):
                value = row.get(f"{fam}/{key}")
                assert isinstance(value, float) and value == value, f"{fam}/{key} missing at step {row['step']}"
        assert row.get("collapse/error", 0.0) == 0.0

    done = subprocess.run([sys.executable, "-m", "ragen_core.cli.main", "diagnose", str(run_dir)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    regime = run_dir / "plots" / "collapse_regimes.png"
    assert regime.is_file() and regime.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (run_dir / "diagnostics.html").read_text(encoding="utf-8")
    assert "collapse_regimes" in html

    # offline: step_1's weights on step 2's rollouts, with the run's settings (num_samples 8, z_source auto)
    # reproduce step 2's logged values; they were paired with step 1's rollouts, under the defaults, filed as step 1
    done = subprocess.run([sys.executable, "-m", "ragen_core.cli.main", "diagnose", str(run_dir), "--checkpoint", "step_1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "settings: the run's diagnostics_config.collapse (z_source=auto, num_samples=8" in done.stderr
    (offline,) = [json.loads(line) for line in (run_dir / "diagnostics_offline.jsonl").read_text().splitlines() if line.strip()]
    assert offline["step"] == 2
    for key in ("collapse_first_turn_sample/mi_estimate", "collapse_trajectory_sample/conditional_entropy_est",
                "collapse_trajectory_sample/retrieval_accuracy"):
        # same weights, tokens and pair sample; only torch's thread count differs (1 in training), which may
        # reorder float32 sums of a few hundred log-probs: differences of ~1e-6, far below 1e-4
        assert abs(offline[key] - rows[1][key]) < 1e-4, (key, offline[key], rows[1][key])
