"""Throughput of the FrozenLake and Countdown envs: steps/s and resets/s, side by side.

Run: ``python bench/bench_frozenlake_countdown.py [--seconds 1.0]``. Each figure is the best of
three timed windows. The grid-env goal is >= 20,000 steps/s; resets are shown for distinct seeds
and for groups of 16 members sharing a seed (the usual rollout shape).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from ragen_core import registry
from ragen_core.seeding import make_rng

GOAL_GRID_STEPS = 20_000


def _rate(fn: Callable[[int], int], seconds: float) -> float:
    """Best-of-3 operations per second of ``fn(i) -> ops done``, each window ~``seconds``/3."""
    best = 0.0
    for _ in range(3):
        ops, i, start = 0, 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 3:
            ops += fn(i)
            i += 1
        best = max(best, ops / (time.perf_counter() - start))
    return best


def bench_steps(env: Any, actions: list[str], seconds: float) -> float:
    """Steps per second, excluding the resets needed when an episode ends."""
    env.reset(0)
    state = {"seed": 0, "step_time": 0.0, "steps": 0}

    def chunk(i: int) -> int:
        t0 = time.perf_counter()
        done = False
        n = 0
        for k in range(64):
            done = env.step(actions[(i + k) % len(actions)]).done
            n += 1
            if done:
                break
        state["step_time"] += time.perf_counter() - t0
        state["steps"] += n
        if done:
            state["seed"] += 1
            env.reset(state["seed"])
        return n

    _rate(chunk, seconds)
    return state["steps"] / state["step_time"]


def bench_resets(env: Any, seconds: float, group: int) -> float:
    return _rate(lambda i: (env.reset(i // group, member=i % group), 1)[1], seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="time per measurement")
    args = parser.parse_args()

    lake = registry.make("env", "frozenlake")
    coord = registry.make("env", "frozenlake", preset="CoordFrozenLake")
    countdown = registry.make("env", "countdown")
    rng = make_rng(0, "bench")
    countdown.reset(0)
    guesses = [countdown.random_action(rng) or "1 + 2" for _ in range(64)]
    moves = ["Left", "Down", "Right", "Up", "jump"]

    rows = [
        ("frozenlake (grid, slippery)", bench_steps(lake, moves, args.seconds),
         bench_resets(lake, args.seconds, 1), bench_resets(lake, args.seconds, 16)),
        ("frozenlake CoordFrozenLake", bench_steps(coord, moves, args.seconds),
         bench_resets(coord, args.seconds, 1), bench_resets(coord, args.seconds, 16)),
        ("countdown (procedural)", bench_steps(countdown, guesses, args.seconds),
         bench_resets(countdown, args.seconds, 1), bench_resets(countdown, args.seconds, 16)),
    ]
    print(f"{'env':32} {'steps/s':>12} {'resets/s':>12} {'resets/s (x16 group)':>22}")
    for name, steps, resets, grouped in rows:
        print(f"{name:32} {steps:12,.0f} {resets:12,.0f} {grouped:22,.0f}")
    grid = min(rows[0][1], rows[1][1])
    verdict = "meets" if grid >= GOAL_GRID_STEPS else "MISSES"
    print(f"grid env: {grid:,.0f} steps/s {verdict} the {GOAL_GRID_STEPS:,} goal ({grid / GOAL_GRID_STEPS:.1f}x)")
    print(f"countdown/frozenlake step ratio: {rows[2][1] / rows[0][1]:.2f}")


if __name__ == "__main__":
    main()
