"""Time to the first RL step and peak memory of `ragen run` per env, from a clean cache (issue 14).

Run: ``python bench/bench_first_step.py [--envs bandit sokoban ...] [--repeat 1] [--out FILE.md]``.

Each case is what a new user types, run as a subprocess with ``RAGEN_CACHE`` pointing at a new
empty folder (no tiny model, no warm-start cache, no index: what a fresh machine has) and plots
off. "First step" is the wall time from starting the process until the first line of the run's
``metrics.jsonl`` exists (imports, tiny-model build, warm start, one rollout and one update);
the run is then stopped. Peak memory is the largest resident set of the run's process as the
kernel reports it (``wait4``'s ``ru_maxrss``, which also covers children it waited for).
The cases: ``make run`` (``ragen run --env bandit --recipe learn``) and ``ragen run --env NAME``
for every installed env (an env that refuses to run here, such as lean without a toolchain, is
reported with its exit code). Wall times depend on the machine and its load: run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAGEN = str(Path(sys.executable).with_name("ragen"))


def one(label: str, args: list[str], limit_s: float, extra: list[str]) -> dict[str, object]:
    cache = Path(tempfile.mkdtemp(prefix="ragen-first-step-"))
    run_dir = cache / "run"
    env = {**os.environ, "RAGEN_CACHE": str(cache / "cache"), "RAGEN_PLOTS": "0"}
    cmd = [RAGEN, "run", *args, "--no-progress", "--run-dir", str(run_dir), "save_freq=0", "test_freq=0", *extra]
    log = (cache / "log.txt").open("w")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    first = None
    done = None  # (status, rusage) once the process has exited, reaped here (Popen.poll would reap it first)
    while done is None and time.monotonic() - t0 < limit_s:
        metrics = run_dir / "metrics.jsonl"
        if metrics.is_file() and metrics.stat().st_size > 0:
            first = time.monotonic() - t0
            os.killpg(proc.pid, signal.SIGINT)  # a first Ctrl-C: the run checkpoints and ends
            break
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            done = (status, usage)
        time.sleep(0.1)
    if done is None:
        if first is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _, status, usage = os.wait4(proc.pid, 0)
    else:
        status, usage = done
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.close()
    if first is None and (run_dir / "metrics.jsonl").is_file():  # ended before the poll saw it
        first = time.monotonic() - t0
    warm: dict[str, object] = {}
    if (run_dir / "warm_start.json").is_file():
        warm = json.loads((run_dir / "warm_start.json").read_text())
    step: dict[str, object] = {}
    if (run_dir / "metrics.jsonl").is_file():
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        step = json.loads(lines[0]) if lines else {}
    tail = (cache / "log.txt").read_text(errors="replace").strip().splitlines()[-1:] or [""]
    shutil.rmtree(cache, ignore_errors=True)
    return {
        "case": label,
        "command": "ragen run " + " ".join(args),
        "first_step_s": None if first is None else round(first, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "exit": os.waitstatus_to_exitcode(status) if first is None else "stopped after step 1",
        "warm_start": warm.get("source", "-"),
        "warm_valid_rate": warm.get("valid_rate"),
        "step_s": step.get("timing_s/step"),
        "valid": next((v for k, v in step.items() if k.startswith("train/") and k.endswith("/action_is_valid")), None),
        "last_line": tail[0][:160] if first is None else "",
    }


def cpu_kind() -> str:
    """The CPU's model name and the vector instructions torch's kernels use here (``AVX2``, ``AVX512``, ...).

    Two 2-core VMs differed by ~1.2x on the model's forward and backward passes (first_step_s11.md
    against first_step_s12.md); the slower one's torch kernels use AVX2 (its CPU offers no AVX-512),
    the other's were not recorded. Recorded from now on, so tables from different machines compare."""
    import torch

    info = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in info.read_text().splitlines() if line.startswith("model name")] if info.is_file() else []
    model = names[0] if names else (platform.processor() or "unknown CPU")
    return f"{model}, torch kernels {torch.backends.cpu.get_cpu_capability()}"


def table(rows: list[dict[str, object]], argv: list[str]) -> str:
    """The Markdown table of ``rows`` (the JSON lines this script prints), headed by the command line."""
    head = ["case", "command", "first RL step (s)", "peak RSS (MB)", "warm start", "its valid rate", "step (s)", "valid actions, step 1",
            "exit / note"]
    cpus = "; ".join(sorted({str(r.get("cpu", "CPU not recorded")) for r in rows})) or cpu_kind()  # rows from --rows keep theirs
    lines = [f"# Time to the first RL step from a clean cache ({platform.node() or 'this machine'}, {os.cpu_count()} CPUs, {cpus}, "
             f"{time.strftime('%Y-%m-%d')})", "", f"`python bench/bench_first_step.py {' '.join(argv)}`".replace("  ", " "), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        rate = r["warm_valid_rate"]
        step = r["step_s"]
        valid = r["valid"]
        lines.append(f"| {r['case']} | `{r['command']}` | {r['first_step_s'] if r['first_step_s'] is not None else '-'} | {r['peak_rss_mb']} "
                     f"| {r['warm_start']} | {f'{rate:.3f}' if isinstance(rate, float) else '-'} "
                     f"| {f'{step:.1f}' if isinstance(step, float) else '-'} | {f'{valid:.2f}' if isinstance(valid, float) else '-'} "
                     f"| {r['exit']} {str(r['last_line']).replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="*", help="envs (default: every installed env)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case (each from its own clean cache)")
    parser.add_argument("--limit", type=float, default=900.0, help="seconds before a case is killed")
    parser.add_argument("--out", help="also write the table to this Markdown file")
    parser.add_argument("--no-make-run", action="store_true", help="leave out the make run case")
    parser.add_argument("--rows", nargs="+", help="only redraw the table from the JSON lines of earlier runs (files)")
    parser.add_argument("--set", nargs="*", default=[], help="extra overrides for every case (e.g. warm_start.enabled=false)")
    args = parser.parse_args()
    if args.rows:
        rows = [json.loads(line) for f in args.rows for line in Path(f).read_text().splitlines() if line.startswith("{")]
        text = table(rows, sys.argv[1:])
        print(text)
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
        return
    from ragen_core import registry

    envs = args.envs or registry.names("env")
    cases: list[tuple[str, list[str]]] = [] if args.no_make_run else [("make run", ["--env", "bandit", "--recipe", "learn"])]
    cases += [(name, ["--env", name]) for name in envs]
    rows = []
    cpu = cpu_kind()
    for label, cmd in cases:
        for _ in range(args.repeat):
            row = one(label, cmd, args.limit, args.set) | {"cpu": cpu}
            rows.append(row)
            print(json.dumps(row), flush=True)
    text = table(rows, sys.argv[1:])
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
