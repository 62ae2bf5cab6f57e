"""Multi-turn learning on FrozenLake with the tiny model on CPU, judged on the process CPU clock.

Every run starts from one warm-started tiny model (reply format only, random legal moves). A run
first measures the warm start's own success rate (``--eval-episodes`` fresh episodes, training
sampling), then trains with the normal :class:`~ragen_core.trainer.trainer.Trainer` step by step
until ``--cpu-minutes`` of *process CPU time* (``time.process_time``; with one torch thread this is
what an unloaded single-core run would take) or ``--max-steps`` are used (or ``--wall-minutes`` pass, or a file ``STOP``
appears in the run folder), and finally measures the
success rate again on the same episodes. Per step it records wall seconds and CPU seconds, so a
shared, loaded machine inflates the wall clock but not the judged clock.

Writes ``bench/results/<name>.png`` (success and valid-reply rate vs CPU minutes, mean +- std over
seeds) and ``bench/results/<name>.md`` (command, per-seed table, mean +- std); raw per-step rows go
to ``<work>/<name>/seed<k>.json`` (``--report-only`` rebuilds the results from them).

    python bench/learning_grid.py --map-seed 3 --seeds 0 1 2 --jobs 2 --cpu-minutes 30 --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
WARM = ROOT / ".ragen_cache" / "warmstart" / "frozenlake-CoordFrozenLake-70ffcaa88351716e"


def overrides(args: argparse.Namespace, seed: int, run_dir: Path) -> list[str]:
    """RunConfig overrides of one run (``--set`` items last, so they win)."""
    env = ["env=frozenlake", f"preset={args.preset}"]
    if args.map_seed is not None:
        env.append(f"env_config.map_seed={args.map_seed}")
    n = args.groups * args.group_size
    return env + [
        f"rollout.env_groups={args.groups}", f"rollout.group_size={args.group_size}",
        f"sampling.train.max_new_tokens={args.new_tokens}", f"sampling.val.max_new_tokens={args.new_tokens}",
        f"algo={args.algo}", f"optim.lr={args.lr}", f"optim.critic_lr={args.lr}", f"optim.mini_batch_size={args.mini_batch or n}",
        f"optim.micro_batch_size={args.micro_batch}", f"steps={args.max_steps}", f"seed={10000 + 1000 * seed}",
        f"model={args.warm_model}", "warm_start.enabled=false", f"run_dir={run_dir}", "test_freq=0", "save_freq=0",
        "progress=false", "early_stop.reward_variance_collapse=false", "early_stop.low_val_success=false", *args.set,
    ]


def evaluate(trainer, episodes: int, seed: int) -> dict[str, float]:
    """Success and valid-reply rate of the current policy on ``episodes`` eval episodes (same before/after)."""
    from ragen_core.seeding import derive_seed
    from ragen_core.trainer.setup import make_runner

    cfg = trainer.config.model_copy(update={"seed": derive_seed(seed, "learning-grid-eval")})
    c0 = time.process_time()
    runner = make_runner(cfg, trainer.engine, trainer.tokenizer, "train", groups=episodes, group_size=1)
    try:
        trajs = runner.run(mode="train", sampling=trainer.train_sampling)
    finally:
        runner.close()
    turns = [t for tr in trajs for t in tr.turns]
    return {"success": sum(bool(t.success) for t in trajs) / len(trajs), "valid": sum(1 for t in turns if t.valid) / max(len(turns), 1),
            "turns": len(turns) / len(trajs), "cpu_s": round(time.process_time() - c0, 1)}


def one_run(args: argparse.Namespace, seed: int) -> dict:
    """Baseline eval, CPU-budgeted training, final eval; returns (and saves) the run record."""
    import torch

    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    torch.set_num_threads(args.threads)
    out = Path(args.work) / args.name
    cfg = load_config(RunConfig, [], overrides(args, seed, out / f"seed{seed}"))
    trainer = Trainer(cfg)
    trainer.setup()
    before = evaluate(trainer, args.eval_episodes, seed)
    print(f"seed {seed}: warm-start baseline {before}", flush=True)
    rows: list[dict] = []
    w0, c0 = time.time(), time.process_time()
    for step in range(1, args.max_steps + 1):
        m = trainer.train_step(step)
        row = {"step": step, "wall_s": time.time() - w0, "cpu_s": time.process_time() - c0, "success": m.get("train/success", 0.0)}
        row["valid"] = next((v for k, v in m.items() if k.startswith("train/") and k.endswith("/action_is_valid")), float("nan"))
        row["reward"] = m.get("train/reward", 0.0)
        row.update({"t_" + k[9:]: round(v, 2) for k, v in m.items() if k.startswith("timing_s/")})
        rows.append(row)
        print(f"seed {seed} step {step}: success {row['success']:.3f} valid {row['valid']:.3f} cpu {row['cpu_s']:.0f}s "
              f"wall {row['wall_s']:.0f}s gen {row.get('t_gen', 0):.0f}s actor {row.get('t_update_actor', 0):.0f}s", flush=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"seed{seed}.partial.json").write_text(json.dumps({"seed": seed, "before": before, "rows": rows}), encoding="utf-8")
        if row["cpu_s"] >= args.cpu_minutes * 60 or row["wall_s"] >= args.wall_minutes * 60 or (out / "STOP").exists():
            break
    after = evaluate(trainer, args.eval_episodes, seed)
    print(f"seed {seed}: after training {after}", flush=True)
    record = {"seed": seed, "before": before, "after": after, "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"seed{seed}.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    return record


def _load(folder: Path, seed: int) -> dict:
    """A finished run's record, else its per-step record with ``after`` None (run killed before the end)."""
    done = folder / f"seed{seed}.json"
    if done.exists():
        return json.loads(done.read_text(encoding="utf-8"))
    return {"after": None, **json.loads((folder / f"seed{seed}.partial.json").read_text(encoding="utf-8"))}


