"""Peak memory of a short ``ragen run``, overall and per phase of the training step.

Runs the trainer in this process (warm start off unless ``--warm-start``) and samples the
process's resident set size (``VmRSS`` of ``/proc/self/status``) every 2 ms in a thread. The
trainer's step timers (``gen``, ``filter``, ``update_actor``, ``old_log_prob``, ...) name the
phase each sample belongs to; everything outside them is ``setup/other``. Prints the peak per
phase, the overall peak and ``ru_maxrss`` (the kernel's own high-water mark, which also sees
peaks shorter than the sampling interval).

    python bench/bench_memory.py --env sudoku --filter snr-topp --steps 2
    python bench/bench_memory.py --env sokoban --steps 1 --set rollout.group_size=4

Results: ``bench/results/bench_memory.md``.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Sampler:
    """Samples RSS every ``interval`` s; ``phase`` names what the trainer is doing."""

    def __init__(self, interval: float = 0.002) -> None:
        self.interval = interval
        self.phase = "setup/other"
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, phase = rss_mib(), self.phase
            if rss > self.peaks.get(phase, 0.0):
                self.peaks[phase] = rss
            time.sleep(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="sudoku")
    parser.add_argument("--filter", default="snr-topp")
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--warm-start", action="store_true", help="keep the warm start on (auto: the tiny model is warm-started)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="run-config override (repeatable)")
    args = parser.parse_args()

    import torch

    from ragen_core.config import load_config
    from ragen_core.trainer import trainer as trainer_mod
    from ragen_core.trainer.config import RunConfig

    torch.set_num_threads(args.threads)
    sampler = Sampler()
    timer_cls = trainer_mod._Timer
    enter, exit_ = timer_cls.__enter__, timer_cls.__exit__

    def timed_enter(self: object) -> None:
        sampler.phase = self.key  # type: ignore[attr-defined]
        enter(self)  # type: ignore[arg-type]

    def timed_exit(self: object, *exc: object) -> None:
        exit_(self, *exc)  # type: ignore[arg-type]
        sampler.phase = "setup/other"

    timer_cls.__enter__, timer_cls.__exit__ = timed_enter, timed_exit  # type: ignore[method-assign]
    from ragen_core.trainer import warmstart

    def phased(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            before, sampler.phase = sampler.phase, f"warm_start/{name}"
            try:
                return fn(*a, **k)
            finally:
                sampler.phase = before

        return wrapper

    for name in ("demonstrations", "sft", "format_check"):  # the warm start's own phases
        setattr(warmstart, name, phased(name, getattr(warmstart, name)))
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [f"env={args.env}", f"filter={args.filter}", f"algo={args.algo}", f"steps={args.steps}", "test_freq=0", "save_freq=0",
                     "progress=false", f"run_dir={Path(tmp) / 'run'}", *([] if args.warm_start else ["warm_start.enabled=false"]), *args.set]
        cfg = load_config(RunConfig, [], overrides)
        t0 = time.time()
        with sampler:
            history = trainer_mod.Trainer(cfg).train()
        wall = time.time() - t0
    print(f"{args.env} / {args.filter} / {args.algo}, {args.steps} steps, {args.threads} threads, overrides {args.set or '-'}: {wall:.0f} s")
    for phase, peak in sorted(sampler.peaks.items(), key=lambda kv: -kv[1]):
        print(f"  peak RSS during {phase:<20} {peak:8.0f} MiB")
    print(f"  peak RSS (sampled)              {max(sampler.peaks.values()):8.0f} MiB")
    print(f"  ru_maxrss                       {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:8.0f} MiB")
    last = history[-1] if history else {}
    lens = {k: round(v, 1) for k, v in last.items() if k.startswith(("rollout/", "response_length", "prompt_length")) and "len" in k}
    if lens:
        print(f"  last step lengths: {lens}")


if __name__ == "__main__":
    main()
