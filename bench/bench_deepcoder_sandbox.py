"""Benchmark: the DeepCoder sandbox against bare subprocesses, and its worker pool.

1. Overhead per program: the same program (one stdin test) run ``--runs`` times as a bare
   ``subprocess.run([python, "-I", "-S", prog.py])`` and through the sandbox (every available
   isolation level), alternating so both see the same machine load: wall time (median and
   minimum) and CPU time of every process involved, side by side. Programs: a 50 ms CPU-bound
   loop (goal: sandbox / bare < 1.3) and an empty one (the fixed cost).
2. Throughput: ``--programs`` programs submitted at once from threads (as the env pool does)
   with a pool of one worker per CPU against one worker, for programs that sleep 0.2 s (goal:
   >= 1.7x) and programs that burn 0.2 CPU-seconds (goal: close to the core count).

Usage: ``python bench/bench_deepcoder_sandbox.py [--runs 30] [--programs 16] [--out FILE]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BUSY = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end:\n    pass\nprint(input())"
SLEEP = "import time\ntime.sleep({s})\nprint(input())"
STDIN = [{"kind": "stdin", "input": "ok\n", "fn_name": None}]


def _children_cpu() -> float:
    """CPU seconds of all finished child processes and the descendants they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(fn) -> tuple[float, float]:
    cpu, wall = _children_cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - wall, _children_cpu() - cpu


def overhead(sb, level: str, config, code: str, runs: int) -> dict[str, tuple[float, float]]:
    """``{"wall median", "wall min", "cpu median"}`` -> (bare ms, sandboxed ms) for ``code``."""
    python = sb.sandbox_python(config.python)[0]
    bare: list[tuple[float, float]] = []
    boxed: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prog.py")
        with open(path, "w") as handle:
            handle.write(code)

        def run_bare() -> None:
            out = subprocess.run([python, "-I", "-S", path], input="ok\n", capture_output=True, text=True, check=True)
            assert out.stdout == "ok\n", out

        def run_boxed() -> None:
            result = sb.run_program(level, config, code, STDIN)
            assert result.tests[0].stdout == "ok\n", result

        for i in range(runs + 2):  # two warm-up rounds, not counted; bare and sandboxed alternate
            b, x = _timed(run_bare), _timed(run_boxed)
            if i >= 2:
                bare.append(b)
                boxed.append(x)
    ms = 1000.0
    return {
        "wall median": (statistics.median(w for w, _ in bare) * ms, statistics.median(w for w, _ in boxed) * ms),
        "wall min": (min(w for w, _ in bare) * ms, min(w for w, _ in boxed) * ms),
        "cpu median": (statistics.median(c for _, c in bare) * ms, statistics.median(c for _, c in boxed) * ms),
    }


def throughput(sb, config, code: str, programs: int, workers: int) -> float:
    """Programs per second when ``programs`` threads submit at once to a pool of ``workers``."""
    sandbox = sb.Sandbox(config.model_copy(update={"workers": workers}))
    done: list[str] = []

    def one() -> None:
        done.append(sandbox.run(code, STDIN).tests[0].status)

    threads = [threading.Thread(target=one) for _ in range(programs)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    assert done == ["ok"] * programs, done
    return programs / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--programs", type=int, default=16)
    parser.add_argument("--out", help="also write the report to this file")
    args = parser.parse_args()

    from ragen_env_deepcoder import sandbox as sb
    from ragen_env_deepcoder.config import SandboxConfig

    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    cpus = os.cpu_count() or 1
    say(f"$ python bench/bench_deepcoder_sandbox.py {' '.join(sys.argv[1:])}".rstrip())
    say(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}, {cpus} CPUs, load average at start "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min), uid {os.geteuid()}")
    levels = {}
    for level, why in sb.available_levels().items():
        if why is None:
            levels[level] = None
        elif os.geteuid() == 0 and os.access("/usr/bin/python3", os.X_OK) and sb.probe(level, "/usr/bin/python3") is None:
            levels[level] = "/usr/bin/python3"  # root without bwrap: an interpreter every uid can read
        else:
            say(f"# level {level}: not available ({why})")

    say("")
    say("1. overhead per program: one stdin test; bare = subprocess.run([python, '-I', '-S', prog.py]), alternating with the")
    say("   sandboxed run. wall = elapsed ms (median, and min = least disturbed by other load); cpu = median CPU ms of")
    say("   all processes involved (bwrap, harness, program), which the load on this shared machine barely affects")
    say(f"{'program':<16}{'level':<9}{'wall median':>22}{'wall min':>22}{'cpu median':>22}")
    ratios = {}
    for name, code in (("50 ms CPU loop", BUSY.format(s=0.05)), ("empty", "print(input())")):
        for level, python in levels.items():
            config = SandboxConfig(isolation=level, allow_unisolated=True, python=python)
            got = overhead(sb, level, config, code, args.runs)
            ratios[(name, level)] = {k: box / bare for k, (bare, box) in got.items()}
            cells = "".join(f"{f'{bare:.1f} -> {box:.1f} ({box / bare:.2f}x)':>22}" for bare, box in got.values())
            say(f"{name:<16}{level:<9}{cells}")

    say("")
    say(f"2. throughput: {args.programs} programs submitted at once from threads (programs/s)")
    say(f"{'program':<22}{'level':<10}{'1 worker':>10}{f'{cpus} workers':>12}{'ratio':>8}")
    level = next(iter(levels))
    config = SandboxConfig(isolation=level, allow_unisolated=True, python=levels[level], time_limit_s=5)
    speedups = {}
    for name, code in (("sleep 0.2 s", SLEEP.format(s=0.2)), ("0.2 CPU-seconds", BUSY.format(s=0.2))):
        one = throughput(sb, config, code, args.programs, 1)
        many = throughput(sb, config, code, args.programs, cpus)
        speedups[name] = many / one
        say(f"{name:<22}{level:<10}{one:>10.2f}{many:>12.2f}{many / one:>8.2f}")

    say("")
    key = ("50 ms CPU loop", "bwrap") if ("50 ms CPU loop", "bwrap") in ratios else ("50 ms CPU loop", level)
    got = ratios[key]
    say(f"overhead of a 50 ms program ({key[1]}): wall median {got['wall median']:.2f}x, wall min {got['wall min']:.2f}x, "
        f"cpu {got['cpu median']:.2f}x (goal < 1.3x: {'met' if got['wall min'] < 1.3 and got['cpu median'] < 1.3 else 'missed'} "
        f"by wall min and cpu; wall median {'met' if got['wall median'] < 1.3 else 'missed'})")
    sleepers = speedups["sleep 0.2 s"]
    say(f"pool speed-up, sleeping programs: {sleepers:.2f}x ({'meets' if sleepers >= 1.7 else 'misses'} the >= 1.7x goal); "
        f"CPU-bound: {speedups['0.2 CPU-seconds']:.2f}x on {cpus} cores")
    say(f"# load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        with open(args.out, "w") as handle:
            handle.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