def _ms(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}" if len(values) > 1 else f"{values[0]:.3f}"


def _curve(rec: dict, key: str, grid: list[float], window: int) -> list[float]:
    """Moving average (``window`` steps) of ``key`` resampled at CPU-minute points ``grid``."""
    rows = rec["rows"]
    smooth = [statistics.fmean(r[key] for r in rows[max(0, i - window + 1): i + 1]) for i in range(len(rows))]
    out, j = [], 0
    for x in grid:
        while j + 1 < len(rows) and rows[j + 1]["cpu_s"] / 60 <= x:
            j += 1
        out.append(smooth[j] if rows[j]["cpu_s"] / 60 <= x + 1e-9 else float("nan"))
    return out


def _first_double(rec: dict, window: int) -> dict | None:
    """First step row whose moving-average training success reaches twice the warm-start eval success."""
    rows, target = rec["rows"], 2 * rec["before"]["success"]
    for i, row in enumerate(rows):
        if i + 1 >= min(window, len(rows)) and statistics.fmean(r["success"] for r in rows[max(0, i - window + 1): i + 1]) >= target:
            return row
    return None


def report(args: argparse.Namespace, records: list[dict], command: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    RESULTS.mkdir(parents=True, exist_ok=True)
    end = min(r["rows"][-1]["cpu_s"] for r in records) / 60
    grid = list(np.linspace(0, end, 60))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in ((axes[0], "success", "success rate"), (axes[1], "valid", "valid reply rate")):
        ys = np.array([_curve(r, key, grid, args.smooth) for r in records])
        for i, (r, y) in enumerate(zip(records, ys)):
            ax.plot(grid, y, lw=0.9, alpha=0.6, ls=":", color=f"C{i + 1}", label=f"seed {r['seed']}")
        mean, sd = np.nanmean(ys, 0), np.nanstd(ys, 0, ddof=1)
        ax.plot(grid, mean, color="C0", label=f"train rollouts, mean of {len(records)} seeds ({args.smooth}-step moving avg)")
        ax.fill_between(grid, mean - sd, mean + sd, color="C0", alpha=0.2, label="± std over seeds")
        b = [r["before"][key] for r in records]
        a = [r["after"][key] for r in records if r["after"]] or [float("nan")]
        ax.errorbar([0], [statistics.fmean(b)], yerr=[statistics.stdev(b)], fmt="s", color="k", label="eval: warm start")
        ax.errorbar([end], [statistics.fmean(a)], yerr=[statistics.stdev(a) if len(a) > 1 else 0.0], fmt="D", color="C3", label="eval: after training")
        if key == "success":
            ax.axhline(2 * statistics.fmean(b), ls="--", color="gray", label="2 x warm-start baseline")
        ax.set_title(f"FrozenLake ({args.preset}{', map_seed ' + str(args.map_seed) if args.map_seed is not None else ''}): {title}")
        ax.set_xlabel("process CPU minutes of training (1 torch thread)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{args.name}.png", dpi=100)
    lines = [f"# Multi-turn learning on FrozenLake (tiny model, CPU): {args.name}", "", f"Command: `{command}`", "",
             (f"Start model: `{args.warm_model}`. {args.groups} groups x {args.group_size} episodes per step, algo {args.algo}, "
             f"lr {args.lr}, {args.new_tokens} new tokens per turn; budget {args.cpu_minutes} CPU-minutes or {args.max_steps} steps. "
             f"Eval = {args.eval_episodes} fixed episodes at the training sampling (temperature 1.0), before and after training."), "",
             (f"'2x reached' = first step whose {args.smooth}-step moving average of the training-rollout success is at least twice "
             "the seed's warm-start eval success, with the CPU and wall minutes of training up to it."), "",
             ("| seed | success, warm start | success, after | ratio | valid, before | valid, after | 2x reached: step (CPU min / wall min) "
             "| best moving avg (step) | last moving avg | steps | CPU min | wall min |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        b, a, last = r["before"], r["after"] or {"success": float("nan"), "valid": float("nan")}, r["rows"][-1]
        ratio = f"{a['success'] / b['success']:.1f}x" if b["success"] > 0 and a["success"] == a["success"] else "-"
        hit = _first_double(r, args.smooth)
        avg = [statistics.fmean(x["success"] for x in r["rows"][max(0, i - args.smooth + 1): i + 1]) for i in range(len(r["rows"]))]
        best = max(range(len(avg)), key=avg.__getitem__)
        at = f"{r['rows'].index(hit) + 1} ({hit['cpu_s'] / 60:.1f} / {hit['wall_s'] / 60:.1f})" if hit else "never"
        lines.append(f"| {r['seed']} | {b['success']:.3f} | {a['success']:.3f} | {ratio} | {b['valid']:.3f} | {a['valid']:.3f} | {at} | "
                     f"{avg[best]:.3f} ({best + 1}) | {avg[-1]:.3f} | "
                     f"{len(r['rows'])} | {last['cpu_s'] / 60:.1f} | {last['wall_s'] / 60:.1f} |")
    done = [r for r in records if r["after"]]
    bs, as_ = [r["before"]["success"] for r in done], [r["after"]["success"] for r in done]
    lines += ["", (f"Mean ± sample std over the {len(done)} finished seeds: success {_ms(bs)} (warm start) -> {_ms(as_)} (after); "
              f"valid {_ms([r['before']['valid'] for r in done])} -> {_ms([r['after']['valid'] for r in done])}."), "",
              f"![curves]({args.name}.png)", ""]
    if args.notes:
        lines += [Path(args.notes).read_text(encoding="utf-8").rstrip(), ""]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="CoordFrozenLake")
    p.add_argument("--map-seed", type=int, default=None, help="one fixed lake for every episode (None = a new lake per seed)")
    p.add_argument("--set", nargs="*", default=[], metavar="key=value", help="extra RunConfig overrides")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--algo", default="grpo")
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--mini-batch", type=int, default=0, help="rows per optimiser step (0 = episodes per step)")
    p.add_argument("--micro-batch", type=int, default=16, help="rows per forward/backward")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--cpu-minutes", type=float, default=30.0)
    p.add_argument("--wall-minutes", type=float, default=1e9, help="also stop after this much wall time (shared, loaded machine)")
    p.add_argument("--max-steps", type=int, default=400)
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--smooth", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    p.add_argument("--warm-model", default=str(WARM))
    p.add_argument("--name", default="learning_frozenlake")
    p.add_argument("--work", default=str(ROOT / "runs" / "learning_grid"))
    p.add_argument("--notes", default="", help="markdown file appended to the results file (reading, context)")
    p.add_argument("--report-only", action="store_true", help="rebuild the results from the saved seed records")
    args = p.parse_args()
    argv = [a for a in sys.argv[1:] if a != "--report-only"]
    if "--notes" in argv:  # not part of the measurement
        i = argv.index("--notes")
        del argv[i : i + 2]
    command = "python bench/learning_grid.py " + " ".join(argv)
    if args.report_only:
        records = [_load(Path(args.work) / args.name, s) for s in args.seeds]
    elif args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            records = list(pool.map(one_run, [args] * len(args.seeds), args.seeds))
    else:
        records = [one_run(args, s) for s in args.seeds]
    report(args, records, command)


if __name__ == "__main__":
    main()
