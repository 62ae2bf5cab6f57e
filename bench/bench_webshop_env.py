"""Benchmark: WebShop env steps per second in process, and search latency against catalog size.

1. Steps/s: ``--episodes`` episodes on the generated 1,000-product catalog, one thread. Each
   episode resets, searches the goal's instruction (without its options and price, so most
   queries are new to the search cache), then takes random available actions (clicks on results,
   options, pages, buy) until done or 9 actions. Reset and every step are timed. Goal: at
   least 1,000 steps/s on one core.
2. Search latency: for catalogs of 1k, 10k and 100k generated products (``--sizes``), the time to
   build the index, and the median / p99 latency of ``--queries`` distinct uncached queries
   (goal instructions) through ``SearchIndex.search`` (top 50). Index build and query time grow
   with the catalog; the full 1.18 M-product catalog is about 12x the largest size here.

Usage: ``taskset -c 0 python bench/bench_webshop_env.py [--episodes 2000] [--sizes 1000,10000,100000]
[--queries 300] [--out FILE]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

from ragen_env_webshop.catalog import generate_catalog
from ragen_env_webshop.env import WebShopEnv
from ragen_env_webshop.goals import make_goals
from ragen_env_webshop.search import SearchIndex

from ragen_core.seeding import make_rng


def steps_per_second(episodes: int) -> dict[str, float]:
    env = WebShopEnv()
    env.reset(0)  # builds the catalog and index outside the timed part
    rng = make_rng(0, "bench-webshop")
    steps = searches = purchases = 0
    start = time.perf_counter()
    for seed in range(episodes):
        env.reset(seed)
        query = env.goal.instruction.split(" with ")[0].split(", and price")[0]
        env.step(f"search[{query}]")
        steps += 1
        searches += 1
        for _ in range(8):
            result = env.step(env.random_action(rng) or "click[back to search]")
            steps += 1
            if result.done:
                purchases += 1
                break
    elapsed = time.perf_counter() - start
    env.close()
    return {"steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed, "searches": searches,
            "purchases": purchases}


def search_latency(size: int, queries: int) -> dict[str, float]:
    products = generate_catalog(size, seed=0)
    t0 = time.perf_counter()
    index = SearchIndex(products)
    build = time.perf_counter() - t0
    goals = make_goals(products[: min(size, 2000)], seed=0)
    texts = list(dict.fromkeys(g.instruction for g in goals))[:queries]
    times = []
    for q in texts:
        t = time.perf_counter()
        index.search(q, 50)
        times.append(time.perf_counter() - t)
    times.sort()
    return {"size": size, "build_s": build, "queries": len(times), "median_ms": 1000 * statistics.median(times),
            "p99_ms": 1000 * times[min(len(times) - 1, int(0.99 * len(times)))]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--out", default=None, help="also append the report to this file")
    args = parser.parse_args()
    lines = [f"# bench_webshop_env {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
             f"# python bench/bench_webshop_env.py --episodes {args.episodes} --sizes {args.sizes} --queries {args.queries}"]
    r = steps_per_second(args.episodes)
    lines.append(f"env steps: {r['steps']} in {r['seconds']:.2f} s = {r['steps_per_s']:.0f} steps/s "
                 f"({r['searches']} searches, {r['purchases']} purchases; goal >= 1000 steps/s)")
    lines.append(f"{'products':>9} {'index build s':>14} {'queries':>8} {'median ms':>10} {'p99 ms':>8}")
    for size in (int(s) for s in args.sizes.split(",")):
        s = search_latency(size, args.queries)
        lines.append(f"{s['size']:>9} {s['build_s']:>14.2f} {s['queries']:>8} {s['median_ms']:>10.3f} {s['p99_ms']:>8.3f}")
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "a") as handle:
            handle.write(report + "\n\n")


if __name__ == "__main__":
    main()
