"""Benchmark: the WebShop HTTP server under concurrent clients on loopback.

Starts the shop (generated 1,000-product catalog) as a child process through
``ragen_core.services``, then runs ``--clients`` concurrent clients for ``--seconds``. Each client
loops over a browsing session as a person or an HTTP-mode env would: an env API step (search),
the results page as HTML, an item page as HTML, the item page as text, and a purchase page.
Reported: requests, requests/s, status counts (goal: no 5xx, no errors), and latency
median / p95 / p99 / max. Clients are asyncio tasks, each with one keep-alive connection and a
minimal HTTP/1.1 client (a full HTTP library costs more CPU per request than the server does).

Usage: ``python bench/bench_webshop_server.py [--clients 200] [--seconds 10] [--out FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import json
import os
import platform
import time
from urllib.parse import quote_plus, urlencode, urlsplit

from ragen_env_webshop.config import WebShopConfig
from ragen_env_webshop.engine import engine_for
from ragen_env_webshop.env import shop_service

from ragen_core.services import acquire


async def request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str, path: str,
                  body: bytes = b"") -> int:
    """One HTTP/1.1 keep-alive request; returns the status. A minimal client: an HTTP library's
    own cost per request would dominate what this bench measures."""
    head = f"{method} {path} HTTP/1.1\r\nHost: shop\r\nContent-Length: {len(body)}\r\n"
    head += "Content-Type: application/json\r\n\r\n" if body else "\r\n"
    writer.write(head.encode() + body)
    await writer.drain()
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def client(host: str, port: int, n: int, engine, stop_at: float, latencies: list[float],
                 statuses: collections.Counter) -> None:
    goal = engine.goal_index(n, "test")
    target = engine.goals[goal]
    query = quote_plus(target.instruction.split(" with ")[0])
    opts = urlencode([("opt", f"{k}:{v}") for k, v in target.options.items()])
    reader, writer = await asyncio.open_connection(host, port)
    i = 0
    try:
        while time.perf_counter() < stop_at:
            step = json.dumps({"goal": goal, "location": {}, "action": f"search[{query} {i % 7}]"}).encode()
            calls = [
                ("POST", "/api/step", step),
                ("GET", f"/g/{goal}/search?q={query}&page={1 + i % 3}", b""),
                ("GET", f"/g/{goal}/item/{target.asin}?{opts}", b""),
                ("GET", f"/g/{goal}/item/{target.asin}?{opts}&format=text", b""),
                ("GET", f"/g/{goal}/buy/{target.asin}?{opts}", b""),
            ]
            for method, path, body in calls:
                t = time.perf_counter()
                try:
                    statuses[await request(reader, writer, method, path, body)] += 1
                except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
                    statuses[type(e).__name__] += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                latencies.append(time.perf_counter() - t)
            i += 1
    finally:
        writer.close()


async def load(url: str, clients: int, seconds: float, engine) -> tuple[list[float], collections.Counter, float]:
    latencies: list[float] = []
    statuses: collections.Counter = collections.Counter()
    parts = urlsplit(url)
    start = time.perf_counter()
    stop_at = start + seconds
    await asyncio.gather(*(client(parts.hostname or "127.0.0.1", parts.port or 80, n, engine, stop_at, latencies, statuses)
                           for n in range(clients)))
    return latencies, statuses, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", default=None, help="also append the report to this file")
    args = parser.parse_args()
    config = WebShopConfig()
    engine = engine_for(config.catalog)
    with acquire(shop_service(config)) as shop:
        latencies, statuses, elapsed = asyncio.run(load(shop.ensure_ready(), args.clients, args.seconds, engine))
    latencies.sort()

    def pct(p: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(p * len(latencies)))]

    bad = sum(v for k, v in statuses.items() if not (isinstance(k, int) and k < 500))
    report = "\n".join([
        f"# bench_webshop_server {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        f"# python bench/bench_webshop_server.py --clients {args.clients} --seconds {args.seconds:g}",
        f"requests: {len(latencies)} in {elapsed:.1f} s = {len(latencies) / elapsed:.0f} req/s; "
        f"statuses {dict(sorted((str(k), v) for k, v in statuses.items()))}; 5xx or errors: {bad}",
        f"latency ms: median {pct(0.5):.1f}, p95 {pct(0.95):.1f}, p99 {pct(0.99):.1f}, max {1000 * latencies[-1]:.1f}",
    ])
    print(report)
    if args.out:
        with open(args.out, "a") as handle:
            handle.write(report + "\n\n")
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
