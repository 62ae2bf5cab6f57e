"""Benchmark: env-bound rollout throughput with the envs in 2 Ray actors against the in-process pool.

The workload is an env whose step burns CPU in Python (:class:`BurnCorridorEnv`, defined here:
the corridor of the core's tests, each step first spending ``--burn-ms`` of CPU time), so the
env, not the model, bounds the rollout. A rollout resets ``--episodes`` episodes and steps all of
them ``--turns`` times, as the rollout runner does once per model turn. The same rollout runs in
the ``local`` pool (this process, one thread: the default), the ``ray`` pool with 2 actors, and,
for reference, the core's ``process`` pool with 2 workers; repetitions alternate between the
pools so each sees the same machine load. Actor/worker start-up is paid once before timing (a run
keeps its pool for every step) and printed on its own. A second workload whose steps sleep
instead of burning shows that the actors step at the same time even when other load leaves no
second core free (the CPU-bound ratio needs a quiet machine).

Goal (issue 19): ray / local >= 1.7x for the CPU-bound workload on a 2-core machine.

Usage: ``python bench/bench_ray_workers.py [--episodes 16] [--turns 5] [--burn-ms 20] [--reps 3] [--out FILE]``
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import statistics
import sys
import time

from pydantic import Field

from ragen_core.interfaces.env import StepResult
from ragen_core.testing.toy_env import CorridorConfig, CorridorEnv

HERE = os.path.dirname(os.path.abspath(__file__))
FACTORY = "bench_ray_workers:BurnCorridorEnv"
"""Import string the actors and workers build the env from (this folder is on their path)."""


class BurnCorridorConfig(CorridorConfig):
    burn_ms: float = Field(default=20.0, ge=0)
    """CPU milliseconds each step spends before moving."""
    sleep_ms: float = Field(default=0.0, ge=0)
    """Milliseconds each step then sleeps (an env waiting on a server or a subprocess)."""


class BurnCorridorEnv(CorridorEnv):
    """The corridor whose every step first burns ``burn_ms`` of this process's CPU time in Python, then sleeps ``sleep_ms``."""

    config_class = BurnCorridorConfig
    config: BurnCorridorConfig

    def step(self, action: str) -> StepResult:
        end = time.process_time() + self.config.burn_ms / 1000.0
        n = 0
        while time.process_time() < end:
            n += 1
        time.sleep(self.config.sleep_ms / 1000.0)
        return super().step(action)


def rollout(pool, episodes: int, turns: int, seed: int) -> float:
    """Seconds for one rollout: reset ``episodes`` episodes, then step all of them ``turns`` times."""
    from ragen_core.interfaces.env_pool import ResetRequest, StepRequest

    started = time.perf_counter()
    pool.reset([ResetRequest(i, seed + i // 4, i % 4) for i in range(episodes)])
    for _ in range(turns):
        # "Think" is not a move: every episode stays live for all turns, and every step burns.
        outcomes = pool.step([StepRequest(i, ("Think",)) for i in range(episodes)])
        assert all(o.end_reason == "" for o in outcomes), [o.error for o in outcomes if o.error]
    return time.perf_counter() - started


def measure(env, args, ray_pool_class) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Start-up seconds and rollout seconds per pool for ``env`` (pools closed afterwards: the Ray has 2 CPUs)."""
    from ragen_core.interfaces.env_pool import ResetRequest
    from ragen_core.rollout.env_pool import LocalEnvPool
    from ragen_core.rollout.process_pool import ProcessEnvPool

    pools = {"local": LocalEnvPool(env), "ray, 2 actors": ray_pool_class(env, workers=2), "process, 2 workers": ProcessEnvPool(env, workers=2)}
    warm: dict[str, float] = {}
    times: dict[str, list[float]] = {name: [] for name in pools}
    try:
        for name, pool in pools.items():  # first reset: actors / workers start here
            t = time.perf_counter()
            pool.reset([ResetRequest(i, 0) for i in range(args.episodes)])
            warm[name] = time.perf_counter() - t
        for rep in range(args.reps):
            for name, pool in pools.items():
                times[name].append(rollout(pool, args.episodes, args.turns, seed=100 * rep))
    finally:
        for pool in pools.values():
            pool.close()
    return warm, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--burn-ms", type=float, default=20.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="also write the report to this file")
    args = parser.parse_args()

    import ray
    from ragen_workers_ray.pool import RayEnvPool

    from ragen_core.interfaces.env_pool import EnvRef

    load_start = os.getloadavg()
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, runtime_env={"env_vars": {"PYTHONPATH": HERE}})
    ray_start = time.perf_counter() - started
    steps = args.episodes * args.turns
    workloads = {
        f"CPU-bound: each step burns {args.burn_ms:g} ms of CPU in Python ({steps * args.burn_ms / 1000:.1f} CPU-s per rollout)":
            {"burn_ms": args.burn_ms},
        f"waiting: each step sleeps {args.burn_ms:g} ms (checks that the actors step at the same time, whatever the load)":
            {"burn_ms": 0.0, "sleep_ms": args.burn_ms},
    }
    results = {}
    try:
        for title, config in workloads.items():
            env = EnvRef(name="burn-corridor", factory=FACTORY, config={"length": 9, **config})
            results[title] = measure(env, args, RayEnvPool)
    finally:
        ray.shutdown()

    lines = [
        f"$ python bench/bench_ray_workers.py --episodes {args.episodes} --turns {args.turns} --burn-ms {args.burn_ms:g} --reps {args.reps}"
        + (f" --out {args.out}" if args.out else ""),
        f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}, {os.cpu_count()} CPUs, "
        f"load average at start {' '.join(f'{x:.2f}' for x in load_start)} (1/5/15 min)",
        f"# {args.episodes} episodes x {args.turns} turns per rollout ({steps} env steps); ray.init (local, 2 CPUs) {ray_start:.1f} s",
    ]
    ratios = []
    for title, (warm, times) in results.items():
        lines += ["", title, "first reset (start-up): " + ", ".join(f"{name} {t:.1f} s" for name, t in warm.items()),
                  f"{'pool':<20} {'rollout s (median)':>18} {'min':>7} {'steps/s':>8} {'vs local':>9}"]
        base = statistics.median(times["local"])
        for name, ts in times.items():
            med = statistics.median(ts)
            lines.append(f"{name:<20} {med:>18.2f} {min(ts):>7.2f} {steps / med:>8.1f} {base / med:>8.2f}x")
        ratios.append(base / statistics.median(times["ray, 2 actors"]))
    lines += ["", f"ray (2 actors) / local, CPU-bound: {ratios[0]:.2f}x ({'meets' if ratios[0] >= 1.7 else 'misses'} the >= 1.7x goal); "
              f"waiting: {ratios[1]:.2f}x",
              f"# load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}"]
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(report + "\n")


if __name__ == "__main__":
    sys.exit(main())
