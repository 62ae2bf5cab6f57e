"""Overhead: the fraction of a training step spent outside the model's forward and backward passes.

Runs a few GRPO (or PPO) steps of the real trainer on the tiny model and times, inside the same
steps: engine generation, split into the model's forwards inside it and the engine's own time
(batching, sampling, KV-cache moves; from the engine's ``stats["forward_s"]``/``["total_s"]``),
model forward passes outside generation (old log-probs, critic values, the update's forwards),
and backward passes. The engine's own time and everything else in the trainer (batch building,
filtering, advantages, optimiser steps, metrics, hooks, Python glue) are "overhead".

    python bench/bench_overhead.py --env bandit --algo grpo --steps 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class Clock:
    def __init__(self) -> None:
        self.gen = self.fwd = self.bwd = 0.0
        self.in_gen = False
        self._fwd_t0: list[float] = []


def instrument(trainer, clock: Clock) -> None:
    import torch

    engine = trainer.engine
    original_generate = engine.generate

    def timed_generate(*a, **k):
        clock.in_gen = True
        t0 = time.perf_counter()
        try:
            return original_generate(*a, **k)
        finally:
            clock.gen += time.perf_counter() - t0
            clock.in_gen = False

    engine.generate = timed_generate

    def pre(module, args, kwargs):
        clock._fwd_t0.append(time.perf_counter())

    def post(module, args, kwargs, output):
        t0 = clock._fwd_t0.pop()
        if not clock.in_gen:
            clock.fwd += time.perf_counter() - t0

    models = [trainer.model] + ([trainer.critic] if trainer.critic is not None else [])
    for m in models:
        m.register_forward_pre_hook(pre, with_kwargs=True)
        m.register_forward_hook(post, with_kwargs=True)
    # Tensor.backward and torch.autograd.backward (the shared-prefix session back-propagates prompt
    # caches with the latter); the outermost call is timed, nested ones are not counted twice
    depth = [0]

    def timed(fn):
        def wrapper(*a, **k):
            depth[0] += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    clock.bwd += time.perf_counter() - t0

        return wrapper

    torch.Tensor.backward = timed(torch.Tensor.backward)
    torch.autograd.backward = timed(torch.autograd.backward)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="bandit")
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--no-shared-prefix", action="store_true",
                        help="force the plain training forward (ragen_core.trainer.prefix.ENABLED = False)")
    args = parser.parse_args()
    import torch

    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.no_shared_prefix:
        from ragen_core.trainer import prefix

        prefix.ENABLED = False
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(RunConfig, [], [f"env={args.env}", f"algo={args.algo}", f"steps={args.steps + 1}", "warm_start.enabled=false",
                                          "test_freq=0", "save_freq=0", "progress=false", f"run_dir={tmp}/run"])
        trainer = Trainer(cfg)
        trainer.setup()
        trainer.train_step(1)  # warm-up, not measured
        clock = Clock()
        instrument(trainer, clock)
        stats = getattr(trainer.engine, "stats", {})
        engine_fwd0 = stats.get("forward_s")
        total = 0.0
        for step in range(2, args.steps + 2):
            t0 = time.perf_counter()
            trainer.train_step(step)
            total += time.perf_counter() - t0
    # The engine's model forwards are model work; the rest of generate is the engine's own time.
    gen_model = stats["forward_s"] - engine_fwd0 if engine_fwd0 is not None else clock.gen
    engine_own = clock.gen - gen_model
    other = total - clock.gen - clock.fwd - clock.bwd
    print(f"{args.env}/{args.algo}, {cfg.rollout.env_groups}x{cfg.rollout.group_size} episodes, {args.steps} steps, {total:.2f} s")
    rows = (
        ("generate: model", gen_model),
        ("generate: engine", engine_own),
        ("forward", clock.fwd),
        ("backward", clock.bwd),
        ("other (trainer)", other),
    )
    for name, value in rows:
        print(f"  {name:<17} {value:8.2f} s  {100 * value / total:5.1f} %")
    if engine_fwd0 is None:
        print("  (this engine reports no forward_s: all of generate counted as model work)")
    print(f"overhead fraction = {(other + engine_own) / total:.3f}  (trainer {other / total:.3f}, engine {engine_own / total:.3f})")


if __name__ == "__main__":
    main()
