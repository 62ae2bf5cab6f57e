"""Benchmark: micro-batched against unbatched dense encoding in the SearchQA retrieval server.

Two servers over the same dense index (the bundled all-MiniLM-L6-v2 encoder, FAISS flat index of
the built-in world), one with micro-batching (the default: the queries of all waiting requests
go through the encoder in one call) and one with ``--no-batching`` (each request encoded on its
own behind the encoder's lock, as the reference server does). Each is hit by ``--clients``
concurrent clients sending single-query requests for ``--seconds``; printed: requests per
second, p50/p99 latency and errors of both, and the throughput ratio (goal: at least 3x at 64
clients).

Usage: ``python bench/bench_searchqa_batching.py [--clients 64] [--seconds 10] [--out FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

from bench_searchqa_load import hammer, pct, server_spec

from ragen_core.services import ServiceConfig, acquire


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds the seconds are split into")
    p.add_argument("--world-size", type=int, default=100)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "bench_searchqa_batching.txt"))
    args = p.parse_args()
    from ragen_env_searchqa.world import build_world

    queries = [q.question for q in build_world(0, args.world_size).questions[:500]]
    rows: dict[bool, tuple[list[float], int, float]] = {True: ([], 0, 0.0), False: ([], 0, 0.0)}
    with tempfile.TemporaryDirectory() as cache:
        # the batched server builds the cached index first; the other then loads the same one
        batched = acquire(server_spec("dense", args.world_size, cache, batching=True), ServiceConfig(ready_timeout_s=1200))
        unbatched = acquire(server_spec("dense", args.world_size, cache, batching=False), ServiceConfig(ready_timeout_s=1200))
        try:
            urls = {True: batched.ensure_ready(), False: unbatched.ensure_ready()}
            for url in urls.values():
                asyncio.run(hammer(url, 8, 1.0, queries))  # warm-up: the first forward passes are slow
            # alternate short rounds, so that both modes see the same machine load
            for _ in range(args.rounds):
                for mode in (True, False):
                    lat, err, el = asyncio.run(hammer(urls[mode], args.clients, args.seconds / args.rounds, queries))
                    rows[mode] = (rows[mode][0] + lat, rows[mode][1] + err, rows[mode][2] + el)
        finally:
            batched.release()
            unbatched.release()
    lines = [
        f"# bench_searchqa_batching {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        f"backend=dense (bundled all-MiniLM-L6-v2, FAISS flat) world_size={args.world_size} clients={args.clients}"
        f" seconds={args.seconds:g} per mode in {args.rounds} alternating rounds",
    ]
    rate = {}
    for batching, (lat, errors, elapsed) in rows.items():
        rate[batching] = len(lat) / elapsed
        lines.append(f"{'batched  ' if batching else 'unbatched'}: {rate[batching]:7.1f} req/s  p50 {1000 * pct(lat, 50):7.1f} ms  "
                     f"p99 {1000 * pct(lat, 99):7.1f} ms  errors {errors}")
    lines.append(f"throughput ratio batched/unbatched: {rate[True] / rate[False]:.2f}x (goal: >= 3x)")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
