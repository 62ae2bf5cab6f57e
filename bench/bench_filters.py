"""Cost of the rollout filters next to a positional numpy reshape baseline.

The filters group by explicit id and detect flat groups robustly; the baseline is the cheapest
possible reference-style computation (reshape to [groups, size], ``std(ddof=1)``, linear top-p
by argsort). Both run on the same batches in one process and the ratio is printed.

Run: ``python bench/bench_filters.py``
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np
from ragen_filters.filters import SoftFilter, TopKFilter, TopPFilter, TopPSoftmaxFilter

from ragen_core.interfaces.rollout_filter import GroupedRollouts


def baseline(rewards: np.ndarray, groups: int, value: float = 0.9, eps: float = 0.01) -> list[int]:
    std = rewards.reshape(groups, -1).std(axis=1, ddof=1)
    order = np.argsort(-std, kind="stable")
    threshold = value * std.sum() - eps
    acc, kept = 0.0, []
    for i in order:
        if acc >= threshold or std[i] <= 0:
            break
        acc += std[i]
        kept.append(int(i))
    return sorted(kept) if acc >= threshold else []


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)  # --help, and unknown arguments refused
    rng = np.random.default_rng(0)
    print(f"{'batch':>10} {'filter':>18} {'us/call':>10} {'baseline us':>12} {'ratio':>7}")
    for groups, size in ((8, 16), (128, 16), (512, 8)):
        rewards = rng.choice([0.0, 1.0, 10.9], size=groups * size)
        batch = GroupedRollouts(group_ids=np.repeat(np.arange(groups), size).tolist(), rewards=rewards.tolist())
        n = 200 if groups <= 128 else 40
        base = timeit.timeit(lambda r=rewards, g=groups: baseline(r, g), number=n) / n * 1e6
        for filt in (TopPFilter(), TopPSoftmaxFilter(), TopKFilter(), SoftFilter()):
            t = timeit.timeit(lambda f=filt, b=batch: f.select(b), number=n) / n * 1e6
            name = type(filt).__name__
            print(f"{groups:>4}x{size:<5} {name:>18} {t:>10.1f} {base:>12.1f} {t / base:>7.1f}")


if __name__ == "__main__":
    main()
