"""Does an env's *default* run learn at tiny scale? `ragen run --env NAME` for a few steps per seed.

Run: ``python bench/learning_defaults.py --envs sokoban sudoku countdown --seeds 0 --steps 20 [--name learning_defaults]``.

Each run is exactly what a user gets from ``ragen run --env NAME seed=S --steps N`` (default
algorithm, batch, sampling; the tiny model warm-started from the shipped warm policy), run as a
subprocess with validation and checkpoints off. From each run's ``metrics.jsonl`` it reports the
training success rate and the valid-action rate over the first and last three steps, and plots
both against the step (``bench/results/<name>.png``, table in ``<name>.md``). A rise of success
from first to last is what "learns" means here; no rise over the measured steps is reported as such.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RAGEN = str(Path(sys.executable).with_name("ragen"))


def run(env: str, seed: int, steps: int, work: Path, extra: list[str]) -> list[dict[str, float]]:
    run_dir = work / f"{env}-seed{seed}"
    cmd = [RAGEN, "run", "--env", env, "--steps", str(steps), "--run-dir", str(run_dir), "--overwrite", "--no-progress",
           f"seed={seed}", "test_freq=0", "save_freq=0", *extra]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "RAGEN_PLOTS": "0"}, check=False)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()] if (run_dir / "metrics.jsonl").is_file() else []
    print(f"{env} seed {seed}: exit {out.returncode}, {len(rows)} steps, {time.time() - t0:.0f} s", flush=True)
    if out.returncode != 0:
        print(out.stderr[-2000:])
    return rows


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["sokoban", "sudoku", "countdown"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--name", default="learning_defaults")
    parser.add_argument("--work", help="folder of the runs (default: a temporary folder)")
    parser.add_argument("--set", nargs="*", default=[], help="extra overrides for every run")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ragen-learning-defaults-"))
    t0 = time.time()
    results: dict[str, dict[int, list[dict[str, float]]]] = {}
    for env in args.envs:
        results[env] = {seed: run(env, seed, args.steps, work, args.set) for seed in args.seeds}

    lines = [f"# Default runs at tiny scale: {', '.join(args.envs)}", "",
             f"Command: `python bench/learning_defaults.py {' '.join(sys.argv[1:])}` ({time.time() - t0:.0f} s in all; "
             f"{os.cpu_count()} CPUs).", "",
             "Each run is `ragen run --env NAME seed=S` with its defaults (tiny model from the shipped warm policy). "
             "First/last = mean over the first/last 3 training steps.", "",
             "| env | seed | steps | success, first | success, last | valid actions, first | valid actions, last | wall s per step |",
             "|---|---|---|---|---|---|---|---|"]
    for env, seeds in results.items():
        for seed, rows in seeds.items():
            succ = [r.get("train/success", float("nan")) for r in rows]
            valid = [r.get(f"train/{env}/action_is_valid", r.get("train/action_is_valid", float("nan"))) for r in rows]
            step_s = [r.get("timing_s/step", float("nan")) for r in rows]
            lines.append(f"| {env} | {seed} | {len(rows)} | {mean(succ[:3]):.3f} | {mean(succ[-3:]):.3f} | {mean(valid[:3]):.3f} "
                         f"| {mean(valid[-3:]):.3f} | {mean(step_s):.1f} |")
    lines += ["", f"![curves]({args.name}.png)", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(4.2 * len(results), 6), squeeze=False)
    for col, (env, seeds) in enumerate(results.items()):
        for seed, rows in seeds.items():
            steps = [r.get("step", i + 1) for i, r in enumerate(rows)]
            axes[0][col].plot(steps, [r.get("train/success", float("nan")) for r in rows], label=f"seed {seed}")
            axes[1][col].plot(steps, [r.get(f"train/{env}/action_is_valid", r.get("train/action_is_valid", float("nan"))) for r in rows],
                              label=f"seed {seed}")
        axes[0][col].set_title(f"{env} (default run)")
        axes[0][col].set_ylabel("training success rate")
        axes[1][col].set_ylabel("valid-action rate")
        axes[1][col].set_xlabel("training step")
        for ax in (axes[0][col], axes[1][col]):
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{args.name}.png", dpi=110)
    print(f"wrote {RESULTS / (args.name + '.md')} and .png")


if __name__ == "__main__":
    main()
