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

``--recipe NAME`` runs a FrozenLake recipe instead (``ragen run --env frozenlake --recipe NAME``
trains the same way): its settings are the runs' base, and unless ``--warm-model`` is given the
recipe's own warm start is built first (or taken from ``--cache``), so the result is what a
fresh machine gets. ``--clock wall`` plots and judges wall minutes (runs alone on the machine).

    python bench/learning_grid.py --recipe learn-one-lake --seeds 0 1 2 --jobs 1 --threads 2 --clock wall --wall-minutes 30
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
    fixed = [f"seed={10000 + 1000 * seed}", f"model={args.warm_model}", "warm_start.enabled=false", f"run_dir={run_dir}", "test_freq=0",
             "save_freq=0", "progress=false", "early_stop.reward_variance_collapse=false", "early_stop.low_val_success=false"]
    if args.recipe:
        return [f"steps={args.max_steps}", *fixed, *args.set]
    env = ["env=frozenlake", f"preset={args.preset}"]
    if args.map_seed is not None:
        env.append(f"env_config.map_seed={args.map_seed}")
    n = args.groups * args.group_size
    return env + [
        f"rollout.env_groups={args.groups}", f"rollout.group_size={args.group_size}",
        f"sampling.train.max_new_tokens={args.new_tokens}", f"sampling.val.max_new_tokens={args.new_tokens}",
        f"algo={args.algo}", f"optim.lr={args.lr}", f"optim.critic_lr={args.lr}", f"optim.mini_batch_size={args.mini_batch or n}",
        f"optim.micro_batch_size={args.micro_batch}", f"steps={args.max_steps}", *fixed, *args.set,
    ]


def recipe_base(args: argparse.Namespace) -> dict | None:
    """The run-config base of ``--recipe`` (None without one)."""
    if not args.recipe:
        return None
    from ragen_core import registry

    return registry.get_spec("env", "frozenlake").recipe(args.recipe)  # type: ignore[attr-defined]


def apply_recipe(args: argparse.Namespace) -> None:
    """Copy the recipe's shape into the flags the report prints; ``--max-steps`` defaults to its steps."""
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig

    cfg = load_config(RunConfig, [], args.set, base=recipe_base(args))
    args.preset, args.map_seed, args.algo = cfg.preset, cfg.env_config.get("map_seed"), cfg.algo
    args.groups, args.group_size, args.lr = cfg.rollout.env_groups, cfg.rollout.group_size, cfg.optim.lr
    args.mini_batch, args.micro_batch, args.new_tokens = cfg.optim.mini_batch_size, cfg.optim.micro_batch_size, cfg.sampling.train.max_new_tokens
    args.max_steps = args.max_steps or cfg.steps


def build_warm_start(args: argparse.Namespace, build: bool = True) -> dict:
    """Build (or load from ``--cache``) the recipe's own warm start; sets ``args.warm_model``; returns its record.

    ``build=False`` (``--report-only``) only reads the record of the cached folder."""
    import torch

    from ragen_core.config import load_config
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.warmstart import cache_folder, read_meta, warm_start

    torch.set_num_threads(args.threads)
    cfg = load_config(RunConfig, [], [*args.set, f"warm_start.cache_dir={args.cache}"], base=recipe_base(args))
    folder = cache_folder(cfg)
    cached = (folder / "config.json").is_file()
    if not build:
        args.warm_model = str(folder)
        return {"cached": True, "wall_min": 0.0, **read_meta(folder)}
    t0 = time.time()
    model, tok = load_model_and_tokenizer("tiny")
    warm_start(cfg, model, tok)
    args.warm_model = str(folder)
    return {"cached": cached, "wall_min": (time.time() - t0) / 60, **read_meta(folder)}


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
    cfg = load_config(RunConfig, [], overrides(args, seed, out / f"seed{seed}"), base=recipe_base(args))
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


def _curve(rec: dict, key: str, grid: list[float], window: int, clock: str = "cpu_s") -> list[float]:
    """Moving average (``window`` steps) of ``key`` resampled at minute points ``grid`` of ``clock``."""
    rows = rec["rows"]
    smooth = [statistics.fmean(r[key] for r in rows[max(0, i - window + 1): i + 1]) for i in range(len(rows))]
    out, j = [], 0
    for x in grid:
        while j + 1 < len(rows) and rows[j + 1][clock] / 60 <= x:
            j += 1
        out.append(smooth[j] if rows[j][clock] / 60 <= x + 1e-9 else float("nan"))
    return out


