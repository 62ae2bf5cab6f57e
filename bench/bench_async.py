"""Async vs sync rollout: training step time on the tiny model, and the off-policy gap.

Workload: PPO on Bandit, 4 groups x 8 episodes, up to 48 new tokens, one optimiser step per rollout
in micro-batches of 8, CPU, warm start off. ``sync`` is the default loop (rollout, then update);
``async`` is ``rollout.async_rollout=true`` (step t+1's rollout runs in a background thread on a
behaviour copy of the weights while step t updates). Each side runs ``--steps`` steps after one
warm-up step (not counted); a step's time is the wall time of ``Trainer.train_step``, so in async
mode it is the update plus whatever part of the next rollout the update did not hide. The run is
configured one step longer than it is played, so every counted async step starts the next
rollout (steady state); the rollout started by the last one is waited for and dropped.

The off-policy gap is printed per async step: ``rollout/policy_lag`` (versions between the
sampling weights and the trained ones: 1 after the first step) and ``actor/ppo_kl`` (token mean
of old minus new log-prob, i.e. how far the trained policy is from the behaviour policy when the
update starts; exactly 0 in sync mode with one optimiser step per rollout).

    python bench/bench_async.py --steps 4            # --threads 1 by default

On a 2-core machine the two threads compete for the same cores (torch ops release the GIL, the
env and tokenizer code does not), so the gain is bounded by how much of a step is torch compute.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def step_times(steps: int, workdir: Path, async_rollout: bool) -> tuple[list[float], list[dict[str, float]]]:
    """Wall time and metrics of each counted step (the warm-up step is dropped)."""
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    tag = "async" if async_rollout else "sync"
    cfg = load_config(RunConfig, [], [
        "env=bandit", "algo=ppo", f"steps={steps + 2}", "rollout.env_groups=4", "rollout.group_size=8",
        "sampling.train.max_new_tokens=48", "optim.mini_batch_size=32", "optim.micro_batch_size=8", "optim.lr=1e-4",
        "warm_start.enabled=false", "test_freq=0", "save_freq=0", "progress=false", f"run_dir={workdir / tag}",
        f"rollout.async_rollout={str(async_rollout).lower()}",
    ])
    trainer = Trainer(cfg)
    trainer.setup()
    times, rows = [], []
    try:
        for step in range(1, steps + 2):
            t0 = time.perf_counter()
            metrics = trainer.train_step(step)
            if step > 1:
                times.append(time.perf_counter() - t0)
                rows.append(metrics)
    finally:
        trainer.close()
    return times, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="counted steps per side (after one warm-up step)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        sync_t, sync_m = step_times(args.steps, Path(tmp), False)
        async_t, async_m = step_times(args.steps, Path(tmp), True)
    for name, times, rows in (("sync", sync_t, sync_m), ("async", async_t, async_m)):
        gen = statistics.median(r.get("timing_s/gen", 0.0) for r in rows)
        print(f"{name:5s} step: median {statistics.median(times):.2f} s over {len(times)} steps "
              f"{[f'{t:.2f}' for t in times]}; median waiting for the rollout {gen:.2f} s")
    print(f"async / sync median step time: {statistics.median(async_t) / statistics.median(sync_t):.2f}x")
    for i, r in enumerate(async_m, start=2):
        print(f"  async step {i}: policy_lag {r['rollout/policy_lag']:.0f}, ppo_kl {r['actor/ppo_kl']:.2e}, "
              f"pg_clipfrac {r['actor/pg_clipfrac']:.3f}")
    print(f"  sync ppo_kl (ratio exactly 1): {[r['actor/ppo_kl'] for r in sync_m]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
