"""Benchmark: the SearchQA retrieval server under 200 concurrent clients.

The server (BM25 over the built-in world, started through the core service helper exactly as
the env starts it) is hit by ``--clients`` asyncio clients, each on its own connection, each
sending single-query ``POST /retrieve`` requests back to back for ``--seconds``. Printed: requests,
errors (any non-200 answer or transport error; goal 0), requests per second, p50/p90/p99 latency,
and whether the server still answers ``/health`` afterwards.

Usage: ``python bench/bench_searchqa_load.py [--clients 200] [--seconds 10] [--backend bm25] [--out FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import statistics
import sys
import tempfile
import time

import httpx

from ragen_core.services import ServiceConfig, ServiceSpec, acquire


def server_spec(backend: str, world_size: int, cache: str, batching: bool = True) -> ServiceSpec:
    argv = [sys.executable, "-m", "ragen_env_searchqa.server", "serve", "--host", "{host}", "--port", "{port}",
            "--backend", backend, "--world-size", str(world_size), "--cache-dir", cache]
    return ServiceSpec(name=f"bench-{backend}-{'batched' if batching else 'unbatched'}", health_path="/ready",
                       command=tuple(argv + ([] if batching else ["--no-batching"])))


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> tuple[int, bytes]:
    """One keep-alive ``POST /retrieve``; (status, body). Raw HTTP/1.1: a full client library costs
    more CPU per request than the server under test, and would measure itself."""
    writer.write(b"POST /retrieve HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    return status, await reader.readexactly(length)


async def hammer(url: str, clients: int, seconds: float, queries: list[str]) -> tuple[list[float], int, float]:
    """(latencies of successful requests, errors, elapsed seconds); one connection per client."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds
    bodies = [json.dumps({"query": q, "top_k": 5}).encode() for q in queries]

    async def client(i: int) -> None:
        nonlocal errors
        rng = random.Random(i)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                try:
                    status, body = await _request(reader, writer, rng.choice(bodies))
                    ok = status == 200 and b'"num_results"' in body
                except (OSError, asyncio.IncompleteReadError, ValueError, StopIteration):
                    ok = False
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, int(port))
                if ok:
                    latencies.append(time.perf_counter() - t0)
                else:
                    errors += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return latencies, errors, time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else (values[0] if values else float("nan"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--backend", default="bm25", choices=["bm25", "dense", "hybrid"])
    p.add_argument("--world-size", type=int, default=400)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "bench_searchqa_load.txt"))
    args = p.parse_args()
    from ragen_env_searchqa.world import build_world

    queries = [q.question for q in build_world(0, args.world_size).questions[:500]]
    with tempfile.TemporaryDirectory() as cache, acquire(server_spec(args.backend, args.world_size, cache),
                                                        ServiceConfig(ready_timeout_s=600)) as server:
        url = server.ensure_ready()
        latencies, errors, elapsed = asyncio.run(hammer(url, args.clients, args.seconds, queries))
        healthy = httpx.get(f"{url}/health").json()["status"] == "healthy" and server.alive
    n = len(latencies)
    lines = [
        f"# bench_searchqa_load {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        f"backend={args.backend} world_size={args.world_size} clients={args.clients} seconds={args.seconds:g}",
        f"requests ok: {n}  errors: {errors}  (goal: 0 errors)",
        f"throughput: {n / elapsed:.0f} req/s",
        f"latency ms: p50 {1000 * pct(latencies, 50):.1f}  p90 {1000 * pct(latencies, 90):.1f}  p99 {1000 * pct(latencies, 99):.1f}",
        f"server healthy afterwards: {healthy}",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