def _first_double(rec: dict, window: int) -> dict | None:
    """First step row whose moving-average training success reaches twice the warm-start eval success."""
    rows, target = rec["rows"], 2 * rec["before"]["success"]
    for i, row in enumerate(rows):
        if i + 1 >= min(window, len(rows)) and statistics.fmean(r["success"] for r in rows[max(0, i - window + 1): i + 1]) >= target:
            return row
    return None


def _warm_line(warm: dict) -> str:
    how = "taken from the cache" if warm["cached"] else f"built from scratch in {warm['wall_min']:.1f} wall min"
    rounds = "; ".join(f"round {h['round']}: {h['valid_rate']:.3f} after {h['seconds'] / 60:.1f} min" for h in warm.get("history", []))
    return (f"Warm start (the recipe's own): {how}; format-valid rate {warm.get('valid_rate', float('nan')):.3f}, target "
            f"{warm.get('target_valid_rate')} ({rounds}).")


def report(args: argparse.Namespace, records: list[dict], command: str, warm: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    RESULTS.mkdir(parents=True, exist_ok=True)
    clock = f"{args.clock}_s"
    end = min(r["rows"][-1][clock] for r in records) / 60
    grid = list(np.linspace(0, end, 60))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in ((axes[0], "success", "success rate"), (axes[1], "valid", "valid reply rate")):
        ys = np.array([_curve(r, key, grid, args.smooth, clock) for r in records])
        for i, (r, y) in enumerate(zip(records, ys)):
            ax.plot(grid, y, lw=0.9, alpha=0.6, ls=":", color=f"C{i + 1}", label=f"seed {r['seed']}")
        mean, sd = np.nanmean(ys, 0), np.nanstd(ys, 0, ddof=1)
        ax.plot(grid, mean, color="C0", label=f"train rollouts, mean of {len(records)} seeds ({args.smooth}-step moving avg)")
        ax.fill_between(grid, mean - sd, mean + sd, color="C0", alpha=0.2, label="± std over seeds")
        b = [r["before"][key] for r in records]
        a = [r["after"][key] for r in records if r["after"]] or [float("nan")]
        ax.errorbar([0], [statistics.fmean(b)], yerr=[statistics.stdev(b) if len(b) > 1 else 0.0], fmt="s", color="k", label="eval: warm start")
        ax.errorbar([end], [statistics.fmean(a)], yerr=[statistics.stdev(a) if len(a) > 1 else 0.0], fmt="D", color="C3",
                    label="eval: after training")
        if key == "success":
            ax.axhline(2 * statistics.fmean(b), ls="--", color="gray", label="2 x warm-start baseline")
        ax.set_title(f"FrozenLake ({args.preset}{', map_seed ' + str(args.map_seed) if args.map_seed is not None else ''}): {title}")
        ax.set_xlabel(f"process CPU minutes of training ({args.threads} torch thread(s))" if args.clock == "cpu"
                      else f"wall minutes of training ({args.jobs} run(s) at a time, {args.threads} thread(s))")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{args.name}.png", dpi=100)
    lines = [f"# Multi-turn learning on FrozenLake (tiny model, CPU): {args.name}", "", f"Command: `{command}`", "",
             (f"Start model: `{args.warm_model}`. {args.groups} groups x {args.group_size} episodes per step, algo {args.algo}, "
             f"lr {args.lr}, {args.new_tokens} new tokens per turn; budget {args.cpu_minutes:g} CPU-minutes, {args.wall_minutes:g} wall "
             f"minutes or {args.max_steps} steps. "
             f"Eval = {args.eval_episodes} fixed episodes at the training sampling, before and after training."), "",
             *([_warm_line(warm), ""] if warm else []),
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
    p.add_argument("--recipe", default="", help="a FrozenLake recipe: its settings replace the shape flags; builds its own warm start")
    p.add_argument("--cache", default=str(ROOT / ".ragen_cache" / "warmstart"), help="warm-start cache of --recipe")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="x axis of the plot")
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
    p.add_argument("--max-steps", type=int, default=0, help="step budget (default 400, or the recipe's steps)")
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--smooth", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    p.add_argument("--warm-model", default="", help=f"start model (default: the recipe's warm start, else {WARM.name})")
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
    warm = None
    if args.recipe:
        apply_recipe(args)
        if not args.warm_model:
            warm = build_warm_start(args, build=not args.report_only)
    args.max_steps = args.max_steps or 400
    args.warm_model = args.warm_model or str(WARM)
    if args.report_only:
        records = [_load(Path(args.work) / args.name, s) for s in args.seeds]
    elif args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            records = list(pool.map(one_run, [args] * len(args.seeds), args.seeds))
    else:
        records = [one_run(args, s) for s in args.seeds]
    report(args, records, command, warm)


if __name__ == "__main__":
    main()
