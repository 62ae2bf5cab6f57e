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
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    cfg = load_config(RunConfig, [], common(args) + [f"algo={algo}", f"steps={args.steps}", f"seed={10000 + 1000 * seed}",
                                                     f"model={model}", "warm_start.enabled=false", f"run_dir={work / f'{algo}-{seed}'}"])
    return Trainer(cfg).train()


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
    model = warm_model(args, work)
    curves: dict[str, list[list[dict]]] = {}
    for algo in args.algos:
        for seed in args.seeds:
            curves.setdefault(algo, []).append(one_run(args, algo, seed, model, work))
            print(f"{algo} seed {seed} done ({time.time() - t0:.0f} s)")
    report(args, curves, time.time() - t0)


def _mean_curve(runs: list[list[dict]], key: str) -> list[float]:
    n = min(len(r) for r in runs)
    return [statistics.fmean(r[i].get(key, 0.0) or 0.0 for r in runs) for i in range(n)]


def report(args: argparse.Namespace, curves: dict[str, list[list[dict]]], seconds: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    env = args.env
    name = "learning_bandit" if env == "bandit" else f"learning_{env.replace('-', '_')}"
    what = "pick-better-arm rate" if env == "bandit" else "success rate"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for algo, runs in curves.items():
        for ax, key, title in ((axes[0], f"train/{env}/success", what), (axes[1], f"train/{env}/action_is_valid", "valid reply rate")):
            ys = _mean_curve(runs, key)
            ax.plot(range(1, len(ys) + 1), ys, marker="o", label=f"{algo} (mean of {len(runs)} seeds)")
            ax.set_title(title)
            ax.set_xlabel("step")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=100)
    k = max(1, min(3, args.steps // 3))
    lines = [
        f"# Learning on {env} (tiny model, CPU)", "",
        (f"Command: `python bench/learning_bandit.py --env {env} {('--set ' + ' '.join(args.set)) if args.set else ''} --steps {args.steps} "
         f"--seeds {' '.join(map(str, args.seeds))} --algos {' '.join(args.algos)} --groups {args.groups} --group-size {args.group_size} "
         f"--lr {args.lr} --warm-episodes {args.warm_episodes} --warm-epochs {args.warm_epochs}`"), "",
        f"{args.groups} groups x {args.group_size} episodes per step, {args.steps} steps, wall time {seconds / 60:.1f} min. "
        + ("Pick-better-arm rate = share of episodes choosing the high-risk arm (invalid replies count as misses); " if env == "bandit"
           else "Success = episode reached the goal; ")
        + f"first/last = mean over the first/last {k} steps.", "",
        f"| algo | seed | {what}, first | {what}, last | valid, first | valid, last | reward, last |",
        "|---|---|---|---|---|---|---|",
    ]
    for algo, runs in curves.items():
        for seed, run in zip(args.seeds, runs):
            def avg(rows: list[dict], key: str) -> float:
                return statistics.fmean(r.get(key, 0.0) or 0.0 for r in rows)

            lines.append(
                f"| {algo} | {seed} | {avg(run[:k], f'train/{env}/success'):.3f} | {avg(run[-k:], f'train/{env}/success'):.3f} | "
                f"{avg(run[:k], f'train/{env}/action_is_valid'):.3f} | {avg(run[-k:], f'train/{env}/action_is_valid'):.3f} | "
                f"{avg(run[-k:], 'train/reward'):.3f} |"
            )
    lines += ["", f"![curves]({name}.png)", ""]
    (RESULTS / f"{name}.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
