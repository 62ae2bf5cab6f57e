"""Does training move the policy? GRPO and PPO on Bandit, several seeds, tiny model, CPU.

Bandit (spec 13.3): two arms with symbolic names; the high-risk arm pays 1.0 with probability
0.25 (mean 0.25), the low-risk arm 0.1. ``train/bandit/success`` is the rate of episodes that
picked the better (high-risk) arm; invalid replies count as not picking it. The tiny model is
first warm-started once (random legal arms in the reply format, no oracle) and every run starts
from that folder, so the runs differ only in algorithm and seed.

Writes ``bench/results/learning_bandit.png`` (pick-better-arm rate and valid-reply rate per
step, mean over seeds) and ``bench/results/learning_bandit.md`` (table + the command line).

    python bench/learning_bandit.py --steps 12 --seeds 0 1 --algos grpo ppo
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"


def common(args: argparse.Namespace) -> list[str]:
    return [
        f"env={args.env}", *args.set, f"rollout.env_groups={args.groups}", f"rollout.group_size={args.group_size}",
        f"sampling.train.max_new_tokens={args.new_tokens}", f"sampling.val.max_new_tokens={args.new_tokens}",
        f"optim.lr={args.lr}", f"optim.critic_lr={args.lr}", f"optim.mini_batch_size={args.groups * args.group_size}",
        "optim.micro_batch_size=8", "test_freq=0", "save_freq=0", "progress=false",
    ]


def warm_model(args: argparse.Namespace, work: Path) -> str:
    from ragen_core.config import load_config
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.warmstart import cache_key, cache_root, warm_start

    cfg = load_config(RunConfig, [], common(args) + [f"warm_start.episodes={args.warm_episodes}", f"warm_start.epochs={args.warm_epochs}",
                                                     f"warm_start.cache_dir={args.cache}"])
    model, tok = load_model_and_tokenizer("tiny")
    warm_start(cfg, model, tok)
    return str(cache_root(cfg) / cache_key(cfg))


def one_run(args: argparse.Namespace, algo: str, seed: int, model: str, work: Path) -> list[dict]:
    import torch

    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.env == "toy-corridor":
        from ragen_core.testing.toy_env import register_toy_env

        register_toy_env()
    t0 = time.time()
    cfg = load_config(RunConfig, [], common(args) + [f"algo={algo}", f"steps={args.steps}", f"seed={10000 + 1000 * seed}",
                                                     f"model={model}", "warm_start.enabled=false", f"run_dir={work / f'{algo}-{seed}'}"])
    rows = Trainer(cfg).train()
    for row in rows:
        row["bench/run_seconds"] = time.time() - t0
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="bandit", help="bandit, or toy-corridor as a fast sanity check")
    parser.add_argument("--set", nargs="*", default=[], metavar="key=value", help="extra RunConfig overrides (env_config.*)")
    parser.add_argument("--algos", nargs="+", default=["grpo", "ppo"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--warm-episodes", type=int, default=64)
    parser.add_argument("--warm-epochs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--warm-model", default="", help="an already warm-started model folder (skips the warm start)")
    parser.add_argument("--name", default="", help="results file stem (default learning_<env>)")
    parser.add_argument("--jobs", type=int, default=1, help="training runs in parallel processes (each with --threads threads)")
    parser.add_argument("--cache", default=str(ROOT / ".ragen_cache" / "warmstart"))
    parser.add_argument("--work", default=str(ROOT / "runs" / "learning_bandit"))
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.env == "toy-corridor":
        from ragen_core.testing.toy_env import register_toy_env

        register_toy_env()
    work = Path(args.work) / args.env
    t0 = time.time()
    model = args.warm_model or warm_model(args, work)
    warm_seconds = time.time() - t0
    from ragen_core.trainer.warmstart import read_meta

    meta = read_meta(model)
    print(f"warm start ready ({warm_seconds:.0f} s): valid rate {meta.get('valid_rate')}")
    jobs = [(algo, seed) for algo in args.algos for seed in args.seeds]
    results: dict[tuple[str, int], list[dict]] = {}
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = {job: pool.submit(one_run, args, job[0], job[1], model, work) for job in jobs}
            for job, fut in futures.items():
                results[job] = fut.result()
                print(f"{job[0]} seed {job[1]} done ({time.time() - t0:.0f} s)")
    else:
        for job in jobs:
            results[job] = one_run(args, job[0], job[1], model, work)
            print(f"{job[0]} seed {job[1]} done ({time.time() - t0:.0f} s)")
    curves: dict[str, list[list[dict]]] = {}
    for algo, seed in jobs:
        curves.setdefault(algo, []).append(results[(algo, seed)])
    report(args, curves, time.time() - t0, meta=meta, warm_seconds=warm_seconds)


def _mean_curve(runs: list[list[dict]], key: str) -> list[float]:
    n = min(len(r) for r in runs)
    return [statistics.fmean(r[i].get(key, 0.0) or 0.0 for r in runs) for i in range(n)]


def _tag(curves: dict[str, list[list[dict]]], env: str) -> str:
    """Metric tag of the env (the preset name when one is set): ``train/<tag>/success``."""
    for runs in curves.values():
        for run in runs:
            for key in run[0] if run else {}:
                if key.startswith("train/") and key.endswith("/success") and key != "train/success":
                    return key.split("/")[1]
    return env


def _avg(rows: list[dict], key: str) -> float:
    return statistics.fmean(r.get(key, 0.0) or 0.0 for r in rows) if rows else float("nan")


def _spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}" if len(values) > 1 else f"{values[0]:.3f}"


def report(args: argparse.Namespace, curves: dict[str, list[list[dict]]], seconds: float, *, meta: dict | None = None,
           warm_seconds: float = 0.0) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    env = args.env
    tag = _tag(curves, env)
    name = args.name or ("learning_bandit" if env == "bandit" else f"learning_{env.replace('-', '_')}")
    what = "pick-better-arm rate" if env == "bandit" else "success rate"
    succ, valid = f"train/{tag}/success", f"train/{tag}/action_is_valid"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for algo, runs in curves.items():
        for ax, key, title in ((axes[0], succ, what), (axes[1], valid, "valid reply rate")):
            ys = _mean_curve(runs, key)
            ax.plot(range(1, len(ys) + 1), ys, marker="o", label=f"{algo} (mean of {len(runs)} seeds)")
            ax.set_title(f"{tag}: {title}")
            ax.set_xlabel("step")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=100)
    k = max(1, min(3, args.steps // 3))
    sets = " ".join(args.set)
    meta = meta or {}
    rate = meta.get("valid_rate")
    lines = [
        f"# Learning on {tag} (tiny model, CPU)", "",
        (f"Command: `python bench/learning_bandit.py --env {env} {('--set ' + sets) if sets else ''} --steps {args.steps} "
         f"--seeds {' '.join(map(str, args.seeds))} --algos {' '.join(args.algos)} --groups {args.groups} --group-size {args.group_size} "
         f"--lr {args.lr} --warm-episodes {args.warm_episodes} --warm-epochs {args.warm_epochs} --new-tokens {args.new_tokens} "
         f"--threads {args.threads} --jobs {args.jobs}{(' --name ' + args.name) if args.name else ''}"
         f"{(' --warm-model ' + args.warm_model) if args.warm_model else ''}`"), "",
        (f"Warm start: {warm_seconds / 60:.1f} min (0 = cached), format-valid rate after it "
         f"{rate:.3f} at the training temperature ({meta.get('rounds')} round(s), target {meta.get('target_valid_rate')})."
         if isinstance(rate, float) else "Warm start: no record."), "",
        f"{args.groups} groups x {args.group_size} episodes per step, {args.steps} steps, total wall time {seconds / 60:.1f} min "
        f"({args.jobs} run(s) in parallel). "
        + ("Pick-better-arm rate = share of episodes choosing the high-risk arm (invalid replies count as misses); " if env == "bandit"
           else "Success = episode reached the goal; ")
        + f"first/last = mean over the first/last {k} steps; 'step >= 0.9' = first step whose {what} reached 0.9 and the run's "
        "wall time up to it.", "",
        f"| algo | seed | {what}, first | {what}, last | valid, first | valid, last | reward, last | step >= 0.9 | run min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    summary = []
    for algo, runs in curves.items():
        firsts, lasts = [], []
        for seed, run in zip(args.seeds, runs):
            hit = next((i for i, r in enumerate(run) if (r.get(succ) or 0.0) >= 0.9), None)
            at = f"{hit + 1} ({run[hit].get('bench/run_seconds', 0) * (hit + 1) / len(run) / 60:.1f} min)" if hit is not None else "never"
            firsts.append(_avg(run[:k], succ))
            lasts.append(_avg(run[-k:], succ))
            lines.append(
                f"| {algo} | {seed} | {firsts[-1]:.3f} | {lasts[-1]:.3f} | {_avg(run[:k], valid):.3f} | {_avg(run[-k:], valid):.3f} | "
                f"{_avg(run[-k:], 'train/reward'):.3f} | {at} | {run[-1].get('bench/run_seconds', 0) / 60:.1f} |"
            )
        summary.append(f"| {algo} | {len(runs)} | {_spread(firsts)} | {_spread(lasts)} |")
    lines += ["", f"Mean ± sample std over seeds:", "", f"| algo | seeds | {what}, first | {what}, last |", "|---|---|---|---|", *summary]
    lines += ["", f"![curves]({name}.png)", ""]
    (RESULTS / f"{name}.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
